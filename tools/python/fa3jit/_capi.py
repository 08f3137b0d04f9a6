"""ctypes binding of the fa3jit C ABI (runtime/include/fa3jit/fa3jit.h).

Needs neither torch nor a GPU: the structs, the library lookup, the status -> exception mapping and one
process-wide runtime. The struct layouts below mirror fa3jit.h field by field (ctypes applies the same
natural alignment as the C compiler); tests/python/test_abi_layout.py compares the offsets with a C build.

Library lookup, first match wins:
  1. the FA3JIT_LIBRARY environment variable (a path; an error if it does not exist),
  2. libfa3jit.so next to this package (a wheel or a copy made by hand),
  3. the source tree's build directory, <repo>/build/libfa3jit.so (an editable or in-tree use; only when
     the package sits in the source tree),
  4. the system loader: libfa3jit.so.0 / libfa3jit.so on LD_LIBRARY_PATH or in the ldconfig cache
     (an install made with `cmake --install build --prefix P` and P/lib on LD_LIBRARY_PATH).
"""

import ctypes
import os
import pathlib
import threading

ABI_VERSION = 1

# fa3jit_status (values equal fa3jit::ErrorCode, generator/error.h).
OK = 0
STATUS_NAMES = {
    0: "ok",
    1: "invalid_spec",
    2: "invalid_argument",
    3: "unsupported",
    4: "compile_failed",
    5: "no_driver",
    6: "driver_error",
    7: "cache_error",
    8: "io_error",
    9: "internal",
}
# The caller's request is at fault: Python reports these as ValueError, everything else as RuntimeError.
VALUE_ERROR_STATUSES = frozenset({1, 2, 3})

# fa3jit_dtype
DTYPE_FP16 = 0
DTYPE_BF16 = 1
DTYPE_E4M3 = 2


class Fa3jitError(Exception):
    """An fa3jit call failed; `status` is the fa3jit_status value, `status_name` its name."""

    def __init__(self, status, message):
        self.status = status
        self.status_name = STATUS_NAMES.get(status, "unknown")
        super().__init__(f"{message} [fa3jit {self.status_name}]")


class Fa3jitValueError(Fa3jitError, ValueError):
    """invalid_spec, invalid_argument or unsupported: the request cannot be served as given."""


class Fa3jitRuntimeError(Fa3jitError, RuntimeError):
    """compile_failed, no_driver, driver_error, cache_error, io_error or internal."""


class LibraryNotFoundError(RuntimeError):
    """libfa3jit.so could not be found or loaded; the message lists every place tried."""


class Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("stride_batch", ctypes.c_int64),
        ("stride_seq", ctypes.c_int64),
        ("stride_head", ctypes.c_int64),
    ]


class RuntimeOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("cache_dir", ctypes.c_char_p),
    ]


class ForwardParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("dtype", ctypes.c_int),
        ("causal", ctypes.c_int32),
        ("batch", ctypes.c_int64),
        ("seqlen_q", ctypes.c_int64),
        ("seqlen_k", ctypes.c_int64),
        ("num_heads", ctypes.c_int64),
        ("num_heads_kv", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("head_dim_v", ctypes.c_int64),
        ("q", Tensor),
        ("k", Tensor),
        ("v", Tensor),
        ("out", Tensor),
        ("lse", ctypes.c_void_p),
        ("softmax_scale", ctypes.c_float),
        ("spec_json", ctypes.c_char_p),
    ]

    def __init__(self, **fields):
        fields.setdefault("struct_size", ctypes.sizeof(ForwardParams))
        super().__init__(**fields)


KEY_CAPACITY = 80
KERNEL_NAME_CAPACITY = 128


class KernelInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("key", ctypes.c_char * KEY_CAPACITY),
        ("kernel_name", ctypes.c_char * KERNEL_NAME_CAPACITY),
        ("cache_hit", ctypes.c_int32),
        ("ms", ctypes.c_double),
        ("registers", ctypes.c_int32),
        ("spill_store_bytes", ctypes.c_int32),
        ("spill_load_bytes", ctypes.c_int32),
        ("smem_bytes", ctypes.c_int32),
        ("num_threads", ctypes.c_int32),
        ("block_m", ctypes.c_int32),
        ("block_n", ctypes.c_int32),
    ]

    def as_dict(self):
        return {
            "key": self.key.decode(),
            "kernel_name": self.kernel_name.decode(),
            "cache_hit": bool(self.cache_hit),
            "ms": self.ms,
            "registers": self.registers,
            "spill_store_bytes": self.spill_store_bytes,
            "spill_load_bytes": self.spill_load_bytes,
            "smem_bytes": self.smem_bytes,
            "num_threads": self.num_threads,
            "block_m": self.block_m,
            "block_n": self.block_n,
        }


_lock = threading.Lock()
_library = None
_library_path = None
_runtime = None
_runtime_lock = threading.Lock()  # separate from _lock: Runtime() takes _lock


def library_candidates():
    """The paths tried, in order (see the module docstring)."""
    here = pathlib.Path(__file__).resolve().parent
    env = os.environ.get("FA3JIT_LIBRARY")
    if env:
        return [env]
    candidates = [str(here / "libfa3jit.so")]
    source_root = here.parent.parent.parent  # tools/python/fa3jit -> the repository, when run from the tree
    if (source_root / "runtime" / "include" / "fa3jit" / "fa3jit.h").is_file():
        candidates.append(str(source_root / "build" / "libfa3jit.so"))
    return candidates + ["libfa3jit.so.0", "libfa3jit.so"]


def _declare(lib):
    lib.fa3jit_version.restype = ctypes.c_char_p
    lib.fa3jit_version.argtypes = []
    lib.fa3jit_last_error.restype = ctypes.c_char_p
    lib.fa3jit_last_error.argtypes = []
    lib.fa3jit_status_name.restype = ctypes.c_char_p
    lib.fa3jit_status_name.argtypes = [ctypes.c_int]
    lib.fa3jit_runtime_create.restype = ctypes.c_int
    lib.fa3jit_runtime_create.argtypes = [ctypes.POINTER(RuntimeOptions), ctypes.POINTER(ctypes.c_void_p)]
    lib.fa3jit_runtime_destroy.restype = None
    lib.fa3jit_runtime_destroy.argtypes = [ctypes.c_void_p]
    lib.fa3jit_forward.restype = ctypes.c_int
    lib.fa3jit_forward.argtypes = [ctypes.c_void_p, ctypes.POINTER(ForwardParams), ctypes.c_void_p]
    lib.fa3jit_compile_spec.restype = ctypes.c_int
    lib.fa3jit_compile_spec.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(KernelInfo)]
    return lib


def library():
    """The loaded libfa3jit (ctypes.CDLL), loaded once. Raises LibraryNotFoundError."""
    global _library, _library_path
    with _lock:
        if _library is not None:
            return _library
        tried = []
        for candidate in library_candidates():
            is_path = os.sep in candidate
            if is_path and not os.path.exists(candidate):
                tried.append(f"{candidate} (no such file)")
                continue
            try:
                lib = ctypes.CDLL(candidate)
            except OSError as error:
                tried.append(f"{candidate} ({error})")
                continue
            _library = _declare(lib)
            _library_path = candidate
            return _library
        hint = ("set FA3JIT_LIBRARY to the path of libfa3jit.so, build the source tree "
                "(cmake -S . -B build && cmake --build build), or put an installed lib directory on LD_LIBRARY_PATH")
        raise LibraryNotFoundError("libfa3jit.so not found; tried: " + "; ".join(tried) + ". " + hint)


def library_path():
    """Path or name the library was loaded from (loads it if needed)."""
    library()
    return _library_path


def check(status, function):
    """Raises the exception for a non-zero fa3jit_status, with the thread's last-error message."""
    if status == OK:
        return
    message = library().fa3jit_last_error().decode(errors="replace") or "(no message)"
    error_type = Fa3jitValueError if status in VALUE_ERROR_STATUSES else Fa3jitRuntimeError
    raise error_type(status, f"{function}: {message}")


def version():
    return library().fa3jit_version().decode()


class Runtime:
    """One fa3jit_runtime. Usually use runtime() (one per process); a separate one is useful for tools
    that need their own cache directory (bench/compile_time.py)."""

    def __init__(self, cache_dir=None):
        lib = library()
        options = RuntimeOptions(ctypes.sizeof(RuntimeOptions),
                                 None if cache_dir is None else os.fsencode(cache_dir))
        handle = ctypes.c_void_p()
        check(lib.fa3jit_runtime_create(ctypes.byref(options), ctypes.byref(handle)), "fa3jit_runtime_create")
        self._handle = handle
        self._lib = lib

    def close(self):
        """Destroys the runtime; kernels launched through it must have finished."""
        if self._handle:
            self._lib.fa3jit_runtime_destroy(self._handle)
            self._handle = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _live_handle(self):
        if not self._handle:
            raise RuntimeError("fa3jit Runtime is closed")
        return self._handle

    def compile_spec(self, spec_json):
        """Compiles (or loads from the cache) the kernel of a JSON spec (str). Returns KernelInfo.as_dict()."""
        info = KernelInfo(struct_size=ctypes.sizeof(KernelInfo))
        status = self._lib.fa3jit_compile_spec(self._live_handle(), spec_json.encode(), ctypes.byref(info))
        check(status, "fa3jit_compile_spec")
        return info.as_dict()

    def forward(self, params, stream):
        """Launches with a ForwardParams on a CUstream given as an int (0 = legacy default stream)."""
        status = self._lib.fa3jit_forward(self._live_handle(), ctypes.byref(params), ctypes.c_void_p(stream or None))
        check(status, "fa3jit_forward")


def runtime():
    """The process-wide Runtime, created on first use (thread-safe). Its cache directory comes from the
    environment (FA3JIT_CACHE_DIR, else $XDG_CACHE_HOME/fa3jit, else ~/.cache/fa3jit). It is never destroyed:
    destroying at interpreter exit could race with the CUDA driver's own teardown."""
    global _runtime
    if _runtime is None:
        with _runtime_lock:
            if _runtime is None:
                _runtime = Runtime()
    return _runtime

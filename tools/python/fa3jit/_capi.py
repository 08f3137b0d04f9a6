"""ctypes binding of the fa3jit C ABI, version 2 (runtime/include/fa3jit/fa3jit.h).

Needs neither torch nor a GPU: the structs, the library lookup, the status -> exception mapping, one
process-wide runtime and kernel handles. The struct layouts below mirror fa3jit.h field by field (ctypes
applies the same natural alignment as the C compiler); tests/python/test_abi_layout.py compares the offsets
with a C build, and the bytes of PARAMS_CALL_STRUCT (the struct-module image of the per-call fields of
fa3jit_forward_params that the hot path packs) with what C lays out.

Library lookup, first match wins:
  1. libfa3jit.so next to this package: the one a wheel bundles (`pip install <repo>`), built together with
     this Python code, so it always wins,
  2. the FA3JIT_LIBRARY environment variable (a path; when set, the only other candidate, and an error
     if it does not exist),
  3. the source tree's build directory, <repo>/build/libfa3jit.so (an editable or in-tree use; only when
     the package sits in the source tree),
  4. the system loader: libfa3jit.so.0 / libfa3jit.so on LD_LIBRARY_PATH or in the ldconfig cache
     (an install made with `cmake --install build --prefix P` and P/lib on LD_LIBRARY_PATH).

NVRTC: the library links libnvrtc.so.13, which the dynamic loader finds through the library's RUNPATH (the
wheel's: site-packages/nvidia/cu13/lib of the nvidia-cuda-nvrtc wheel, then the toolkit it was built with;
a build tree's: its toolkit), LD_LIBRARY_PATH or the ldconfig cache. When loading fails because NVRTC is not
found, NVRTC is loaded here from the first of: the nvidia-cuda-nvrtc wheel on sys.path, $CUDA_HOME,
$CUDA_PATH, /usr/local/cuda, and the library is tried again (the loader then resolves the soname to the copy
already in the process). libcuda is never linked: the library opens it when a GPU call first needs it.
"""

from __future__ import annotations

import ctypes
import json
import os
import pathlib
import platform
import re
import struct
import sys
import threading
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

ABI_VERSION = 2

# fa3jit_status (values equal fa3jit::ErrorCode, core/error.h).
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

# fa3jit_dtype (DTYPE_DEFAULT: for ForwardParams.out_dtype only)
DTYPE_DEFAULT = -1
DTYPE_FP16 = 0
DTYPE_BF16 = 1
DTYPE_E4M3 = 2

# fa3jit_quant
QUANT_NONE = 0
QUANT_PER_HEAD = 1
QUANT_PER_BLOCK = 2

# fa3jit_rope (fa3jit_quantize_params.rope)
ROPE_NONE = 0
ROPE_NEOX = 1
ROPE_INTERLEAVED = 2

KEY_CAPACITY = 80
KERNEL_NAME_CAPACITY = 128
KIND_CAPACITY = 32
SUMMARY_CAPACITY = 128

Spec = Union[str, Mapping[str, Any]]


class Fa3jitError(Exception):
    """An fa3jit call failed; `status` is the fa3jit_status value, `status_name` its name."""

    def __init__(self, status: int, message: str):
        self.status = status
        self.status_name = STATUS_NAMES.get(status, "unknown")
        super().__init__(f"{message} [fa3jit {self.status_name}]")


class Fa3jitValueError(Fa3jitError, ValueError):
    """invalid_spec, invalid_argument or unsupported: the request cannot be served as given."""


class Fa3jitRuntimeError(Fa3jitError, RuntimeError):
    """compile_failed, no_driver, driver_error, cache_error, io_error or internal."""


class LibraryNotFoundError(RuntimeError):
    """libfa3jit.so could not be found or loaded; the message lists every place tried."""


# ---- structs (fa3jit.h) ---------------------------------------------------------------------------------

def _int_bounds(ctype: Any) -> Tuple[int, int]:
    """[lowest, highest] integer a ctypes integer or pointer type holds."""
    bits = 8 * ctypes.sizeof(ctype)
    if ctype is ctypes.c_void_p or ctype(-1).value > 0:
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def check_int(name: str, value: Any, ctype: Any) -> None:
    """ValueError naming `name` when the int `value` does not fit the C integer (or pointer) type `ctype`: ctypes
    would keep its low bits, and the library would read a plausible value that no check could tell from a real
    one (2**32 + 128 as an int32 is 128)."""
    lowest, highest = _int_bounds(ctype)
    if not lowest <= value <= highest:
        raise ValueError(f"{name} is {value!r}; expected an integer in [{lowest}, {highest}] (the range of its C "
                         f"type in fa3jit.h)")


class _CheckedStructure(ctypes.Structure):
    """A ctypes struct whose integer and pointer fields refuse values they cannot hold. ctypes itself keeps the low
    bits, so 2**32 + 128 given to an int32 field would reach the library as 128: a plausible value that no check
    downstream could tell from a real one. Raises ValueError naming the field."""

    def __init__(self, *values: Any, **fields: Any):
        for (name, _), value in zip(self._fields_, values):
            self._check(name, value)
        for name, value in fields.items():
            self._check(name, value)
        super().__init__(*values, **fields)

    def __setattr__(self, name: str, value: Any) -> None:
        self._check(name, value)
        super().__setattr__(name, value)

    @classmethod
    def _check(cls, name: str, value: Any) -> None:
        if not isinstance(value, int):
            return  # nested structs, strings, floats: ctypes checks their types itself
        ctype = dict(cls._fields_).get(name)
        if ctype is not None and issubclass(ctype, ctypes._SimpleCData) and ctype._type_ in "bBhHiIlLqQnNP":
            check_int(name, value, ctype)

    @classmethod
    def check_fields(cls, **fields: Any) -> None:
        """Each named value against its field (ValueError for the first that does not fit)."""
        for name, value in fields.items():
            cls._check(name, value)


class Tensor(_CheckedStructure):
    """fa3jit_tensor: device pointer and the batch/seq/head strides in elements (the dim axis has stride 1)."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("stride_batch", ctypes.c_int64),
        ("stride_seq", ctypes.c_int64),
        ("stride_head", ctypes.c_int64),
    ]


class RuntimeOptions(_CheckedStructure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("cache_dir", ctypes.c_char_p),
    ]


class Scale(_CheckedStructure):
    """fa3jit_scale: fp32 descales of one e4m3 input, data[batch * stride_batch + head * stride_head + i]
    (strides in elements; fa3jit.h gives the shapes per quant)."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("stride_batch", ctypes.c_int64),
        ("stride_head", ctypes.c_int64),
    ]


class ForwardParams(_CheckedStructure):
    """fa3jit_forward_params. Built with keywords; struct_size defaults to this struct's size and out_dtype to
    DTYPE_DEFAULT, as fa3jit_forward_params_init sets them."""
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
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
        # Appended for e4m3 (fa3jit.h); a struct_size of FORWARD_PARAMS_SIZE_BEFORE_E4M3 leaves them out.
        ("out_dtype", ctypes.c_int),
        ("quant", ctypes.c_int32),
        ("q_descale", Scale),
        ("k_descale", Scale),
        ("v_descale", Scale),
        # Appended for serving (fa3jit.h, "Serving layouts"); FORWARD_PARAMS_SIZE_BEFORE_SERVING leaves them out.
        # The index tensors are int32 device pointers.
        ("cu_seqlens_q", ctypes.c_void_p),
        ("max_seqlen_q", ctypes.c_int64),
        ("cu_seqlens_k", ctypes.c_void_p),
        ("max_seqlen_k", ctypes.c_int64),
        ("seqused_k", ctypes.c_void_p),
        ("page_table", ctypes.c_void_p),
        ("page_table_stride", ctypes.c_int64),
        ("max_pages", ctypes.c_int64),
        ("num_pages", ctypes.c_int64),
        ("page_size", ctypes.c_int64),
        ("num_splits", ctypes.c_int32),
        ("pack_gqa", ctypes.c_int32),
        # Appended for the attention variant (fa3jit.h); FORWARD_PARAMS_SIZE_BEFORE_VARIANT leaves them out.
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("softcap", ctypes.c_float),
        ("sinks", ctypes.c_void_p),
        # Appended for a transposed V (fa3jit.h: fa3jit_v_layout); FORWARD_PARAMS_SIZE_BEFORE_V_LAYOUT leaves it out.
        ("v_layout", ctypes.c_int32),
        ("reserved", ctypes.c_int32),  # 0: the tail padding made explicit (fa3jit.h)
    ]

    def __init__(self, **fields: Any):
        fields.setdefault("struct_size", ctypes.sizeof(ForwardParams))
        fields.setdefault("out_dtype", DTYPE_DEFAULT)
        fields.setdefault("num_splits", 1)  # as fa3jit_forward_params_init: no split, no workspace
        fields.setdefault("window_left", -1)  # and no window
        fields.setdefault("window_right", -1)
        super().__init__(**fields)


# struct_size of a caller whose header predates the e4m3 fields (offsetof(fa3jit_forward_params, out_dtype)).
FORWARD_PARAMS_SIZE_BEFORE_E4M3 = ForwardParams.out_dtype.offset
# struct_size of a caller whose header predates the serving fields (offsetof(fa3jit_forward_params, cu_seqlens_q)).
FORWARD_PARAMS_SIZE_BEFORE_SERVING = ForwardParams.cu_seqlens_q.offset
# struct_size of a caller whose header predates the variant fields (offsetof(fa3jit_forward_params, window_left)).
FORWARD_PARAMS_SIZE_BEFORE_VARIANT = ForwardParams.window_left.offset
# struct_size of a caller whose header predates v_layout (offsetof(fa3jit_forward_params, v_layout)).
FORWARD_PARAMS_SIZE_BEFORE_V_LAYOUT = ForwardParams.v_layout.offset
V_LAYOUT_SEQ_MAJOR, V_LAYOUT_D_MAJOR = 0, 1  # fa3jit_v_layout


def d_major_keys(seqlen_k: Any) -> Any:
    """Keys per row of a d_major V: seqlen_k rounded up to a whole group of 16 (kernels/attention_fwd/device/
    fp8_v_layout.h: d_major_keys). Works on symbolic sizes too."""
    return (seqlen_k + 15) // 16 * 16


# The per-call fields of ForwardParams, dtype through softmax_scale, for struct.pack_into at PARAMS_CALL_OFFSET:
# native ("@") alignment pads exactly as the C compiler does. The hot path of flash_attn_func writes a whole
# call with one pack_into into a per-thread ForwardParams (several times cheaper than setting ctypes fields);
# struct_size is set once when that struct is made, and the workspace fields are packed per call with
# WORKSPACE_STRUCT (a causal call's tile counter, else NULL / 0). Pointers are "P"
# (pass 0 for NULL), the enum dtype "i". tests/python/test_abi_layout.py compares the bytes with C's.
PARAMS_CALL_STRUCT = struct.Struct("@i i 7q" + " P3q" * 4 + " P f")
PARAMS_CALL_OFFSET = ForwardParams.dtype.offset
if PARAMS_CALL_OFFSET + PARAMS_CALL_STRUCT.size != ForwardParams.softmax_scale.offset + 4:
    # A wrong edit of either must never reach the library.
    raise ImportError("fa3jit: PARAMS_CALL_STRUCT does not cover ForwardParams.dtype .. softmax_scale")

# The same for an e4m3 call: dtype through v_descale, i.e. PARAMS_CALL_STRUCT's fields, then workspace ("P",
# pass 0) and workspace_bytes ("N", pass 0), out_dtype ("i"), quant ("i") and the three descales ("P2q" each).
# Packed at PARAMS_CALL_OFFSET into a per-thread ForwardParams of its own, so the 16-bit path never has to reset
# these fields; the serving fields keep ForwardParams()'s defaults (num_splits 1: no workspace).
PARAMS_FP8_CALL_STRUCT = struct.Struct(PARAMS_CALL_STRUCT.format + " P N i i" + " P2q" * 3)
if PARAMS_CALL_OFFSET + PARAMS_FP8_CALL_STRUCT.size != ForwardParams.cu_seqlens_q.offset:
    raise ImportError("fa3jit: PARAMS_FP8_CALL_STRUCT does not cover ForwardParams.dtype .. v_descale")

# The same for a serving call (fa3jit.serving): dtype through the end of the struct, i.e. PARAMS_FP8_CALL_STRUCT's
# fields (16-bit only: out_dtype DEFAULT, quant NONE, descales 0), then cu_seqlens_q ("P"), max_seqlen_q ("q"),
# cu_seqlens_k ("P"), max_seqlen_k ("q"), seqused_k ("P"), page_table ("P"), page_table_stride, max_pages,
# num_pages, page_size ("q" each), num_splits and pack_gqa ("i" each), window_left and window_right ("q" each),
# softcap ("f") and sinks ("P"). The workspace fields are packed as 0 and set with WORKSPACE_STRUCT at
# WORKSPACE_OFFSET once the call's size is known.
PARAMS_SERVING_CALL_STRUCT = struct.Struct(PARAMS_FP8_CALL_STRUCT.format + " P q P q P P 4q i i 2q f P")
if PARAMS_CALL_OFFSET + PARAMS_SERVING_CALL_STRUCT.size != ForwardParams.sinks.offset + ctypes.sizeof(ctypes.c_void_p):
    raise ImportError("fa3jit: PARAMS_SERVING_CALL_STRUCT does not cover ForwardParams.dtype .. sinks")
# A serving call of a kept plan (fa3jit.serving: _run_planned) writes an image of the call's fields once and then, per
# call, only what moves: the four tensors (pointer and strides) through lse and softmax_scale at PARAMS_TENSORS_OFFSET,
# and the index fields cu_seqlens_q through page_table (pointers and max_seqlen_*) at PARAMS_INDEX_OFFSET.
PARAMS_TENSORS_STRUCT = struct.Struct("@" + "P3q " * 4 + "P f")
PARAMS_TENSORS_OFFSET = ForwardParams.q.offset
if PARAMS_TENSORS_OFFSET + PARAMS_TENSORS_STRUCT.size != ForwardParams.softmax_scale.offset + 4:
    raise ImportError("fa3jit: PARAMS_TENSORS_STRUCT does not cover ForwardParams.q .. softmax_scale")
PARAMS_INDEX_STRUCT = struct.Struct("@P q P q P P")
PARAMS_INDEX_OFFSET = ForwardParams.cu_seqlens_q.offset
if PARAMS_INDEX_OFFSET + PARAMS_INDEX_STRUCT.size != ForwardParams.page_table_stride.offset:
    raise ImportError("fa3jit: PARAMS_INDEX_STRUCT does not cover ForwardParams.cu_seqlens_q .. page_table")
WORKSPACE_STRUCT = struct.Struct("@P N")
WORKSPACE_OFFSET = ForwardParams.workspace.offset
if WORKSPACE_OFFSET + WORKSPACE_STRUCT.size != ForwardParams.out_dtype.offset:
    raise ImportError("fa3jit: WORKSPACE_STRUCT does not cover ForwardParams.workspace .. workspace_bytes")


class QuantizeParams(_CheckedStructure):
    """fa3jit_quantize_params (the FP8 pre-pass, fa3jit_quantize_fp8). Built with keywords; struct_size defaults
    to this struct's size and hadamard to 1, as fa3jit_quantize_params_init sets them."""
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("dtype", ctypes.c_int),
        ("hadamard", ctypes.c_int32),
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
        ("q8", Tensor),
        ("k8", Tensor),
        ("v8", Tensor),
        ("q_descale", ctypes.c_void_p),
        ("k_descale", ctypes.c_void_p),
        ("v_descale", ctypes.c_void_p),
        ("rope", ctypes.c_int32),
        ("rotary_dim", ctypes.c_int32),
        ("q_block_rows", ctypes.c_int32),
        ("k_block_rows", ctypes.c_int32),
        ("rope_cos", ctypes.c_void_p),
        ("rope_sin", ctypes.c_void_p),
        ("rope_max_seqlen", ctypes.c_int64),
        ("seed", ctypes.c_uint64),
        # Appended for a transposed V (fa3jit.h: fa3jit_v_layout).
        ("v_layout", ctypes.c_int32),
        ("reserved", ctypes.c_int32),  # 0: the tail padding made explicit (fa3jit.h)
    ]

    def __init__(self, **fields: Any):
        fields.setdefault("struct_size", ctypes.sizeof(QuantizeParams))
        fields.setdefault("hadamard", 1)
        super().__init__(**fields)


class CallPlan(_CheckedStructure):
    """fa3jit_call_plan: how a call runs (fa3jit_attention_plan)."""
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("num_splits", ctypes.c_int32),
        ("pack_gqa", ctypes.c_int32),
        ("block_m", ctypes.c_int32),
        ("block_n", ctypes.c_int32),
        ("workspace_bytes", ctypes.c_size_t),
    ]

    def __init__(self, **fields: Any):
        fields.setdefault("struct_size", ctypes.sizeof(CallPlan))
        super().__init__(**fields)


class KernelInfo(_CheckedStructure):
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
        ("kind", ctypes.c_char * KIND_CAPACITY),
        ("summary", ctypes.c_char * SUMMARY_CAPACITY),
    ]

    def __init__(self, **fields: Any):
        fields.setdefault("struct_size", ctypes.sizeof(KernelInfo))
        super().__init__(**fields)

    def as_dict(self) -> Dict[str, Any]:
        return {
            "key": self.key.decode(),
            "kernel_name": self.kernel_name.decode(),
            "kind": self.kind.decode(),
            "summary": self.summary.decode(),
            "cache_hit": bool(self.cache_hit),
            "ms": self.ms,
            "registers": self.registers,
            "spill_store_bytes": self.spill_store_bytes,
            "spill_load_bytes": self.spill_load_bytes,
            "smem_bytes": self.smem_bytes,
            "num_threads": self.num_threads,
        }


# ---- library ------------------------------------------------------------------------------------------

_lock = threading.Lock()
_library: Optional[ctypes.CDLL] = None
_library_path: str = ""
_runtime: Optional["Runtime"] = None
_runtime_lock = threading.Lock()  # separate from _lock: Runtime() takes _lock


def bundled_library() -> pathlib.Path:
    """Where a wheel puts the library: libfa3jit.so in this package's directory."""
    return pathlib.Path(__file__).resolve().parent / "libfa3jit.so"


def library_candidates() -> List[str]:
    """The paths tried, in order (see the module docstring)."""
    here = pathlib.Path(__file__).resolve().parent
    bundled = bundled_library()
    candidates = [str(bundled)] if bundled.exists() else []
    env = os.environ.get("FA3JIT_LIBRARY")
    if env:
        return candidates + [env]
    source_root = here.parent.parent.parent  # tools/python/fa3jit -> the repository, when run from the tree
    if (source_root / "runtime" / "include" / "fa3jit" / "fa3jit.h").is_file():
        candidates.append(str(source_root / "build" / "libfa3jit.so"))
    return candidates + ["libfa3jit.so.0", "libfa3jit.so"]


_MISSING_NVRTC = re.compile(r"(libnvrtc[\w.-]*\.so[\d.]*): cannot open shared object file")


def nvrtc_candidates(soname: str) -> List[str]:
    """Paths where NVRTC (`soname`, e.g. libnvrtc.so.13) may be, in the order the fallback tries them: the
    NVIDIA wheel's site-packages/nvidia/cu<major>/lib on sys.path, then the CUDA toolkit under $CUDA_HOME,
    $CUDA_PATH and /usr/local/cuda (lib64, then targets/<arch>-linux/lib). Only existing files are listed."""
    major = soname.rsplit(".so.", 1)[-1].split(".")[0] if ".so." in soname else ""
    directories: List[pathlib.Path] = []
    if major:
        for entry in sys.path:
            directories.append(pathlib.Path(entry or ".") / "nvidia" / f"cu{major}" / "lib")
    arch = f"{platform.machine()}-linux"
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            directories += [pathlib.Path(root) / "lib64", pathlib.Path(root) / "targets" / arch / "lib"]
    found: List[str] = []
    for directory in directories:
        path = directory / soname
        if path.is_file() and str(path) not in found:
            found.append(str(path))
    return found


def _load(candidate: str, tried: List[str]) -> Optional[ctypes.CDLL]:
    """ctypes.CDLL(candidate), with one retry after loading NVRTC by hand when that is what was missing;
    None (and the reasons appended to `tried`) when it cannot be loaded."""
    try:
        return ctypes.CDLL(candidate)
    except OSError as error:
        missing = _MISSING_NVRTC.search(str(error))
        if missing is None:
            tried.append(f"{candidate} ({error})")
            return None
        nvrtc_paths = nvrtc_candidates(missing.group(1))
        for nvrtc in nvrtc_paths:
            try:
                # RTLD_GLOBAL: the loader then resolves the library's DT_NEEDED soname to this copy.
                ctypes.CDLL(nvrtc, mode=ctypes.RTLD_GLOBAL)
            except OSError as nvrtc_error:
                error = nvrtc_error
                continue
            try:
                return ctypes.CDLL(candidate)
            except OSError as retry_error:  # something else is missing now: one NVRTC in the process is enough
                error = retry_error
                break
        where = (", ".join(nvrtc_paths)
                 or "not in the nvidia-cuda-nvrtc wheel, $CUDA_HOME, $CUDA_PATH or /usr/local/cuda")
        tried.append(f"{candidate} ({error}; NVRTC {missing.group(1)} tried from: {where}; install the CUDA 13 "
                     f"toolkit or `pip install nvidia-cuda-nvrtc`, or put its lib directory on LD_LIBRARY_PATH)")
        return None


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    c_int, c_void_p, c_char_p = ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p
    signatures = {
        "fa3jit_version": (c_char_p, []),
        "fa3jit_last_error": (c_char_p, []),
        "fa3jit_status_name": (c_char_p, [c_int]),
        "fa3jit_capabilities_json": (c_char_p, []),
        "fa3jit_runtime_create": (c_int, [ctypes.POINTER(RuntimeOptions), ctypes.POINTER(c_void_p)]),
        "fa3jit_runtime_destroy": (None, [c_void_p]),
        # params as c_void_p: the hot path passes the address of its per-thread struct as an int (the
        # cheapest conversion ctypes has); other callers pass ctypes.byref(ForwardParams).
        "fa3jit_attention_forward": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p]),
        "fa3jit_attention_workspace_size": (c_int, [c_void_p, c_void_p, ctypes.POINTER(ctypes.c_size_t)]),
        "fa3jit_attention_plan": (c_int, [c_void_p, c_void_p, c_void_p, ctypes.POINTER(CallPlan)]),
        "fa3jit_kernel_create": (c_int, [c_void_p, c_char_p, ctypes.POINTER(c_void_p)]),
        "fa3jit_kernel_destroy": (None, [c_void_p]),
        "fa3jit_kernel_get_info": (c_int, [c_void_p, ctypes.POINTER(KernelInfo)]),
        "fa3jit_compile_spec": (c_int, [c_void_p, c_char_p, ctypes.POINTER(KernelInfo)]),
        "fa3jit_warm_manifest": (c_int, [c_void_p, c_char_p, ctypes.POINTER(ctypes.c_size_t)]),
        # params as c_void_p: fa3jit.fp8 passes the address of its QuantizeParams.
        "fa3jit_quantize_fp8": (c_int, [c_void_p, c_void_p, c_void_p]),
        "fa3jit_fp8_key_positions": (c_int, [ctypes.POINTER(ctypes.c_int32)]),
        "fa3jit_attention_quant_blocks": (c_int, [c_void_p, ctypes.c_int64, ctypes.c_int32,
                                                  ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32)]),
    }
    missing = [name for name in signatures if not hasattr(lib, name)]
    if missing:
        raise LibraryNotFoundError(f"the loaded fa3jit library lacks {', '.join(missing)}: it is older than this "
                                   f"package (C ABI version {ABI_VERSION}); rebuild it or point FA3JIT_LIBRARY at "
                                   f"a current build")
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    return lib


def library() -> ctypes.CDLL:
    """The loaded libfa3jit (ctypes.CDLL), loaded once. Raises LibraryNotFoundError."""
    global _library, _library_path
    with _lock:
        if _library is not None:
            return _library
        tried: List[str] = []
        for candidate in library_candidates():
            is_path = os.sep in candidate
            if is_path and not os.path.exists(candidate):
                tried.append(f"{candidate} (no such file)")
                continue
            lib = _load(candidate, tried)
            if lib is None:
                continue
            _library = _declare(lib)
            _library_path = candidate
            return _library
        hint = ("set FA3JIT_LIBRARY to the path of libfa3jit.so, build the source tree "
                "(cmake -S . -B build && cmake --build build), or put an installed lib directory on LD_LIBRARY_PATH")
        raise LibraryNotFoundError("libfa3jit.so not found; tried: " + "; ".join(tried) + ". " + hint)


def library_path() -> str:
    """Path or name the library was loaded from (loads it if needed)."""
    library()
    return _library_path


def error_for(status: int, function: str) -> Fa3jitError:
    """The exception for a non-zero fa3jit_status, with this thread's last-error message (read at once: the
    next fa3jit call of the thread replaces it)."""
    message = library().fa3jit_last_error().decode(errors="replace") or "(no message)"
    error_type = Fa3jitValueError if status in VALUE_ERROR_STATUSES else Fa3jitRuntimeError
    # Some library messages already begin with the function's name: not twice.
    return error_type(status, message if message.startswith(function + ":") else f"{function}: {message}")


def check(status: int, function: str) -> None:
    """Raises the exception for a non-zero fa3jit_status, with the thread's last-error message."""
    if status != OK:
        raise error_for(status, function)


def version() -> str:
    """The library's version, "MAJOR.MINOR.PATCH"."""
    return library().fa3jit_version().decode()


def capabilities() -> Dict[str, Any]:
    """What the loaded library generates, parsed from fa3jit_capabilities_json(). Needs no GPU (and no torch).

    Returns a new dict on every call:
      {"abi_version": 2,                      # FA3JIT_ABI_VERSION of the library (ABI_VERSION here)
       "version": "0.1.0",                    # fa3jit.version()
       "families": {                          # one entry per kernel family (kernels/<kind>/)
         "attention_fwd": {"description": str,
                           "dtypes": ["fp16", "bf16", "e4m3"],
                           "head_dims": [64, 96, 128, 192, 256],  # the tile table's rows
                           "head_dim_rule": {"min": 8, "max": 256, "multiple_of": 8},  # every size generated
                           "fp8_head_dim_rule": {"min": 16, "max": 256, "multiple_of": 16},  # e4m3
                           "head_dim_v_may_differ": True,              # e.g. 192 / 128 (DeepSeek MLA prefill)
                           "features": ["causal", "gqa", "mqa", "lse", "strided"]},
         "attention_combine": {"description": str, "out_dtypes": [...], "partial_dtype": "fp32",
                               "head_dim_v": {"min", "max", "multiple_of"}, "max_splits": {"min", "max",
                               "default"}, "features": [...]}}}
    Every family has "description" (str) and "features" (list of str); the other keys are the family's own
    (kernels/<kind>/spec.cpp writes them). A spec or call outside them is refused with Fa3jitValueError.
    Raises LibraryNotFoundError when libfa3jit.so cannot be loaded.
    """
    return json.loads(library().fa3jit_capabilities_json().decode())


def fp8_key_positions() -> Tuple[int, ...]:
    """fa3jit_fp8_key_positions: positions[j] is where key j of every aligned group of 16 keys sits in a d_major V
    (the order in which the e4m3 kernel packs its probabilities). Needs no GPU."""
    positions = (ctypes.c_int32 * 16)()
    check(library().fa3jit_fp8_key_positions(positions), "fa3jit_fp8_key_positions")
    return tuple(positions)


def plan(params: ForwardParams, kernel: Optional["Kernel"] = None) -> CallPlan:
    """fa3jit_attention_plan: how a call with these params runs on `kernel` (None: the tile table's kernel): its
    num_splits, pack_gqa, tile (block_m, block_n: an e4m3 PER_BLOCK call's descale blocks) and workspace bytes,
    from the shapes and serving fields (tensor pointers may be 0); needs no runtime, and the CUDA driver only when
    num_splits is 0. Raises Fa3jitValueError for a bad argument, Fa3jitRuntimeError without a driver."""
    result = CallPlan()
    status = library().fa3jit_attention_plan(None, None if kernel is None else kernel.handle, ctypes.byref(params),
                                             ctypes.byref(result))
    check(status, "fa3jit_attention_plan")
    return result


def quant_blocks(head_dim: int, causal: bool = False, kernel: Optional["Kernel"] = None) -> Tuple[int, int]:
    """fa3jit_attention_quant_blocks: (block_m, block_n), the query rows per q_descale entry and the key rows per
    k_descale entry of per-block e4m3 descales, for `kernel` when given, else for the tile table's e4m3 kernel
    of (head_dim, causal). Needs no GPU (and no torch). Raises Fa3jitValueError for a head_dim that e4m3 does
    not support, ValueError for a closed kernel."""
    check_int("head_dim", int(head_dim), ctypes.c_int64)
    block_m, block_n = ctypes.c_int32(), ctypes.c_int32()
    status = library().fa3jit_attention_quant_blocks(None if kernel is None else kernel.handle, int(head_dim),
                                                     1 if causal else 0, ctypes.byref(block_m),
                                                     ctypes.byref(block_n))
    check(status, "fa3jit_attention_quant_blocks")
    return block_m.value, block_n.value


def c_string(text: Union[str, bytes], name: str) -> bytes:
    """text as the bytes of a C string; ValueError naming `name` when it holds a NUL character, where the library
    would stop reading (the rest silently dropped)."""
    data = text if isinstance(text, bytes) else text.encode()
    nul = data.find(b"\0")
    if nul >= 0:
        raise ValueError(f"{name} contains a NUL character (at byte {nul}); a C string ends there")
    return data


def spec_text(spec: Spec) -> str:
    """A spec as JSON text: a str is taken as is, a mapping is serialised."""
    if isinstance(spec, str):
        return spec
    if isinstance(spec, Mapping):
        return json.dumps(dict(spec))
    raise TypeError(f"spec: expected a JSON string or a dict; got {type(spec).__name__}")


# ---- runtime and kernels ------------------------------------------------------------------------------

class Runtime:
    """One fa3jit_runtime. Usually use runtime() (one per process); a separate one is useful for tools
    that need their own cache directory (bench/compile_time.py)."""

    def __init__(self, cache_dir: Optional[Union[str, os.PathLike]] = None) -> None:
        lib = library()
        options = RuntimeOptions(ctypes.sizeof(RuntimeOptions),
                                 None if cache_dir is None else c_string(os.fsencode(cache_dir), "cache_dir"))
        handle = ctypes.c_void_p()
        check(lib.fa3jit_runtime_create(ctypes.byref(options), ctypes.byref(handle)), "fa3jit_runtime_create")
        self._handle: Optional[int] = handle.value
        self._lib = lib

    @property
    def handle(self) -> int:
        """The fa3jit_runtime* as an int. Raises RuntimeError once closed."""
        if not self._handle:
            raise RuntimeError("fa3jit Runtime is closed")
        return self._handle

    def _live_handle(self) -> int:
        return self.handle

    def close(self) -> None:
        """Destroys the runtime; kernels launched through it must have finished, and its Kernel objects
        must not be used any more."""
        if self._handle:
            self._lib.fa3jit_runtime_destroy(self._handle)
            self._handle = None

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def compile_spec(self, spec: Spec) -> Dict[str, Any]:
        """Compiles (or loads from the cache) the kernel of a spec (JSON text or dict). Needs no GPU.
        Returns KernelInfo.as_dict(). Raises Fa3jitValueError for a bad spec, Fa3jitRuntimeError when NVRTC
        or the cache fails."""
        info = KernelInfo()
        status = self._lib.fa3jit_compile_spec(self.handle, c_string(spec_text(spec), "spec"), ctypes.byref(info))
        check(status, "fa3jit_compile_spec")
        return info.as_dict()

    def warm_manifest(self, manifest: Spec) -> int:
        """Compiles every kernel of a serving manifest (JSON text or dict of kind "serving_manifest") into the
        cache; blocks while it compiles; returns how many kernels were not cached yet. Needs no GPU. Raises
        Fa3jitValueError for a bad manifest naming the field, Fa3jitRuntimeError when NVRTC or the cache fails."""
        compiled = ctypes.c_size_t(0)
        status = self._lib.fa3jit_warm_manifest(self.handle, c_string(spec_text(manifest), "manifest"),
                                                ctypes.byref(compiled))
        check(status, "fa3jit_warm_manifest")
        return compiled.value

    def create_kernel(self, spec: Spec) -> "Kernel":
        """Kernel(spec, runtime=self)."""
        return Kernel(spec, runtime=self)

    def forward(self, params: ForwardParams, stream: Optional[int], kernel: Optional["Kernel"] = None) -> None:
        """fa3jit_attention_forward with a ForwardParams on a CUstream given as an int (0 or None = the legacy
        default stream), on `kernel` when given (else the tile table's kernel). Raises Fa3jitError."""
        kernel_handle = None if kernel is None else kernel.handle
        status = self._lib.fa3jit_attention_forward(self.handle, kernel_handle, ctypes.byref(params), stream or None)
        check(status, "fa3jit_attention_forward")

    def workspace_size(self, params: ForwardParams) -> int:
        """fa3jit_attention_workspace_size: bytes of device workspace (16-byte aligned) a call with these params
        needs: 0 with num_splits 1 (ForwardParams()'s default, read without a GPU); with num_splits 0 or > 1 the
        params are checked as a forward call checks them and the heuristic needs the CUDA driver. Raises
        Fa3jitValueError for a bad struct_size or argument, Fa3jitRuntimeError without a driver."""
        size = ctypes.c_size_t()
        status = self._lib.fa3jit_attention_workspace_size(self.handle, ctypes.byref(params), ctypes.byref(size))
        check(status, "fa3jit_attention_workspace_size")
        return size.value


class Kernel:
    """A compiled and loaded kernel of one spec (an fa3jit_kernel handle): create it once, before serving, and
    pass it as `flash_attn_func(..., kernel=k)`; the calls then read no JSON and skip the tile table.

    spec: JSON text or a dict (kernels/attention_fwd/spec.h lists the fields; "kind" defaults to
    "attention_fwd"). The calls must agree with the spec's dtype, head dims and causal flag, else they raise
    Fa3jitValueError (invalid_argument) naming the mismatch. Creating needs the CUDA driver (the kernel is
    loaded into it). Raises Fa3jitValueError (invalid_spec, unsupported), Fa3jitRuntimeError (compile_failed,
    no_driver, driver_error, cache_error), TypeError for a spec that is neither str nor dict.

    The handle is destroyed by close(), by leaving a `with` block, or when the object is collected; the code
    stays loaded while its runtime lives.
    """

    def __init__(self, spec: Spec, runtime: Optional[Runtime] = None) -> None:
        self.spec = spec_text(spec)
        self._v_d_major = False
        self.runtime = runtime if runtime is not None else _process_runtime()
        self._lib = self.runtime._lib
        handle = ctypes.c_void_p()
        status = self._lib.fa3jit_kernel_create(self.runtime.handle, c_string(self.spec, "spec"), ctypes.byref(handle))
        check(status, "fa3jit_kernel_create")
        self._handle: Optional[int] = handle.value
        # A d_major kernel reads v transposed (fa3jit.v_to_d_major): flash_attn_func reads v's shape by it. The
        # library has validated the spec, so it is a JSON object here.
        self._v_d_major = json.loads(self.spec).get("v_layout") == "d_major"
        # (runtime, kernel) handles as flash_attn_func reads them, one attribute access per call; None = closed.
        self._handles: Optional[Tuple[int, int]] = (self.runtime.handle, self.handle)
        self._info: Optional[Dict[str, Any]] = None

    @property
    def handle(self) -> int:
        """The fa3jit_kernel* as an int. Raises ValueError once closed."""
        if not self._handle:
            raise ValueError("fa3jit Kernel is closed")
        return self._handle

    def info(self) -> Dict[str, Any]:
        """fa3jit_kernel_get_info as a dict (KernelInfo.as_dict(): key, kernel_name, kind, summary, cache_hit,
        ms, registers, spill_store_bytes, spill_load_bytes, smem_bytes, num_threads)."""
        if self._info is None:
            info = KernelInfo()
            check(self._lib.fa3jit_kernel_get_info(self.handle, ctypes.byref(info)), "fa3jit_kernel_get_info")
            self._info = info.as_dict()
        return dict(self._info)

    @property
    def name(self) -> str:
        """The kernel's name, e.g. fa3jit_attention_fwd_bf16_d128_causal_1a2b3c4d: its entry point, or the common
        prefix of its entry points where it has several (the FP8 pre-pass: one per pass, <name>_qk, ...)."""
        return self.info()["kernel_name"]

    @property
    def summary(self) -> str:
        """One line: dtype, head_dim, mask, tile, layout and schedule, e.g. "bf16 d128 causal 128x176 wg2 st2 pingpong
        overlap mask-free-loop l2-hints persistent" (cut at 127 characters)."""
        return self.info()["summary"]

    def close(self) -> None:
        """Destroys the handle (idempotent). Calls passing this kernel afterwards raise ValueError."""
        handle, self._handle, self._handles = self._handle, None, None
        if handle:
            self._lib.fa3jit_kernel_destroy(handle)

    def __enter__(self) -> "Kernel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        # Only frees the host-side handle (never the loaded code), so it is safe at any time, even after the
        # runtime was closed; getattr: __init__ may have failed before the handle existed.
        if getattr(self, "_handle", None):
            self.close()

    def __repr__(self) -> str:
        if not self._handle:
            return "<fa3jit.Kernel (closed)>"
        return f"<fa3jit.Kernel {self.summary!r} {self.name}>"


def runtime() -> Runtime:
    """The process-wide Runtime, created on first use (thread-safe). Its cache directory comes from the
    environment (FA3JIT_CACHE_DIR, else $XDG_CACHE_HOME/fa3jit, else ~/.cache/fa3jit). It is never destroyed:
    destroying at interpreter exit could race with the CUDA driver's own teardown."""
    global _runtime
    if _runtime is None:
        with _runtime_lock:
            if _runtime is None:
                _runtime = Runtime()
    return _runtime


def _process_runtime() -> Runtime:
    # Kernel.__init__'s `runtime` argument hides the module function of that name.
    return runtime()

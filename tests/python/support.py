"""Shared setup of the Python tests (imported by conftest.py and the test modules).

Four levels, each skipped with its reason where it cannot run:
  - `needs_cc`: a C compiler only (ABI layout check);
  - `needs_library`: libfa3jit.so (C ABI through ctypes; NVRTC but no GPU);
  - `needs_torch`: torch, no GPU (the custom ops' registration, fake implementations and tracing on the CPU);
  - `needs_gpu`: the library, torch with CUDA and an sm_90 GPU (kernels target sm_90a).
The package is the source tree's (tools/python), whatever is installed, so the suite tests this checkout with
the library of FA3JIT_LIBRARY or ./build; FA3JIT_TEST_INSTALLED=1 tests the installed package instead (a wheel
from `pip install .`, with its bundled library).
"""

import json
import os
import pathlib
import shutil
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
TEST_INSTALLED = os.environ.get("FA3JIT_TEST_INSTALLED") == "1"

if not TEST_INSTALLED:
    sys.path.insert(0, str(ROOT / "tools" / "python"))
import fa3jit  # noqa: E402,F401

from fa3jit import _capi  # noqa: E402


def _library_reason():
    try:
        _capi.library()
    except _capi.LibraryNotFoundError:
        return "libfa3jit.so not found: set FA3JIT_LIBRARY or build ./build (pytest's header lists the paths tried)"
    return None


def _gpu_reason():
    reason = _library_reason()
    if reason:
        return reason
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"fa3jit kernels target sm_90a (Hopper); this GPU is sm_{major}{minor}"
    # The float32 reference must be true float32: no TF32 in matmuls.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return None


def _torch_reason():
    try:
        import torch  # noqa: F401
    except ImportError:
        return "torch is not installed"
    from fa3jit import _torch_ops
    if not _torch_ops.REGISTERED:
        return f"torch.ops.fa3jit is not registered: {_torch_ops.UNAVAILABLE_REASON}"
    return None


_LIBRARY_REASON = _library_reason()
_TORCH_REASON = _torch_reason()
_GPU_REASON = _gpu_reason()

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on PATH")
needs_library = pytest.mark.skipif(_LIBRARY_REASON is not None, reason=str(_LIBRARY_REASON))
needs_torch = pytest.mark.skipif(_TORCH_REASON is not None, reason=str(_TORCH_REASON))
needs_gpu = pytest.mark.skipif(_GPU_REASON is not None, reason=str(_GPU_REASON))


def environment_summary():
    """Lines for pytest's report header: which library is used and why levels are skipped."""
    try:
        library = _capi.library_path()
    except _capi.LibraryNotFoundError as error:
        library = str(error)
    package = pathlib.Path(fa3jit.__file__).resolve().parent
    return [f"fa3jit package: {package}{' (installed)' if TEST_INSTALLED else ''}",
            f"fa3jit library: {library}",
            f"fa3jit torch ops: {'registered' if _TORCH_REASON is None else 'skipped: ' + _TORCH_REASON}",
            f"fa3jit GPU tests: {'enabled' if _GPU_REASON is None else 'skipped: ' + _GPU_REASON}"]


def load_data(name):
    with open(DATA / name) as f:
        return json.load(f)

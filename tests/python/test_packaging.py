"""The Python package as a package, without a GPU: it imports without torch, ships py.typed, documents and
annotates its public API, takes its version from CMake's, and finds its library and NVRTC in the documented
order (the NVRTC fallback of fa3jit._capi is exercised with stand-in files and a stand-in loader).

The wheel itself (`pip wheel .`, installed into a fresh virtual environment) is checked by
tests/python/wheel/run.sh, a stage of `tools/bootstrap.sh test`."""

import ctypes
import inspect
import os
import pathlib
import re
import subprocess
import sys

import pytest

import fa3jit
from fa3jit import _capi

from support import ROOT

PACKAGE = pathlib.Path(fa3jit.__file__).resolve().parent


def _cmake_version():
    return re.search(r"project\(fa3jit VERSION (\d+\.\d+\.\d+)", (ROOT / "CMakeLists.txt").read_text()).group(1)


# ---- metadata -------------------------------------------------------------------------------------------

def test_pyproject_reads_the_version_from_cmake():
    text = (ROOT / "pyproject.toml").read_text()
    regex = re.search(r"^regex = '(.*)'$", text, re.MULTILINE).group(1)
    match = re.search(regex, (ROOT / "CMakeLists.txt").read_text(), re.MULTILINE)
    assert match and match.group("value") == _cmake_version()
    assert 'wheel.packages = ["tools/python/fa3jit"]' in text
    assert (ROOT / "tools" / "python" / "fa3jit" / "__init__.py").is_file()


def test_the_package_is_typed():
    assert (PACKAGE / "py.typed").is_file()


def test_the_package_imports_without_torch():
    """torch is optional: with `import torch` failing, fa3jit imports, registers no op and says why."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "import fa3jit\n"
            "from fa3jit import _torch_ops\n"
            "assert not _torch_ops.REGISTERED and 'torch' in _torch_ops.UNAVAILABLE_REASON\n"
            "assert callable(fa3jit.flash_attn_func) and callable(fa3jit.capabilities)\n"
            "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


# ---- typed, documented API ------------------------------------------------------------------------------

def _public_callables():
    for name in fa3jit.__all__:
        value = getattr(fa3jit, name)
        if inspect.isfunction(value):
            yield name, value
        elif inspect.isclass(value) and not issubclass(value, BaseException):
            yield name, value
            for member_name, member in vars(value).items():
                if inspect.isfunction(member) and (not member_name.startswith("_") or member_name == "__init__"):
                    yield f"{name}.{member_name}", member


@pytest.mark.parametrize("name, function", list(_public_callables()), ids=lambda x: x if isinstance(x, str) else "")
def test_public_api_is_annotated_and_documented(name, function):
    if inspect.isclass(function):
        assert function.__doc__ and function.__doc__.strip(), f"{name} has no docstring"
        return
    signature = inspect.signature(function)
    for parameter in signature.parameters.values():
        if parameter.name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        assert parameter.annotation is not inspect.Parameter.empty, f"{name}({parameter.name}) has no type hint"
    assert signature.return_annotation is not inspect.Signature.empty, f"{name} has no return type hint"
    if not name.endswith("__init__"):
        assert function.__doc__ and function.__doc__.strip(), f"{name} has no docstring"


def test_flash_attn_func_documents_shapes_dtypes_and_errors():
    doc = fa3jit.flash_attn_func.__doc__
    for needle in ("(batch, seqlen_q, num_heads,    head_dim)", "torch.float16", "torch.bfloat16", "float32",
                   "Raises ValueError", "RuntimeError", "TypeError", "torch.compile", "torch.ops.fa3jit"):
        assert needle in doc, needle


def test_capabilities_is_documented():
    doc = fa3jit.capabilities.__doc__
    for needle in ("abi_version", "families", "dtypes", "head_dims", "features", "description", "Needs no GPU"):
        assert needle in doc, needle


def test_mypy_accepts_the_package():
    """Type-checks the package with mypy where it is installed (not part of the CI image)."""
    pytest.importorskip("mypy")
    result = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--ignore-missing-imports",
                             "--disallow-untyped-defs", str(PACKAGE)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- library lookup and NVRTC -----------------------------------------------------------------------------

def test_nvrtc_candidates_follow_the_wheel_then_the_toolkit(monkeypatch, tmp_path):
    site = tmp_path / "site"
    wheel_lib = site / "nvidia" / "cu13" / "lib"
    toolkit = tmp_path / "cuda"
    for directory in (wheel_lib, toolkit / "lib64"):
        directory.mkdir(parents=True)
        (directory / "libnvrtc.so.13").write_bytes(b"")
    (tmp_path / "empty").mkdir()
    monkeypatch.setattr(sys, "path", [str(tmp_path / "empty"), str(site)])
    monkeypatch.setenv("CUDA_HOME", str(toolkit))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    found = _capi.nvrtc_candidates("libnvrtc.so.13")
    assert found[:2] == [str(wheel_lib / "libnvrtc.so.13"), str(toolkit / "lib64" / "libnvrtc.so.13")]
    assert _capi.nvrtc_candidates("libnvrtc.so.12")[:1] != [str(wheel_lib / "libnvrtc.so.12")]


class _StandInLoader:
    """ctypes.CDLL as the dynamic loader would answer when libfa3jit.so's NVRTC is not on its search path:
    the library loads only once NVRTC was loaded by path."""

    def __init__(self, library):
        self.library, self.calls, self.nvrtc_loaded = library, [], False

    def __call__(self, path, mode=None):
        self.calls.append((path, mode))
        if path == self.library:
            if not self.nvrtc_loaded:
                raise OSError("libnvrtc.so.13: cannot open shared object file: No such file or directory")
            return "library handle"
        if path.endswith("libnvrtc.so.13"):
            self.nvrtc_loaded = True
            return "nvrtc handle"
        raise OSError(f"{path}: cannot open shared object file")


def test_a_missing_nvrtc_is_loaded_from_the_wheel_and_the_library_retried(monkeypatch, tmp_path):
    wheel_lib = tmp_path / "nvidia" / "cu13" / "lib"
    wheel_lib.mkdir(parents=True)
    (wheel_lib / "libnvrtc.so.13").write_bytes(b"")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    loader = _StandInLoader("/x/libfa3jit.so")
    monkeypatch.setattr(_capi.ctypes, "CDLL", loader)
    tried = []
    assert _capi._load("/x/libfa3jit.so", tried) == "library handle"
    assert tried == []
    assert loader.calls[1] == (str(wheel_lib / "libnvrtc.so.13"), ctypes.RTLD_GLOBAL)


def test_a_missing_nvrtc_that_is_nowhere_is_reported_with_the_places_tried(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    monkeypatch.setenv("CUDA_PATH", str(tmp_path / "no-cuda"))
    monkeypatch.setattr(_capi, "nvrtc_candidates", lambda soname: [])
    monkeypatch.setattr(_capi.ctypes, "CDLL", _StandInLoader("/x/libfa3jit.so"))
    tried = []
    assert _capi._load("/x/libfa3jit.so", tried) is None
    assert "libnvrtc.so.13" in tried[0] and "nvidia-cuda-nvrtc" in tried[0] and "LD_LIBRARY_PATH" in tried[0]


def test_other_load_errors_are_not_retried(monkeypatch):
    calls = []

    def loader(path, mode=None):
        calls.append(path)
        raise OSError(f"{path}: invalid ELF header")

    monkeypatch.setattr(_capi.ctypes, "CDLL", loader)
    tried = []
    assert _capi._load("/x/libfa3jit.so", tried) is None
    assert calls == ["/x/libfa3jit.so"] and "invalid ELF header" in tried[0]

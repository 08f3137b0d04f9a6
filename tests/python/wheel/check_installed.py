"""Checks an installed fa3jit wheel from inside its virtual environment (run by tests/python/wheel/run.sh with
the venv's python -I, outside the source tree, FA3JIT_LIBRARY unset, no torch, no GPU).

    python -I check_installed.py WHEEL VERSION

Exits non-zero with a message naming what is wrong."""

import pathlib
import sys
import zipfile


def fail(message: str) -> None:
    sys.exit(f"wheel check: {message}")


def check_contents(wheel: str) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    required = {"fa3jit/__init__.py", "fa3jit/_capi.py", "fa3jit/attention.py", "fa3jit/_torch_ops.py",
                "fa3jit/libfa3jit.so", "fa3jit/py.typed"}
    if not required <= names:
        fail(f"the wheel lacks {sorted(required - names)}")
    # Only the package and its metadata: the C install (lib/, include/, bin/, lib/cmake) stays out.
    stray = sorted(n for n in names if not n.startswith("fa3jit/") and ".dist-info/" not in n)
    if stray:
        fail(f"the wheel holds files outside the package: {stray}")
    if any("__pycache__" in n for n in names):
        fail("the wheel holds __pycache__")


def main() -> None:
    wheel, version = sys.argv[1], sys.argv[2]
    check_contents(wheel)

    import fa3jit
    from fa3jit import _torch_ops

    package = pathlib.Path(fa3jit.__file__).resolve().parent
    if not str(package).startswith(str(pathlib.Path(sys.prefix).resolve())):
        fail(f"imported fa3jit from {package}, not from the virtual environment {sys.prefix}")
    if "torch" in sys.modules or _torch_ops.REGISTERED:
        fail("importing fa3jit imported torch in an environment without it")
    if not (package / "py.typed").is_file():
        fail("py.typed is not installed")
    if fa3jit.library_path() != str(package / "libfa3jit.so"):
        fail(f"loaded {fa3jit.library_path()}, not the bundled {package / 'libfa3jit.so'}")
    if fa3jit.version() != version:
        fail(f"fa3jit.version() is {fa3jit.version()}; the CMake project says {version}")

    caps = fa3jit.capabilities()
    attention = caps["families"]["attention_fwd"]
    if caps["abi_version"] != fa3jit.ABI_VERSION or attention["head_dims"] != [64, 96, 128, 192, 256]:
        fail(f"unexpected capabilities: {caps}")

    # NVRTC is found by the installed library (RUNPATH: the NVRTC wheel, then the toolkit built with) and
    # compiles a kernel; no GPU is needed for that.
    info = fa3jit.compile_spec({"dtype": "bf16", "head_dim": 64})
    if not info["kernel_name"].startswith("fa3jit_attention_fwd_bf16_d64") or info["cache_hit"]:
        fail(f"unexpected compile result: {info}")

    try:
        fa3jit.flash_attn_func(None, None, None)
    except RuntimeError as error:  # torch is absent: the one function that needs it says so
        if "needs torch" not in str(error):
            fail(f"flash_attn_func without torch raised: {error}")
    else:
        fail("flash_attn_func without torch did not raise")

    print(f"wheel check: fa3jit {fa3jit.version()} from {package}; library {fa3jit.library_path()}; "
          f"NVRTC compile {info['ms']:.0f} ms ({info['kernel_name']}); families {sorted(caps['families'])}")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The Python wheel as a user gets it: `pip wheel <repo>` (pyproject.toml: scikit-build-core runs CMake with the
# tests off and builds the library alone), the wheel installed into a fresh `python3 -m venv` without torch,
# then checked there without a GPU (check_installed.py: import, capabilities, an NVRTC compile, contents).
# A broken package (missing library or py.typed, a library that cannot find NVRTC, an import that needs torch)
# fails here.
# Usage: tests/python/wheel/run.sh
# Environment: PYTHON (default python3; needs pip, which the isolated build uses to fetch scikit-build-core),
#   FA3JIT_WHEEL_NO_ISOLATION=1 (build with the scikit-build-core already installed for PYTHON: no network),
#   FA3JIT_WHEEL_BUILD_DIR (CMake build directory, default a temporary one; reused from run to run only with
#   FA3JIT_WHEEL_NO_ISOLATION=1: scikit-build-core clears a build directory that another isolated build made).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
python=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/fa3jit-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT
build_dir=${FA3JIT_WHEEL_BUILD_DIR:-$work/build}
seconds() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(seconds)" 'BEGIN { printf "%.1f s", b - a }'; }

# pip for the build (Debian's python3 has it only with python3-pip; venv's `--without-pip` needs no ensurepip).
if ! "$python" -m pip --version >/dev/null 2>&1; then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "wheel: installing python3-pip (apt) for $python"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-pip >/dev/null
fi

# ---- build ------------------------------------------------------------------------------------------------
start=$(seconds)
isolation=()
[[ "${FA3JIT_WHEEL_NO_ISOLATION:-}" == 1 ]] && isolation=(--no-build-isolation)
if ! "$python" -m pip wheel "$root" --no-deps "${isolation[@]}" -w "$work/dist" \
     --config-settings=cmake.define.FA3JIT_BUILD_TESTS=OFF --config-settings=build-dir="$build_dir" \
     > "$work/build.log" 2>&1; then
  tail -n 60 "$work/build.log" >&2
  echo "wheel: 'pip wheel' failed (log above; FA3JIT_WHEEL_NO_ISOLATION=1 builds offline with an installed scikit-build-core)" >&2
  exit 1
fi
wheel=$(ls "$work"/dist/fa3jit-*.whl)
echo "wheel: built $(basename "$wheel") in $(elapsed "$start")"

# ---- install into a fresh virtual environment ---------------------------------------------------------------
start=$(seconds)
"$python" -m venv --without-pip "$work/venv"
# The outer pip installs into the venv (pip >= 22.3); no index: the wheel has no dependencies to fetch.
if ! "$python" -m pip --python "$work/venv/bin/python" install -q --no-index --no-deps "$wheel" 2> "$work/install.log"; then
  cat "$work/install.log" >&2
  echo "wheel: installing into the venv failed" >&2
  exit 1
fi
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
echo "wheel: installed into a fresh venv in $(elapsed "$start")"

# ---- the installed library: links NVRTC (found through RUNPATH), never libcuda ------------------------------
library="$site/fa3jit/libfa3jit.so"
dynamic=$(readelf -d "$library")
grep -q 'NEEDED.*\[libnvrtc\.so\.' <<< "$dynamic" || { echo "$dynamic" >&2; echo "wheel: the library does not link NVRTC" >&2; exit 1; }
if grep -q 'NEEDED.*\[libcuda\.so' <<< "$dynamic"; then
  echo "$dynamic" >&2; echo "wheel: the library links libcuda (it must dlopen it)" >&2; exit 1
fi
grep -q 'RUNPATH.*\[\$ORIGIN/\.\./nvidia/cu[0-9]*/lib' <<< "$dynamic" \
  || { echo "$dynamic" >&2; echo "wheel: RUNPATH does not start with the NVRTC wheel's directory" >&2; exit 1; }
if ldd "$library" | grep -q "not found"; then
  ldd "$library" >&2; echo "wheel: the installed library has unresolved dependencies" >&2; exit 1
fi

# ---- import and use it there, without torch, without a GPU, from outside the source tree ----------------------
start=$(seconds)
version=$(sed -n 's/^project(fa3jit VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
(cd "$work" && env -u FA3JIT_LIBRARY -u PYTHONPATH FA3JIT_CACHE_DIR="$work/cache" \
   "$work/venv/bin/python" -I "$here/check_installed.py" "$wheel" "$version")
echo "wheel: checked the installed package in $(elapsed "$start")"

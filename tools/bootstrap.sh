#!/usr/bin/env bash
# One-command set-up for a fresh Debian/Ubuntu machine with the CUDA 13 toolkit (nvcc, NVRTC) installed:
# installs the missing build dependencies, configures and builds fa3jit, then either
#   run   : runs the main job, `fa3jit run configs/default.json` (on a GPU: correctness check + TFLOPS;
#           without one: emit + NVRTC compile + resource report), or
#   test  : runs the whole test suite (C++ tests; Python tests, GPU parts skip without a GPU; the
#           out-of-tree install consumer).
# Usage: tools/bootstrap.sh run|test        Environment: BUILD_DIR (default build), JOBS (default nproc).
set -euo pipefail
mode=${1:-}
[[ "$mode" == run || "$mode" == test ]] || { echo "usage: $0 run|test" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
cd "$root"

# ---- dependencies (Debian packages; NVRTC and nvcc come with the CUDA toolkit) ----------------------
packages=(cmake ninja-build g++ libfmt-dev nlohmann-json3-dev libcli11-dev catch2 libssl-dev python3 python3-pytest)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [[ -z "${CUDAToolkit_ROOT:-}" && ! -x "$(command -v nvcc)" && -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

# ---- build -------------------------------------------------------------------------------------------
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "${JOBS:-$(nproc)}"

if [[ "$mode" == run ]]; then
  exec "$build/fa3jit" run "$root/configs/default.json"
fi

# ---- tests -------------------------------------------------------------------------------------------
# The Python tests need only pytest and ctypes (torch for the GPU parts): use the first python3 on PATH
# that has pytest, else the system one, which the apt step above gave pytest.
python=python3
$python -c "import pytest" 2>/dev/null || python=/usr/bin/python3
if [[ -z "${FA3JIT_CACHE_DIR:-}" ]]; then
  FA3JIT_CACHE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/fa3jit-test-cache.XXXXXX")
  trap 'rm -rf "$FA3JIT_CACHE_DIR"' EXIT
fi
export FA3JIT_CACHE_DIR
"$build/fa3jit_tests"
# Launch-argument validation against the fake CUDA driver (tests/fake_driver), found before any real one.
LD_LIBRARY_PATH="$build/fake_driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$build/tests/fake_driver/fa3jit_fake_driver_tests"
FA3JIT_LIBRARY="$build/libfa3jit.so" $python -m pytest -q -p no:cacheprovider "$root/tests/python"
bash "$root/tests/install_consumer/run.sh" "$build"
echo "all test stages passed"

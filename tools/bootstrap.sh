#!/usr/bin/env bash
# One-command set-up for a fresh Debian/Ubuntu machine with the CUDA 13 toolkit (nvcc, NVRTC) installed:
# installs the missing build dependencies, configures and builds fa3jit, then either
#   run   : runs the main job, `fa3jit run configs/default.json` (on a GPU: correctness check + TFLOPS;
#           without one: emit + NVRTC compile + resource report), or
#   test  : runs the whole test suite (C++ tests; Python tests, GPU parts skip without a GPU; the
#           out-of-tree install consumer), then the same C++ tests built with ASan + UBSan (clang) and a
#           short libFuzzer run of every harness (tests/fuzz, docs/reliability.md); prints each stage's time.
# Usage: tools/bootstrap.sh run|test        Environment: BUILD_DIR (default build), JOBS (default nproc),
#   FUZZ_BUILD_DIR (default BUILD_DIR-fuzz: the sanitizer/fuzzer build), FUZZ_SECONDS (default 60 per harness).
set -euo pipefail
mode=${1:-}
[[ "$mode" == run || "$mode" == test ]] || { echo "usage: $0 run|test" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
cd "$root"

# ---- dependencies (Debian packages; NVRTC and nvcc come with the CUDA toolkit) ----------------------
packages=(cmake ninja-build g++ libfmt-dev nlohmann-json3-dev libcli11-dev catch2 libssl-dev libpng-dev python3 python3-pytest)
# test: clang for the sanitizer and libFuzzer build, llvm for llvm-symbolizer (readable sanitizer reports), pip
# for the cuobjdump wheel when the toolkit lacks cuobjdump (the FP8 SASS test).
if [[ "$mode" == test ]]; then packages+=(clang llvm python3-pip); fi
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# libFuzzer ships with clang on some releases and in libclang-rt-<N>-dev on others: link a trivial fuzzer to know.
if [[ "$mode" == test ]] && ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
    clang++ -x c++ -fsanitize=fuzzer,address,undefined - -o /dev/null 2>/dev/null; then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  rt="libclang-rt-$(clang++ -dumpversion | cut -d. -f1)-dev"
  echo "installing: $rt"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$rt" >/dev/null
fi
if [[ -z "${CUDAToolkit_ROOT:-}" && ! -x "$(command -v nvcc)" && -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

# ---- build -------------------------------------------------------------------------------------------
# `stage NAME command...` runs a step of the test command and records its wall time for the summary; the
# dependency step above is everything before it.
stage_log=("$(printf '%-26s %5d s' dependencies "$SECONDS")")
stage() {
  local name=$1 start=$SECONDS
  shift
  echo "== $name"
  "$@"
  stage_log+=("$(printf '%-26s %5d s' "$name" $((SECONDS - start)))")
  echo "== $name: $((SECONDS - start)) s"
}
quiet() { "$@" >/dev/null; }
jobs=${JOBS:-$(nproc)}
stage configure quiet cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
stage build cmake --build "$build" -j "$jobs"

if [[ "$mode" == run ]]; then
  exec "$build/fa3jit" run "$root/configs/default.json"
fi

# ---- tests -------------------------------------------------------------------------------------------
# libcuda is dlopened at run time, never linked: a DT_NEEDED on it would stop these from starting without
# a GPU driver (CMakeLists.txt links NVRTC by its file for that reason).
no_libcuda() {
  local f
  for f in "$@"; do
    if readelf -d "$f" | grep NEEDED | grep -q 'libcuda\.so'; then echo "$f lists libcuda as NEEDED" >&2; return 1; fi
  done
  echo "no libcuda among the NEEDED entries of: ${*##*/}"
}
stage "no-libcuda check" no_libcuda "$build/libfa3jit.so" "$build/fa3jit" "$build/fa3jit_tests"
# The Python tests need only pytest and ctypes (torch for the GPU parts): use the first python3 on PATH
# that has pytest, else the system one, which the apt step above gave pytest.
python=python3
$python -c "import pytest" 2>/dev/null || python=/usr/bin/python3
if [[ -z "${FA3JIT_CACHE_DIR:-}" ]]; then
  FA3JIT_CACHE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/fa3jit-test-cache.XXXXXX")
  trap 'rm -rf "$FA3JIT_CACHE_DIR"' EXIT
fi
export FA3JIT_CACHE_DIR
# The FP8 SASS test disassembles cubins with cuobjdump (which runs nvdisasm from its own folder). Some toolkit
# installs (NVRTC + nvcc only) lack them: then take NVIDIA's cuobjdump and nvdisasm wheels into the build folder
# (pip, no root needed).
find_cuobjdump() {
  command -v cuobjdump 2>/dev/null && return
  for c in /usr/local/cuda/bin/cuobjdump "$build/cuda-tools/nvidia/cu13/bin/cuobjdump"; do
    [[ -x "$c" && -x "$(dirname "$c")/nvdisasm" ]] && { echo "$c"; return; }
  done
}
if [[ -z "${FA3JIT_CUOBJDUMP:-}" ]]; then
  FA3JIT_CUOBJDUMP=$(find_cuobjdump || true)
  if [[ -z "$FA3JIT_CUOBJDUMP" ]]; then
    echo "installing: cuobjdump, nvdisasm (pip nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm into $build/cuda-tools)"
    $python -m pip install -q --no-deps --target "$build/cuda-tools" "nvidia-cuda-cuobjdump>=13,<14" \
      "nvidia-cuda-nvdisasm>=13,<14" >/dev/null
    FA3JIT_CUOBJDUMP=$(find_cuobjdump)
  fi
  export FA3JIT_CUOBJDUMP
fi
stage "unit tests" "$build/fa3jit_tests"
# Launch-argument validation against the fake CUDA driver (tests/fake_driver), found before any real one.
stage "fake-driver tests" env LD_LIBRARY_PATH="$build/fake_driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$build/tests/fake_driver/fa3jit_fake_driver_tests"
# The same with two fake devices: calls alternating between devices, from one thread and from two.
stage "fake-driver two devices" env FAKE_CUDA_DEVICES=2 LD_LIBRARY_PATH="$build/fake_driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$build/tests/fake_driver/fa3jit_fake_driver_tests" "[multi_device]"
stage "python tests" env FA3JIT_LIBRARY="$build/libfa3jit.so" $python -m pytest -q -p no:cacheprovider "$root/tests/python"
# The Python wheel: `pip wheel` of the repository (library only, tests off), installed into a fresh venv and
# used there without torch or a GPU (tests/python/wheel/run.sh; about a minute on two cores, the library build).
stage "python wheel" env PYTHON=$python bash "$root/tests/python/wheel/run.sh"
stage "install consumer" bash "$root/tests/install_consumer/run.sh" "$build"
# The CLI under hostile files and arguments (FIFOs, /dev/zero, deep nesting, a full stdout, cache faults).
stage "cli tests" bash "$root/tests/cli/run.sh" "$build"

# ---- sanitizers and fuzzers (docs/reliability.md) ------------------------------------------------------
# One clang build with ASan + UBSan (and libFuzzer's coverage) serves both the sanitizer run of the C++ tests
# and the harnesses. It links with --no-as-needed, so the libcuda check also covers a toolchain that keeps
# every library it is given. The sanitizer run has every test case: the NVRTC/nvcc-bound [compile] and [nvcc]
# ones add about 25 s (the compilers themselves are not instrumented).
san=${FUZZ_BUILD_DIR:-$build-fuzz}
stage "sanitizer configure" quiet cmake -S "$root" -B "$san" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
  -DFA3JIT_BUILD_FUZZERS=ON -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--no-as-needed -DCMAKE_EXE_LINKER_FLAGS=-Wl,--no-as-needed
stage "sanitizer build" cmake --build "$san" -j "$jobs" --target fa3jit_tests fa3jit_fake_driver_tests fa3jit_fuzzers
stage "no-libcuda (no-as-needed)" no_libcuda "$san/libfa3jit.so" "$san/fa3jit_tests" "$san"/tests/fuzz/fa3jit_fuzz_*
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
stage "ASan+UBSan unit tests" "$san/fa3jit_tests"
stage "ASan+UBSan fake-driver" env LD_LIBRARY_PATH="$san/fake_driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$san/tests/fake_driver/fa3jit_fake_driver_tests"
stage "ASan+UBSan two devices" env FAKE_CUDA_DEVICES=2 LD_LIBRARY_PATH="$san/fake_driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$san/tests/fake_driver/fa3jit_fake_driver_tests" "[multi_device]"
stage "fuzz (${FUZZ_SECONDS:-60} s per harness)" env FUZZ_BUILD_DIR="$san" JOBS="$jobs" "$root/tools/fuzz.sh" all "${FUZZ_SECONDS:-60}"

echo
echo "stage times:"
printf '  %s\n' "${stage_log[@]}"
echo "  total                      $(printf '%5d' "$SECONDS") s"
echo "all test stages passed"

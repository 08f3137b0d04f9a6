#!/usr/bin/env bash
# Everything that needs the GPU in one go: the main job, GPU tests, pytest, compute-sanitizer, tile sweeps and
# the one-process benchmark beside cuDNN/FA2. Prints a short summary per stage; full logs go to OUT_DIR.
# Usage (on the GPU machine, from the repository root, with a build in ./build):
#   bench/gpu_suite.sh OUT_DIR [run|tests|pytest|sanitizer|tune|bench]...   (default: all)
set -uo pipefail
out=${1:?usage: bench/gpu_suite.sh OUT_DIR [tests|tune|bench]...}; shift
stages=("$@"); ((${#stages[@]})) || stages=(run tests pytest sanitizer tune bench)
mkdir -p "$out"
export FA3JIT_CACHE_DIR=${FA3JIT_CACHE_DIR:-/tmp/fa3jit-device-cache}
export FA3JIT_LIBRARY=$PWD/build/libfa3jit.so PYTHONPATH=$PWD/tools/python${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
for stage in "${stages[@]}"; do
  case $stage in
    run)
      timeout 120 build/fa3jit run configs/default.json > "$out/run_default.log" 2>&1
      echo "== fa3jit run configs/default.json (rc=$?)"; grep -E "^(kernel|cache|problem|max error|tolerance|check|time|throughput)" "$out/run_default.log" ;;
    pytest)
      python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/fa3jit-py tools/python > "$out/pip.log" 2>&1
      PYTHONPATH=/tmp/fa3jit-py timeout 500 python3 -m pytest -q -p no:cacheprovider tests/python > "$out/pytest.log" 2>&1
      echo "pytest rc=$?: $(tail -1 "$out/pytest.log")" ;;
    sanitizer)
      printf '{"dtype":"bf16","head_dim":128,"causal":true,"problem":{"batch":2,"seqlen_q":239,"seqlen_k":1023,"num_heads":8,"num_heads_kv":2}}' > /tmp/fa3jit-small.json
      timeout 300 compute-sanitizer --tool memcheck --print-limit 5 build/fa3jit run /tmp/fa3jit-small.json > "$out/memcheck.log" 2>&1
      echo "memcheck rc=$?: $(grep -E '^check|ERROR SUMMARY' "$out/memcheck.log" | tr '\n' ' ')" ;;
    tests)
      timeout 500 build/fa3jit_tests "[gpu]" > "$out/gpu_tests.log" 2>&1
      echo "gpu tests rc=$?: $(grep -E '^forward matrix' "$out/gpu_tests.log") | $(tail -2 "$out/gpu_tests.log" | tr '\n' ' ')" ;;
    tune)
      for s in ${TUNE_SWEEPS:-configs/sweeps/*.json}; do
        timeout 300 build/fa3jit tune "$s" > "$out/tune_$(basename "$s" .json).log" 2>&1
        echo "== tune $s (rc=$?)"; grep -E "^ *[0-9]+ " "$out/tune_$(basename "$s" .json).log" | head -10
      done ;;
    bench)
      timeout 500 python3 bench/bench_fwd.py --out-dir "$out" ${BENCH_ARGS:-} > "$out/bench.log" 2>&1
      echo "bench rc=$?"; grep -E "^\|" "$out/bench.log" | head -80 ;;
  esac
done

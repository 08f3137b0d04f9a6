#!/usr/bin/env bash
# Everything that needs the GPU in one go: the main job, GPU tests, pytest, compute-sanitizer, tile sweeps,
# the one-process benchmark beside cuDNN/FA2 (and FA3 when its wheel is importable), the host cost per call,
# and a before/after comparison of every config against another build. Prints a short summary per stage;
# full logs go to OUT_DIR.
# Usage (on the GPU machine, from the repository root, with a build in ./build):
#   bench/gpu_suite.sh OUT_DIR [run|checks|tests|pytest|sanitizer|tune|bench|decode|splits|fp8|host|compare]...   (default: all but compare)
# Environment: BEFORE_DIR (for compare: a directory holding an older `fa3jit` CLI and its libfa3jit.so),
# FA3_SITE (a directory on which `import fa3_fwd_interface` works, for FA3 as a peer), GPU_TESTS (the Catch2 tags of
# the tests stage, default "[gpu]"), PYTEST_PATHS (default tests/python), COMPARE_SPECS (default configs/*.json),
# SANITIZE_TESTS (the tags of the sanitizer stage).
set -uo pipefail
out=${1:?usage: bench/gpu_suite.sh OUT_DIR [tests|tune|bench]...}; shift
stages=("$@"); ((${#stages[@]})) || stages=(run tests pytest sanitizer tune bench decode splits fp8 host)
mkdir -p "$out"
export FA3JIT_CACHE_DIR=${FA3JIT_CACHE_DIR:-/tmp/fa3jit-device-cache}
export FA3JIT_LIBRARY=$PWD/build/libfa3jit.so PYTHONPATH=$PWD/tools/python${FA3_SITE:+:$FA3_SITE}${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
for stage in "${stages[@]}"; do
  case $stage in
    run)
      timeout 120 build/fa3jit run configs/default.json > "$out/run_default.log" 2>&1
      echo "== fa3jit run configs/default.json (rc=$?)"; grep -E "^(kernel|cache|problem|max error|tolerance|check|time|throughput)" "$out/run_default.log" ;;
    pytest)
      python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/fa3jit-py tools/python > "$out/pip.log" 2>&1
      PYTHONPATH=/tmp/fa3jit-py timeout 500 python3 -m pytest -q -p no:cacheprovider ${PYTEST_PATHS:-tests/python} > "$out/pytest.log" 2>&1
      echo "pytest rc=$?: $(tail -1 "$out/pytest.log")" ;;
    sanitizer)
      # A representative set (tests/gpu/test_sanitize_set.cpp and test_serving.cpp's [sanitize] case: every attention
      # mainloop variant, head dims and variants on odd sizes), the combine kernel's and the FP8 pre-pass's GPU tests
      # (every kernel family), under each tool, one process per tool; SANITIZE_TESTS overrides the tags.
      for tool in memcheck racecheck synccheck; do
        timeout 400 compute-sanitizer --tool $tool --print-limit 5 build/fa3jit_tests "${SANITIZE_TESTS:-[sanitize],[gpu][combine],[gpu][quantize]}" > "$out/$tool.log" 2>&1
        echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|test cases' "$out/$tool.log" | tr '\n' ' ')"
      done ;;
    checks)
      # The project's standing check in one call: the [gpu] tests in six shards (their union is every [gpu] test
      # case, none twice), pytest and the three sanitizer tools, all at once (kernel compilation is per-process and
      # CPU-bound, the GPU mostly idle), then a summary line each. CHECK_TIMEOUT caps each process (default 520 s).
      t=${CHECK_TIMEOUT:-520}; pids=()
      # The forward tests in two shards: the matrix and repeat tests, and the bit-identity pairs (alone, the forward
      # shard ran past a 300 s cap on a loaded H100).
      shards=("[gpu][forward]~[head_dims]~[mask_free_loop]~[load_k_ahead]~[rescale]~[persistent]~[cluster]~[softmax_arms]~[lazy_rescale]~[l2_hints]~[p_in_smem]~[pin_pv_wait]"
              "[gpu][forward][mask_free_loop],[gpu][forward][load_k_ahead],[gpu][forward][rescale],[gpu][forward][persistent],[gpu][forward][cluster],[gpu][forward][softmax_arms],[gpu][forward][lazy_rescale],[gpu][forward][l2_hints],[gpu][forward][p_in_smem],[gpu][forward][pin_pv_wait]"
              "[gpu][fp8]" "[gpu][head_dims]" "[gpu][serving],[gpu][combine]"
              "[gpu][determinism],[gpu][cases],[gpu][arguments]~[serving],[gpu][quantize],[gpu][sanitize]~[serving]")
      for i in "${!shards[@]}"; do
        timeout "$t" build/fa3jit_tests "${shards[$i]}" > "$out/gpu_tests_$i.log" 2>&1 & pids+=($!)
      done
      for tool in memcheck racecheck synccheck; do
        timeout "$t" compute-sanitizer --tool $tool --print-limit 5 build/fa3jit_tests \
          "${SANITIZE_TESTS:-[sanitize],[gpu][combine],[gpu][quantize]}" > "$out/$tool.log" 2>&1 & pids+=($!)
      done
      (python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/fa3jit-py tools/python > "$out/pip.log" 2>&1
       PYTHONPATH=/tmp/fa3jit-py:$PYTHONPATH timeout "$t" python3 -m pytest -q -p no:cacheprovider ${PYTEST_PATHS:-tests/python} \
         > "$out/pytest.log" 2>&1) & pids+=($!)
      rcs=(); for p in "${pids[@]}"; do wait "$p"; rcs+=($?); done
      for i in "${!shards[@]}"; do
        echo "gpu tests ${shards[$i]} rc=${rcs[$i]}: $(grep -E '^(e4m3 )?forward matrix|head dims matrix|batches passed|bit for bit|lazy_rescale: ' "$out/gpu_tests_$i.log" | tr '\n' ' ' | cut -c1-400) | $(tail -2 "$out/gpu_tests_$i.log" | tr '\n' ' ')"
        # A failing shard's failures in the summary itself (Catch's FAILED blocks: test case, expression, expansion,
        # INFO messages), so they survive where the logs do not come back.
        if (( rcs[i] != 0 )); then grep -B 6 -A 14 "FAILED:" "$out/gpu_tests_$i.log" | head -80; fi
      done
      j=${#shards[@]}
      for tool in memcheck racecheck synccheck; do
        echo "$tool rc=${rcs[$j]}: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|test cases' "$out/$tool.log" | tr '\n' ' ')"; j=$((j + 1))
      done
      echo "pytest rc=${rcs[$j]}: $(tail -1 "$out/pytest.log")" ;;
    tests)
      timeout 700 build/fa3jit_tests "${GPU_TESTS:-[gpu]}" > "$out/gpu_tests.log" 2>&1
      echo "gpu tests ${GPU_TESTS:-[gpu]} rc=$?: $(grep -E '^(e4m3 )?forward matrix|batches passed|bit for bit' "$out/gpu_tests.log" | tr '\n' ' ') | $(tail -2 "$out/gpu_tests.log" | tr '\n' ' ')" ;;
    tune)
      for s in ${TUNE_SWEEPS:-configs/sweeps/*.json}; do
        timeout 300 build/fa3jit tune "$s" > "$out/tune_$(basename "$s" .json).log" 2>&1
        echo "== tune $s (rc=$?)"; grep -E "^ *[0-9]+ " "$out/tune_$(basename "$s" .json).log" | head -10
      done ;;
    bench)
      timeout 500 python3 bench/bench_fwd.py --out-dir "$out" ${BENCH_ARGS:-} > "$out/bench.log" 2>&1
      echo "bench rc=$?"; grep -E "^\|" "$out/bench.log" | head -80 ;;
    decode)
      # Decode-step K/V bandwidth: fa3jit contiguous and paged beside FA3 and cuDNN, and the host cost per call.
      timeout 400 python3 bench/bench_decode.py --out-dir "$out" ${FA3_SITE:+--fa3-site "$FA3_SITE"} > "$out/bench_decode.log" 2>&1
      echo "decode bench rc=$?"; grep -E "^\||geometric|host cost|MISMATCH" "$out/bench_decode.log" | head -20 ;;
    splits)
      # Decode bandwidth against the KV split count (fa3jit forced to 1..64 splits beside its heuristic, FA3 and cuDNN),
      # and each decode kernel's GPU time: the data the split heuristic follows.
      timeout 120 python3 bench/decode_splits.py ${FA3_SITE:+--fa3-site "$FA3_SITE"} --json "$out/decode_splits.json" > "$out/decode_splits.log" 2>&1
      echo "decode splits rc=$?"; grep -E "^\||MISMATCH" "$out/decode_splits.log" | head -20
      timeout 60 python3 bench/decode_kernel_times.py ${FA3_SITE:+--fa3-site "$FA3_SITE"} > "$out/decode_kernels.log" 2>&1
      echo "decode kernel times rc=$?"; grep -E " x " "$out/decode_kernels.log" | head -20 ;;
    fp8)
      # FP8 beside FA3 fp8 and cuDNN bf16, the accuracy ablation and long-context sweep, the pre-pass bandwidth.
      timeout 300 python3 bench/bench_fwd.py --dtype e4m3 --out-dir "$out" ${FA3_SITE:+--fa3-site "$FA3_SITE"} > "$out/bench_fp8.log" 2>&1
      echo "fp8 bench rc=$?"; grep -E "^\||Geometric" "$out/bench_fp8.log" | head -45
      timeout 300 build/fa3jit_fp8_accuracy --json "$out/fp8_accuracy.json" > "$out/fp8_accuracy.log" 2>&1
      echo "fp8 accuracy rc=$?"; cat "$out/fp8_accuracy.log"
      timeout 120 build/fa3jit_prepass_bandwidth --json "$out/prepass.json" > "$out/prepass.log" 2>&1
      echo "pre-pass bandwidth rc=$?"; cat "$out/prepass.log" ;;
    host)
      timeout 120 build/fa3jit_host_cost --json "$out/host_cost_cpp.json" > "$out/host_cost_cpp.log" 2>&1
      echo "host cost C++ rc=$?"; cat "$out/host_cost_cpp.log"
      PYTHONUNBUFFERED=1 timeout 300 python3 bench/host_cost.py ${FA3_SITE:+--fa3-site "$FA3_SITE"} --json "$out/host_cost_py.json" > "$out/host_cost_py.log" 2>&1
      echo "host cost Python rc=$?"; grep -E "^\||available" "$out/host_cost_py.log" ;;
    compare)
      # Every config timed by the older build and by this one, alternating (A B A B), in this one run.
      before=${BEFORE_DIR:?compare needs BEFORE_DIR}
      # Every kernel of both builds compiled first, in parallel (NVRTC is CPU-bound; the cache is content-addressed),
      # so the timed runs below only load them.
      for spec in ${COMPARE_SPECS:-configs/*.json}; do printf '%s %s\n' "$before" "$spec" "$PWD/build" "$spec"; done |
        xargs -P "$(nproc)" -n 2 sh -c 'LD_LIBRARY_PATH=$0 timeout 120 "$0/fa3jit" compile "$1" > /dev/null' 2>>"$out/compare.err"
      printf '| config | before TFLOPS | after TFLOPS | after / before |\n|---|---|---|---|\n' > "$out/compare.md"
      for spec in ${COMPARE_SPECS:-configs/*.json}; do
        name=$(basename "$spec" .json); a=(); b=()
        for round in 1 2; do
          a+=("$(LD_LIBRARY_PATH=$before timeout 120 "$before/fa3jit" bench "$spec" --json 2>>"$out/compare.err" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tflops"])')")
          b+=("$(timeout 120 build/fa3jit bench "$spec" --json 2>>"$out/compare.err" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tflops"])')")
        done
        python3 - "$name" "${a[@]}" "${b[@]}" >> "$out/compare.md" <<'PY'
import sys
name, a1, a2, b1, b2 = sys.argv[1:6]
a = max(float(a1), float(a2)); b = max(float(b1), float(b2))
print(f"| {name} | {a:.1f} | {b:.1f} | {b / a:.3f} |")
PY
      done
      echo "== compare (best of 2 each)"; cat "$out/compare.md" ;;
  esac
done

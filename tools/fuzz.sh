#!/usr/bin/env bash
# Runs the libFuzzer harnesses of tests/fuzz (docs/reliability.md).
#
# Usage: tools/fuzz.sh <harness|all> <seconds> [libFuzzer options...]
#   harnesses: spec (spec -> config -> emit), sweep (`fa3jit tune`'s reader), cache_entry (cubin cache entries),
#              c_api (fa3jit_attention_forward on the fake driver)
#   e.g. tools/fuzz.sh cache_entry 3600          tools/fuzz.sh all 60          tools/fuzz.sh spec 600 -jobs=2
# Each harness first replays tests/fuzz/regressions/<harness>/ (a crash there fails at once), then fuzzes for
# <seconds> from the committed seeds (tests/fuzz/corpus/<harness>/) plus a working corpus kept in the build
# directory, so long runs build on each other while the committed seeds stay small.
# Environment: FUZZ_BUILD_DIR (default build-fuzz; configured with clang and built when needed), JOBS,
# FA3JIT_CACHE_DIR (c_api compiles its kernels once into it; default $FUZZ_BUILD_DIR/fuzz-cache).
# A finding lands in $FUZZ_BUILD_DIR/fuzz-artifacts/<harness>/; replay it by running the harness binary on the
# file, minimise it with -minimize_crash=1 -runs=10000, and commit it under tests/fuzz/regressions/<harness>/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
harnesses=(spec sweep cache_entry c_api)
[[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || { echo "usage: $0 <${harnesses[*]// /|}|all> <seconds> [libFuzzer options]" >&2; exit 2; }
which=$1 seconds=$2
shift 2
if [[ "$which" == all ]]; then
  selected=("${harnesses[@]}")
elif [[ " ${harnesses[*]} " == *" $which "* ]]; then
  selected=("$which")
else
  echo "unknown harness '$which'; expected one of: ${harnesses[*]} all" >&2
  exit 2
fi
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
fuzz_src=$root/tests/fuzz

if [[ ! -f "$build/build.ninja" ]]; then
  [[ -x "$(command -v nvcc)" || ! -x /usr/local/cuda/bin/nvcc ]] || export PATH=/usr/local/cuda/bin:$PATH
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
    -DFA3JIT_BUILD_FUZZERS=ON >/dev/null
fi
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${selected[@]/#/fa3jit_fuzz_}" >/dev/null

# The c_api harness loads the fake libcuda.so.1 by name (the runtime dlopens it), and compiles its kernels
# once into a private cache directory that later runs load from.
export LD_LIBRARY_PATH="$build/fake_driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FA3JIT_CACHE_DIR=${FA3JIT_CACHE_DIR:-$build/fuzz-cache}
mkdir -p "$FA3JIT_CACHE_DIR" && chmod 700 "$FA3JIT_CACHE_DIR"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

status=0
for h in "${selected[@]}"; do
  bin=$build/tests/fuzz/fa3jit_fuzz_$h
  work=$build/fuzz-corpus/$h artifacts=$build/fuzz-artifacts/$h log=$build/fuzz-logs/$h.log
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  start=$SECONDS
  mapfile -t regressions < <(find "$fuzz_src/regressions/$h" -type f ! -name '*.md' 2>/dev/null | sort)
  if ((${#regressions[@]})) && ! "$bin" "${regressions[@]}" >"$log" 2>&1; then
    echo "fuzz $h: a regression input crashes again:"; tail -n 40 "$log"; status=1; continue
  fi
  dict=()
  [[ -f "$fuzz_src/$h.dict" ]] && dict=(-dict="$fuzz_src/$h.dict")
  # -timeout: an input running 25 s is reported as a hang (a finding), not waited for.
  if ! "$bin" -max_total_time="$seconds" -timeout=25 -print_final_stats=1 -artifact_prefix="$artifacts/" \
      "${dict[@]}" "$@" "$work" "$fuzz_src/corpus/$h" >>"$log" 2>&1; then
    echo "fuzz $h: FINDING (inputs in $artifacts/):"; tail -n 60 "$log"; status=1; continue
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  echo "fuzz $h: ${#regressions[@]} regressions replayed; ${runs:-?} executions in ${seconds} s (${rate:-?}/s);" \
       "corpus $(find "$work" -type f | wc -l) found + $(find "$fuzz_src/corpus/$h" -type f | wc -l) seeds; $((SECONDS - start)) s wall"
done
exit $status

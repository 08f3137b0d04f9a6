#!/usr/bin/env bash
# Builds the library and CLI of this checkout with a patch applied (bench/experiments/*.patch), for an A/B against
# this checkout's build on a GPU machine: the result is a folder holding fa3jit and libfa3jit.so*, the layout
# gpu_suite.sh's `compare` stage reads as BEFORE_DIR, and any tool linked against libfa3jit.so (fa3jit_tests,
# fa3jit_prepass_bandwidth, the Python package through FA3JIT_LIBRARY) runs the variant's kernels with
# LD_LIBRARY_PATH=OUT_DIR. Build it here, carry OUT_DIR: the GPU machine has no build of its own.
# Usage: bench/build_variant.sh PATCH OUT_DIR        Environment: JOBS (default nproc)
set -euo pipefail
patch=$(realpath "${1:?usage: bench/build_variant.sh PATCH OUT_DIR}")
out=$(realpath -m "${2:?usage: bench/build_variant.sh PATCH OUT_DIR}")
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$root" worktree add --detach -q "$work/src" HEAD
git -C "$work/src" apply "$patch"
cmake -S "$work/src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release > "$work/configure.log"
cmake --build "$work/build" -j "${JOBS:-$(nproc)}" --target fa3jit_cli > "$work/build.log" || { tail -20 "$work/build.log"; exit 1; }
mkdir -p "$out"
cp "$work/build/fa3jit" "$out/"
cp -P "$work/build"/libfa3jit.so* "$out/"
echo "built $(basename "$patch") over $(git -C "$root" rev-parse --short HEAD) into $out:"
ls "$out"

#!/usr/bin/env bash
# Installs fa3jit from a build directory into a temporary prefix, then configures, builds and runs the
# out-of-tree C consumer (main.c) against the installed package, and runs the installed CLI.
# Usage: tests/install_consumer/run.sh [build-dir]      (default: <repo>/build, already built)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/fa3jit-install-consumer.XXXXXX")
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
for f in include/fa3jit/fa3jit.h lib/cmake/fa3jit/fa3jitConfig.cmake lib/cmake/fa3jit/fa3jitConfigVersion.cmake bin/fa3jit; do
  [[ -e "$work/prefix/$f" ]] || { echo "install is missing $f" >&2; cat "$work/install.log" >&2; exit 1; }
done
ls "$work/prefix"/lib*/libfa3jit.so >/dev/null
# Test and CLI helpers (CPU reference, fills, device buffers: testing/) stay out of the installed library.
if nm -DC --defined-only "$work/prefix"/lib*/libfa3jit.so | grep -E "reference_rows|fill_fa3_distribution|AttentionProblem" >&2; then
  echo "the installed libfa3jit.so exports testing/ code" >&2; exit 1
fi

cmake -S "$here" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release > "$work/configure.log" \
  || { cat "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" > "$work/build.log" || { cat "$work/build.log" >&2; exit 1; }
"$work/build/fa3jit_consumer" "$work/cache"

# The installed CLI runs and loads the installed library (RPATH $ORIGIN/../lib), not the build tree's.
"$work/prefix/bin/fa3jit" --help > /dev/null
loaded=$(ldd "$work/prefix/bin/fa3jit" | awk '/libfa3jit/ {print $3}')
[[ "$loaded" == "$work/prefix/"* ]] || { echo "installed CLI loads libfa3jit from '$loaded', not from the prefix" >&2; exit 1; }
echo "install consumer: installed CLI runs from the prefix"

#!/usr/bin/env bash
# The CLI under hostile or careless input: every case must end in "fa3jit: error: <message naming the file or
# argument>" with exit status 2 (or the documented status), never a crash (SIGSEGV/SIGABRT), a hang, a silent
# success or a file created where none should be. No GPU needed; three cases compile a kernel with NVRTC.
# Usage: tests/cli/run.sh [build-dir]      (default: <repo>/build, already built)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
fa3jit="$build/fa3jit"
work=$(mktemp -d "${TMPDIR:-/tmp}/fa3jit-cli-test.XXXXXX")
trap 'chmod -R u+rwx "$work" 2>/dev/null; rm -rf "$work"' EXIT
export FA3JIT_CACHE_DIR="$work/cache"
export FA3JIT_LOG=warn
spec="$root/configs/bf16_d64.json"
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# expect STATUS PATTERN CMD...: runs CMD (10 s at most), wants exit STATUS and PATTERN (grep -E) in its output.
expect() {
  local want=$1 pattern=$2
  shift 2
  local out rc
  out=$(timeout 10 "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $want ]]; then
    fail "'$*' exited $rc, expected $want; output: ${out:0:600}"
  elif ! grep -Eq -- "$pattern" <<<"$out"; then
    fail "'$*' output lacks /$pattern/: ${out:0:600}"
  fi
}

python3 - "$work" <<'EOF'
import sys
w = sys.argv[1]
def deep(path, depth):
    with open(path, "w") as f:
        f.write('{"dtype": ' + "[" * depth + "]" * depth + ', "head_dim": 64}')
deep(w + "/deep4k.json", 2048)
deep(w + "/deep10m.json", 5 << 20)
with open(w + "/overflow.json", "w") as f:
    f.write('{"dtype": "bf16", "head_dim": 64,\n "problem": {"batch": 1e309}}')
with open(w + "/nul.json", "wb") as f:
    f.write(b'{"dtype": "bf16", "head_dim": 64}\0{"head_dim": 256}')
with open(w + "/dup_sweep.json", "w") as f:
    f.write('{"base": {"dtype": "bf16", "head_dim": 64}, "sweep": {"stages": [2]}, "sweep": {"stages": [3]}}')
with open(w + "/sweep.json", "w") as f:
    f.write('{"base": {"dtype": "bf16", "head_dim": 64}, "sweep": {"stages": [2], "pingpong": [false]}}')
# Values echoed in messages: a NUL, a 900 KB string, a long multi-byte string cut at 60 characters.
with open(w + "/nul_kind.json", "w") as f:
    f.write('{"kind": "attention_fwd\\u0000x", "dtype": "bf16", "head_dim": 64}')
with open(w + "/huge_kind.json", "w") as f:
    f.write('{"kind": "' + "k" * 900000 + '\\n", "dtype": "bf16", "head_dim": 64}')
with open(w + "/huge_sweep.json", "w") as f:
    f.write('{"base": {"dtype": "bf16", "head_dim": 64}, "sweep": {"stages": "' + "s" * 900000 + '"}}')
with open(w + "/utf8.json", "w", encoding="utf-8") as f:
    f.write('{"dtype": "a' + "\u00e9" * 100 + '", "head_dim": 64}')
EOF
mkfifo "$work/fifo.json"  # no writer: opening it for reading blocks unless done without blocking

# 1. Deep nesting on a 256 KiB stack: refused at parse time (the 10 MB file by its size first).
(failures=0
 ulimit -s 256
 expect 2 'deep4k.json: .*more than 64 levels deep' "$fa3jit" emit "$work/deep4k.json"
 expect 2 'deep4k.json: .*more than 64 levels deep' "$fa3jit" compile "$work/deep4k.json"
 expect 2 'deep10m.json.*at most 1048576 bytes' "$fa3jit" emit "$work/deep10m.json"
 expect 2 'deep10m.json.*at most 1048576 bytes' "$fa3jit" compile "$work/deep10m.json"
 exit $failures) || failures=$((failures + $?))

# 3. A number beyond a double names the file, the field and the position.
expect 2 'overflow.json: spec field "problem.batch": number 1e309 at line 2, column 23' "$fa3jit" emit "$work/overflow.json"

# 4. Files that are not regular: no hang, no endless read.
expect 2 'fifo.json": it is a FIFO; a spec file must be a regular file' "$fa3jit" emit "$work/fifo.json"
expect 2 '"/dev/zero": it is a character device' "$fa3jit" compile /dev/zero
expect 2 'fifo.json": it is a FIFO' "$fa3jit" tune "$work/fifo.json"

# 5. Silent acceptance.
expect 2 'nul.json: spec contains a NUL byte at byte offset 33' "$fa3jit" emit "$work/nul.json"
expect 2 'dup_sweep.json: spec key "sweep" appears twice' "$fa3jit" tune "$work/dup_sweep.json"
# The tuner's database and options.
expect 2 'tune needs a SWEEP.json file' "$fa3jit" tune
printf '{"format": "fa3jit-tune-db", "version": 1, "records": [' > "$work/torn-db.json"
expect 2 'tuning database ".*torn-db.json"' "$fa3jit" tune show --db "$work/torn-db.json"
printf '{"format": "fa3jit-tune-db", "version": 2}' > "$work/v2-db.json"
expect 2 '"version" must be 1' "$fa3jit" tune show --db "$work/v2-db.json"
expect 0 'missing-db.json: 0 records' "$fa3jit" tune show --db "$work/missing-db.json"
[[ -e "$work/missing-db.json" ]] && fail "tune show created $work/missing-db.json"
expect 2 'heatmap-axes' "$fa3jit" tune "$work/dup_sweep.json" --heatmap-axes a,b,c
# --heatmap-axes is checked against the sweep's keys before anything compiles (with or without a GPU).
expect 2 '^fa3jit: error: --heatmap-axes: "nosuch" is not a key of the sweep; allowed: "pingpong", "stages"$' \
  "$fa3jit" tune "$work/sweep.json" --cache-dir "$work/tune" --heatmap-axes nosuch,alsono
out=$("$fa3jit" tune "$work/sweep.json" --cache-dir "$work/tune" --heatmap-axes stages,nosuch 2>&1)
grep -q 'compil' <<<"$out" && fail "tune compiled before checking --heatmap-axes: $out"
expect 2 '--heatmap-axes: "stages" is given twice' "$fa3jit" tune "$work/sweep.json" --cache-dir "$work/tune" --heatmap-axes stages,stages
# A value echoed in a message: NUL escaped, not a cut; a huge one shortened; a cut never splits a character.
expect 2 'nul_kind.json: spec field "kind": "attention_fwd\\u0000x" is not a kernel family; expected one of' \
  "$fa3jit" emit "$work/nul_kind.json"
expect 2 'huge_kind.json: spec field "kind": "k{56}\.\.\. is not a kernel family' "$fa3jit" emit "$work/huge_kind.json"
out=$("$fa3jit" emit "$work/huge_kind.json" 2>&1)
((${#out} < 300)) || fail "a 900 KB kind was echoed in a message of ${#out} bytes"
expect 2 '"sweep.stages" must be a non-empty list of values, got "s{56}\.\.\.$' "$fa3jit" tune "$work/huge_sweep.json"
out=$("$fa3jit" emit "$work/utf8.json" 2>&1)
python3 -c 'import sys; sys.stdin.buffer.read().decode("utf-8")' <<<"$out" 2>/dev/null ||
  fail "a long multi-byte value was cut inside a character: $out"
grep -q '"a\(é\)\{27\}\.\.\. is not allowed' <<<"$out" || fail "utf8.json: unexpected message: $out"
expect 2 '--seed: "-5" is not allowed' "$fa3jit" bench "$spec" --seed -5
expect 2 'cannot write the kernel source to stdout' sh -c "'$fa3jit' emit '$spec' > /dev/full"
expect 2 'fa3jit: error: cannot write to standard output' sh -c "'$fa3jit' cache list > /dev/full"
expect 0 'does not exist' "$fa3jit" cache list --cache-dir "$work/typo/a/b"
expect 0 'removed 0 entries' "$fa3jit" cache clear --cache-dir "$work/typo/a/b"
[[ -e "$work/typo" ]] && fail "cache list/clear created $work/typo"

# 2. cache warm: every worker error is a line naming its file; no abort whatever a worker throws.
mkdir "$work/specs"
cp "$work/overflow.json" "$work/nul.json" "$work/deep4k.json" "$work/specs/"
expect 2 '0 kernels warmed into .*, 5 failed' "$fa3jit" cache warm "$work/specs" /dev/zero "$work/fifo.json" -j 4
out=$("$fa3jit" cache warm "$work/specs" /dev/zero "$work/fifo.json" -j 4 2>&1)
for f in overflow.json nul.json deep4k.json /dev/zero fifo.json; do
  grep -q "^error .*$f" <<<"$out" || fail "cache warm printed no error line for $f: $out"
done

# 2 + 5. Threads that cannot be started (16 GiB stacks in 8 GiB of address space) mean fewer workers; the
# publish removes the temp file of a writer killed between write and rename, and only that one.
mkdir -p "$FA3JIT_CACHE_DIR" && chmod 700 "$FA3JIT_CACHE_DIR"
sh -c 'exit 0' & dead=$!
wait $dead
key=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
orphan="$FA3JIT_CACHE_DIR/.tmp-$key-$dead-0123456789abcdef"
head -c 1048576 /dev/zero > "$orphan"
touch -d '-30 seconds' "$orphan"
echo "keep me" > "$FA3JIT_CACHE_DIR/.tmp-notes"
touch -d '-2 hours' "$FA3JIT_CACHE_DIR/.tmp-notes"
(failures=0
 ulimit -v 8388608
 ulimit -s 16777216
 expect 0 'could not start 1 of the 2 worker threads' "$fa3jit" cache warm "$spec" "$root/configs/fp16_d64.json" -j 2
 exit $failures) || failures=$((failures + $?))
[[ -e "$orphan" ]] && fail "the publish left the dead writer's temp file $orphan"
# An entry of a warmed directory whose status cannot be read (a symlink loop) is an error line; the rest is warmed.
mkdir "$work/loop" && cp "$spec" "$work/loop/a.json" && ln -s loop.json "$work/loop/loop.json"
expect 2 '1 kernel warmed into .*, 1 failed' "$fa3jit" cache warm "$work/loop"
out=$("$fa3jit" cache warm "$work/loop" 2>&1)
grep -q "^error $work/loop/loop.json: Too many levels of symbolic links$" <<<"$out" ||
  fail "cache warm printed no error line for the symlink loop: $out"
grep -q "^hit .*$work/loop/a.json$" <<<"$out" || fail "cache warm did not warm the rest of the directory: $out"
# A --db named explicitly must be usable, before anything compiles.
expect 2 '^fa3jit: error: --db: tuning database ".*/missing-db.json" does not exist$' \
  "$fa3jit" cache warm "$spec" --db "$work/missing-db.json"
expect 2 '^fa3jit: error: --db: tuning database ".*/torn-db.json": spec is not valid JSON' \
  "$fa3jit" cache warm "$spec" --db "$work/torn-db.json"
expect 2 '^fa3jit: error: --db: cannot read tuning database ".*/loop": it is a directory' \
  "$fa3jit" cache warm "$spec" --db "$work/loop"
out=$("$fa3jit" cache warm "$spec" --db "$work/missing-db.json" 2>&1)
grep -q 'warmed' <<<"$out" && fail "cache warm compiled before checking --db: $out"
expect 0 'removed 2 entries' "$fa3jit" cache clear
[[ -e "$FA3JIT_CACHE_DIR/.tmp-notes" ]] || fail "cache clear removed a user's .tmp-notes"

# 5. A cache that falls back to memory: warm says so and exits 2.
mkdir "$work/shared" && chmod 777 "$work/shared"
expect 2 'nothing was written to disk' "$fa3jit" cache warm "$spec" --cache-dir "$work/shared"
# ... and cache list and clear name it and say why they did nothing; clear fails.
touch "$work/shared/$key.cubin-entry"
expect 2 "^fa3jit: error: cache clear: cache directory $work/shared is owned by another user or writable by others \(mode 777\); nothing was removed$" \
  "$fa3jit" cache clear --cache-dir "$work/shared"
[[ -e "$work/shared/$key.cubin-entry" ]] || fail "cache clear removed an entry of a directory it does not trust"
expect 0 "^cache directory $work/shared is owned by another user or writable by others \(mode 777\); nothing is listed$" \
  "$fa3jit" cache list --cache-dir "$work/shared"

# 6. A kernel another process is compiling (its lock file held) is warmed after the others, then read or compiled.
if command -v flock >/dev/null; then
  other="$root/configs/fp16_d64.json"
  busy_key=$("$fa3jit" compile "$spec" --cache-dir "$work/keys" 2>&1 | awk '/^cache key/ {print $3}')
  mkdir -m 700 "$work/ranks"
  (flock -x 9 && touch "$work/held" && sleep 4) 9>"$work/ranks/.lock-$busy_key" &
  holder=$!
  for _ in $(seq 100); do [[ -e "$work/held" ]] && break; sleep 0.1; done
  out=$(timeout 60 "$fa3jit" cache warm "$spec" "$other" -j 1 --cache-dir "$work/ranks" 2>&1)
  wait $holder
  order=$(grep -E '^(built|hit) ' <<<"$out" | awk '{print $NF}' | xargs -n1 basename | tr '\n' ' ')
  [[ $order == "fp16_d64.json bf16_d64.json " ]] ||
    fail "cache warm did not take the kernel being compiled elsewhere last (order: $order): $out"
else
  echo "cli tests: flock(1) not installed; the deferral case is skipped"
fi

if ((failures)); then
  echo "cli tests: $failures failed" >&2
  exit 1
fi
echo "cli tests: all passed"

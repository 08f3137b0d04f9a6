#!/usr/bin/env python3
"""Kernel compile time per spec in configs/: cold NVRTC compile and warm cache load, CPU only (no GPU needed).

Cold: a fresh runtime on a fresh, empty cache directory compiles the kernel with NVRTC (generation + NVRTC +
writing the cache entry). Warm: a fresh runtime on the directory the cold run filled loads and verifies the
entry from disk (what a restarted serving process pays). Both through the C ABI's fa3jit_compile_spec, which
reports its own wall time; the median of --repeat runs each.

    python bench/compile_time.py                      # every configs/*.json, median of 5
    python bench/compile_time.py configs/bf16_d128.json --repeat 3
Writes bench/results/compile_time.json.
"""

import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def import_fa3jit():
    try:
        import fa3jit
    except ImportError:
        sys.path.insert(0, str(ROOT / "tools" / "python"))
        import fa3jit
    return fa3jit


def cpu_model():
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def measure(fa3jit, spec_text, repeat):
    cold, warm, info = [], [], None
    with tempfile.TemporaryDirectory(prefix="fa3jit-compile-time-") as scratch:
        for i in range(repeat):
            cache_dir = pathlib.Path(scratch) / f"cold-{i}"
            with fa3jit.Runtime(cache_dir=cache_dir) as rt:
                info = rt.compile_spec(spec_text)
            if info["cache_hit"]:
                raise RuntimeError(f"cold run {i} was served from a cache in an empty directory {cache_dir}")
            cold.append(info["ms"])
        for _ in range(repeat):
            with fa3jit.Runtime(cache_dir=cache_dir) as rt:
                loaded = rt.compile_spec(spec_text)
            if not loaded["cache_hit"] or loaded["key"] != info["key"]:
                raise RuntimeError(f"warm run was not served from the cache in {cache_dir}")
            warm.append(loaded["ms"])
    return {
        "kernel_name": info["kernel_name"],
        "key": info["key"],
        "registers": info["registers"],
        "spill_store_bytes": info["spill_store_bytes"],
        "smem_bytes": info["smem_bytes"],
        "cold_ms": cold,
        "warm_ms": warm,
        "cold_median_ms": statistics.median(cold),
        "warm_median_ms": statistics.median(warm),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="*", type=pathlib.Path, help="spec files (default: configs/*.json)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "bench" / "results" / "compile_time.json")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    configs = args.configs or sorted((ROOT / "configs").glob("*.json"))
    if not configs:
        sys.exit("no spec files found in configs/")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    fa3jit = import_fa3jit()

    results = []
    for path in configs:
        result = {"config": os.path.relpath(path, ROOT)}
        result.update(measure(fa3jit, path.read_text(), args.repeat))
        results.append(result)
        print(f"{result['config']}: cold {result['cold_median_ms']:.0f} ms, warm {result['warm_median_ms']:.2f} ms",
              file=sys.stderr, flush=True)

    print(f"\nfa3jit {fa3jit.version()}, {cpu_model()}, {os.cpu_count()} CPUs; median of {args.repeat}\n")
    print("| config | kernel | cold compile (ms) | warm cache load (ms) | registers | smem (bytes) |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['config']} | {r['kernel_name']} | {r['cold_median_ms']:.0f} | {r['warm_median_ms']:.2f} | "
              f"{r['registers']} | {r['smem_bytes']} |")
    if args.no_save:
        return
    document = {
        "environment": {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "fa3jit": fa3jit.version(),
            "fa3jit_library": fa3jit.library_path(),
            "cpu": cpu_model(),
            "cpus": os.cpu_count(),
            "repeat": args.repeat,
        },
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()

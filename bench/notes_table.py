#!/usr/bin/env python3
"""Prints a results file of bench_fwd.py as the markdown table bench/NOTES.md uses, plus a summary line.

    python3 bench/notes_table.py bench/results/<file>.json [--dtype bf16]
"""
import argparse
import json
import statistics

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("results")
parser.add_argument("--dtype", nargs="+", default=["fp16", "bf16"])
args = parser.parse_args()
doc = json.load(open(args.results))
rows = [r for r in doc["results"] if r["dtype"] in args.dtype]
print("| dtype | head_dim | causal | seqlen | fa3jit | cuDNN | FA2 | fa3jit / cuDNN |")
print("|---|---|---|---|---|---|---|---|")
ratios = []
for r in rows:
    f, c, a = (r.get(k, {}).get("tflops") for k in ("fa3jit", "cudnn", "fa2"))
    ratio = f / c if f and c else None
    if ratio:
        ratios.append(ratio)
    cell = lambda x: f"{x:.1f}" if x else "-"
    print(f"| {r['dtype']} | {r['head_dim']} | {r['causal']} | {r['seqlen']} | {cell(f)} | {cell(c)} | {cell(a)} | "
          f"{ratio:.2f} |" if ratio else "| - |")
if ratios:
    wins = sum(x > 1.0 for x in ratios)
    print(f"\nfa3jit / cuDNN: geometric mean {statistics.geometric_mean(ratios):.3f}, min {min(ratios):.2f}, "
          f"max {max(ratios):.2f}, faster in {wins} of {len(ratios)} cells")

#!/usr/bin/env python3
"""GPU time of each kernel of a decode step, fa3jit beside FlashAttention-3 and cuDNN (torch.profiler's CUDA
activity records: start and end of every kernel on the device, nothing serialised, as the calls run in
bench_decode.py but back to back without the L2 flush).

For each cell and backend: the kernels of one call (name, mean duration in us over --calls calls) and the mean span
from the first kernel's start to the last kernel's end, which is the call's GPU time without the launch latency.

    python3 bench/decode_kernel_times.py [--fa3-site DIR]
"""

import argparse
import collections
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import bench_decode  # noqa: E402
from bench_fwd import import_fa3jit  # noqa: E402

CELLS = [(1, 1024), (16, 1024), (1, 4096), (16, 4096)]
HEADS, HEADS_KV = 32, 8


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--fa3-site", default="/tmp/site")
    args = parser.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile
    fa3jit = import_fa3jit()
    fa3_call, _ = bench_decode.load_fa3(torch, args.fa3_site)
    for batch, seqlen_k in CELLS:
        q, k, v, seqlens = bench_decode.tensors(torch, batch, seqlen_k, HEADS, HEADS_KV)
        calls = {"fa3jit": lambda: fa3jit.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, causal=True),
                 "fa3jit s1": lambda: fa3jit.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, causal=True,
                                                                     num_splits=1),
                 "cuDNN": bench_decode.sdpa_call(torch, q, k, v, "view")}
        if fa3_call:
            calls["FA3"] = lambda: fa3_call(q, k, v, seqlens)
        for name, fn in calls.items():
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.calls):
                    torch.cuda._sleep(100_000)
                    fn()
                torch.cuda.synchronize()
            skipped = ("sleep", "spin", "Memcpy", "Memset")  # the spin kernel between calls, copies, memsets
            kernels = [e for e in prof.events()
                       if e.device_type.name == "CUDA" and not any(word in e.name for word in skipped)]
            kernels.sort(key=lambda e: e.time_range.start)
            per_call = len(kernels) // args.calls
            durations = collections.defaultdict(list)
            spans = []
            for c in range(args.calls):
                group = kernels[c * per_call:(c + 1) * per_call]
                for e in group:
                    durations[e.name[:60]].append(e.time_range.end - e.time_range.start)
                if group:
                    spans.append(max(e.time_range.end for e in group) - min(e.time_range.start for e in group))
            parts = ", ".join(f"{n} {sum(d) / len(d):.1f}" for n, d in durations.items())
            span = sorted(spans)[len(spans) // 2] if spans else float("nan")
            print(f"{batch} x {seqlen_k} {name}: span {span:.1f} us ({per_call} kernels: {parts})", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""How much of a decode call's time after an L2 flush is its own code coming from HBM: each backend timed as
bench_decode.py times it (L2 flushed, a spin kernel hiding the host), and again with the same kernels run once on
one-key caches between the flush and the timed call, so that their instructions (and little else) are in L2.

In a serving process a decode step runs the same kernels once per layer, so their code is in L2 while the
K/V cache is not; bench_decode.py's flush evicts both. The difference between the two columns of a backend is
what its cold instruction fetches cost; a kernel whose code starts far from its first load (a producer branch
thousands of instructions in) pays more of it.

Warming calls: fa3jit and FA3 the same call with cache_seqlens all 1 (the host picks the same kernels and grid
from the shapes; every CTA reads at most its first key block); cuDNN (torch SDPA, which has no kernel for one key)
the call on 128-key views of the caches, which may select another cuDNN kernel than the timed shape (then its warm
column is no warmer).

    python3 bench/decode_code_warm.py [--fa3-site DIR] [--runs 30]
"""

import argparse
import pathlib
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import bench_decode  # noqa: E402
from bench_fwd import import_fa3jit  # noqa: E402

CELLS = [(1, 1024), (16, 1024), (1, 4096), (16, 4096), (64, 8192)]
HEADS, HEADS_KV = 32, 8


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--fa3-site", default="/tmp/site")
    args = parser.parse_args()
    import torch
    fa3jit = import_fa3jit()
    fa3_call, fa3_where = bench_decode.load_fa3(torch, args.fa3_site)
    timer = bench_decode.Timer(torch, args.runs, args.warmup)
    print("| batch x seqlen_k | fa3jit GB/s cold / code warm | FA3 | cuDNN |")
    print("|---|---|---|---|")
    for batch, seqlen_k in CELLS:
        q, k, v, seqlens = bench_decode.tensors(torch, batch, seqlen_k, HEADS, HEADS_KV)
        ones = torch.ones_like(seqlens)
        kv_bytes = batch * seqlen_k * HEADS_KV * bench_decode.HEAD_DIM * 2 * 2
        # (timed call, warming call) per backend
        calls = {"fa3jit": (lambda: fa3jit.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, causal=True),
                            lambda: fa3jit.flash_attn_with_kvcache(q, k, v, cache_seqlens=ones, causal=True))}
        if fa3_call is not None:
            calls["fa3"] = (lambda: fa3_call(q, k, v, seqlens), lambda: fa3_call(q, k, v, ones))
        # cuDNN has no kernel for one key: its warming call reads the first 128.
        calls["cudnn"] = (bench_decode.sdpa_call(torch, q, k, v, "view"),
                          bench_decode.sdpa_call(torch, q, k[:, :128], v[:, :128], "view"))
        for name in list(calls):
            try:
                for call in calls[name]:
                    call()
            except Exception as error:  # a backend that cannot run the cell (or its warming call) is left out
                print(f"{name} at {batch} x {seqlen_k}: {type(error).__name__}: {error}", file=sys.stderr)
                del calls[name]
        for real, warm in calls.values():
            for _ in range(args.warmup):
                real()
                warm()
        events = {(name, mode): [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                                 for _ in range(args.runs)] for name in calls for mode in ("cold", "warm")}
        for run in range(args.runs):
            for name, (real, warm) in calls.items():
                for mode in ("cold", "warm"):
                    start, end = events[(name, mode)][run]
                    timer.flush.zero_()
                    if timer.spin is not None:
                        timer.spin(timer.spin_cycles)
                    if mode == "warm":
                        warm()
                    start.record()
                    real()
                    end.record()
        torch.cuda.synchronize()
        gbps = {key: kv_bytes / (statistics.median(s.elapsed_time(e) for s, e in pairs) * 1e-3) / 1e9
                for key, pairs in events.items()}
        cells = [f"{gbps[(n, 'cold')]:.0f} / {gbps[(n, 'warm')]:.0f}" if (n, "cold") in gbps else "n/a"
                 for n in ("fa3jit", "fa3", "cudnn")]
        print(f"| {batch} x {seqlen_k} | " + " | ".join(cells) + " |", flush=True)
        del q, k, v, seqlens, ones, calls
        torch.cuda.empty_cache()
    if fa3_call is None:
        print(f"FA3: {fa3_where}")


if __name__ == "__main__":
    main()

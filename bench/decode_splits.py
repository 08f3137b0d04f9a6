#!/usr/bin/env python3
"""Decode-step bandwidth against the number of KV splits: fa3jit's flash_attn_with_kvcache with num_splits forced to
each count, beside its own heuristic (num_splits=0), FlashAttention-3 and cuDNN, one process.

The split heuristic (kernels/attention_fwd/scheduler.cpp: num_splits_heuristic) fills the SMs by wave efficiency;
a decode step of a small batch is latency-bound, where fewer splits (fewer partials, a shorter combine) or more
(more bytes in flight) may win. This sweep measures which, per cell, for the heuristic to follow.

Cells (batch, seqlen_k), bf16, head_dim 128, 32 query heads over 8 KV heads, seqlen_q 1, contiguous caches; GB/s of
K+V read (bench_decode.py's figure of merit and timing: median of --runs calls after an L2 flush and a spin kernel,
every column of a cell timed in turn).
Each forced count's output is compared with one split's (max abs difference over bench_decode's 2e-2: MISMATCH, exit 1);
a column that raises reads nan, with the reason on stderr.

    python3 bench/decode_splits.py [--fa3-site DIR] [--json OUT] [--cells 8x256,1x512,...]
"""

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import bench_decode  # noqa: E402
from bench_fwd import import_fa3jit  # noqa: E402

CELLS = [(1, 1024), (1, 2048), (1, 4096), (1, 16384), (2, 4096), (4, 1024), (4, 4096), (8, 1024), (8, 4096),
         (16, 1024), (16, 2048), (16, 4096), (32, 1024), (32, 4096)]
SPLITS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
HEADS, HEADS_KV = 32, 8


def key_blocks(seqlens, batch, seqlen_k):
    """Key blocks of one sequence in the kernel the call runs: block_n from the library's plan of the call
    (fa3jit_attention_plan, num_splits 1), so the tile table is not restated here."""
    from fa3jit import _capi
    present = seqlens.data_ptr()  # the plan reads no tensor; a non-null pointer selects the seqused_k layout
    plan = _capi.plan(_capi.ForwardParams(
        dtype=_capi.DTYPE_BF16, causal=1, batch=batch, num_heads=HEADS, num_heads_kv=HEADS_KV,
        head_dim=bench_decode.HEAD_DIM, head_dim_v=bench_decode.HEAD_DIM, q=_capi.Tensor(data=present),
        seqused_k=present, seqlen_q=1, seqlen_k=seqlen_k, num_splits=1, pack_gqa=-1))
    return -(-seqlen_k // plan.block_n)


def medians(timer, calls, what):
    """{name: median ms} of the calls timed in turn; a call that raises is dropped (its reason on stderr) and the rest
    timed again, so one failing column leaves the others."""
    while calls:
        try:
            return timer.medians_ms(calls)
        except Exception as error:  # noqa: BLE001 (a peer's or a split count's failure is reported, not fatal)
            for name, fn in list(calls.items()):
                try:
                    fn()
                except Exception as call_error:  # noqa: BLE001
                    print(f"{what} {name}: {type(call_error).__name__}: {call_error}", file=sys.stderr)
                    del calls[name]
                    break
            else:
                raise error
    return {}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--fa3-site", default="/tmp/site")
    parser.add_argument("--json", type=pathlib.Path)
    parser.add_argument("--cells", help="comma-separated BATCHxSEQLEN_K cells instead of the default list")
    args = parser.parse_args()
    cells = CELLS
    if args.cells:
        cells = [tuple(int(x) for x in cell.split("x")) for cell in args.cells.split(",")]
    import torch
    fa3jit = import_fa3jit()
    fa3_call, fa3_where = bench_decode.load_fa3(torch, args.fa3_site)
    if fa3_call is None:
        print(f"FA3: {fa3_where}", file=sys.stderr)
    timer = bench_decode.Timer(torch, args.runs, args.warmup)
    results = []
    mismatches = 0
    header = ["batch", "seqlen_k", "heuristic", "FA3", "cuDNN"] + [f"s{s}" for s in SPLITS] + ["best", "best/peer"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for batch, seqlen_k in cells:
        q, k, v, seqlens = bench_decode.tensors(torch, batch, seqlen_k, HEADS, HEADS_KV)
        gb = batch * seqlen_k * HEADS_KV * bench_decode.HEAD_DIM * 2 * 2 / 1e9
        ref = fa3jit.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, causal=True, num_splits=1)
        row = {"batch": batch, "seqlen_k": seqlen_k}
        cell = f"batch {batch} seqlen_k {seqlen_k}"
        calls = {"heuristic": lambda: fa3jit.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, causal=True),
                 "cudnn": bench_decode.sdpa_call(torch, q, k, v, "view")}
        if fa3_call:
            calls["fa3"] = lambda: fa3_call(q, k, v, seqlens)
        n_blocks = key_blocks(seqlens, batch, seqlen_k)
        for s in SPLITS:
            if s > n_blocks:
                continue
            call = lambda s=s: fa3jit.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, causal=True,  # noqa: E731
                                                             num_splits=s)
            try:
                diff = (call().float() - ref.float()).abs().max().item()
            except Exception as error:  # noqa: BLE001
                print(f"{cell} num_splits={s}: {type(error).__name__}: {error}", file=sys.stderr)
                continue
            if not diff <= bench_decode.MAX_ABS_DIFF:
                print(f"MISMATCH {cell} num_splits {s}: max abs difference {diff} from one split", file=sys.stderr)
                mismatches += 1
            calls[f"s{s}"] = call
        # Every column of the cell timed in the same rounds (bench_decode.Timer.medians_ms): none is favoured by its
        # place in the order.
        times = medians(timer, calls, cell)
        for name in ["heuristic", "fa3", "cudnn"] + [f"s{s}" for s in SPLITS]:
            row[name] = gb / (times[name] * 1e-3) if name in times else float("nan")
        measured = {s: row[f"s{s}"] for s in SPLITS if row[f"s{s}"] == row[f"s{s}"]}
        best = max(measured, key=measured.get) if measured else 0
        row["best"] = best
        peers = [x for x in (row["fa3"], row["cudnn"]) if x == x]
        peer = max(peers) if peers else float("nan")
        cells = [str(batch), str(seqlen_k)] + [f"{row[c]:.0f}" for c in ("heuristic", "fa3", "cudnn")]
        cells += [f"{row[f's{s}']:.0f}" if row[f"s{s}"] == row[f"s{s}"] else "-" for s in SPLITS]
        cells += [f"s{best}", f"{measured[best] / peer:.2f}" if measured else "-"]
        print("| " + " | ".join(cells) + " |", flush=True)
        results.append(row)
    if args.json:
        args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "cells": results}, indent=1))
    if mismatches:
        sys.exit(1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Sliding window, softcap and sinks: fa3jit's flash_attn_varlen_func beside FlashAttention-3's, one process.

Prefill cells in FA3's convention (16k tokens, bf16, hidden 2048: 16 heads at head_dim 128, 8 at 256; sequences of
equal length packed with cu_seqlens), each with a mask or score variant of a served model:
  window 4096 causal  Mistral-style sliding window (window_size=(4095, 0)), seqlen 8k and 16k, d128
  window 1024x1024    a two-sided local window, seqlen 8k, d128
  softcap 50 causal   Gemma-2's logit softcapping, seqlen 8k, d256 (and d128)
  window 128 + sinks  gpt-oss: window 128, causal, one sink logit per head, 64/8 heads at d64, seqlen 8k
FLOPs count the (query, key) pairs each mask lets through: 4 * d * pairs (the halved square for plain causal).

Columns: fa3jit (flash_attn_varlen_func with window_size / softcap / sinks), FA3 (the `fa3-fwd` wheel's
flash_attn_varlen_func with window_size / softcap; it has no sinks, so the sinks cell compares fa3jit with sinks to
FA3 without them), and fa3jit's own cost of the variant: the same call without it (plain causal or full).
Each cell checks fa3jit against FA3 (max abs difference <= 2e-2, cells FA3 can run) before timing; a mismatch
prints MISMATCH and makes the script exit 1. Timing: bench_fwd.Timer (median of --runs CUDA-event timings, each
after an L2 flush).

    python3 bench/bench_variant.py            # prints the table; --json PATH writes the rows
"""

import argparse
import json
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_fwd import Timer, import_fa3jit  # noqa: E402

# (label, head_dim, num_heads, num_heads_kv, seqlen, causal, window (left, right), softcap, sinks)
CELLS = [
    ("window 4096 causal", 128, 16, 16, 8192, True, (4095, 0), 0.0, False),
    ("window 4096 causal", 128, 16, 16, 16384, True, (4095, 0), 0.0, False),
    ("window 1024x1024", 128, 16, 16, 8192, False, (1024, 1024), 0.0, False),
    ("softcap 50 causal", 256, 8, 8, 8192, True, (-1, -1), 50.0, False),
    ("softcap 50 causal", 128, 16, 16, 8192, True, (-1, -1), 50.0, False),
    ("window 128 + sinks", 64, 64, 8, 8192, True, (127, 0), 0.0, True),
]
TOKENS = 16384
MAX_ABS_DIFF = 2e-2


def visible_pairs(seqlen, causal, window):
    left, right = window
    if causal:
        right = 0
    total = 0
    for i in range(seqlen):
        hi = seqlen - 1 if right < 0 else min(seqlen - 1, i + right)
        lo = 0 if left < 0 else max(0, i - left)
        total += max(0, hi - lo + 1)
    return total


def load_fa3_varlen(fa3_site):
    if fa3_site and os.path.isdir(fa3_site) and fa3_site not in sys.path:
        sys.path.insert(0, fa3_site)
    try:
        import fa3_fwd_interface
        return fa3_fwd_interface.flash_attn_varlen_func, None
    except Exception as error:  # noqa: BLE001  (any import failure: FA3 is then a missing column)
        return None, f"{type(error).__name__}: {error}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--fa3-site", default=os.environ.get("FA3_SITE") or "/tmp/site")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    import torch
    fa3jit = import_fa3jit()
    fa3, fa3_error = load_fa3_varlen(args.fa3_site)
    if fa3 is None:
        print(f"FA3 unavailable: {fa3_error}")
    timer = Timer(torch, args.runs, args.warmup)
    rows, failed = [], False
    for label, d, h, hkv, seqlen, causal, window, softcap, use_sinks in CELLS:
        batch = TOKENS // seqlen
        gen = torch.Generator(device="cuda").manual_seed(seqlen + d)
        total = batch * seqlen
        q = torch.randn(total, h, d, generator=gen, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(total, hkv, d, generator=gen, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(total, hkv, d, generator=gen, device="cuda", dtype=torch.bfloat16)
        cu = torch.arange(0, total + 1, seqlen, dtype=torch.int32, device="cuda")
        sinks = torch.rand(h, generator=gen, device="cuda") * 4 if use_sinks else None
        ours = lambda: fa3jit.flash_attn_varlen_func(q, k, v, cu, cu, seqlen, seqlen, causal=causal,  # noqa: E731
                                                      window_size=window, softcap=softcap, sinks=sinks)
        plain = lambda: fa3jit.flash_attn_varlen_func(q, k, v, cu, cu, seqlen, seqlen, causal=causal)  # noqa: E731
        peer = None
        if fa3 is not None:
            peer = lambda: fa3(q, k, v, cu, cu, seqlen, seqlen, causal=causal, window_size=window,  # noqa: E731
                               softcap=softcap)
        flops = 4.0 * d * h * batch * visible_pairs(seqlen, causal, window)
        plain_flops = 4.0 * d * h * batch * visible_pairs(seqlen, causal, (-1, -1))
        row = {"cell": label, "head_dim": d, "heads": f"{h}/{hkv}", "seqlen": seqlen}
        out = ours()
        if peer is not None and not use_sinks:
            reference = peer()
            reference = reference[0] if isinstance(reference, (tuple, list)) else reference
            diff = (out.float() - reference.float()).abs().max().item()
            row["max_abs_diff_vs_fa3"] = diff
            if diff > MAX_ABS_DIFF:
                print(f"MISMATCH {label} seqlen {seqlen}: max |fa3jit - FA3| = {diff:.3e}")
                failed = True
        for name, fn, f in (("fa3jit", ours, flops), ("fa3jit_plain", plain, plain_flops), ("fa3", peer, flops)):
            if fn is None:
                continue
            ms = timer.median_ms(fn)
            row[name] = {"ms": ms, "tflops": f / ms / 1e9}
        rows.append(row)
    header = "| cell | d | heads | seqlen | fa3jit TFLOP/s | FA3 TFLOP/s | fa3jit / FA3 | fa3jit ms | plain ms |"
    print(header)
    print("|" + "---|" * 9)
    for r in rows:
        ratio = r["fa3jit"]["tflops"] / r["fa3"]["tflops"] if "fa3" in r else None
        print(f"| {r['cell']} | {r['head_dim']} | {r['heads']} | {r['seqlen']} | {r['fa3jit']['tflops']:.1f} | "
              f"{r['fa3']['tflops'] if 'fa3' in r else float('nan'):.1f} | "
              f"{'n/a' if ratio is None else f'{ratio:.3f}'} | {r['fa3jit']['ms']:.3f} | "
              f"{r['fa3jit_plain']['ms']:.3f} |")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

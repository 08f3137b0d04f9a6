#!/usr/bin/env python3
"""One bench_fwd.py cell, each backend called a few times, for a profiler: Nsight Compute picks the launches.

    ncu -k regex:'attention_fwd|flash' --launch-skip 4 --launch-count 1 --section WarpStateStats \\
        python3 bench/profile_fwd.py --dtype bf16 --head-dim 128 --seqlen 8192 --backends fa3jit
Inputs, kernels and calls are bench_fwd.py's (FA3's convention: 16k tokens, hidden 2048); each backend runs
--calls times in turn (warm-up included: skip the first launches with --launch-skip), then the script exits.
"""
import argparse
import sys

from bench_fwd import BACKENDS, alt_fields, load_fa3, import_fa3jit, make_calls  # noqa: E402  (bench/ is the script's dir)

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--dtype", choices=["fp16", "bf16", "e4m3"], default="bf16")
parser.add_argument("--head-dim", type=int, default=128)
parser.add_argument("--causal", action="store_true")
parser.add_argument("--seqlen", type=int, default=8192)
parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=["fa3jit", "fa3"])
parser.add_argument("--calls", type=int, default=5)
parser.add_argument("--alt", type=alt_fields, default={}, help="spec fields of the fa3jit_alt backend (bench_fwd.py)")
parser.add_argument("--fa3-site", default="/tmp/site")
args = parser.parse_args()

import torch  # noqa: E402

fa3jit = import_fa3jit()
fa3_op, why = load_fa3(torch, args.fa3_site)
if "fa3" in args.backends and fa3_op is None:
    sys.exit(f"FA3: {why}")
batch, heads = 16384 // args.seqlen, 2048 // args.head_dim
dtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.randn(batch, args.seqlen, heads, args.head_dim, dtype=dtype, device="cuda", generator=g)
           for _ in range(3))
calls = make_calls(torch, fa3jit, fa3_op, q, k, v, args.causal, "view", args.dtype == "e4m3", args.backends,
                   args.alt)
for name in args.backends:
    for _ in range(args.calls):
        calls[name]()
    torch.cuda.synchronize()
    print(f"{name}: {args.calls} calls", flush=True)

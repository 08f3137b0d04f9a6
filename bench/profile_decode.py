#!/usr/bin/env python3
"""One bench_decode.py cell, each column called a few times, for a profiler: Nsight Compute picks the launches.

    ncu --clock-control none --section LaunchStats --section SpeedOfLight \\
        python3 bench/profile_decode.py --batch 1 --seqlen-k 1024 --columns fa3jit fa3 cudnn
Inputs and calls are bench_decode.py's (bf16, head_dim 128, seqlen_q 1, full caches, causal for fa3jit and FA3);
each column runs --calls times in turn (its first call compiles or loads fa3jit's kernels), separated by a
synchronisation, then the script exits. Every kernel of a call is a launch of its own (a split-KV call: the
split kernel and the combine kernel), so ncu's launch list shows each column's kernels, their grids and times.
"""
import argparse
import sys

from bench_decode import COLUMNS, load_fa3, make_calls, tensors  # noqa: E402  (bench/ is the script's dir)
from bench_fwd import import_fa3jit  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--batch", type=int, default=1)
parser.add_argument("--seqlen-k", type=int, default=1024)
parser.add_argument("--heads", type=int, default=32)
parser.add_argument("--heads-kv", type=int, default=8)
parser.add_argument("--columns", nargs="+", choices=COLUMNS, default=["fa3jit", "fa3", "cudnn"])
parser.add_argument("--calls", type=int, default=3)
parser.add_argument("--sdpa-layout", choices=["view", "contiguous"], default="view")
parser.add_argument("--fa3-site", default="/tmp/site")
args = parser.parse_args()

import torch  # noqa: E402

fa3jit = import_fa3jit()
fa3_call, why = load_fa3(torch, args.fa3_site)
if "fa3" in args.columns and fa3_call is None:
    sys.exit(f"FA3: {why}")
q, k, v, seqlens = tensors(torch, args.batch, args.seqlen_k, args.heads, args.heads_kv)
for column in args.columns:
    call = make_calls(torch, fa3jit, fa3_call, q, k, v, seqlens, column, args)
    for _ in range(args.calls):
        call()
    torch.cuda.synchronize()
    print(f"{column}: {args.calls} calls", flush=True)

#!/usr/bin/env python3
"""What the pieces of a Python attention call cost on the host: torch's tensor attribute reads, an allocation from
the caching allocator, the current-stream query, the library's C ABI calls through ctypes, beside whole calls.

Each row: nanoseconds per operation, the best of --rounds rounds of --n operations (time.perf_counter_ns, the
cyclic garbage collector off, as timeit), on CUDA tensors of bench/host_cost.py's SERVING shapes (a decode step of
batch 8, 32/8 heads, d128, 256 cached keys, page_size 16). Whole calls synchronise the device every 256 calls,
outside the timed part, as bench/host_cost.py does. The sum of a call's attribute reads times their cost (the
read counts are bench/serving_host_cost_stub.py's) against the call's time says where a call's microseconds go.

    python3 bench/host_cost_parts.py [--n 20000] [--rounds 5] [--json parts.json]
"""
import argparse
import ctypes
import gc
import json
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_fwd import import_fa3jit  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--n", type=int, default=20000)
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--json", type=pathlib.Path)
args = parser.parse_args()

import torch  # noqa: E402

fa3jit = import_fa3jit()
from fa3jit import _capi, attention  # noqa: E402

b, sk, h, hk, d, ps = 8, 256, 32, 8, 128, 16
dev = "cuda"
q = torch.randn(b, 1, h, d, dtype=torch.bfloat16, device=dev)
out = torch.empty_like(q)
k, v = (torch.randn(b, sk, hk, d, dtype=torch.bfloat16, device=dev) for _ in range(2))
pages = b * sk // ps
k_pages, v_pages = k.view(pages, ps, hk, d), v.view(pages, ps, hk, d)
page_table = torch.randperm(pages, device=dev).to(torch.int32).view(b, sk // ps)
seqlens = torch.full((b,), sk, dtype=torch.int32, device=dev)
raw_stream = torch._C._cuda_getCurrentRawStream


def sync_every(fn):
    def run(n):
        done = 0
        while done < n:
            m = min(256, n - done)
            t0 = time.perf_counter_ns()
            for _ in range(m):
                fn()
            t1 = time.perf_counter_ns()
            torch.cuda.synchronize()
            run.host += t1 - t0
            done += m
    run.host = 0
    return run


PIECES = [
    ("loop + lambda (floor)", lambda: None),
    ("t.shape", lambda: q.shape),
    ("t.shape[0] (torch.Size index)", lambda: q.shape[0]),
    ("t.stride()", lambda: q.stride()),
    ("t.data_ptr()", lambda: q.data_ptr()),
    ("t.dtype", lambda: q.dtype),
    ("t.dim()", lambda: q.dim()),
    ("t.is_cuda", lambda: q.is_cuda),
    ("t.get_device()", lambda: q.get_device()),
    ("t.device", lambda: q.device),
    ("isinstance(t, torch.Tensor)", lambda: isinstance(q, torch.Tensor)),
    ("torch._C._cuda_getCurrentRawStream(0)", lambda: raw_stream(0)),
    ("q.new_empty((4096,), dtype=uint8)", lambda: q.new_empty((4096,), dtype=torch.uint8)),
    ("q.new_empty(q.shape) (out)", lambda: q.new_empty((b, 1, h, d))),
    ("torch.full((8,), 256, int32, cuda)", lambda: torch.full((b,), sk, dtype=torch.int32, device=dev)),
]
CALLS = [
    ("flash_attn_func(q, k, v, out=o), dense", lambda: fa3jit.flash_attn_func(q, k, v, out=out)),
    ("flash_attn_with_kvcache, paged, num_splits=0",
     lambda: fa3jit.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=seqlens, page_table=page_table)),
    ("flash_attn_with_kvcache, paged, num_splits=1, out=o",
     lambda: fa3jit.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=seqlens, page_table=page_table,
                                            num_splits=1, out=out)),
    ("flash_attn_with_kvcache, contiguous, num_splits=0",
     lambda: fa3jit.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens)),
    ("torch.cuda._sleep(0) (launch floor)", lambda: torch.cuda._sleep(0)),
]


def best_ns(fn, launches):
    times = []
    gc.disable()
    try:
        for _ in range(args.rounds):
            if launches:
                run = sync_every(fn)
                run(args.n)
                times.append(run.host / args.n)
            else:
                t0 = time.perf_counter_ns()
                for _ in range(args.n):
                    fn()
                times.append((time.perf_counter_ns() - t0) / args.n)
    finally:
        gc.enable()
    return min(times)


# The workspace-size query alone, through ctypes, on the params of a paged split call.
fa3jit.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=seqlens, page_table=page_table)
params, address, size, size_ref, _ = __import__("fa3jit.serving", fromlist=["_local"])._local.params
handle = attention._runtime_handle
workspace_size = _capi.library().fa3jit_attention_workspace_size
PIECES.append(("fa3jit_attention_workspace_size (ctypes)", lambda: workspace_size(handle, address, size_ref)))

rows = []
for name, fn in PIECES:
    fn()
    rows.append((name, best_ns(fn, False)))
    print(f"{name:<55} {rows[-1][1]:9.0f} ns", flush=True)
for name, fn in CALLS:
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    rows.append((name, best_ns(fn, True)))
    print(f"{name:<55} {rows[-1][1]:9.0f} ns", flush=True)
print("\n| piece | ns |\n|---|---|")
for name, ns in rows:
    print(f"| {name} | {ns:.0f} |")
if args.json:
    args.json.write_text(json.dumps({"n": args.n, "rounds": args.rounds, "rows": dict(rows)}, indent=2) + "\n")

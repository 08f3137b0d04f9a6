#!/usr/bin/env python3
"""fa3jit's own Python work per serving call, without torch and without a GPU.

The calls of bench/host_cost.py's SERVING rows (a decode step of batch 8, 32/8 heads, d128, 256 cached keys per
sequence, page_size 16; a packed prefill of 64 queries per sequence) on the stand-in tensors of
tests/python/torch_standin.py, with the library's fa3jit_attention_forward and fa3jit_attention_workspace_size
replaced by functions that return at once: what is timed is the package's Python (checks, packing, the stand-in's
allocations), not torch's attribute access, allocator or the driver, which bench/host_cost.py measures on a GPU
machine. Per call: us (median of --rounds rounds of --n calls, the cyclic garbage collector off, as timeit), the
tensor attribute reads and method calls of one warm call and of the first call of its signature ("cold"), by
name with --verbose, and the workspace-size queries per warm call. The loop and lambda are a row of their own.

    python3 bench/serving_host_cost_stub.py [--n 20000] [--rounds 5] [--json out.json] [--verbose]
The library is found as the package finds it (FA3JIT_LIBRARY, else build/libfa3jit.so).
"""

import argparse
import gc
import json
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

import torch_standin  # noqa: E402

torch = torch_standin.install(ROOT)

import fa3jit  # noqa: E402
from fa3jit import _capi, attention, serving  # noqa: E402

WORKSPACE_BYTES = 4096
SIZE_QUERIES = [0]


def _forward(runtime, kernel, address, stream):
    return 0


def _workspace_size(runtime, address, size_ref):
    SIZE_QUERIES[0] += 1
    size_ref._obj.value = WORKSPACE_BYTES
    return 0


def calls():
    Tensor, bf16, i32 = torch_standin.Tensor, torch.bfloat16, torch.int32
    b, sk, h, hk, d, ps = 8, 256, 32, 8, 128, 16
    q = Tensor((b, 1, h, d), bf16)
    out = Tensor((b, 1, h, d), bf16)
    k, v = Tensor((b, sk, hk, d), bf16), Tensor((b, sk, hk, d), bf16)
    seqlens = Tensor((b,), i32)
    pages = b * sk // ps
    k_pages, v_pages = Tensor((pages, ps, hk, d), bf16), Tensor((pages, ps, hk, d), bf16)
    page_table = Tensor((b, sk // ps), i32)
    q_packed, out_packed = Tensor((b * 64, h, d), bf16), Tensor((b * 64, h, d), bf16)
    kv_packed = Tensor((b * sk, hk, d), bf16)
    cu_q, cu_k = Tensor((b + 1,), i32), Tensor((b + 1,), i32)
    dq, dk, dv, dout = (Tensor((1, 128, 16, 128), bf16) for _ in range(4))
    kvcache, varlen = fa3jit.flash_attn_with_kvcache, fa3jit.flash_attn_varlen_func
    return [
        ("loop + lambda (floor)", lambda: None),
        ("flash_attn_func(q, k, v, out=o), dense (scale)", lambda: fa3jit.flash_attn_func(dq, dk, dv, out=dout)),
        ("flash_attn_with_kvcache, paged, num_splits=0",
         lambda: kvcache(q, k_pages, v_pages, seqlens, page_table=page_table, causal=True)),
        ("flash_attn_with_kvcache, paged, num_splits=1, out=o",
         lambda: kvcache(q, k_pages, v_pages, seqlens, page_table=page_table, causal=True, num_splits=1, out=out)),
        ("flash_attn_with_kvcache, contiguous, num_splits=0", lambda: kvcache(q, k, v, seqlens, causal=True)),
        ("flash_attn_varlen_func, packed prefill, out=o",
         lambda: varlen(q_packed, kv_packed, kv_packed, cu_q, cu_k, 64, sk, causal=True, num_splits=1,
                        out=out_packed)),
    ]


def counted(call):
    torch_standin.ACCESSES.clear()
    queries = SIZE_QUERIES[0]
    torch_standin.Tensor.count_accesses(True)
    try:
        call()
    finally:
        torch_standin.Tensor.count_accesses(False)
    return dict(torch_standin.ACCESSES), SIZE_QUERIES[0] - queries


def timed(call, n, rounds):
    per_call = []
    for _ in range(rounds):
        del torch_standin.ALLOCATIONS[:]
        gc.disable()
        try:
            start = time.perf_counter_ns()
            for _ in range(n):
                call()
            elapsed = time.perf_counter_ns() - start
        finally:
            gc.enable()
        per_call.append(elapsed / n / 1000.0)
    return statistics.median(per_call)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=pathlib.Path)
    parser.add_argument("--verbose", action="store_true", help="the attribute reads by name")
    args = parser.parse_args()
    attention._bind_torch()
    attention._attention_forward = _forward
    _capi.library().fa3jit_attention_workspace_size = _workspace_size
    rows = []
    for name, call in calls():
        cold, _ = counted(call)
        call()
        warm, queries = counted(call)
        us = timed(call, args.n, args.rounds)
        rows.append({"call": name, "us": round(us, 2), "reads_warm": sum(warm.values()),
                     "reads_cold": sum(cold.values()), "size_queries_warm": queries, "reads_by_name": warm})
        print(f"{name:<55} {us:6.2f} us  reads warm {sum(warm.values()):3d} cold {sum(cold.values()):3d}  "
              f"size queries {queries}", flush=True)
        if args.verbose:
            print("    " + ", ".join(f"{key} {count}" for key, count in sorted(warm.items())))
    if args.json:
        args.json.write_text(json.dumps({"python": sys.version.split()[0], "n": args.n, "rounds": args.rounds,
                                         "rows": rows},
                                        indent=1) + "\n")


if __name__ == "__main__":
    main()

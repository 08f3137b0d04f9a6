#!/usr/bin/env python3
"""Decode-step bandwidth: fa3jit's flash_attn_with_kvcache (contiguous and paged K/V) beside FlashAttention-3's
and cuDNN's (torch SDPA), one process.

A decode step reads the whole K/V cache once for one new query token per sequence, so it is bound by HBM
bandwidth: the figure of merit is GB/s of K+V read, batch * seqlen_k * num_heads_kv * head_dim * 2 tensors *
2 bytes / time (Q and O are negligible). bf16, head_dim 128, seqlen_q 1, every cache full (cache_seqlens =
seqlen_k; --unused-keys N leaves N keys of each cache unused, so its last key block ends inside the block),
random normal inputs. Cells (batch, seqlen_k, num_heads / num_heads_kv): (64, 8192, 32/8),
(256, 4096, 32/8), (8, 32768, 64/8), (1, 131072, 32/8), and batch 1 and 16 at seqlen_k 1024 and 4096 (32/8).

Columns:
  fa3jit       fa3jit.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=..., causal=True): contiguous
               (batch, seqlen_k, num_heads_kv, head_dim) caches, num_splits=0 (its heuristic), pack_gqa=None
  fa3jit p1    the same cache as a pool of 1-row pages in shuffled order behind page_table= (the gather kernels:
               the producer copies rows with cp.async)
  fa3jit p16   the same with 16-row pages (TMA boxes of 16 rows)
  fa3jit p64   the same with 64-row pages
  fa3jit p128  the same with 128-row pages
  FA3          FlashAttention-3's flash_attn_with_kvcache of the `fa3-fwd` wheel (fa3_fwd_interface; --fa3-site,
               default $FA3_SITE else /tmp/site, is put on sys.path first) on the contiguous caches, num_splits
               auto; where the wheel has no such function, its op torch.ops.fa3_fwd.fwd with seqused_k=
               cache_seqlens and num_splits=0, which is what that function calls
  cuDNN        F.scaled_dot_product_attention(q (b, h, 1, d), k, v (b, hkv, sk, d), enable_gqa=True) under
               sdpa_kernel(SDPBackend.CUDNN_ATTENTION), not causal (SDPA's causal mask is top-left aligned, so
               is_causal=True would let the one query see only the first key); k/v are transposed views of the
               contiguous caches (--sdpa-layout view) or copies made before timing (--sdpa-layout contiguous)
and each fa3jit column's ratio to max(FA3, cuDNN). A backend that cannot run a cell reads n/a, with the reason
printed below the table.

Timing (as bench/bench_fwd.py): warm-up calls (the first fa3jit call compiles or loads its kernels), then the
median of --runs calls, each bracketed by CUDA events after an L2 flush (256 MB, over the H200's 50 MB), and
after a spin kernel (torch.cuda._sleep) that keeps the GPU busy while Python queues the call: a decode kernel
runs for tens of microseconds, about what one Python call costs on the host, and that host time is not
what is measured here. Split-KV calls time both of their kernels (attention and combine). The columns of a cell
are timed in turn, one run of each per round, so that none is favoured by its place in the order.
Correctness: once per cell every fa3jit column's output is compared with FA3's (else cuDNN's); a max abs
difference over 2e-2 is printed as MISMATCH and makes the script exit 1 after the table.
Host cost: microseconds per call of a tiny decode (batch 1, seqlen_k 256, 32/8 heads), 2000 calls back to back,
wall clock from the first call to the synchronisation after the last, for fa3jit, FA3 and cuDNN.

    python3 bench/bench_decode.py                     # every cell; writes bench/results/<date>-decode.json
    python3 bench/bench_decode.py --quick --no-save   # (16, 4096) and (64, 8192) only, print the table
fa3jit is the package of tools/python (or an installed one) with the library from FA3JIT_LIBRARY, else
<source tree>/build/libfa3jit.so (fa3jit/_capi.py).
"""

import argparse
import datetime
import json
import math
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import bench_fwd  # noqa: E402  (the shared pieces: import_fa3jit, environment, unique_path)
from bench_fwd import import_fa3jit, unique_path  # noqa: E402
HEAD_DIM = 128
CELLS = [(64, 8192, 32, 8), (256, 4096, 32, 8), (8, 32768, 64, 8), (1, 131072, 32, 8),
         (1, 1024, 32, 8), (16, 1024, 32, 8), (1, 4096, 32, 8), (16, 4096, 32, 8)]
QUICK_CELLS = [(16, 4096, 32, 8), (64, 8192, 32, 8)]
FA3JIT_COLUMNS = ("fa3jit", "fa3jit_p1", "fa3jit_p16", "fa3jit_p64", "fa3jit_p128")
PEERS = ("fa3", "cudnn")
COLUMNS = FA3JIT_COLUMNS + PEERS
NAMES = {"fa3jit": "fa3jit", "fa3jit_p1": "fa3jit p1", "fa3jit_p16": "fa3jit p16", "fa3jit_p64": "fa3jit p64",
         "fa3jit_p128": "fa3jit p128", "fa3": "FA3", "cudnn": "cuDNN"}
PAGE_SIZES = {"fa3jit_p1": 1, "fa3jit_p16": 16, "fa3jit_p64": 64, "fa3jit_p128": 128}
MAX_ABS_DIFF = 2e-2
HOST_COST_CELL = (1, 256, 32, 8)
HOST_COST_CALLS = 2000
SPIN_CYCLES = 400_000  # ~200 us at H200 clocks: longer than one Python call takes to queue


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="cells (16, 4096) and (64, 8192) only")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per backend (median; at least 30)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--backends", nargs="+", choices=COLUMNS, default=list(COLUMNS))
    parser.add_argument("--sdpa-layout", choices=["view", "contiguous"], default="view")
    parser.add_argument("--fa3-site", default=os.environ.get("FA3_SITE") or "/tmp/site",
                        help="directory holding fa3_fwd_interface.py and fa3_fwd/ (the fa3-fwd wheel)")
    parser.add_argument("--unused-keys", type=int, default=0, metavar="N",
                        help="cache_seqlens = seqlen_k - N: each sequence's last key block ends inside the block, as "
                             "serving lengths do (GB/s then counts the keys used; cuDNN, which takes no lengths, "
                             "reads n/a)")
    parser.add_argument("--no-host-cost", action="store_true", help="leave out the host-cost line")
    parser.add_argument("--out-dir", type=pathlib.Path, default=ROOT / "bench" / "results")
    parser.add_argument("--json", type=pathlib.Path, help="also write the results JSON here")
    parser.add_argument("--no-save", action="store_true", help="print the table only (and --json if given)")
    args = parser.parse_args()
    if args.runs < 30:
        parser.error("--runs must be at least 30 (the convention is the median of >= 30 runs)")
    return args


def first(result):
    """The output tensor of a call that returns it alone or first in a tuple (FA3's return_softmax_lse)."""
    return result[0] if isinstance(result, (tuple, list)) else result


def load_fa3(torch, fa3_site):
    """(kvcache call taking (q, k_cache, v_cache, cache_seqlens), where it came from), or (None, why not)."""
    if fa3_site and os.path.isdir(fa3_site) and fa3_site not in sys.path:
        sys.path.insert(0, fa3_site)
    try:
        import fa3_fwd_interface
    except Exception as error:
        return None, (f"import fa3_fwd_interface failed ({type(error).__name__}: {error}); install the fa3-fwd "
                      f"wheel with pip --target {fa3_site} or pass --fa3-site")
    where = getattr(fa3_fwd_interface, "__file__", "?")
    function = getattr(fa3_fwd_interface, "flash_attn_with_kvcache", None)
    if function is not None:
        # FA3's defaults: num_splits=0 (its heuristic), pack_gqa=None; returns out (out, lse with return_softmax_lse).
        return (lambda q, k, v, seqlens: function(q, k, v, cache_seqlens=seqlens, causal=True),
                f"fa3_fwd_interface.flash_attn_with_kvcache from {where}")
    try:
        op = torch.ops.fa3_fwd.fwd
        overloads = op.overloads()
        schema = getattr(op, "default" if "default" in overloads else overloads[0])._schema
    except Exception as error:
        return None, f"no flash_attn_with_kvcache in {where} and torch.ops.fa3_fwd.fwd is not registered ({error})"
    names = {argument.name for argument in schema.arguments}
    needed = {"q", "k", "v", "seqused_k", "is_causal", "num_splits"}
    if not needed <= names:
        return None, f"unexpected signature of torch.ops.fa3_fwd.fwd (needs {sorted(needed - names)}): {schema}"
    # What FA3's flash_attn_with_kvcache passes: the cache lengths as seqused_k, num_splits 0 = its heuristic.
    return (lambda q, k, v, seqlens: op(q, k, v, seqused_k=seqlens, is_causal=True, num_splits=0)[0],
            f"torch.ops.fa3_fwd.fwd(seqused_k=cache_seqlens, num_splits=0) from {where}")


def Timer(torch, runs, warmup):
    """bench_fwd's timer with a spin kernel before each call (SPIN_CYCLES): a decode call is shorter than its host
    cost, which is not what is measured."""
    return bench_fwd.Timer(torch, runs, warmup, spin_cycles=SPIN_CYCLES)


def paged_cache(torch, k, v, page_size, generator):
    """(k_pool, v_pool (num_pages, page_size, hkv, d), page_table (batch, pages) int32): the pages of contiguous
    (batch, seqlen_k, hkv, d) caches in one shuffled order; sequence b's page p is pool[page_table[b, p]]."""
    batch, seqlen_k, heads_kv, head_dim = k.shape
    pages = seqlen_k // page_size
    order = torch.randperm(batch * pages, generator=generator).to(k.device)
    pools = []
    for cache in (k, v):
        pool = torch.empty(batch * pages, page_size, heads_kv, head_dim, dtype=cache.dtype, device=cache.device)
        pool[order] = cache.view(batch * pages, page_size, heads_kv, head_dim)
        pools.append(pool)
    return pools[0], pools[1], order.view(batch, pages).to(torch.int32)


def tensors(torch, batch, seqlen_k, heads, heads_kv, unused_keys=0):
    generator = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(batch, 1, heads, HEAD_DIM, dtype=torch.bfloat16, device="cuda", generator=generator)
    k, v = (torch.randn(batch, seqlen_k, heads_kv, HEAD_DIM, dtype=torch.bfloat16, device="cuda",
                        generator=generator) for _ in range(2))
    seqlens = torch.full((batch,), seqlen_k - unused_keys, dtype=torch.int32, device="cuda")
    return q, k, v, seqlens


def sdpa_call(torch, q, k, v, layout):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    qt = q.transpose(1, 2)
    kt, vt = k.transpose(1, 2), v.transpose(1, 2)
    if layout == "contiguous":
        qt, kt, vt = qt.contiguous(), kt.contiguous(), vt.contiguous()

    def call():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return sdpa(qt, kt, vt, enable_gqa=True).transpose(1, 2)  # (b, 1, h, d) like the others
    return call


def make_calls(torch, fa3jit, fa3_call, q, k, v, seqlens, column, args):
    """A zero-argument call for one column, or raises with the reason it cannot run."""
    if column == "fa3jit":
        return lambda: fa3jit.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, causal=True)
    if column in PAGE_SIZES:
        generator = torch.Generator().manual_seed(PAGE_SIZES[column])
        k_pool, v_pool, table = paged_cache(torch, k, v, PAGE_SIZES[column], generator)
        return lambda: fa3jit.flash_attn_with_kvcache(q, k_pool, v_pool, cache_seqlens=seqlens, page_table=table,
                                                      causal=True)
    if column == "fa3":
        if fa3_call is None:
            raise RuntimeError("FA3 not available")
        return lambda: fa3_call(q, k, v, seqlens)
    return sdpa_call(torch, q, k, v, args.sdpa_layout)


def bench_cell(torch, fa3jit, fa3, timer, cell, args):
    batch, seqlen_k, heads, heads_kv = cell
    q, k, v, seqlens = tensors(torch, batch, seqlen_k, heads, heads_kv, args.unused_keys)
    kv_bytes = batch * (seqlen_k - args.unused_keys) * heads_kv * HEAD_DIM * 2 * 2
    row = {"batch": batch, "seqlen_k": seqlen_k, "heads": heads, "heads_kv": heads_kv, "kv_bytes": kv_bytes,
           "unused_keys": args.unused_keys}
    fa3_call, fa3_where = fa3
    outputs, calls = {}, {}
    for column in args.backends:
        if column == "fa3" and fa3_call is None:
            row[column] = {"error": f"FA3 not available: {fa3_where}"}
            continue
        if column == "cudnn" and args.unused_keys:
            row[column] = {"error": "cuDNN (torch SDPA) takes no per-sequence key counts (--unused-keys)"}
            continue
        try:
            call = make_calls(torch, fa3jit, fa3_call, q, k, v, seqlens, column, args)
            outputs[column] = first(call()).float()
            calls[column] = call
        except Exception as error:  # a backend that cannot run this cell is reported, not fatal
            row[column] = {"error": f"{type(error).__name__}: {error}"}
    # Every column timed in the same rounds (Timer.medians_ms), so the order of the columns favours none.
    for column, ms in timer.medians_ms(calls).items():
        row[column] = {"ms": ms, "gbps": kv_bytes / (ms * 1e-3) / 1e9}
    del calls
    # Guard against timing a wrong kernel: every fa3jit column against FA3 (else cuDNN).
    peer = next((p for p in PEERS if p in outputs), None)
    row["reference"] = peer
    for column in FA3JIT_COLUMNS:
        if column in outputs and peer is not None:
            diff = (outputs[column] - outputs[peer]).abs().max().item()
            row[column]["max_abs_diff"] = diff
            if not diff <= MAX_ABS_DIFF:
                row[column]["mismatch"] = True
                print(f"MISMATCH: {NAMES[column]} vs {NAMES[peer]} max abs diff {diff:.3e} > {MAX_ABS_DIFF} at "
                      f"batch {batch} seqlen_k {seqlen_k} heads {heads}/{heads_kv}", file=sys.stderr, flush=True)
    del q, k, v, seqlens, outputs
    torch.cuda.empty_cache()
    return row


def gbps(row, column):
    return (row.get(column) or {}).get("gbps")


def peer_best(row):
    values = [gbps(row, p) for p in PEERS if gbps(row, p) is not None]
    return max(values) if values else None


def ratio(row, column):
    x, best = gbps(row, column), peer_best(row)
    return x / best if x is not None and best else None


def cell_text(row, column):
    entry = row.get(column)
    if entry is None:
        return "-"
    return f"{entry['gbps']:.0f}" if "gbps" in entry else "n/a"


def markdown_table(rows, columns):
    shown_fa3jit = [c for c in FA3JIT_COLUMNS if c in columns]
    header = (["batch", "seqlen_k", "heads"] + [f"{NAMES[c]} GB/s" for c in columns] +
              [f"{NAMES[c]} / best peer" for c in shown_fa3jit] + ["max diff"])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [str(row["batch"]), str(row["seqlen_k"]), f"{row['heads']}/{row['heads_kv']}"]
        cells += [cell_text(row, c) for c in columns]
        for c in shown_fa3jit:
            r = ratio(row, c)
            cells.append(f"{r:.2f}" if r is not None else "n/a")
        diffs = [(row.get(c) or {}).get("max_abs_diff") for c in shown_fa3jit]
        diffs = [d for d in diffs if d is not None]
        cells.append(f"{max(diffs):.1e} vs {NAMES[row['reference']]}" if diffs else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    for c in shown_fa3jit:
        ratios = [r for r in (ratio(row, c) for row in rows) if r is not None]
        if ratios:
            mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            lines.append(f"\n{NAMES[c]} / max(FA3, cuDNN): geometric mean {mean:.3f} over {len(ratios)} cells, "
                         f"faster in {sum(r > 1.0 for r in ratios)}")
    return "\n".join(lines)


def host_cost(torch, fa3jit, fa3_call, args):
    """µs per call, wall clock, of HOST_COST_CALLS back-to-back tiny decode calls per backend."""
    q, k, v, seqlens = tensors(torch, *HOST_COST_CELL)
    calls = {"fa3jit": lambda: fa3jit.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, causal=True),
             "cudnn": sdpa_call(torch, q, k, v, args.sdpa_layout)}
    if fa3_call is not None:
        calls["fa3"] = lambda: fa3_call(q, k, v, seqlens)
    result = {}
    for name, call in calls.items():
        try:
            for _ in range(50):
                call()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(HOST_COST_CALLS):
                call()
            torch.cuda.synchronize()
            result[name] = (time.perf_counter() - start) / HOST_COST_CALLS * 1e6
        except Exception as error:
            result[name] = f"{type(error).__name__}: {error}"
    return result


def environment(torch, fa3jit, fa3, args):
    """bench_fwd's record of the run (device, versions, peers), with this benchmark's convention."""
    env = bench_fwd.environment(torch, fa3jit, fa3, args)
    env.pop("fp8", None)
    env["convention"] = ("bf16, head_dim 128, seqlen_q 1, full caches; GB/s = batch*seqlen_k*heads_kv*head_dim*2*2 "
                         "bytes / median time; CUDA events, L2 flushed, host queueing hidden by a spin kernel, the "
                         "columns of a cell timed in turn, one run each per round")
    return env


def main():
    args = parse_args()
    import torch
    if not torch.cuda.is_available():
        sys.exit("bench_decode.py needs a CUDA GPU (Hopper for fa3jit)")
    fa3jit = import_fa3jit()
    if not hasattr(fa3jit, "flash_attn_with_kvcache"):
        sys.exit(f"this fa3jit ({getattr(fa3jit, '__file__', '?')}) has no flash_attn_with_kvcache")
    fa3 = load_fa3(torch, args.fa3_site) if "fa3" in args.backends else (None, "not in --backends")
    print(f"FA3: {fa3[1]}" if fa3[0] is not None else f"FA3 not available: {fa3[1]}", file=sys.stderr, flush=True)
    timer = Timer(torch, args.runs, args.warmup)
    rows = []
    for cell in QUICK_CELLS if args.quick else CELLS:
        row = bench_cell(torch, fa3jit, fa3, timer, cell, args)
        rows.append(row)
        print(" ".join(f"{c}={cell_text(row, c)}" for c in args.backends),
              f"<- batch {cell[0]} seqlen_k {cell[1]} heads {cell[2]}/{cell[3]}", file=sys.stderr, flush=True)
    costs = {} if args.no_host_cost else host_cost(torch, fa3jit, fa3[0], args)

    env = environment(torch, fa3jit, fa3, args)
    print(f"\n{env['device']}, torch {env['torch']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, fa3jit {env['fa3jit']}, "
          f"FA3 {env['fa3'] or 'n/a'}; decode bf16 d{HEAD_DIM}, GB/s of K+V, median of {args.runs}\n")
    print(markdown_table(rows, args.backends))
    if costs:
        print(f"\nhost cost, batch {HOST_COST_CELL[0]} seqlen_k {HOST_COST_CELL[1]}, {HOST_COST_CALLS} calls back to "
              "back, wall clock: " + ", ".join(
                  f"{NAMES[name]} {value:.1f} us/call" if isinstance(value, float) else f"{NAMES[name]} n/a ({value})"
                  for name, value in costs.items()))
    for row in rows:
        for column in args.backends:
            error = (row.get(column) or {}).get("error")
            if error and not (column == "fa3" and env["fa3_unavailable"]):
                print(f"{NAMES[column]} batch {row['batch']} seqlen_k {row['seqlen_k']}: {error}")
    if env["fa3_unavailable"]:
        print(f"FA3 n/a: {env['fa3_unavailable']}")
    mismatches = [(row, c) for row in rows for c in FA3JIT_COLUMNS if (row.get(c) or {}).get("mismatch")]

    document = json.dumps({"environment": env, "results": rows, "host_cost_us": costs}, indent=1) + "\n"
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(document)
        print(f"\nwrote {args.json}")
    if not args.no_save:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        path = unique_path(args.out_dir, f"{datetime.date.today().isoformat()}-decode", ".json")
        path.write_text(document)
        print(f"\nwrote {path}")
    if mismatches:
        sys.exit(f"{len(mismatches)} fa3jit outputs differ from the peer's by more than {MAX_ABS_DIFF} (MISMATCH above)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Attention forward throughput: fa3jit beside FlashAttention-3 and torch SDPA's cuDNN and FlashAttention-2
backends, one process.

Convention (FlashAttention-3 paper and benchmark_attn.py; docs/kernel-design.md §8): 16k tokens in all
(batch * seqlen = 16384, seqlen 512 ... 16384), hidden 2048 (num_heads = num_heads_kv = 2048 / head_dim),
seqlen_q = seqlen_k, random normal inputs, FLOPs = 4 * batch * heads * seqlen_q * seqlen_k * head_dim, halved
for causal. Each backend: warm-up calls (the first fa3jit call compiles or loads the kernel), then the median
of --runs calls, each timed alone with CUDA events after an L2 flush (which also keeps the GPU busy while
Python queues the call, so launch overhead is not timed). The backends of a case are timed in turn, one run of
each per round, so that none is favoured by its place in the order.

Backends per dtype:
  fp16, bf16: fa3jit, FA3 (bf16/fp16), cuDNN and FA2 (torch SDPA) in that dtype.
  e4m3:       fa3jit FP8 and FA3 FP8 on the same float8_e4m3fn q, k, v with per_head descales (FA3's contract:
              fp32 (batch, num_heads_kv), amax / 448 of each (batch, kv head) of the bf16 inputs), bf16 output;
              cuDNN in bf16 on the unquantised inputs (on Hopper cuDNN's FP8 attention cannot write a 16-bit
              output, per the H200 anchor runs). A head_dim a backend does not run reads n/a.
fa3jit takes (batch, seqlen, heads, head_dim) tensors, as FA3 does; SDPA takes (batch, heads, seqlen, head_dim):
it gets transposed views of the same tensors (--sdpa-layout view, the serving layout; no copy is timed), or
copies made once before timing (--sdpa-layout contiguous, as in the cuDNN/FA3 anchor runs).
FA3 is the `fa3-fwd` wheel's forward, torch.ops.fa3_fwd.fwd (registered by `import fa3_fwd_interface`; --fa3-site,
default $FA3_SITE else /tmp/site, is put on sys.path first), called with keywords and num_splits=1 as its own
flash_attn_func does. Without it the FA3 column reads n/a and the reason is printed.

    python bench/bench_fwd.py                  # full sweep: fp16, bf16 x head_dim 64/128/256 x causal
    python bench/bench_fwd.py --dtype e4m3     # FP8: fa3jit and FA3 fp8 beside cuDNN bf16
    python bench/bench_fwd.py --quick          # bf16, head_dim 128, seqlen 2048 and 8192
    python bench/bench_fwd.py --dtype bf16 --head-dim 96 192 192/128   # other head dims (FLOPs use d + dv)
Prints one markdown table per dtype (TFLOP/s, fa3jit / FA3 and fa3jit / cuDNN with their geometric means).
Writes bench/results/<date>.json and a PNG bar chart beside it (needs matplotlib; skipped with a message), and
--json PATH writes the same JSON to PATH.
"""

import argparse
import datetime
import json
import math
import os
import pathlib
import platform
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOKENS = 16384
HIDDEN = 2048
BACKENDS = ("fa3jit", "fa3jit_vt", "fa3jit_pb", "fa3jit_grid", "fa3jit_persistent", "fa3jit_alt", "fa3", "cudnn",
            "fa2")
# fa3jit_vt (e4m3 only): the kernel with V given transposed (spec field v_layout "d_major", its tile-table tile),
# on fa3jit.v_to_d_major(v8) made before timing.
# fa3jit_grid: the tile table's kernel (16-bit: fa3jit's; e4m3: fa3jit_vt's) with spec field persistent false, one
# CTA per tile: the persistent grid's A/B partner in the same process. fa3jit_persistent: the same kernel with
# persistent true (causal included), whatever the tile table chooses. fa3jit_pb (e4m3 only): per-block descales
# (fa3jit.quantize_fp8 without rotation, before timing) with the per_block d_major kernel and its own tile.
# fa3jit_alt: the tile table's kernel (16-bit: fa3jit's tile for the call; e4m3: fa3jit_vt's) with the spec fields of
# --alt laid over it (a JSON object, e.g. '{"rescale_o_before_pv": true}' or '{"tile": {"block_n": 128}}'): a knob's A/B partner.
# e4m3 with --alt '{"v_layout": "seq_major", ...}': the partner is fa3jit (V transposed in the kernel).
NAMES = {"fa3jit": "fa3jit", "fa3jit_vt": "fa3jit d_major", "fa3jit_grid": "fa3jit grid",
         "fa3jit_persistent": "fa3jit persistent", "fa3jit_pb": "fa3jit per_block", "fa3jit_alt": "fa3jit alt",
         "fa3": "FA3",
         "cudnn": "cuDNN", "fa2": "FA2"}
E4M3_MAX = 448.0  # largest finite float8_e4m3fn


def head_dims(text):
    """'128' -> (128, 128); '192/128' -> (192, 128): head_dim and head_dim_v."""
    try:
        dims = tuple(int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not D or D/DV") from None
    if len(dims) not in (1, 2) or min(dims) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not D or D/DV")
    return dims if len(dims) == 2 else dims * 2


def dims_label(head_dim, head_dim_v):
    return str(head_dim) if head_dim == head_dim_v else f"{head_dim}/{head_dim_v}"


def alt_fields(text):
    fields = json.loads(text)
    if not isinstance(fields, dict):
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON object of spec fields")
    return fields


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", nargs="+", choices=["fp16", "bf16", "e4m3"], default=["fp16", "bf16"])
    parser.add_argument("--head-dim", nargs="+", type=head_dims, default=[(64, 64), (128, 128), (256, 256)],
                        metavar="D[/DV]", help="head_dim, or head_dim/head_dim_v (e.g. 96 192 192/128)")
    parser.add_argument("--causal", choices=["both", "true", "false"], default="both")
    parser.add_argument("--seqlens", nargs="+", type=int, default=[512, 1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--quick", action="store_true", help="bf16, head_dim 128, seqlen 2048 and 8192")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per backend (median; at least 30)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS,
                        default=[b for b in BACKENDS if b != "fa3jit_alt"])
    parser.add_argument("--alt", type=alt_fields, default={},
                        help="spec fields (JSON object) of the fa3jit_alt backend over the tile table's kernel")
    parser.add_argument("--sdpa-layout", choices=["view", "contiguous"], default="view")
    parser.add_argument("--fa3-site", default=os.environ.get("FA3_SITE") or "/tmp/site",
                        help="directory holding fa3_fwd_interface.py and fa3_fwd/ (the fa3-fwd wheel)")
    parser.add_argument("--out-dir", type=pathlib.Path, default=ROOT / "bench" / "results")
    parser.add_argument("--json", type=pathlib.Path, help="also write the results JSON here")
    parser.add_argument("--no-save", action="store_true", help="print the table only (and --json if given)")
    args = parser.parse_args()
    if args.quick:
        args.dtype, args.head_dim, args.seqlens = ["bf16"], [(128, 128)], [2048, 8192]
    if args.runs < 30:
        parser.error("--runs must be at least 30 (the convention is the median of >= 30 runs)")
    for seqlen in args.seqlens:
        if seqlen <= 0 or TOKENS % seqlen:
            parser.error(f"--seqlens: {seqlen} does not divide {TOKENS} tokens")
    return args


def import_fa3jit():
    try:
        import fa3jit
    except ImportError:
        sys.path.insert(0, str(ROOT / "tools" / "python"))
        import fa3jit
    return fa3jit


def load_fa3(torch, fa3_site):
    """(torch.ops.fa3_fwd.fwd, where it came from), or (None, why not): FA3 is a peer only where its wheel
    imports on this torch."""
    if fa3_site and os.path.isdir(fa3_site) and fa3_site not in sys.path:
        sys.path.insert(0, fa3_site)
    try:
        import fa3_fwd_interface
    except Exception as error:
        return None, (f"import fa3_fwd_interface failed ({type(error).__name__}: {error}); install the fa3-fwd "
                      f"wheel with pip --target {fa3_site} or pass --fa3-site")
    try:
        op = torch.ops.fa3_fwd.fwd
        overloads = op.overloads()
        schema = getattr(op, "default" if "default" in overloads else overloads[0])._schema
    except Exception as error:
        return None, f"torch.ops.fa3_fwd.fwd is not registered ({type(error).__name__}: {error})"
    names = {argument.name for argument in schema.arguments}
    # fa3-fwd 0.0.3: fwd(q, k, v, ..., out, ..., q_descale, k_descale, v_descale, softmax_scale, is_causal, ...,
    # num_splits, ...) -> (out, softmax_lse, ...).
    needed = {"q", "k", "v", "is_causal", "num_splits", "q_descale", "k_descale", "v_descale"}
    if not needed <= names:
        return None, f"unexpected signature of torch.ops.fa3_fwd.fwd (needs {sorted(needed - names)}): {schema}"
    return op, getattr(fa3_fwd_interface, "__file__", "?")


class Timer:
    """Median of single-call CUDA-event timings, each after an L2 flush (and, with spin_cycles, a spin kernel that
    keeps the GPU busy while Python queues the call: for calls shorter than their host cost, bench_decode.py)."""

    def __init__(self, torch, runs, warmup, spin_cycles=0):
        self.torch, self.runs, self.warmup = torch, runs, warmup
        # Larger than the H200's L2 (50 MB), so every call starts from HBM as in serving.
        self.flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        self.spin_cycles = spin_cycles
        self.spin = getattr(torch.cuda, "_sleep", None) if spin_cycles else None
        if spin_cycles and self.spin is None:
            print("this torch has no torch.cuda._sleep: host time per call may be part of the timings",
                  file=sys.stderr)

    def median_ms(self, fn):
        return self.medians_ms({None: fn})[None]

    def medians_ms(self, fns):
        """{name: median ms} of several calls timed in turn, one run of each per round: each call's runs are spread
        over the same stretch of time, so none is favoured by being timed first or last (a decode kernel timed right
        after its inputs were made read up to 6 % slower than the same kernel timed later in the same cell,
        bench/NOTES.md 2026-12-07)."""
        torch = self.torch
        for fn in fns.values():
            for _ in range(self.warmup):
                fn()
        events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                         for _ in range(self.runs)] for name in fns}
        for run in range(self.runs):
            for name, fn in fns.items():
                start, end = events[name][run]
                self.flush.zero_()
                if self.spin is not None:
                    self.spin(self.spin_cycles)
                start.record()
                fn()
                end.record()
        torch.cuda.synchronize()
        return {name: statistics.median(s.elapsed_time(e) for s, e in pairs) for name, pairs in events.items()}


def quantize_per_head(torch, x, num_heads_kv):
    """x (batch, seqlen, heads, head_dim) -> (float8_e4m3fn x8, fp32 descale (batch, num_heads_kv)): one scale
    per (batch, kv head) over its seqlen, heads of its group and head_dim, amax / 448, so that x8 * descale ~ x
    (FA3's per-head contract; the query heads of a group share their kv head's descale)."""
    batch, seqlen, heads, head_dim = x.shape
    grouped = x.float().view(batch, seqlen, num_heads_kv, heads // num_heads_kv, head_dim)
    descale = (grouped.abs().amax(dim=(1, 3, 4)) / E4M3_MAX).clamp_min(1e-12)  # (batch, num_heads_kv)
    x8 = (grouped / descale[:, None, :, None, None]).view(batch, seqlen, heads, head_dim).to(torch.float8_e4m3fn)
    return x8, descale.contiguous()


def make_calls(torch, fa3jit, fa3_op, q, k, v, causal, sdpa_layout, fp8, backends=BACKENDS, alt=None):
    """One zero-argument call per backend; fa3jit and FA3 return (batch, seqlen, heads, head_dim), SDPA
    (batch, heads, seqlen, head_dim). fp8: q, k, v are the bf16 inputs; fa3jit and FA3 get their e4m3 quantisation with per_head
    descales, cuDNN the bf16 tensors, FA2 nothing (it has no FP8)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    if sdpa_layout == "view":
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    else:
        qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))

    def sdpa_call(backend):
        def call():
            with sdpa_kernel(backend):
                return sdpa(qt, kt, vt, is_causal=causal)
        return call

    calls = {"cudnn": sdpa_call(SDPBackend.CUDNN_ATTENTION)}
    if fp8:
        num_heads_kv = k.shape[2]
        (q8, qd), (k8, kd), (v8, vd) = (quantize_per_head(torch, t, num_heads_kv) for t in (q, k, v))
        calls["fa3jit"] = lambda: fa3jit.flash_attn_func(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd,
                                                         v_descale=vd)
        vt8 = fa3jit.v_to_d_major(v8)
        vt_kernel = fa3jit.Kernel({"dtype": "e4m3", "head_dim": q.shape[3], "head_dim_v": v.shape[3],
                                   "causal": causal, "v_layout": "d_major"})
        calls["fa3jit_vt"] = lambda: fa3jit.flash_attn_func(q8, k8, vt8, causal=causal, q_descale=qd, k_descale=kd,
                                                            v_descale=vd, kernel=vt_kernel)
        grid_kernel = fa3jit.Kernel({"dtype": "e4m3", "head_dim": q.shape[3], "head_dim_v": v.shape[3],
                                     "causal": causal, "v_layout": "d_major", "persistent": False})
        calls["fa3jit_grid"] = lambda: fa3jit.flash_attn_func(q8, k8, vt8, causal=causal, q_descale=qd, k_descale=kd,
                                                              v_descale=vd, kernel=grid_kernel)
        persistent_kernel = fa3jit.Kernel({"dtype": "e4m3", "head_dim": q.shape[3], "head_dim_v": v.shape[3],
                                           "causal": causal, "v_layout": "d_major", "persistent": True})
        calls["fa3jit_persistent"] = lambda: fa3jit.flash_attn_func(q8, k8, vt8, causal=causal, q_descale=qd,
                                                                    k_descale=kd, v_descale=vd, kernel=persistent_kernel)
        if "fa3jit_alt" in backends:
            # d_major unless --alt names v_layout "seq_major" (then the partner is fa3jit, V in the tensor's layout).
            seq_major = alt_partner("e4m3", alt) == "fa3jit"
            alt_kernel = fa3jit.Kernel({"dtype": "e4m3", "head_dim": q.shape[3], "head_dim_v": v.shape[3],
                                        "causal": causal, "v_layout": "d_major", **(alt or {})})
            alt_v = v8 if seq_major else vt8
            calls["fa3jit_alt"] = lambda: fa3jit.flash_attn_func(q8, k8, alt_v, causal=causal, q_descale=qd,
                                                                 k_descale=kd, v_descale=vd, kernel=alt_kernel)
        if "fa3jit_pb" in backends:  # per-block descales from the pre-pass (no rotation), V written d_major
            pb_kernel = fa3jit.Kernel({"dtype": "e4m3", "head_dim": q.shape[3], "head_dim_v": v.shape[3],
                                       "causal": causal, "quant": "per_block", "v_layout": "d_major"})
            block_m, block_n = fa3jit.fp8_quant_blocks(q.shape[3], causal, pb_kernel)
            q8b, k8b, v8b, qdb, kdb, vdb = fa3jit.quantize_fp8(q, k, v, hadamard=False, block_m=block_m,
                                                               block_n=block_n, v_layout="d_major")
            calls["fa3jit_pb"] = lambda: fa3jit.flash_attn_func(q8b, k8b, v8b, causal=causal, q_descale=qdb,
                                                                k_descale=kdb, v_descale=vdb, kernel=pb_kernel)
        if fa3_op is not None:
            calls["fa3"] = lambda: fa3_op(q8, k8, v8, is_causal=causal, num_splits=1, q_descale=qd, k_descale=kd,
                                          v_descale=vd)[0]
    else:
        calls["fa3jit"] = lambda: fa3jit.flash_attn_func(q, k, v, causal=causal)
        dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}[q.dtype]
        # The partners run fa3jit's tile for this call (a short causal call takes the short-causal tile, which a
        # written-out spec does not), from the library's own plan of the call.
        from fa3jit import _capi
        code = _capi.DTYPE_FP16 if dtype == "fp16" else _capi.DTYPE_BF16
        plan = _capi.plan(_capi.ForwardParams(dtype=code, causal=1 if causal else 0, batch=q.shape[0],
                                              seqlen_q=q.shape[1], seqlen_k=k.shape[1], num_heads=q.shape[2],
                                              num_heads_kv=k.shape[2], head_dim=q.shape[3], head_dim_v=v.shape[3]))
        tile = {"tile": {"block_m": plan.block_m, "block_n": plan.block_n}, "consumer_warpgroups": plan.block_m // 64}
        grid_kernel = fa3jit.Kernel({"dtype": dtype, "head_dim": q.shape[3], "head_dim_v": v.shape[3],
                                     "causal": causal, "persistent": False, **tile})
        calls["fa3jit_grid"] = lambda: fa3jit.flash_attn_func(q, k, v, causal=causal, kernel=grid_kernel)
        persistent_kernel = fa3jit.Kernel({"dtype": dtype, "head_dim": q.shape[3], "head_dim_v": v.shape[3],
                                           "causal": causal, "persistent": True, **tile})
        calls["fa3jit_persistent"] = lambda: fa3jit.flash_attn_func(q, k, v, causal=causal, kernel=persistent_kernel)
        if "fa3jit_alt" in backends:
            alt_kernel = fa3jit.Kernel({"dtype": dtype, "head_dim": q.shape[3], "head_dim_v": v.shape[3],
                                        "causal": causal, **tile, **(alt or {})})
            calls["fa3jit_alt"] = lambda: fa3jit.flash_attn_func(q, k, v, causal=causal, kernel=alt_kernel)
        calls["fa2"] = sdpa_call(SDPBackend.FLASH_ATTENTION)
        if fa3_op is not None:
            calls["fa3"] = lambda: fa3_op(q, k, v, is_causal=causal, num_splits=1)[0]
    return calls


def bench_case(torch, fa3jit, fa3, timer, dtype_name, dims, causal, seqlen, args):
    fp8 = dtype_name == "e4m3"
    head_dim, head_dim_v = dims
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "e4m3": torch.bfloat16}[dtype_name]
    batch, heads = TOKENS // seqlen, HIDDEN // head_dim
    generator = torch.Generator(device="cuda").manual_seed(0)
    q, k = (torch.randn(batch, seqlen, heads, head_dim, dtype=dtype, device="cuda", generator=generator)
            for _ in range(2))
    v = torch.randn(batch, seqlen, heads, head_dim_v, dtype=dtype, device="cuda", generator=generator)
    # FA3's benchmark: 2 * b * h * sq * sk * (head_dim + head_dim_v), halved for causal (4 * ... * d when equal).
    flops = 2 * batch * heads * seqlen * seqlen * (head_dim + head_dim_v) / (2 if causal else 1)
    fa3_op, fa3_reason = fa3
    calls = make_calls(torch, fa3jit, fa3_op, q, k, v, causal, args.sdpa_layout, fp8, args.backends, args.alt)
    row = {"dtype": dtype_name, "head_dim": head_dim, "head_dim_v": head_dim_v, "causal": causal, "seqlen": seqlen,
           "batch": batch, "heads": heads, "flops": flops}
    outputs, timed = {}, {}
    for name in args.backends:
        if name == "fa3" and fa3_op is None:
            row[name] = {"error": f"FA3 not available: {fa3_reason}"}
            continue
        if name not in calls:  # FA2 on FP8: not a peer of this dtype
            continue
        try:
            out = calls[name]()
            outputs[name] = out.transpose(1, 2) if name in ("cudnn", "fa2") else out
            timed[name] = calls[name]
        except Exception as error:  # a backend that cannot run this case is reported, not fatal
            row[name] = {"error": f"{type(error).__name__}: {error}"}
    # Every backend timed in the same rounds (Timer.medians_ms), so the order of the backends favours none.
    for name, ms in timer.medians_ms(timed).items():
        row[name] = {"ms": ms, "tflops": flops / (ms * 1e-3) / 1e12}
    # Guard against timing a wrong kernel: fa3jit's output against cuDNN's (or FA2's; FP8 against the bf16
    # cuDNN output on the unquantised inputs, so the difference includes the quantisation error) and FA3's.
    grid_partner = "fa3jit_vt" if fp8 else "fa3jit"
    if grid_partner in outputs and "fa3jit_grid" in outputs:  # the same tiles, each in the same order: identical
        row["max_abs_diff_fa3jit_grid"] = (outputs["fa3jit_grid"].float() - outputs[grid_partner].float()).abs().max().item()
    if "fa3jit_persistent" in outputs and "fa3jit_grid" in outputs:
        row["max_abs_diff_fa3jit_persistent_vs_grid"] = \
            (outputs["fa3jit_persistent"].float() - outputs["fa3jit_grid"].float()).abs().max().item()
    alt_of = alt_partner(dtype_name, args.alt)
    if alt_of in outputs and "fa3jit_alt" in outputs:
        row["max_abs_diff_fa3jit_alt"] = (outputs["fa3jit_alt"].float() - outputs[alt_of].float()).abs().max().item()
    if "fa3jit" in outputs and "fa3jit_vt" in outputs:  # the same sums in the same order: identical
        row["max_abs_diff_fa3jit_vt_vs_fa3jit"] = (outputs["fa3jit_vt"].float() - outputs["fa3jit"].float()).abs().max().item()
    if "fa3jit" in outputs:
        for peer in ("cudnn", "fa2", "fa3"):
            if peer in outputs:
                row[f"max_abs_diff_fa3jit_vs_{peer}"] = \
                    (outputs["fa3jit"].float() - outputs[peer].float()).abs().max().item()
    return row


def tflops(row, name):
    entry = row.get(name) or {}
    return entry.get("tflops")


def cell(row, name):
    entry = row.get(name)
    if entry is None:
        return "-"
    return f"{entry['tflops']:.1f}" if "tflops" in entry else "n/a"


def ratio(row, a, b):
    x, y = tflops(row, a), tflops(row, b)
    return x / y if x is not None and y is not None else None


def geomean_summary(rows, a, b):
    """'fa3jit / FA3 = 0.901 (faster in 3 of 36)' over the rows where both ran, or None."""
    ratios = [r for r in (ratio(row, a, b) for row in rows) if r is not None]
    if not ratios:
        return None
    mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    faster = sum(1 for r in ratios if r > 1.0)
    return {"ratio": f"{NAMES[a]} / {NAMES[b]}", "geomean": mean, "faster": faster, "cells": len(ratios)}


def column_label(backend, dtype_name):
    if dtype_name != "e4m3":
        return NAMES[backend]
    return f"{NAMES[backend]} {'bf16' if backend in ('cudnn', 'fa2') else 'fp8'}"


def alt_partner(dtype_name, alt):
    """The backend fa3jit_alt is the A/B partner of: the table's kernel it lays --alt over."""
    if dtype_name != "e4m3":
        return "fa3jit"
    return "fa3jit" if (alt or {}).get("v_layout") == "seq_major" else "fa3jit_vt"


def markdown_table(rows, backends, alt=None):
    """One markdown table for rows of one dtype, with the ratio columns fa3jit / FA3 and fa3jit / cuDNN and
    their geometric means below."""
    dtype_name = rows[0]["dtype"]
    shown = [b for b in backends if any(b in row for row in rows)]
    pairs = (("fa3jit", "fa3"), ("fa3jit", "cudnn"), ("fa3jit_vt", "fa3"), ("fa3jit_vt", "fa3jit"),
             ("fa3jit", "fa3jit_grid") if dtype_name != "e4m3" else ("fa3jit_vt", "fa3jit_grid"),
             ("fa3jit_persistent", "fa3jit_grid"), ("fa3jit_persistent", "fa3"), ("fa3jit_pb", "fa3"),
             ("fa3jit_pb", "fa3jit_vt"), ("fa3jit_alt", alt_partner(dtype_name, alt)),
             ("fa3jit_alt", "fa3"))
    ratios = [(a, b) for a, b in pairs if a in shown and b in shown]
    header = (["dtype", "head_dim", "causal", "seqlen", "batch", "heads"] +
              [column_label(b, dtype_name) for b in shown] + [f"{NAMES[a]} / {NAMES[b]}" for a, b in ratios])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row["dtype"], dims_label(row["head_dim"], row.get("head_dim_v", row["head_dim"])), str(row["causal"]),
                 str(row["seqlen"]), str(row["batch"]),
                 str(row["heads"])] + [cell(row, b) for b in shown]
        for a, b in ratios:
            r = ratio(row, a, b)
            cells.append(f"{r:.2f}" if r is not None else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    summaries = [s for s in (geomean_summary(rows, a, b) for a, b in ratios) if s is not None]
    if summaries:
        lines.append("")
        lines.append(f"Geometric means ({dtype_name}): " + "; ".join(
            f"{s['ratio']} = {s['geomean']:.3f} (faster in {s['faster']} of {s['cells']})" for s in summaries))
    return "\n".join(lines)


def save_chart(rows, backends, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG chart (pip install matplotlib)")
        return None
    def dims(r):
        return dims_label(r["head_dim"], r.get("head_dim_v", r["head_dim"]))

    groups = sorted({(r["dtype"], r["causal"], dims(r)) for r in rows})
    columns = sorted({g[2] for g in groups})
    panel_rows = sorted({(g[0], g[1]) for g in groups})
    figure, axes = plt.subplots(len(panel_rows), len(columns), squeeze=False,
                                figsize=(5.5 * len(columns), 3.2 * len(panel_rows)))
    width = 0.8 / len(backends)
    for i, (dtype, causal) in enumerate(panel_rows):
        for j, head_dim in enumerate(columns):
            axis = axes[i][j]
            cases = [r for r in rows if (r["dtype"], r["causal"], dims(r)) == (dtype, causal, head_dim)]
            for b, backend in enumerate(backends):
                values = [tflops(r, backend) or 0.0 for r in cases]
                axis.bar([x + b * width for x in range(len(cases))], values, width,
                         label=column_label(backend, dtype))
            axis.set_xticks([x + width * (len(backends) - 1) / 2 for x in range(len(cases))])
            axis.set_xticklabels([str(r["seqlen"]) for r in cases])
            axis.set_title(f"{dtype} d{head_dim} {'causal' if causal else 'non-causal'}")
            axis.set_xlabel("seqlen (batch x seqlen = 16k)")
            axis.set_ylabel("TFLOP/s")
            axis.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return path


def environment(torch, fa3jit, fa3, args):
    properties = torch.cuda.get_device_properties(0)
    fa3_op, fa3_where = fa3
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "device": properties.name,
        "sm_count": properties.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "fa3jit": fa3jit.version(),
        "fa3jit_library": fa3jit.library_path(),
        "fa3": fa3_where if fa3_op is not None else None,
        "fa3_unavailable": None if fa3_op is not None else fa3_where,
        "python": platform.python_version(),
        "runs": args.runs,
        "warmup": args.warmup,
        "sdpa_layout": args.sdpa_layout,
        "alt": args.alt if "fa3jit_alt" in args.backends else None,
        "fp8": "e4m3 q, k, v with per_head fp32 descales (batch, num_heads_kv) = amax / 448, bf16 out; "
               "cuDNN in bf16 on the unquantised inputs",
        "convention": "16k tokens, hidden 2048, FLOPs 4*b*h*s*s*d (halved causal), median, CUDA events, L2 flushed",
    }


def unique_path(directory, stem, suffix):
    path = directory / f"{stem}{suffix}"
    n = 2
    while path.exists():
        path = directory / f"{stem}-{n}{suffix}"
        n += 1
    return path


def main():
    args = parse_args()
    import torch
    if not torch.cuda.is_available():
        sys.exit("bench_fwd.py needs a CUDA GPU (Hopper for fa3jit)")
    if "e4m3" in args.dtype and not hasattr(torch, "float8_e4m3fn"):
        sys.exit("--dtype e4m3 needs a torch with torch.float8_e4m3fn")
    fa3jit = import_fa3jit()
    fa3 = load_fa3(torch, args.fa3_site) if "fa3" in args.backends else (None, "not in --backends")
    print(f"FA3: torch.ops.fa3_fwd.fwd from {fa3[1]}" if fa3[0] is not None else f"FA3 not available: {fa3[1]}",
          file=sys.stderr, flush=True)
    timer = Timer(torch, args.runs, args.warmup)
    causal_values = {"both": [False, True], "true": [True], "false": [False]}[args.causal]
    rows = []
    for dtype_name in args.dtype:
        for dims in args.head_dim:
            for causal in causal_values:
                for seqlen in args.seqlens:
                    row = bench_case(torch, fa3jit, fa3, timer, dtype_name, dims, causal, seqlen, args)
                    rows.append(row)
                    print(" ".join(f"{b}={cell(row, b)}" for b in args.backends),
                          f"<- {dtype_name} d{dims_label(*dims)} causal={causal} s={seqlen}", file=sys.stderr,
                          flush=True)
    env = environment(torch, fa3jit, fa3, args)
    print(f"\n{env['device']}, torch {env['torch']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, "
          f"fa3jit {env['fa3jit']}, FA3 {env['fa3'] or 'n/a'}; TFLOP/s, median of {args.runs}\n")
    summaries = {}
    for dtype_name in args.dtype:
        dtype_rows = [row for row in rows if row["dtype"] == dtype_name]
        print(markdown_table(dtype_rows, args.backends, args.alt) + "\n")
        summaries[dtype_name] = [s for s in (geomean_summary(dtype_rows, "fa3jit", b) for b in ("fa3", "cudnn"))
                                 if s is not None]
    if env["fa3_unavailable"]:
        print(f"FA3 n/a: {env['fa3_unavailable']}")
    for row in rows:
        for backend in args.backends:
            error = (row.get(backend) or {}).get("error")
            if error and not (backend == "fa3" and env["fa3_unavailable"]):  # that one is printed once above
                print(f"{backend} {row['dtype']} d{row['head_dim']} causal={row['causal']} s={row['seqlen']}: {error}")
    document = json.dumps({"environment": env, "results": rows, "geomeans": summaries}, indent=1) + "\n"
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(document)
        print(f"\nwrote {args.json}")
    if args.no_save:
        return
    args.out_dir.mkdir(parents=True, exist_ok=True)
    json_path = unique_path(args.out_dir, datetime.date.today().isoformat(), ".json")
    json_path.write_text(document)
    print(f"\nwrote {json_path}")
    chart = save_chart(rows, [b for b in args.backends if any(b in row for row in rows)],
                       json_path.with_suffix(".png"))
    if chart:
        print(f"wrote {chart}")


if __name__ == "__main__":
    main()

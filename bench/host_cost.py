#!/usr/bin/env python3
"""Host cost per attention call from Python: fa3jit beside FlashAttention-3 and cuDNN, one process, one GPU.

A tiny problem (bf16, batch 1, seqlen 128, 16 heads, head_dim 128, non-causal), so that the GPU finishes each
kernel sooner than Python can issue the next call and what is timed is the host's work per call. Each peer:
warm-up calls (the first fa3jit call compiles or loads its kernel), then --rounds rounds of --n calls in a
tight loop timed with time.perf_counter_ns. Every --sync-every calls (256, as bench/host_cost.cpp) the loop
stops and synchronises the device, so the launch queue never fills (a full queue would make the host wait for
the GPU); that synchronisation is EXCLUDED from the "host" time and INCLUDED in the "wall" time, for every
peer alike. "wall" above "host" by more than a little means the GPU, not the host, set the pace.
The cyclic garbage collector is off while timing (as in timeit), for every peer alike; the loop and the
lambda each call goes through cost the same for every peer and are printed as their own row.

Peers (each skipped with its reason where it cannot run):
  fa3jit flash_attn_func(q, k, v)                 out allocated by the call
  fa3jit flash_attn_func(q, k, v, out=o)          caller's out
  fa3jit flash_attn_func(..., out=o, kernel=K)    a pinned fa3jit.Kernel (no tile-table lookup)
  fa3jit C ABI via ctypes, params packed once     fa3jit_attention_forward alone: the library + ctypes floor
  fa3jit via torch.ops.fa3jit.flash_attn_func     the custom op that torch.compile records, called directly
                                                  (dispatcher + the op's Autograd kernel), and its out= op
  fa3jit flash_attn_func under torch.compile      torch.compile(fullgraph=True) of a function making the call:
                                                  Dynamo's guards, the compiled graph and the op
  FA3 torch.ops.fa3_fwd.fwd(q, k, v, ...)         FlashAttention-3's forward op (the `fa3-fwd` wheel), out
                                                  allocated, and with out= given
  FA3 fa3_fwd_interface.flash_attn_func           FA3's own Python wrapper (autograd Function + custom op)
  cuDNN F.scaled_dot_product_attention            on (b, h, s, d) contiguous tensors; the CUDNN_ATTENTION
                                                  backend is selected once, outside the timed loop
  torch.cuda._sleep(0)                            launch-only floor: the cheapest Python -> kernel launch
Serving calls (SERVING: a decode step of batch 8, 32/8 heads, d128, 256 cached keys per sequence), each row
with its own shapes, so compare them with each other and with the FA3 decode row, not with the rows above:
  fa3jit flash_attn_with_kvcache, paged           page_size 16, shuffled page table, cache_seqlens tensor,
                                                  num_splits=0 (the heuristic: one kernel at this size),
                                                  num_splits=2 (split + combine, the kept workspace) and
                                                  num_splits=1 with out= given
  fa3jit flash_attn_with_kvcache, contiguous      the dense cache, num_splits=0
  fa3jit flash_attn_varlen_func                   packed prefill of the batch (cu_seqlens, max_seqlen_* given,
                                                  causal, out= given)
  FA3 fa3_fwd_interface.flash_attn_with_kvcache   contiguous cache (the wheel has no paged KV), its defaults
The C++ side (the same calls made from C++) is bench/host_cost.cpp's job.

    python3 bench/host_cost.py --json host_cost_py.json [--fa3-site /tmp/site] [--n 20000] [--rounds 3]
FA3: `import fa3_fwd_interface` must work; --fa3-site (default: $FA3_SITE, else /tmp/site when it exists) is
put on sys.path first. Prints one line per peer as it goes, then a markdown table; --json writes the numbers.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import os
import pathlib
import platform
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROBLEM = {"dtype": "bf16", "batch": 1, "seqlen_q": 128, "seqlen_k": 128, "num_heads": 16, "num_heads_kv": 16,
           "head_dim": 128, "causal": False}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20000, help="timed calls per round and peer (default 20000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per peer, interleaved; the median is shown")
    parser.add_argument("--warmup", type=int, default=200, help="untimed calls per peer before its first round")
    parser.add_argument("--sync-every", type=int, default=256,
                        help="synchronise the device every this many calls (default 256; excluded from host time)")
    parser.add_argument("--fa3-site", default=os.environ.get("FA3_SITE") or "/tmp/site",
                        help="directory holding fa3_fwd_interface.py and fa3_fwd/ (the fa3-fwd wheel)")
    parser.add_argument("--json", type=pathlib.Path, help="write the numbers here as JSON")
    parser.add_argument("--no-torch-ops", action="store_true",
                        help="leave out the torch.ops.fa3jit and torch.compile rows (and Dynamo with them)")
    args = parser.parse_args()
    if args.n < 1 or args.rounds < 1 or args.sync_every < 1 or args.warmup < 1:
        parser.error("--n, --rounds, --sync-every and --warmup must be >= 1")
    return args


def import_fa3jit():
    try:
        import fa3jit
    except ImportError:
        sys.path.insert(0, str(ROOT / "tools" / "python"))
        import fa3jit
    return fa3jit


class Peer:
    """One way of making the call: a zero-argument callable, or the reason it cannot run."""

    def __init__(self, key: str, label: str, call: Optional[Callable[[], Any]] = None, skipped: str = ""):
        self.key, self.label, self.call, self.skipped = key, label, call, skipped
        self.host_us: List[float] = []  # per round: host time per call, synchronisation excluded
        self.wall_us: List[float] = []  # per round: wall time per call, synchronisation included
        self.error = ""


def time_round(call: Callable[[], Any], n: int, sync_every: int, synchronize: Callable[[], None]):
    """(host µs per call, wall µs per call) over n calls; the device is synchronised every sync_every calls and
    at the end, outside the host time."""
    perf_counter_ns = time.perf_counter_ns
    synchronize()
    host_ns = 0
    wall_start = perf_counter_ns()
    done = 0
    while done < n:
        chunk = min(sync_every, n - done)
        start = perf_counter_ns()
        for _ in range(chunk):
            call()
        host_ns += perf_counter_ns() - start
        synchronize()
        done += chunk
    wall_ns = perf_counter_ns() - wall_start
    return host_ns / n / 1e3, wall_ns / n / 1e3


def fa3jit_peers(torch, fa3jit, args, q, k, v, out) -> List[Peer]:
    peers = [
        Peer("fa3jit", "fa3jit flash_attn_func(q, k, v)", lambda: fa3jit.flash_attn_func(q, k, v)),
        Peer("fa3jit_out", "fa3jit flash_attn_func(q, k, v, out=o)", lambda: fa3jit.flash_attn_func(q, k, v, out=out)),
    ]
    spec = {"dtype": PROBLEM["dtype"], "head_dim": PROBLEM["head_dim"], "causal": PROBLEM["causal"]}
    try:
        kernel = fa3jit.Kernel(spec)
        peers.append(Peer("fa3jit_kernel_out", "fa3jit flash_attn_func(..., out=o, kernel=K)",
                          lambda: fa3jit.flash_attn_func(q, k, v, out=out, kernel=kernel)))
        print(f"fa3jit kernel handle: {kernel.summary} ({kernel.name})", flush=True)
    except Exception as error:  # reported in the table, not fatal
        peers.append(Peer("fa3jit_kernel_out", "fa3jit flash_attn_func(..., out=o, kernel=K)",
                          skipped=f"fa3jit.Kernel({json.dumps(spec)}) failed: {error}"))

    # The library alone: params packed once, the ctypes call per iteration (what flash_attn_func adds on top
    # of this is its Python work: checks, allocation, packing, stream lookup).
    from fa3jit import _capi

    params = _capi.ForwardParams(
        dtype=_capi.DTYPE_BF16, causal=int(PROBLEM["causal"]), batch=q.shape[0], seqlen_q=q.shape[1],
        seqlen_k=k.shape[1], num_heads=q.shape[2], num_heads_kv=k.shape[2], head_dim=q.shape[3],
        head_dim_v=v.shape[3],
        q=_capi.Tensor(q.data_ptr(), *q.stride()[:3]), k=_capi.Tensor(k.data_ptr(), *k.stride()[:3]),
        v=_capi.Tensor(v.data_ptr(), *v.stride()[:3]), out=_capi.Tensor(out.data_ptr(), *out.stride()[:3]))
    forward = _capi.library().fa3jit_attention_forward
    runtime_handle = _capi.runtime().handle
    address = ctypes.addressof(params)
    stream = torch.cuda.current_stream().cuda_stream

    def c_abi_call():
        status = forward(runtime_handle, None, address, stream)
        if status:
            raise _capi.error_for(status, "fa3jit_attention_forward")

    c_abi_call.params = params  # the call passes the struct's address: keep the struct alive with the call
    peers.append(Peer("fa3jit_c_abi", "fa3jit C ABI via ctypes, params packed once", c_abi_call))

    if args.no_torch_ops:  # keep Dynamo out of the process: it is not imported by the plain path
        return peers
    # The route torch.compile takes (fa3jit/_torch_ops.py): the ops themselves, and a compiled caller.
    labels = {"fa3jit_op": "fa3jit via torch.ops.fa3jit.flash_attn_func(q, k, v)",
              "fa3jit_op_out": "fa3jit via torch.ops.fa3jit.flash_attn_func_out(q, k, v, o)",
              "fa3jit_compiled": "fa3jit flash_attn_func under torch.compile(fullgraph=True)"}
    from fa3jit import _torch_ops

    if not _torch_ops.REGISTERED:
        return peers + [Peer(key, label, skipped=f"torch.ops.fa3jit not registered: {_torch_ops.UNAVAILABLE_REASON}")
                        for key, label in labels.items()]
    op, op_out = torch.ops.fa3jit.flash_attn_func.default, torch.ops.fa3jit.flash_attn_func_out.default
    compiled = torch.compile(lambda q, k, v: fa3jit.flash_attn_func(q, k, v), fullgraph=True)  # compiles in warm-up
    peers += [Peer("fa3jit_op", labels["fa3jit_op"], lambda: op(q, k, v)),
              Peer("fa3jit_op_out", labels["fa3jit_op_out"], lambda: op_out(q, k, v, out)),
              Peer("fa3jit_compiled", labels["fa3jit_compiled"], lambda: compiled(q, k, v))]
    return peers


def fa3_peers(torch, args, q, k, v, out) -> List[Peer]:
    labels = {"fa3_op": "FA3 torch.ops.fa3_fwd.fwd(q, k, v, ...)",
              "fa3_op_out": "FA3 torch.ops.fa3_fwd.fwd(..., out=o)",
              "fa3_func": "FA3 fa3_fwd_interface.flash_attn_func(q, k, v)"}

    def unavailable(reason: str) -> List[Peer]:
        print(f"FA3 not available: {reason}", flush=True)
        return [Peer(key, label, skipped=f"FA3 not available: {reason}") for key, label in labels.items()]

    if args.fa3_site and os.path.isdir(args.fa3_site) and args.fa3_site not in sys.path:
        sys.path.insert(0, args.fa3_site)
    try:
        import fa3_fwd_interface
    except Exception as error:
        return unavailable(f"import fa3_fwd_interface failed ({type(error).__name__}: {error}); "
                           f"install the fa3-fwd wheel with pip --target {args.fa3_site} or pass --fa3-site")
    try:
        op = torch.ops.fa3_fwd.fwd
        overloads = op.overloads()
        schema = getattr(op, "default" if "default" in overloads else overloads[0])._schema
    except Exception as error:
        return unavailable(f"torch.ops.fa3_fwd.fwd is not registered ({type(error).__name__}: {error})")
    names = {argument.name for argument in schema.arguments}
    # fa3-fwd 0.0.3: fwd(q, k, v, k_new, v_new, q_v, out, ..., softmax_scale, is_causal, ..., num_splits, ...).
    # Called with keywords, num_splits=1 as fa3_fwd_interface.flash_attn_func passes it (no split-KV).
    if not {"q", "k", "v", "out", "is_causal", "num_splits"} <= names:
        return unavailable(f"unexpected signature of torch.ops.fa3_fwd.fwd: {schema}")
    causal = PROBLEM["causal"]
    peers = [Peer("fa3_op", labels["fa3_op"], lambda: op(q, k, v, is_causal=causal, num_splits=1)),
             Peer("fa3_op_out", labels["fa3_op_out"], lambda: op(q, k, v, out=out, is_causal=causal, num_splits=1)),
             Peer("fa3_func", labels["fa3_func"], lambda: fa3_fwd_interface.flash_attn_func(q, k, v, causal=causal))]
    try:
        result = peers[0].call()
        if not (isinstance(result, (tuple, list)) and tuple(result[0].shape) == tuple(q.shape)):
            return unavailable(f"torch.ops.fa3_fwd.fwd returned {type(result).__name__}, not (out, lse, ...)")
    except Exception as error:
        return unavailable(f"a trial call of torch.ops.fa3_fwd.fwd failed ({type(error).__name__}: {error}); "
                           f"signature: {schema}")
    where = getattr(fa3_fwd_interface, "__file__", "?")
    print(f"FA3 available: torch.ops.fa3_fwd.fwd from {where}", flush=True)
    return peers


def other_peers(torch, q, k, v) -> List[Peer]:
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))  # (b, h, s, d), as SDPA takes them
    causal = PROBLEM["causal"]
    peers = [Peer("cudnn", "cuDNN F.scaled_dot_product_attention (b, h, s, d)",
                  lambda: sdpa(qt, kt, vt, is_causal=causal))]
    if hasattr(torch.cuda, "_sleep"):
        peers.append(Peer("launch_floor", "torch.cuda._sleep(0) (launch-only floor)", lambda: torch.cuda._sleep(0)))
    else:
        peers.append(Peer("launch_floor", "torch.cuda._sleep(0) (launch-only floor)",
                          skipped="this torch has no torch.cuda._sleep"))
    peers.append(Peer("loop", "empty lambda (the timing loop itself)", lambda: None))
    return peers


SERVING = {"batch": 8, "seqlen_k": 256, "num_heads": 32, "num_heads_kv": 8, "head_dim": 128, "page_size": 16}


def serving_peers(torch, fa3jit, args, device) -> List[Peer]:
    """The serving entry points on a decode step and a packed prefill (SERVING)."""
    b, sk, h, hk, d, ps = (SERVING[key] for key in ("batch", "seqlen_k", "num_heads", "num_heads_kv", "head_dim",
                                                      "page_size"))
    generator = torch.Generator(device=device).manual_seed(1)
    bf16 = torch.bfloat16
    q = torch.randn((b, 1, h, d), dtype=bf16, device=device, generator=generator)
    out = torch.empty_like(q)
    k = torch.randn((b, sk, hk, d), dtype=bf16, device=device, generator=generator)
    v = torch.randn((b, sk, hk, d), dtype=bf16, device=device, generator=generator)
    seqlens = torch.full((b,), sk, dtype=torch.int32, device=device)
    pages = b * sk // ps
    order = torch.randperm(pages, device=device, generator=generator)
    k_pages = torch.empty((pages, ps, hk, d), dtype=bf16, device=device)
    v_pages = torch.empty_like(k_pages)
    k_pages[order] = k.reshape(pages, ps, hk, d)
    v_pages[order] = v.reshape(pages, ps, hk, d)
    page_table = order.to(torch.int32).reshape(b, sk // ps).contiguous()
    q_packed = torch.randn((b * 64, h, d), dtype=bf16, device=device, generator=generator)
    out_packed = torch.empty_like(q_packed)
    kv_packed = torch.randn((b * sk, hk, d), dtype=bf16, device=device, generator=generator)
    cu_q = torch.arange(0, b * 64 + 1, 64, dtype=torch.int32, device=device)
    cu_k = torch.arange(0, b * sk + 1, sk, dtype=torch.int32, device=device)
    kvcache = fa3jit.flash_attn_with_kvcache
    peers = [
        Peer("serve_paged", "fa3jit flash_attn_with_kvcache, paged, num_splits=0",
             lambda: kvcache(q, k_pages, v_pages, seqlens, page_table=page_table, causal=True)),
        Peer("serve_paged_split2", "fa3jit flash_attn_with_kvcache, paged, num_splits=2",
             lambda: kvcache(q, k_pages, v_pages, seqlens, page_table=page_table, causal=True, num_splits=2)),
        Peer("serve_paged_nosplit_out", "fa3jit flash_attn_with_kvcache, paged, num_splits=1, out=o",
             lambda: kvcache(q, k_pages, v_pages, seqlens, page_table=page_table, causal=True, num_splits=1,
                             out=out)),
        Peer("serve_dense", "fa3jit flash_attn_with_kvcache, contiguous, num_splits=0",
             lambda: kvcache(q, k, v, seqlens, causal=True)),
        Peer("serve_varlen_out", "fa3jit flash_attn_varlen_func, packed prefill, out=o",
             lambda: fa3jit.flash_attn_varlen_func(q_packed, kv_packed, kv_packed, cu_q, cu_k, 64, sk, causal=True,
                                                   num_splits=1, out=out_packed))]
    try:
        import fa3_fwd_interface
        function = fa3_fwd_interface.flash_attn_with_kvcache
        peers.append(Peer("fa3_kvcache", "FA3 fa3_fwd_interface.flash_attn_with_kvcache, contiguous",
                          lambda: function(q, k, v, cache_seqlens=seqlens, causal=True)))
    except Exception as error:
        peers.append(Peer("fa3_kvcache", "FA3 fa3_fwd_interface.flash_attn_with_kvcache, contiguous",
                          skipped=f"FA3 not available: {type(error).__name__}: {error}"))
    return peers


def check_outputs(torch, fa3jit, peers: Dict[str, Peer], q, k, v, out) -> Dict[str, float]:
    """max |fa3jit - peer| over the output, so that a timed call is known to compute attention."""
    reference = fa3jit.flash_attn_func(q, k, v).float()
    diffs = {}
    candidates = {"fa3jit_out": lambda: (fa3jit.flash_attn_func(q, k, v, out=out), out)[1],
                  "fa3jit_op": lambda: peers["fa3jit_op"].call()[0],
                  "fa3jit_compiled": lambda: peers["fa3jit_compiled"].call(),
                  "cudnn": lambda: peers["cudnn"].call().transpose(1, 2),
                  "fa3_op": lambda: peers["fa3_op"].call()[0]}
    for key, produce in candidates.items():
        if key in peers and peers[key].call is not None and not peers[key].error:
            try:
                diffs[key] = (produce().float() - reference).abs().max().item()
            except Exception as error:
                print(f"output check of {key} failed: {type(error).__name__}: {error}", flush=True)
    return diffs


def main() -> int:
    args = parse_args()
    import torch

    if not torch.cuda.is_available():
        print("host_cost.py needs a CUDA GPU; torch sees none", flush=True)
        return 2
    fa3jit = import_fa3jit()
    device = torch.device("cuda", torch.cuda.current_device())
    generator = torch.Generator(device=device).manual_seed(0)
    shape_q = (PROBLEM["batch"], PROBLEM["seqlen_q"], PROBLEM["num_heads"], PROBLEM["head_dim"])
    shape_k = (PROBLEM["batch"], PROBLEM["seqlen_k"], PROBLEM["num_heads_kv"], PROBLEM["head_dim"])
    q = torch.randn(shape_q, dtype=torch.bfloat16, device=device, generator=generator)
    k = torch.randn(shape_k, dtype=torch.bfloat16, device=device, generator=generator)
    v = torch.randn(shape_k, dtype=torch.bfloat16, device=device, generator=generator)
    out = torch.empty_like(q)

    gpu = torch.cuda.get_device_name(device)
    print(f"host cost per call: {gpu}, torch {torch.__version__}, Python {platform.python_version()}, "
          f"fa3jit {fa3jit.version()} ({fa3jit.library_path()})", flush=True)
    print(f"problem: {json.dumps(PROBLEM)}; {args.rounds} rounds x {args.n} calls per peer, device synchronised "
          f"every {args.sync_every} calls (excluded from host time, included in wall time)", flush=True)

    print("fa3jit: first call (compiles the kernel or loads it from the cache) ...", flush=True)
    start = time.perf_counter()
    try:
        fa3jit.flash_attn_func(q, k, v)
        torch.cuda.synchronize()
    except Exception as error:
        print(f"fa3jit: the first call failed, nothing to measure: {type(error).__name__}: {error}", flush=True)
        return 1
    print(f"fa3jit: first call took {time.perf_counter() - start:.2f} s", flush=True)

    peer_list = fa3jit_peers(torch, fa3jit, args, q, k, v, out) + fa3_peers(torch, args, q, k, v, out) + \
        other_peers(torch, q, k, v) + serving_peers(torch, fa3jit, args, device)
    peers = {peer.key: peer for peer in peer_list}

    from torch.nn.attention import SDPBackend, sdpa_kernel

    synchronize = torch.cuda.synchronize
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for peer in peer_list:
            if peer.call is None:
                continue
            try:
                for _ in range(args.warmup):
                    peer.call()
                synchronize()
            except Exception as error:  # a peer that cannot run is reported, not fatal
                peer.error = f"{type(error).__name__}: {error}"
                print(f"{peer.label}: failed in warm-up: {peer.error}", flush=True)
        diffs = check_outputs(torch, fa3jit, peers, q, k, v, out)
        for key, diff in diffs.items():
            print(f"output check: max |fa3jit - {key}| = {diff:.3g}", flush=True)

        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for round_index in range(args.rounds):  # interleaved: a drift of the machine hits every peer alike
                for peer in peer_list:
                    if peer.call is None or peer.error:
                        continue
                    try:
                        host, wall = time_round(peer.call, args.n, args.sync_every, synchronize)
                    except Exception as error:
                        peer.error = f"{type(error).__name__}: {error}"
                        print(f"{peer.label}: failed: {peer.error}", flush=True)
                        continue
                    peer.host_us.append(host)
                    peer.wall_us.append(wall)
                    print(f"round {round_index + 1}/{args.rounds}  {peer.label:<52} host {host:7.2f} us/call  "
                          f"wall {wall:7.2f} us/call", flush=True)
        finally:
            if gc_was_enabled:
                gc.enable()

    rows = []
    baseline = peers["fa3jit"].host_us
    baseline_us = statistics.median(baseline) if baseline else None
    print()
    print("| call | host us/call (sync excluded) | wall us/call (sync included) | min host us/call "
          "| vs fa3jit (out=None) |")
    print("|---|---|---|---|---|")
    for peer in peer_list:
        row: Dict[str, Any] = {"key": peer.key, "label": peer.label}
        if peer.host_us:
            host, wall = statistics.median(peer.host_us), statistics.median(peer.wall_us)
            ratio = f"{host / baseline_us:.2f}x" if baseline_us else "-"
            print(f"| {peer.label} | {host:.2f} | {wall:.2f} | {min(peer.host_us):.2f} | {ratio} |")
            row.update(host_us_per_call=host, wall_us_per_call=wall, host_us_rounds=peer.host_us,
                       wall_us_rounds=peer.wall_us)
        else:
            reason = peer.skipped or peer.error or "not run"
            cell = " ".join(reason.split())  # one table row, however many lines the message has
            print(f"| {peer.label} | - | - | - | {cell[:240] + ('...' if len(cell) > 240 else '')} |")
            row["skipped"] = reason
        rows.append(row)
    print()
    print("host = time.perf_counter_ns around the calls only; wall = the same plus a torch.cuda.synchronize() every "
          f"{args.sync_every} calls; each the median of {args.rounds} rounds of {args.n} calls.")

    if args.json:
        document = {
            "benchmark": "host_cost_py",
            "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "gpu": gpu,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "fa3jit": fa3jit.version(),
            "fa3jit_library": fa3jit.library_path(),
            "problem": PROBLEM,
            "n": args.n,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "sync_every": args.sync_every,
            "sync_in_host_time": False,
            "gc_disabled_while_timing": True,
            "output_max_abs_diff_vs_fa3jit": {key: None if math.isnan(diff) else diff for key, diff in diffs.items()},
            "rows": rows,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

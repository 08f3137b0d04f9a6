#!/usr/bin/env python3
"""Attention forward throughput: fa3jit beside torch SDPA's cuDNN and FlashAttention-2 backends, one process.

Convention (FlashAttention-3 paper and benchmark_attn.py; docs/kernel-design.md §8): 16k tokens in all
(batch * seqlen = 16384, seqlen 512 ... 16384), hidden 2048 (num_heads = num_heads_kv = 2048 / head_dim),
seqlen_q = seqlen_k, random normal inputs, FLOPs = 4 * batch * heads * seqlen_q * seqlen_k * head_dim, halved
for causal. Each backend: warm-up calls (the first fa3jit call compiles or loads the kernel), then the median
of --runs calls, each timed alone with CUDA events after an L2 flush (which also keeps the GPU busy while
Python queues the call, so launch overhead is not timed).

fa3jit takes (batch, seqlen, heads, head_dim) tensors; SDPA takes (batch, heads, seqlen, head_dim): it gets
transposed views of the same tensors (--sdpa-layout view, the serving layout; no copy is timed), or copies
made once before timing (--sdpa-layout contiguous, as in the cuDNN/FA3 anchor runs).

    python bench/bench_fwd.py                  # full sweep: fp16, bf16 x head_dim 64/128/256 x causal
    python bench/bench_fwd.py --quick          # bf16, head_dim 128, seqlen 2048 and 8192
Writes bench/results/<date>.json and a PNG bar chart beside it (needs matplotlib; skipped with a message).
"""

import argparse
import datetime
import json
import pathlib
import platform
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOKENS = 16384
HIDDEN = 2048
BACKENDS = ("fa3jit", "cudnn", "fa2")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", nargs="+", choices=["fp16", "bf16"], default=["fp16", "bf16"])
    parser.add_argument("--head-dim", nargs="+", type=int, choices=[64, 128, 256], default=[64, 128, 256])
    parser.add_argument("--causal", choices=["both", "true", "false"], default="both")
    parser.add_argument("--seqlens", nargs="+", type=int, default=[512, 1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--quick", action="store_true", help="bf16, head_dim 128, seqlen 2048 and 8192")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per backend (median; at least 30)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--sdpa-layout", choices=["view", "contiguous"], default="view")
    parser.add_argument("--out-dir", type=pathlib.Path, default=ROOT / "bench" / "results")
    parser.add_argument("--no-save", action="store_true", help="print the table only")
    args = parser.parse_args()
    if args.quick:
        args.dtype, args.head_dim, args.seqlens = ["bf16"], [128], [2048, 8192]
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


class Timer:
    """Median of single-call CUDA-event timings, each after an L2 flush."""

    def __init__(self, torch, runs, warmup):
        self.torch, self.runs, self.warmup = torch, runs, warmup
        # Larger than the H200's L2 (50 MB), so every call starts from HBM as in serving.
        self.flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def median_ms(self, fn):
        torch = self.torch
        for _ in range(self.warmup):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.runs)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.runs)]
        for start, end in zip(starts, ends):
            self.flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def make_calls(torch, fa3jit, q, k, v, causal, sdpa_layout):
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

    return {
        "fa3jit": lambda: fa3jit.flash_attn_func(q, k, v, causal=causal),
        "cudnn": sdpa_call(SDPBackend.CUDNN_ATTENTION),
        "fa2": sdpa_call(SDPBackend.FLASH_ATTENTION),
    }


def bench_case(torch, fa3jit, timer, dtype_name, head_dim, causal, seqlen, args):
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    batch, heads = TOKENS // seqlen, HIDDEN // head_dim
    generator = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(batch, seqlen, heads, head_dim, dtype=dtype, device="cuda", generator=generator)
               for _ in range(3))
    flops = 4 * batch * heads * seqlen * seqlen * head_dim / (2 if causal else 1)
    calls = make_calls(torch, fa3jit, q, k, v, causal, args.sdpa_layout)
    row = {"dtype": dtype_name, "head_dim": head_dim, "causal": causal, "seqlen": seqlen, "batch": batch,
           "heads": heads, "flops": flops}
    outputs = {}
    for name in args.backends:
        try:
            out = calls[name]()
            outputs[name] = out.transpose(1, 2) if name != "fa3jit" else out
            ms = timer.median_ms(calls[name])
            row[name] = {"ms": ms, "tflops": flops / (ms * 1e-3) / 1e12}
        except Exception as error:  # a backend that cannot run this case is reported, not fatal
            row[name] = {"error": f"{type(error).__name__}: {error}"}
    # Guard against timing a wrong kernel: fa3jit's output against cuDNN's (or FA2's).
    baseline = outputs.get("cudnn", outputs.get("fa2"))
    if "fa3jit" in outputs and baseline is not None:
        row["max_abs_diff_fa3jit_vs_" + ("cudnn" if "cudnn" in outputs else "fa2")] = \
            (outputs["fa3jit"].float() - baseline.float()).abs().max().item()
    return row


def cell(row, name):
    entry = row.get(name)
    if entry is None:
        return "-"
    return f"{entry['tflops']:.1f}" if "tflops" in entry else "n/a"


def markdown_table(rows, backends):
    names = {"fa3jit": "fa3jit", "cudnn": "cuDNN", "fa2": "FA2"}
    header = ["dtype", "head_dim", "causal", "seqlen", "batch", "heads"] + [names[b] for b in backends]
    ratio = "fa3jit" in backends and "cudnn" in backends
    if ratio:
        header.append("fa3jit / cuDNN")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row["dtype"], str(row["head_dim"]), str(row["causal"]), str(row["seqlen"]), str(row["batch"]),
                 str(row["heads"])] + [cell(row, b) for b in backends]
        if ratio:
            a, b = row.get("fa3jit", {}), row.get("cudnn", {})
            cells.append(f"{a['tflops'] / b['tflops']:.2f}" if "tflops" in a and "tflops" in b else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def save_chart(rows, backends, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG chart (pip install matplotlib)")
        return None
    groups = sorted({(r["dtype"], r["causal"], r["head_dim"]) for r in rows})
    columns = sorted({g[2] for g in groups})
    panel_rows = sorted({(g[0], g[1]) for g in groups})
    figure, axes = plt.subplots(len(panel_rows), len(columns), squeeze=False,
                                figsize=(5.5 * len(columns), 3.2 * len(panel_rows)))
    width = 0.8 / len(backends)
    for i, (dtype, causal) in enumerate(panel_rows):
        for j, head_dim in enumerate(columns):
            axis = axes[i][j]
            cases = [r for r in rows if (r["dtype"], r["causal"], r["head_dim"]) == (dtype, causal, head_dim)]
            for b, backend in enumerate(backends):
                values = [r.get(backend, {}).get("tflops", 0.0) for r in cases]
                axis.bar([x + b * width for x in range(len(cases))], values, width, label=backend)
            axis.set_xticks([x + width * (len(backends) - 1) / 2 for x in range(len(cases))])
            axis.set_xticklabels([str(r["seqlen"]) for r in cases])
            axis.set_title(f"{dtype} d{head_dim} {'causal' if causal else 'non-causal'}")
            axis.set_xlabel("seqlen (batch x seqlen = 16k)")
            axis.set_ylabel("TFLOP/s")
            axis.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return path


def environment(torch, fa3jit, args):
    properties = torch.cuda.get_device_properties(0)
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "device": properties.name,
        "sm_count": properties.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "fa3jit": fa3jit.version(),
        "fa3jit_library": fa3jit.library_path(),
        "python": platform.python_version(),
        "runs": args.runs,
        "warmup": args.warmup,
        "sdpa_layout": args.sdpa_layout,
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
    fa3jit = import_fa3jit()
    timer = Timer(torch, args.runs, args.warmup)
    causal_values = {"both": [False, True], "true": [True], "false": [False]}[args.causal]
    rows = []
    for dtype_name in args.dtype:
        for head_dim in args.head_dim:
            for causal in causal_values:
                for seqlen in args.seqlens:
                    row = bench_case(torch, fa3jit, timer, dtype_name, head_dim, causal, seqlen, args)
                    rows.append(row)
                    print(" ".join(f"{b}={cell(row, b)}" for b in args.backends),
                          f"<- {dtype_name} d{head_dim} causal={causal} s={seqlen}", file=sys.stderr, flush=True)
    env = environment(torch, fa3jit, args)
    print(f"\n{env['device']}, torch {env['torch']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, "
          f"fa3jit {env['fa3jit']}; TFLOP/s, median of {args.runs}\n")
    print(markdown_table(rows, args.backends))
    for row in rows:
        for backend in args.backends:
            if "error" in row.get(backend, {}):
                print(f"{backend} {row['dtype']} d{row['head_dim']} causal={row['causal']} s={row['seqlen']}: "
                      f"{row[backend]['error']}")
    if args.no_save:
        return
    args.out_dir.mkdir(parents=True, exist_ok=True)
    json_path = unique_path(args.out_dir, datetime.date.today().isoformat(), ".json")
    json_path.write_text(json.dumps({"environment": env, "results": rows}, indent=1) + "\n")
    print(f"\nwrote {json_path}")
    chart = save_chart(rows, args.backends, json_path.with_suffix(".png"))
    if chart:
        print(f"wrote {chart}")


if __name__ == "__main__":
    main()

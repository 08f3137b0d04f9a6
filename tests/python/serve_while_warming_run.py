"""Serving while the runtime warms a manifest (run by test_serving.py::test_serve_while_warming in a subprocess, with
FA3JIT_CACHE_DIR an empty directory so that every kernel of the manifest is really compiled).

A decode step (bf16, d128, GQA 32:8, a dense cache of 2048 keys, batch 4, split by the heuristic) is compiled and
checked against the float64 reference first; then fa3jit.warm_manifest(MANIFEST, background=True) compiles the
manifest's kernels in a thread while this thread keeps calling the same step, synchronising after each call. Prints
one JSON line: how many kernels the thread compiled, how many calls ran while it was alive, the longest call, and
whether every output was bit-identical to the checked one."""

import json
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import fa3jit  # noqa: E402
from attention_reference import check_against_reference  # noqa: E402

# Kernels the decode step does not use (other head dims, variants and layouts), so the warm-up really compiles.
MANIFEST = {"kind": "serving_manifest", "models": [
    {"name": "gpt-oss-like", "dtype": "bf16", "head_dim": 64, "num_heads": 64, "num_heads_kv": 8, "causal": True,
     "window_size": [127, 0], "sinks": True, "kv": ["paged"], "page_sizes": [16], "decode_queries": [1]},
    {"name": "phi-like", "dtype": "fp16", "head_dim": 96, "num_heads": 32, "num_heads_kv": 32, "causal": True,
     "kv": ["packed"], "decode_queries": [1]}]}


def main() -> None:
    generator = torch.Generator(device="cuda").manual_seed(5)
    batch, seqlen_k, heads, heads_kv, head_dim = 4, 2048, 32, 8, 128
    q = torch.randn(batch, 1, heads, head_dim, device="cuda", generator=generator).to(torch.bfloat16)
    k = torch.randn(batch, seqlen_k, heads_kv, head_dim, device="cuda", generator=generator).to(torch.bfloat16)
    v = torch.randn(batch, seqlen_k, heads_kv, head_dim, device="cuda", generator=generator).to(torch.bfloat16)
    out = torch.empty_like(q)

    def step():
        return fa3jit.flash_attn_with_kvcache(q, k, v, causal=True, num_splits=0, out=out, return_lse=True)

    _, lse = step()  # compiles and loads the step's kernels before the warm-up starts
    torch.cuda.synchronize()
    check_against_reference(out, lse, q, k, v, True)
    checked = out.clone()

    started = time.perf_counter()
    thread = fa3jit.warm_manifest(MANIFEST, background=True)
    calls, longest, identical = 0, 0.0, True
    while thread.is_alive():
        t0 = time.perf_counter()
        out.fill_(float("nan"))
        step()
        torch.cuda.synchronize()
        longest = max(longest, time.perf_counter() - t0)
        identical = identical and torch.equal(out, checked)
        calls += 1
    thread.join()
    warm_s = time.perf_counter() - started
    print(json.dumps({"compiled": getattr(thread, "compiled", None), "error": repr(thread.error),
                      "calls_while_warming": calls, "longest_call_ms": longest * 1e3, "warm_s": warm_s,
                      "identical": identical}))


if __name__ == "__main__":
    main()

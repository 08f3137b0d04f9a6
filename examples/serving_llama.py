#!/usr/bin/env python3
"""The attention of a Llama-3.1-8B layer (32 query heads, 8 KV heads, head_dim 128, bf16) through a serving loop.

What an engine does per layer, with fa3jit's FlashAttention-3 entry points:
  1. prefill: the prompts, packed into one (total_q, 32, 128) tensor, attend causally with
     flash_attn_varlen_func (cu_seqlens_q = cu_seqlens_k); their K/V are written into a paged cache of
     --page-size rows per page, pages handed out in a shuffled order as an allocator would;
  2. decode: each step appends one token's K/V per sequence into its pages and runs flash_attn_with_kvcache on
     the paged cache (page_table, cache_seqlens, split-KV by the heuristic), replayed from a CUDA graph captured
     once per batch size; sequences finish at different steps, so the batch shrinks and the graph of the next
     size up runs with zero-length padding sequences (their rows come out as 0).
Every --check-every-th step (every step once one sequence is left) is checked against a float32 reference
computed from the same cache (the K/V of each sequence gathered through its page table), and so is the prefill:
the largest error must stay below --tolerance. At the end it prints the decode
steps' attention throughput (tokens/s of one layer) and the K+V bandwidth the decode kernels read at.

    FA3JIT_LIBRARY=build/libfa3jit.so PYTHONPATH=tools/python python3 examples/serving_llama.py [--steps 256]

Needs a Hopper GPU and torch. Exits 1 when a step's error is above the tolerance.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch

import fa3jit

NUM_HEADS, NUM_HEADS_KV, HEAD_DIM = 32, 8, 128  # Llama-3.1-8B


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, nargs="+", default=[1000, 517, 2048, 33, 1500, 4000, 77, 2900],
                        help="prompt lengths (tokens); one sequence each")
    parser.add_argument("--steps", type=int, default=256, help="decode steps of the longest-lived sequence")
    parser.add_argument("--page-size", type=int, default=16, help="rows per page of the KV cache")
    parser.add_argument("--check-every", type=int, default=8, help="compare with the reference every this many steps")
    parser.add_argument("--tolerance", type=float, default=2e-2, help="largest |fa3jit - reference| allowed")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


class PagedCache:
    """K and V of every sequence in pages of page_size rows; page_table[b, j] is sequence b's j-th page."""

    def __init__(self, batch: int, max_len: int, page_size: int, generator: torch.Generator):
        self.page_size = page_size
        self.max_pages = math.ceil(max_len / page_size)
        num_pages = batch * self.max_pages + 7  # a few spare pages that no sequence uses
        shape = (num_pages, page_size, NUM_HEADS_KV, HEAD_DIM)
        self.k = torch.randn(shape, dtype=torch.bfloat16, device="cuda", generator=generator)  # garbage until written
        self.v = torch.randn(shape, dtype=torch.bfloat16, device="cuda", generator=generator)
        order = torch.randperm(num_pages, device="cuda", generator=generator)[: batch * self.max_pages]
        self.page_table = order.to(torch.int32).reshape(batch, self.max_pages).contiguous()
        self.seqlens = torch.zeros(batch, dtype=torch.int32, device="cuda")

    def slots(self, b: int, start: int, count: int):
        """(page, row) of sequence b's keys start .. start + count - 1."""
        positions = torch.arange(start, start + count, device="cuda")
        return self.page_table[b, positions // self.page_size].long(), positions % self.page_size

    def write(self, b: int, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        pages, rows = self.slots(b, start, k.shape[0])
        self.k[pages, rows] = k
        self.v[pages, rows] = v

    def gather(self, b: int, length: int):
        pages, rows = self.slots(b, 0, length)
        return self.k[pages, rows], self.v[pages, rows]


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """float32 attention of one sequence: q (Lq, 32, 128), k/v (Lk, 8, 128), bottom-right causal."""
    group = NUM_HEADS // NUM_HEADS_KV
    qf = q.float().transpose(0, 1)                                   # (32, Lq, d)
    kf = k.float().repeat_interleave(group, dim=1).transpose(0, 1)   # (32, Lk, d)
    vf = v.float().repeat_interleave(group, dim=1).transpose(0, 1)
    scores = qf @ kf.transpose(1, 2) / math.sqrt(HEAD_DIM)
    if causal:
        lq, lk = q.shape[0], k.shape[0]
        visible = torch.arange(lk, device="cuda")[None, :] <= torch.arange(lq, device="cuda")[:, None] + (lk - lq)
        scores = scores.masked_fill(~visible, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ vf).transpose(0, 1)      # (Lq, 32, d)


class DecodeGraph:
    """One decode step for a batch of `size` sequences, captured in a CUDA graph over static tensors."""

    def __init__(self, cache: PagedCache, size: int):
        self.q = torch.zeros((size, 1, NUM_HEADS, HEAD_DIM), dtype=torch.bfloat16, device="cuda")
        self.out = torch.empty_like(self.q)
        self.seqlens = torch.zeros(size, dtype=torch.int32, device="cuda")
        self.page_table = torch.zeros((size, cache.max_pages), dtype=torch.int32, device="cuda")
        self.cache = cache
        self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def step():
            fa3jit.flash_attn_with_kvcache(self.q, cache.k, cache.v, self.seqlens, page_table=self.page_table,
                                           causal=True, out=self.out)

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside capture: compiles or loads the kernels
            step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            step()

    def run(self, q: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Decode the sequences `rows` of the cache with queries q (len(rows), 1, 32, 128); padding rows past
        len(rows) get 0 keys (and output 0)."""
        n = rows.shape[0]
        self.q[:n].copy_(q)
        self.seqlens.zero_()
        self.seqlens[:n].copy_(self.cache.seqlens[rows])
        self.page_table[:n].copy_(self.cache.page_table[rows])
        self.start.record()
        self.graph.replay()
        self.end.record()
        return self.out[:n]

    def seconds(self) -> float:
        """The last replay's GPU time (waits for it)."""
        self.end.synchronize()
        return self.start.elapsed_time(self.end) / 1e3


def main() -> int:
    args = parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU (Hopper)", file=sys.stderr)
        return 2
    generator = torch.Generator(device="cuda").manual_seed(args.seed)
    prompts = args.prompts
    batch = len(prompts)
    # Sequence b decodes steps * (b + 1) / batch tokens, so the batch shrinks as the loop goes on.
    decode_steps = [max(1, args.steps * (b + 1) // batch) for b in range(batch)]
    cache = PagedCache(batch, max(p + s for p, s in zip(prompts, decode_steps)), args.page_size, generator)
    worst = 0.0

    # ---- prefill: packed prompts, causal, K/V into the pages ----
    total = sum(prompts)
    q = torch.randn((total, NUM_HEADS, HEAD_DIM), dtype=torch.bfloat16, device="cuda", generator=generator)
    k = torch.randn((total, NUM_HEADS_KV, HEAD_DIM), dtype=torch.bfloat16, device="cuda", generator=generator)
    v = torch.randn((total, NUM_HEADS_KV, HEAD_DIM), dtype=torch.bfloat16, device="cuda", generator=generator)
    cu = torch.tensor([0] + list(torch.tensor(prompts).cumsum(0)), dtype=torch.int32, device="cuda")
    out = fa3jit.flash_attn_varlen_func(q, k, v, cu, cu, max_seqlen_q=max(prompts), max_seqlen_k=max(prompts),
                                        causal=True)
    offsets = [0] + torch.tensor(prompts).cumsum(0).tolist()
    for b in range(batch):
        lo, hi = offsets[b], offsets[b + 1]
        cache.write(b, 0, k[lo:hi], v[lo:hi])
        worst = max(worst, (out[lo:hi].float() - reference(q[lo:hi], k[lo:hi], v[lo:hi], True)).abs().max().item())
    cache.seqlens.copy_(torch.tensor(prompts, dtype=torch.int32))
    print(f"prefill: {batch} prompts, {total} tokens, max error {worst:.2e}")

    # ---- decode: one graph per batch size (powers of two), the batch shrinking as sequences finish ----
    sizes = sorted({1 << max(0, (n - 1).bit_length()) for n in range(1, batch + 1)})
    graphs = {size: DecodeGraph(cache, size) for size in sizes}
    remaining = list(decode_steps)
    step = tokens = 0
    kv_bytes = 0
    elapsed = 0.0
    while any(remaining):
        live = [b for b in range(batch) if remaining[b] > 0]
        rows = torch.tensor(live, dtype=torch.long, device="cuda")
        new_q = torch.randn((len(live), 1, NUM_HEADS, HEAD_DIM), dtype=torch.bfloat16, device="cuda",
                            generator=generator)
        new_k = torch.randn((len(live), NUM_HEADS_KV, HEAD_DIM), dtype=torch.bfloat16, device="cuda",
                            generator=generator)
        new_v = torch.randn_like(new_k)
        lengths = cache.seqlens[rows].tolist()
        for i, b in enumerate(live):  # the engine's KV write for the new token
            cache.write(b, lengths[i], new_k[i:i + 1], new_v[i:i + 1])
        cache.seqlens[rows] += 1
        graph = graphs[min(size for size in sizes if size >= len(live))]
        result = graph.run(new_q, rows)
        elapsed += graph.seconds()
        tokens += len(live)
        kv_bytes += sum(length + 1 for length in lengths) * NUM_HEADS_KV * HEAD_DIM * 2 * 2
        if step % args.check_every == 0 or len(live) == 1:
            for i, b in enumerate(live):
                kb, vb = cache.gather(b, lengths[i] + 1)
                expected = reference(new_q[i], kb, vb, True)
                worst = max(worst, (result[i].float() - expected).abs().max().item())
        for b in live:
            remaining[b] -= 1
        step += 1
    print(f"decode: {step} steps, {tokens} tokens, graphs for batch sizes {sizes}, page_size {args.page_size}")
    print(f"decode attention (one layer): {tokens / elapsed:,.0f} tokens/s, {kv_bytes / elapsed / 1e9:,.0f} GB/s "
          f"of K+V, {elapsed / step * 1e6:.1f} us per step (CUDA events around each graph replay, one step at a "
          f"time: the replay's launch latency is included, as in an engine that waits for every step)")
    print(f"max error against the float32 reference: {worst:.2e} (tolerance {args.tolerance:.0e})")
    if not worst <= args.tolerance:
        print("FAIL", file=sys.stderr)
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())

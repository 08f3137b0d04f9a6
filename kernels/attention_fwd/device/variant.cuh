// The attention variant: everything that decides which keys a query sees and how a score becomes a
// probability, resolved at compile time from the KernelConfig. This is the file to open for a new mask
// (sliding window), a score transform (softcap) or a change of the softmax normaliser (attention sinks);
// kernel.cuh (key-block range), mainloop.cuh (transform and mask of each score block) and epilogue.cuh (row-sum
// hook, through OnlineSoftmax::finalize) only call these hooks.
//
// Today's variant: keys past seqlen_k are masked, and with Cfg::kCausal the causal mask aligned to the
// bottom-right corner (query i sees key j iff j <= i + seqlen_k - seqlen_q, FA3/FA2 >= 2.1 semantics).
//
// Where the coming features plug in:
//  - sliding window: n_block_range (a lower bound n_block_min), needs_mask and apply_mask (a lower key limit
//    per row next to the causal upper one);
//  - softcap: transform_scores (tanh of the scaled score, as FA3's apply_softcap; it runs before the mask);
//  - attention sinks: finalize_row_sum (the sink's exp(logit - max) joins each row's normaliser);
//  - split-KV: split_range (each split visits its own part of the key blocks).
// The hooks are static and take the run-time values they use as arguments (a feature's values will come from
// Params the same way); they are all inlined, so an identity hook costs nothing.
#pragma once

#include "hopper/fragment.cuh"
#include "kernels/attention_fwd/device/mask.cuh"

namespace fa3jit::attention_fwd {

/// Key blocks a CTA row block visits: [n_block_min, n_block_max), from the last to the first.
struct NBlockRange {
  int n_block_min;
  int n_block_max;
  __device__ __forceinline__ bool empty() const { return n_block_max <= n_block_min; }
};

template <class Cfg>
struct AttentionVariant {
  using ScoreFrag = AccFragment<Cfg::kBlockN>;  // one consumer warpgroup's 64 x block_n scores

  /// Key blocks of a tile whose last real query is q_end - 1 (q_end = min(first query + queries per tile,
  /// seqlen_q)): all of them, or with kCausal those up to the diagonal of that query.
  static __device__ __forceinline__ NBlockRange n_block_range(int q_end, int seqlen_q, int seqlen_k) {
    int keys = seqlen_k;
    if constexpr (Cfg::kCausal) keys = min(keys, max(0, q_end + (seqlen_k - seqlen_q)));
    return NBlockRange{0, (keys + Cfg::kBlockN - 1) / Cfg::kBlockN};
  }

  /// The key blocks of split `split` of `num_splits` (split-KV): consecutive ranges of ceil(n / num_splits) blocks,
  /// the last ones possibly empty.
  static __device__ __forceinline__ NBlockRange split_range(NBlockRange r, int split, int num_splits) {
    if (num_splits <= 1) return r;
    const int per = (r.n_block_max - r.n_block_min + num_splits - 1) / num_splits;
    const int lo = r.n_block_min + split * per;
    return NBlockRange{lo, min(r.n_block_max, lo + per)};
  }

  /// The first key block that some query of a tile must mask, q_first being the tile's first query: block n needs
  /// the mask iff n >= this (its last column (n+1)*block_n - 1 reaches seqlen_k, or with kCausal passes the
  /// diagonal of the first query, q_first + seqlen_k - seqlen_q). Blocks are visited last first, so the masked
  /// ones come first and the mainloop runs the rest in a loop with no mask code at all (mainloop.cuh).
  static __device__ __forceinline__ int first_masked_block(int q_first, int seqlen_q, int seqlen_k) {
    int first = seqlen_k / Cfg::kBlockN;  // (n+1)*block_n > seqlen_k
    if constexpr (Cfg::kCausal) {
      const int t = q_first + (seqlen_k - seqlen_q) + 1;  // (n+1)*block_n > t
      first = min(first, t >= 0 ? t / Cfg::kBlockN : -((-t + Cfg::kBlockN - 1) / Cfg::kBlockN));
    }
    return first;
  }

  /// Score transform, applied to every raw score block S = Q.K^T before the mask. Identity today.
  static __device__ __forceinline__ void transform_scores(float (&s)[ScoreFrag::kRegs]) {}

  /// Sets to -inf the scores of block n_block that the thread's rows must not see. query[h]: the query index (in
  /// its sequence) of the thread's row half h (hopper/fragment.cuh; seqlen.cuh: RowMap).
  static __device__ __forceinline__ void apply_mask(float (&s)[ScoreFrag::kRegs], int n_block, const int (&query)[2],
                                                    int seqlen_q, int seqlen_k) {
    const int col0 = ScoreFrag::col_base(n_block * Cfg::kBlockN);  // key column of register 0
#pragma unroll
    for (int h = 0; h < ScoreFrag::kRowHalves; ++h) {
      int limit = seqlen_k;  // first masked key column of this row
      if constexpr (Cfg::kCausal) limit = min(limit, query[h] + 1 + (seqlen_k - seqlen_q));
      mask_row_half_from<Cfg::kBlockN>(s, h, col0, limit);
    }
  }

  /// Row-sum finalisation: turns the quad-reduced sum of exp2(s * c - row_max) of one row (row_max in the scaled
  /// log2 domain, softmax.cuh) into the softmax normaliser (1 / it scales O, log of it enters the LSE). Identity today.
  static __device__ __forceinline__ float finalize_row_sum(float row_sum, float row_max) { return row_sum; }
};

}  // namespace fa3jit::attention_fwd

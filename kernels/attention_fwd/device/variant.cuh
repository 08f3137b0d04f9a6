// The attention variant: everything that decides which keys a query sees and how a score becomes a
// probability, resolved at compile time from the KernelConfig. kernel.cuh (key-block range), mainloop.cuh
// (transform and mask of each score block) and epilogue.cuh (the sink, through OnlineSoftmax::finalize) only
// call these hooks; the run-time values come from Params (window_left/right, softcap_log2, sinks) through TileWork.
//
// Which keys query i of a sequence sees (seqlen_q queries, seqlen_k keys, masks aligned to the bottom-right
// corner, FA3/FA2 >= 2.1 semantics; d = seqlen_k - seqlen_q):
//  - always j < seqlen_k;
//  - Cfg::kCausal: j <= i + d;
//  - Cfg::kLocal (sliding window, FA3's window_size = (left, right)): i + d - left <= j <= i + d + right. The host
//    passes left and right >= 0 (an unbounded side as a large value); the kernel clamps them to the sequence's
//    lengths, so no sum overflows. A causal window is kLocal with right = 0 (causal and local are exclusive).
// How a score becomes a probability:
//  - Cfg::kSoftcap (Gemma-2, Grok; FA3's softcap): s' = softcap * tanh(s * softmax_scale / softcap), before the
//    mask; the softmax then runs on s' with scale 1, i.e. softcap_log2 = softcap * log2(e) in the log2 domain.
//  - Cfg::kSinks (gpt-oss's learnable sinks; one fp32 logit per query head, in the units of the scaled scores):
//    an extra term exp(sink - max) joins every row's normaliser, as if a key of score `sink` and value 0 were
//    present. With split-KV only split 0 adds it (the combine's log-sum-exp merge then counts it once).
#pragma once

#include "hopper/fragment.cuh"
#include "kernels/attention_fwd/device/mask.cuh"
#include "kernels/attention_fwd/params.h"

namespace fa3jit::attention_fwd {

/// Key blocks a CTA row block visits: [n_block_min, n_block_max), from the last to the first.
struct NBlockRange {
  int n_block_min;
  int n_block_max;
  __device__ __forceinline__ bool empty() const { return n_block_max <= n_block_min; }
};

/// The window of a sequence, clamped to its lengths: left <= seqlen_k and right <= seqlen_q, so every bound below
/// stays inside [-seqlen_q - 1, seqlen_k + seqlen_q + 1].
struct Window {
  int left, right;
};

template <class Cfg>
struct AttentionVariant {
  using ScoreFrag = AccFragment<Cfg::kBlockN>;  // one consumer warpgroup's 64 x block_n scores
  static constexpr bool kLocal = Cfg::kLocal;
  static constexpr bool kSinks = Cfg::kSinks;

  static __device__ __forceinline__ Window window(const Params& p, int seqlen_q, int seqlen_k) {
    if constexpr (kLocal) {
      return Window{min(p.window_left, seqlen_k), min(p.window_right, seqlen_q)};
    } else {
      return Window{seqlen_k, Cfg::kCausal ? 0 : seqlen_q};
    }
  }

  /// Key blocks of a tile whose queries are [q_first, q_end) (q_end = min(q_first + queries per tile, seqlen_q)):
  /// from the lower window edge of q_first to the upper edge (causal diagonal, window right) of q_end - 1.
  static __device__ __forceinline__ NBlockRange n_block_range(int q_first, int q_end, int seqlen_q, int seqlen_k,
                                                              Window win) {
    int keys = seqlen_k;
    if constexpr (Cfg::kCausal || kLocal) keys = min(keys, max(0, q_end + (seqlen_k - seqlen_q) + win.right));
    int lo = 0;
    if constexpr (kLocal) lo = max(0, q_first + (seqlen_k - seqlen_q) - win.left) / Cfg::kBlockN;
    return NBlockRange{lo, (keys + Cfg::kBlockN - 1) / Cfg::kBlockN};
  }

  /// The key blocks of split `split` of `num_splits` (split-KV): consecutive ranges of ceil(n / num_splits) blocks,
  /// the last ones possibly empty.
  static __device__ __forceinline__ NBlockRange split_range(NBlockRange r, int split, int num_splits) {
    if (num_splits <= 1) return r;
    const int per = (r.n_block_max - r.n_block_min + num_splits - 1) / num_splits;
    const int lo = r.n_block_min + split * per;
    return NBlockRange{lo, min(r.n_block_max, lo + per)};
  }

  /// Floor division for a possibly negative numerator.
  static __device__ __forceinline__ int floor_div(int t) {
    return t >= 0 ? t / Cfg::kBlockN : -((-t + Cfg::kBlockN - 1) / Cfg::kBlockN);
  }

  /// The first key block that some query of a tile must mask at its upper edge, q_first being the tile's first
  /// query: block n needs the mask iff n >= this (its last column (n+1)*block_n - 1 reaches seqlen_k, or passes the
  /// upper edge of the first query, q_first + seqlen_k - seqlen_q + right). Blocks are visited last first, so these
  /// come first and the mainloop runs the rest without mask code (mainloop.cuh).
  static __device__ __forceinline__ int first_masked_block(int q_first, int seqlen_q, int seqlen_k, Window win) {
    int first = seqlen_k / Cfg::kBlockN;  // (n+1)*block_n > seqlen_k
    if constexpr (Cfg::kCausal || kLocal)
      first = min(first, floor_div(q_first + (seqlen_k - seqlen_q) + win.right + 1));  // (n+1)*block_n > t
    return first;
  }

  /// kLocal: the key blocks below this one hold keys left of the window of the tile's last query q_end - 1 and
  /// need the mask again (its lower edge, q_end - 1 + seqlen_k - seqlen_q - left); the mainloop runs them after the
  /// mask-free loop. Without kLocal nothing below is masked (INT_MIN).
  static __device__ __forceinline__ int unmasked_min_block(int q_end, int seqlen_q, int seqlen_k, Window win) {
    if constexpr (kLocal) {
      const int lo = q_end - 1 + (seqlen_k - seqlen_q) - win.left;  // n * block_n >= lo: no key left of any window
      return lo <= 0 ? 0 : (lo + Cfg::kBlockN - 1) / Cfg::kBlockN;
    } else {
      return -0x7fffffff;
    }
  }

  /// Whether block n_block may need the mask (the run-time check of a block of the masked loops).
  static __device__ __forceinline__ bool needs_mask(int n_block, int first_masked, int unmasked_min) {
    if constexpr (kLocal) {
      return n_block >= first_masked || n_block < unmasked_min;
    } else {
      return n_block >= first_masked;
    }
  }

  /// kSoftcap: the factor that maps a raw score block onto tanh's argument, from the block's scale c (log2 units,
  /// softmax_scale * log2(e) [* descales]): s * softmax_scale / softcap = s * c * inv_softcap_log2.
  static __device__ __forceinline__ float softcap_factor(float inv_softcap_log2, float c) { return c * inv_softcap_log2; }

  /// Score transform before the mask: tanh of the scaled score with kSoftcap (PTX tanh.approx.f32, as FA3), the
  /// identity otherwise. `factor`: softcap_factor of the block.
  static __device__ __forceinline__ void transform_scores(float (&s)[ScoreFrag::kRegs], float factor) {
    if constexpr (Cfg::kSoftcap) {
#pragma unroll
      for (int i = 0; i < ScoreFrag::kRegs; ++i) {
        float y;
        asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(s[i] * factor));
        s[i] = y;
      }
    }
  }

  /// The softmax scale (log2 units) of a block after transform_scores: softcap_log2 with kSoftcap, else c.
  static __device__ __forceinline__ float softmax_scale_log2(float softcap_log2, float c) {
    if constexpr (Cfg::kSoftcap) {
      return softcap_log2;
    } else {
      return c;
    }
  }

  /// Sets to -inf the scores of block n_block that the thread's rows must not see. query[h]: the query index (in
  /// its sequence) of the thread's row half h (hopper/fragment.cuh; seqlen.cuh: RowMap).
  static __device__ __forceinline__ void apply_mask(float (&s)[ScoreFrag::kRegs], int n_block, const int (&query)[2],
                                                    int seqlen_q, int seqlen_k, Window win) {
    const int col0 = ScoreFrag::col_base(n_block * Cfg::kBlockN);  // key column of register 0
#pragma unroll
    for (int h = 0; h < ScoreFrag::kRowHalves; ++h) {
      int limit = seqlen_k;  // first masked key column of this row
      if constexpr (Cfg::kCausal || kLocal) limit = min(limit, query[h] + 1 + (seqlen_k - seqlen_q) + win.right);
      if constexpr (kLocal) {
        mask_row_half_outside<Cfg::kBlockN>(s, h, col0, query[h] + (seqlen_k - seqlen_q) - win.left, limit);
      } else {
        mask_row_half_from<Cfg::kBlockN>(s, h, col0, limit);
      }
    }
  }

  /// kSinks: the sink logit of query head `head` in the scaled log2 domain of the softmax (softmax.cuh), for split
  /// `split` (only split 0 adds it); -inf when the split adds none. A value from the caller's memory: NaN and
  /// infinities are clamped into [-1e30, 1e30] so the normaliser stays finite.
  static __device__ __forceinline__ float sink_log2(const Params& p, int head, int split) {
    if constexpr (kSinks) {
      constexpr float kLog2e = 1.4426950408889634f;
      if (split != 0) return neg_inf();
      return fminf(fmaxf(p.sinks[head], -1e30f), 1e30f) * kLog2e;
    } else {
      return neg_inf();
    }
  }
};

}  // namespace fa3jit::attention_fwd

// Masking of a score tile: keys past seqlen_k, and the causal mask aligned to the bottom-right corner
// (query i sees key j iff j <= i + seqlen_k - seqlen_q, FA3/FA2 >= 2.1 semantics).
#pragma once

#include "softmax.cuh"

namespace fa3jit {

/// Column range handled by one CTA row block: keys [0, n_block_max * kBlockN) are visited, last block first.
template <int kBlockM, int kBlockN, bool kCausal>
__device__ __forceinline__ int num_n_blocks(int m_block, int seqlen_q, int seqlen_k) {
  int keys = seqlen_k;
  if constexpr (kCausal) {
    const int last_row = min((m_block + 1) * kBlockM, seqlen_q);  // one past the last real row
    keys = min(keys, max(0, last_row + seqlen_k - seqlen_q));
  }
  return (keys + kBlockN - 1) / kBlockN;
}

/// True when some score of block n_block must be masked for some row of the CTA's row block.
template <int kBlockM, int kBlockN, bool kCausal>
__device__ __forceinline__ bool n_block_needs_mask(int n_block, int m_block, int seqlen_q, int seqlen_k) {
  const int last_col = (n_block + 1) * kBlockN - 1;
  bool needed = last_col >= seqlen_k;
  if constexpr (kCausal) needed = needed || last_col > m_block * kBlockM + seqlen_k - seqlen_q;
  return needed;
}

/// Sets masked scores to -inf. `row` is the thread's first row (the second is row + 8); `col0` the
/// global column of register 0 (n_block * kBlockN + 2 * (lane % 4)).
template <int kBlockN, bool kCausal>
__device__ __forceinline__ void apply_mask(float (&s)[kBlockN / 2], int row, int col0, int seqlen_q, int seqlen_k) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int limit = seqlen_k;
    if constexpr (kCausal) limit = min(limit, row + 8 * h + 1 + seqlen_k - seqlen_q);
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) {
      if (((i >> 1) & 1) != h) continue;
      const int col = col0 + (i & 1) + 8 * (i >> 2);
      if (col >= limit) s[i] = neg_inf();
    }
  }
}

}  // namespace fa3jit

// The masking primitives on a score fragment: set to -inf every score of one row half (hopper/fragment.cuh)
// whose key column lies outside the row's visible range. Which limits apply (seqlen_k, causal, a sliding window)
// is decided by the attention variant, variant.cuh; this file only knows the fragment layout.
#pragma once

#include "hopper/fragment.cuh"
#include "kernels/attention_fwd/device/softmax.cuh"

namespace fa3jit::attention_fwd {

/// Sets to -inf the scores of row half h (of the thread's two rows) whose key column is >= limit. s: the
/// thread's registers of a 64 x kN score tile; col0: the global key column of the thread's first column
/// (tile origin + AccFragment::col_base).
template <int kN>
__device__ __forceinline__ void mask_row_half_from(float (&s)[kN / 2], int h, int col0, int limit) {
  using Frag = AccFragment<kN>;
#pragma unroll
  for (int j = 0; j < Frag::kRegsPerRowHalf; ++j) {
    const int i = Frag::reg(h, j);
    if (Frag::col(i, col0) >= limit) s[i] = neg_inf();
  }
}

/// Same, for the key columns outside [lo, limit).
template <int kN>
__device__ __forceinline__ void mask_row_half_outside(float (&s)[kN / 2], int h, int col0, int lo, int limit) {
  using Frag = AccFragment<kN>;
#pragma unroll
  for (int j = 0; j < Frag::kRegsPerRowHalf; ++j) {
    const int i = Frag::reg(h, j);
    const int col = Frag::col(i, col0);
    if (col >= limit || col < lo) s[i] = neg_inf();
  }
}

}  // namespace fa3jit::attention_fwd

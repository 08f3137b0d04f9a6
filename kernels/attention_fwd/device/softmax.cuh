// Online softmax in base 2 over the rows a consumer thread owns (FA3 paper §3.1, Algorithm 1; FA2 §3.1).
//
// The scores arrive as an m64nN wgmma accumulator fragment (hopper/fragment.cuh): each thread owns two rows
// (its row halves), each spread over the 4 lanes of a quad, so row reductions are a local reduction plus two
// butterfly shuffles. The scale is folded into one FFMA before ex2: exp(s*scale - m*scale) =
// 2^(s*scale_log2 - m*scale_log2). The running max is kept unscaled; a row with no visible key keeps
// max = -inf and uses 0 as the subtrahend, so it produces P = 0 and never NaN.
// Which scores are masked and how they are transformed first is the attention variant's business
// (variant.cuh); so is the last touch to the normaliser (finalize's row-sum hook, where sinks will go).
#pragma once

#include "hopper/fragment.cuh"
#include "hopper/types.cuh"

namespace fa3jit::attention_fwd {

__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float log2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }

template <int kBlockN>
struct OnlineSoftmax {
  using Frag = AccFragment<kBlockN>;
  static constexpr int kRegs = Frag::kRegs;
  float row_max[Frag::kRowHalves];
  float row_sum[Frag::kRowHalves];  // per-thread partial sums; reduced across the quad in finalize()

  __device__ __forceinline__ void init() {
    row_max[0] = row_max[1] = neg_inf();
    row_sum[0] = row_sum[1] = 0.f;
  }

  /// Turns scores S into unnormalised probabilities P in place; returns in o_scale the factor by which the
  /// output accumulator rows must be multiplied (exp of the max shift; 0 on the first block of a row).
  __device__ __forceinline__ void update(float (&s)[kRegs], float scale_log2, float (&o_scale)[2]) {
#pragma unroll
    for (int h = 0; h < Frag::kRowHalves; ++h) {
      float m = row_max[h];
#pragma unroll
      for (int j = 0; j < Frag::kRegsPerRowHalf; ++j) m = fmaxf(m, s[Frag::reg(h, j)]);
      m = quad_max(m);
      const bool empty = m == neg_inf();
      o_scale[h] = empty ? 1.f : exp2_approx((row_max[h] - m) * scale_log2);
      row_max[h] = m;
      const float m_scaled = empty ? 0.f : m * scale_log2;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < Frag::kRegsPerRowHalf; ++j) {
        const int i = Frag::reg(h, j);
        s[i] = exp2_approx(fmaf(s[i], scale_log2, -m_scaled));
        sum += s[i];
      }
      row_sum[h] = fmaf(row_sum[h], o_scale[h], sum);
    }
  }

  /// Final normalisation: inv_sum = 1/rowsum (0 for a row that saw no key), lse = natural-log
  /// log-sum-exp of the scaled scores (-inf for a row that saw no key). Variant supplies the row-sum hook
  /// (AttentionVariant::finalize_row_sum, variant.cuh).
  template <class Variant>
  __device__ __forceinline__ void finalize(float softmax_scale, float (&inv_sum)[2], float (&lse)[2]) {
    constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
    for (int h = 0; h < Frag::kRowHalves; ++h) {
      const float sum = Variant::finalize_row_sum(quad_sum(row_sum[h]), row_max[h]);
      const bool empty = !(sum > 0.f);  // also catches NaN
      inv_sum[h] = empty ? 0.f : 1.f / sum;
      lse[h] = empty ? neg_inf() : row_max[h] * softmax_scale + log2_approx(sum) * kLn2;
    }
  }
};

}  // namespace fa3jit::attention_fwd

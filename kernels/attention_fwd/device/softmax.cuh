// Online softmax in base 2 over the rows a consumer thread owns (FA3 paper §3.1, Algorithm 1; FA2 §3.1).
//
// The scores arrive as an m64nN wgmma accumulator fragment (hopper/fragment.cuh): each thread owns two rows
// (its row halves), each spread over the 4 lanes of a quad, so row reductions are a local reduction plus two
// butterfly shuffles. The scale is folded into one FFMA before ex2: exp(s*scale - m) = 2^(s*c - m*log2(e)) with
// c = scale * log2(e), which for e4m3 also carries the block's q and k descales (so c may change from one key
// block to the next). The running max is therefore kept in the scaled log2 domain, where blocks of different c
// compare. A row with no visible key keeps max = -inf and uses 0 as the subtrahend, so it produces P = 0 and
// never NaN.
// kMaxOffset (e4m3, FA3's trick): P = 2^(s*c - max + 8) lies in [0, 256] instead of [0, 1], using the e4m3 range
// (max 448) and keeping small probabilities out of its subnormals; O and the row sum carry the same 2^8, which
// cancels in O / sum, and finalize subtracts it from the LSE.
// kLazyRescale (spec field lazy_rescale, 16-bit P only): a row keeps the maximum O and its sum were scaled to
// while a key block's maximum rises at most kLazyRescaleSlack above it, so P = 2^(s*c - max) lies in [0, 2^slack]
// instead of [0, 1] and O needs no rescale for that block (o_scale = 1 exactly); only a larger rise moves the
// reference. O / sum and the LSE (max + log2 sum) are the same quantities with either reference. The caller skips
// the multiplies of O when no row of the warp moved (mainloop.cuh: rescale_o). This is the conditional rescaling of
// FlashAttention-4 (Blackwell), which skips O's correction while the maximum rises by less than a threshold. e4m3
// P is already scaled to use the e4m3 range (kMaxOffset), so it has no slack.
// Which scores are masked and how they are transformed first is the attention variant's business
// (variant.cuh); so is the sink that joins the normaliser in finalize.
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

/// How far (log2 units) a row's block maximum may rise above the maximum O was scaled to before O is rescaled, with
/// lazy rescaling: P <= 2^8 = 256, well inside bf16 and fp16 (max 65504) and the fp32 accumulators.
constexpr float kLazyRescaleSlack = 8.f;

template <int kBlockN, int kMaxOffset = 0, bool kLazyRescale = false>
struct OnlineSoftmax {
  static_assert(!(kLazyRescale && kMaxOffset != 0), "e4m3 P (max offset) has no slack for lazy rescaling");
  using Frag = AccFragment<kBlockN>;
  static constexpr int kRegs = Frag::kRegs;
  float row_max[Frag::kRowHalves];  // max of s * c over the keys seen, log2 domain
  float row_sum[Frag::kRowHalves];  // per-thread partial sums; reduced across the quad in finalize()

  __device__ __forceinline__ void init() {
    row_max[0] = row_max[1] = neg_inf();
    row_sum[0] = row_sum[1] = 0.f;
  }

  /// Turns scores S into unnormalised probabilities P in place, with c the block's scale in log2 units (positive);
  /// returns in o_scale the factor by which the output accumulator rows must be multiplied (exp of the max shift;
  /// 0 on the first block of a row).
  __device__ __forceinline__ void update(float (&s)[kRegs], float c, float (&o_scale)[2]) {
    // Row max and row sum over kRegsPerRowHalf values each: kChains independent partial results, combined at the
    // end, so the reductions are short dependency chains instead of one chain of kRegsPerRowHalf latencies.
    constexpr int kChains = Frag::kRegsPerRowHalf % 4 == 0 ? 4 : 2;
#pragma unroll
    for (int h = 0; h < Frag::kRowHalves; ++h) {
      // Each chain starts at its first value, not at -inf or 0 (one max and one add fewer per chain).
      static_assert(Frag::kRegsPerRowHalf >= kChains, "every chain has a first value");
      float part[kChains];
#pragma unroll
      for (int k = 0; k < kChains; ++k) part[k] = s[Frag::reg(h, k)];
#pragma unroll
      for (int j = kChains; j < Frag::kRegsPerRowHalf; ++j)
        part[j % kChains] = fmaxf(part[j % kChains], s[Frag::reg(h, j)]);
      float m = part[0];
#pragma unroll
      for (int k = 1; k < kChains; ++k) m = fmaxf(m, part[k]);
      m = fmaxf(row_max[h], quad_max(m) * c);
      // Lazy: keep the reference while the rise is within the slack (a first block always moves it from -inf: the
      // rise is +inf). The difference, not row_max + slack: at |row_max| >= 2^27 the sum would round by 16.
      if constexpr (kLazyRescale) m = m - row_max[h] <= kLazyRescaleSlack ? row_max[h] : m;
      const bool empty = m == neg_inf();
      // Lazy: exactly 1 where the reference stayed, which is what lets the caller skip O's multiplies.
      o_scale[h] = empty || (kLazyRescale && m == row_max[h]) ? 1.f : exp2_approx(row_max[h] - m);
      row_max[h] = m;
      const float subtrahend = empty ? 0.f : m - static_cast<float>(kMaxOffset);
#pragma unroll
      for (int j = 0; j < Frag::kRegsPerRowHalf; ++j) {
        const int i = Frag::reg(h, j);
        s[i] = exp2_approx(fmaf(s[i], c, -subtrahend));
        part[j % kChains] = j < kChains ? s[i] : part[j % kChains] + s[i];
      }
      float sum = part[0];
#pragma unroll
      for (int k = 1; k < kChains; ++k) sum += part[k];
      row_sum[h] = fmaf(row_sum[h], o_scale[h], sum);
    }
  }

  /// Final normalisation: inv_sum = the factor of O's rows (1 / row sum; 0 for a row that saw no key and has no
  /// sink), lse = natural-log log-sum-exp of the scaled scores (-inf for such a row). kSinks: sink_log2[h] (row half
  /// h's sink logit in the scaled log2 domain, AttentionVariant::sink_log2; -inf for none) joins the normaliser as
  /// one more key of value 0: with m' = max(row_max, sink), sum' = sum * 2^(row_max - m') + 2^(sink - m'), and O,
  /// accumulated against row_max, is scaled by 2^(row_max - m') / sum'. A row with no key then gets O = 0 and
  /// lse = sink.
  template <bool kSinks>
  __device__ __forceinline__ void finalize(float (&inv_sum)[2], float (&lse)[2], const float (&sink_log2)[2]) {
    constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
    for (int h = 0; h < Frag::kRowHalves; ++h) {
      float sum = quad_sum(row_sum[h]);
      float m = row_max[h];
      float o_factor = 1.f;
      if constexpr (kSinks) {
        if (sink_log2[h] != neg_inf()) {
          const float m2 = fmaxf(m, sink_log2[h]);
          o_factor = exp2_approx(m - m2);  // 0 when the row saw no key (m = -inf)
          sum = fmaf(sum, o_factor, exp2_approx(sink_log2[h] - m2 + static_cast<float>(kMaxOffset)));
          m = m2;
        }
      }
      const bool empty = !(sum > 0.f);  // also catches NaN
      inv_sum[h] = empty ? 0.f : o_factor / sum;
      lse[h] = empty ? neg_inf() : (m - static_cast<float>(kMaxOffset) + log2_approx(sum)) * kLn2;
    }
  }
};

}  // namespace fa3jit::attention_fwd

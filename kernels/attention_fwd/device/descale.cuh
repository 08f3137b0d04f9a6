// Dequantisation scales of e4m3 inputs, folded where they cost nothing (FA3 paper §3.3; launch.h: ScaleView):
//  - q and k descales join the softmax's log2 scale: block_scale_log2(n_block) = softmax_scale * log2(e) *
//    q_descale * k_descale, one value per (M tile, N block), so a score costs the same one FFMA as without
//    scales (softmax.cuh);
//  - the v descale joins the epilogue: per (batch, kv head) into 1 / row sum, or per channel onto O's columns.
// For 16-bit inputs every factor is 1 and block_scale_log2 is params.scale_log2.
#pragma once

#include "hopper/fragment.cuh"
#include "kernels/attention_fwd/device/scheduler.cuh"
#include "kernels/attention_fwd/params.h"

namespace fa3jit::attention_fwd {

/// A descale as the kernel uses it: positive and finite. The values come from the caller's memory and only the GPU
/// sees them, so NaN, zero, negative and infinite ones are clamped into [FLT_MIN, FLT_MAX] (fmaxf maps NaN to the
/// lower bound) instead of turning the softmax's max into a min or its scores into NaN.
__device__ __forceinline__ float clamp_descale(float x) { return fminf(fmaxf(x, 1.17549435e-38f), 3.40282347e38f); }

template <class Cfg>
struct Descale {
  static constexpr bool kFp8 = Cfg::kElemBytes == 1;
  float qk_log2;         // scale_log2 * q descale (* k descale unless per block)
  const float* k_block;  // per block: the k descales of this (batch, kv head), one per N block
  float v_head;          // per head: v descale of this (batch, kv head); else 1
  const float* v_chan;   // per block: the v descales of this (batch, kv head), one per channel

  static __device__ __forceinline__ Descale load(const Params& p, TileCoord tile, int kv_head) {
    Descale d{p.scale_log2, nullptr, 1.f, nullptr};
    if constexpr (kFp8) {
      const int k_off = tile.batch * p.k_descale_stride_batch + kv_head * p.k_descale_stride_head;
      const int v_off = tile.batch * p.v_descale_stride_batch + kv_head * p.v_descale_stride_head;
      if constexpr (Cfg::kQuantPerBlock) {
        const int q_off = tile.batch * p.q_descale_stride_batch + tile.head * p.q_descale_stride_head + tile.m_block;
        d.qk_log2 = clamp_descale(d.qk_log2 * clamp_descale(p.q_descale[q_off]));
        d.k_block = p.k_descale + k_off;
        d.v_chan = p.v_descale + v_off;
      } else {
        const int q_off = tile.batch * p.q_descale_stride_batch + kv_head * p.q_descale_stride_head;
        d.qk_log2 = clamp_descale(d.qk_log2 * clamp_descale(p.q_descale[q_off]) * clamp_descale(p.k_descale[k_off]));
        d.v_head = clamp_descale(p.v_descale[v_off]);
      }
    }
    return d;
  }

  /// The softmax scale of key block n_block in log2 units.
  __device__ __forceinline__ float block_scale_log2(int n_block) const {
    if constexpr (kFp8 && Cfg::kQuantPerBlock) {
      return clamp_descale(qk_log2 * clamp_descale(k_block[n_block]));
    } else {
      return qk_log2;
    }
  }

  /// Applies the v descale to one row half's normaliser (per head) or to O's columns (per channel). col0: the
  /// column of the thread's register 0 (hopper/fragment.cuh).
  template <int kRegs>
  __device__ __forceinline__ void apply_v(float (&o)[kRegs], float (&inv_sum)[2], int col0) const {
    if constexpr (kFp8 && Cfg::kQuantPerBlock) {
      using Frag = AccFragment<2 * kRegs>;
#pragma unroll
      for (int i = 0; i < kRegs; ++i) o[i] *= clamp_descale(v_chan[Frag::col(i, col0)]);
    } else if constexpr (kFp8) {
      inv_sum[0] *= v_head;
      inv_sum[1] *= v_head;
    }
  }
};

}  // namespace fa3jit::attention_fwd

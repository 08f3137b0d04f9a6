// Rotary position embedding on a Q/K row fragment (device/layout.cuh), as FlashAttention's apply_rotary_emb:
//   x1' = x1 cos - x2 sin,  x2' = x1 sin + x2 cos,  cos/sin row = the token's position, column = pair index
// "interleaved" pairs (2p, 2p + 1): the partner is the neighbouring value of the same chunk.
// "neox" pairs (p, p + rotary_dim / 2), rotary_dim / 2 a power of two >= 8: the partner is whole chunks away,
// i.e. one chunk-index bit, which is either a k bit (the partner is in this thread) or a lane bit (one
// shfl.xor). Every chunk is either wholly rotated or not (spec.cpp: rotary_dim rules), and its cos/sin values
// are 4 (interleaved) or 8 (neox) consecutive floats: 16-byte loads.
#pragma once

#include "kernels/quantize_fp8/device/convert.cuh"
#include "kernels/quantize_fp8/device/layout.cuh"

namespace fa3jit::quantize_fp8 {

/// Rotates the row held in x (chunk k = element chunk k * row_lanes + lane_in_row) with the table rows
/// cos_row/sin_row of its token. `row_ok` false: the row is padding (all zeros, its table row may not exist),
/// no table is read, but the lane still takes part in the shuffles.
template <class Cfg>
__device__ __forceinline__ void apply_rope(float (&x)[kRowChunks][kChunkElems], const float* cos_row,
                                           const float* sin_row, int lane_in_row, bool row_ok) {
  constexpr int kLanes = row_lanes(Cfg::kHeadDim);
  constexpr int kRotChunks = Cfg::kRotaryDim / kChunkElems;  // chunks c < kRotChunks are rotated
  static_assert(Cfg::kRotaryDim % kChunkElems == 0 && Cfg::kRotaryDim <= Cfg::kHeadDim, "whole chunks");
  if constexpr (Cfg::kRope == kRopeInterleaved) {
#pragma unroll
    for (int k = 0; k < kRowChunks; ++k) {
      if (k * kLanes >= kRotChunks) continue;  // no lane's chunk k is rotated
      const int c = k * kLanes + lane_in_row;
      if (row_ok && c < kRotChunks) {
        float cs[4], sn[4];  // pairs 4c .. 4c + 3
        load_float4(cos_row + 4 * c, cs);
        load_float4(sin_row + 4 * c, sn);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float x1 = x[k][2 * q], x2 = x[k][2 * q + 1];
          x[k][2 * q] = x1 * cs[q] - x2 * sn[q];
          x[k][2 * q + 1] = x1 * sn[q] + x2 * cs[q];
        }
      }
    }
  } else if constexpr (Cfg::kRope == kRopeNeox) {
    constexpr int kHalfChunks = kRotChunks / 2;  // partner chunk = c ^ kHalfChunks
    static_assert(kHalfChunks >= 1 && (kHalfChunks & (kHalfChunks - 1)) == 0, "neox: rotary_dim / 2 = 8 * 2^n");
    if constexpr (kHalfChunks < kLanes) {
      // A lane bit: the rotated chunks are k = 0 of lanes < 2 * kHalfChunks; the partner is lane ^ kHalfChunks.
      float partner[kChunkElems];
#pragma unroll
      for (int j = 0; j < kChunkElems; ++j) partner[j] = __shfl_xor_sync(0xffffffffu, x[0][j], kHalfChunks);
      if (row_ok && lane_in_row < 2 * kHalfChunks) {
        const int col = (lane_in_row & ~kHalfChunks) * kChunkElems;
        float cs[8], sn[8];
        load_float8(cos_row + col, cs);
        load_float8(sin_row + col, sn);
        // First of the pair: x1' = x1 cos - x2 sin; second: x2' = x2 cos + x1 sin.
        const float sign = (lane_in_row & kHalfChunks) ? 1.0f : -1.0f;
#pragma unroll
        for (int j = 0; j < kChunkElems; ++j) x[0][j] = x[0][j] * cs[j] + sign * (partner[j] * sn[j]);
      }
    } else {
      // A k bit: chunks k and k + kKBit of this thread pair up (k < 2 * kKBit are rotated).
      constexpr int kKBit = kHalfChunks / kLanes;
      static_assert(kKBit == 1 || kKBit == 2, "two k bits");
#pragma unroll
      for (int k = 0; k < 2 * kKBit; ++k) {
        if (k & kKBit) continue;
        if (!row_ok) continue;
        const int col = (k * kLanes + lane_in_row) * kChunkElems;
        float cs[8], sn[8];
        load_float8(cos_row + col, cs);
        load_float8(sin_row + col, sn);
#pragma unroll
        for (int j = 0; j < kChunkElems; ++j) {
          const float x1 = x[k][j], x2 = x[k + kKBit][j];
          x[k][j] = x1 * cs[j] - x2 * sn[j];
          x[k + kKBit][j] = x1 * sn[j] + x2 * cs[j];
        }
      }
    }
  }
}

}  // namespace fa3jit::quantize_fp8

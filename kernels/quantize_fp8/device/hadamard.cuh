// Incoherent processing of one Q/K row (FA3 paper §3.3): y = H.D.x with D the random sign diagonal of
// params.h: hadamard_sign and H the Sylvester Walsh-Hadamard matrix (entries (-1)^popcount(i & j)), as a fast
// Walsh-Hadamard transform: log2(head_dim) butterfly stages, the stage of index bit b pairing elements
// i and i ^ (1 << b) as (a, b) -> (a + b, a - b) (docs/hopper-ptx.md §9). With the fragment layout of
// device/layout.cuh the j and k bits are butterflies inside a thread and the lane bits one shfl.xor each.
// The 1/sqrt(head_dim) normalisation is folded into the quantisation scale by the caller.
#pragma once

#include "hopper/types.cuh"
#include "kernels/quantize_fp8/device/layout.cuh"
#include "kernels/quantize_fp8/params.h"

namespace fa3jit::quantize_fp8 {

/// Fills `words` (head_dim / 32 words: bit b of word w = sign of element 32 w + b is negative) from
/// hadamard_sign: each warp computes whole words with one ballot. Called by every thread of the CTA, which
/// must synchronise before reading the words.
template <int kHeadDim, int kNumThreads>
__device__ __forceinline__ void compute_sign_words(unsigned long long seed, uint32_t* words) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int base = static_cast<int>(threadIdx.x / 32) * 32; base < kHeadDim; base += kNumThreads) {
    const uint32_t negative = __ballot_sync(0xffffffffu, hadamard_sign(seed, base + lane) < 0.0f);
    if (lane == 0) words[base / 32] = negative;
  }
}

/// The signs of this thread's 32 values: bit 8k + j is the sign of value j of chunk k (element
/// (k * row_lanes + lane_in_row) * 8 + j), taken from the words of compute_sign_words.
template <int kHeadDim>
__device__ __forceinline__ uint32_t thread_sign_bits(const uint32_t* words, int lane_in_row) {
  constexpr int kLanes = row_lanes(kHeadDim);
  uint32_t bits = 0;
#pragma unroll
  for (int k = 0; k < kRowChunks; ++k) {
    const int c = k * kLanes + lane_in_row;  // element chunk: elements 8c .. 8c + 7 = word c / 4, byte c % 4
    bits |= ((words[c >> 2] >> ((c & 3) * 8)) & 0xffu) << (8 * k);
  }
  return bits;
}

/// x <- H.D.x (unnormalised) for the row held by this thread's row group; every lane of the warp must call it.
template <int kHeadDim>
__device__ __forceinline__ void hadamard_rotate(float (&x)[kRowChunks][kChunkElems], uint32_t sign_bits, int lane) {
  constexpr int kLanes = row_lanes(kHeadDim);
  // D: flip the sign bit where the diagonal is -1.
#pragma unroll
  for (int k = 0; k < kRowChunks; ++k)
#pragma unroll
    for (int j = 0; j < kChunkElems; ++j) {
      const int bit = 8 * k + j;
      x[k][j] = __uint_as_float(__float_as_uint(x[k][j]) ^ ((sign_bits << (31 - bit)) & 0x80000000u));
    }
  // Index bits 0..2 (j): inside a chunk.
#pragma unroll
  for (int h = 1; h < kChunkElems; h <<= 1)
#pragma unroll
    for (int k = 0; k < kRowChunks; ++k)
#pragma unroll
      for (int j = 0; j < kChunkElems; ++j) {
        if (j & h) continue;
        const float a = x[k][j], b = x[k][j + h];
        x[k][j] = a + b;
        x[k][j + h] = a - b;
      }
  // The two top index bits (k): between chunks of this thread.
#pragma unroll
  for (int h = 1; h < kRowChunks; h <<= 1)
#pragma unroll
    for (int k = 0; k < kRowChunks; ++k) {
      if (k & h) continue;
#pragma unroll
      for (int j = 0; j < kChunkElems; ++j) {
        const float a = x[k][j], b = x[k + h][j];
        x[k][j] = a + b;
        x[k + h][j] = a - b;
      }
    }
  // Lane bits: the lane with the bit clear holds a and receives b (a + b); the other holds b, receives a
  // (a - b). Row groups are aligned groups of kLanes lanes, so lane ^ m stays in the row.
#pragma unroll
  for (int m = 1; m < kLanes; m <<= 1) {
    const float sign = (lane & m) ? -1.0f : 1.0f;
#pragma unroll
    for (int k = 0; k < kRowChunks; ++k)
#pragma unroll
      for (int j = 0; j < kChunkElems; ++j) {
        const float partner = __shfl_xor_sync(0xffffffffu, x[k][j], m);
        x[k][j] = fmaf(sign, x[k][j], partner);
      }
  }
}

}  // namespace fa3jit::quantize_fp8

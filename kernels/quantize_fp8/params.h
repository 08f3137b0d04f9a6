// The launch contract of the FP8 quantisation pre-pass (Hadamard incoherent processing + block quantisation),
// read by both compilers: the host (launch, tests, the CPU reference) and the generated unit.
// Includes nothing beyond hopper/abi.h: NVRTC has no headers, and the host must not see device code.
//
// Layouts (sizes in elements; strides in elements; "contiguous" = row-major, last dimension fastest):
//   q          bf16 | fp16 (batch, seqlen_q, num_heads, head_dim), last dimension contiguous, base and strides
//              multiples of 16 bytes
//   k          as q with (batch, seqlen_k, num_heads_kv, head_dim)
//   v          as q with (batch, seqlen_k, num_heads_kv, head_dim_v)
//   q8, k8, v8 e4m3 with the shapes of q, k, v; last dimension contiguous, base and strides multiples of 16 bytes
//              (a contiguous tensor qualifies)
//   q_descale  fp32 (batch, num_heads, ceil(seqlen_q / q_block_rows)), contiguous: one per block of
//              q_block_rows tokens of one head
//   k_descale  fp32 (batch, num_heads_kv, ceil(seqlen_k / k_block_rows)), contiguous
//   v_descale  fp32 (batch, num_heads_kv, head_dim_v), contiguous: one per V channel, over all seqlen_k tokens
//   rope_cos, rope_sin  fp32 (max_seqlen_rope, rotary_dim / 2), contiguous; token s uses row s
// The real value of a stored e4m3 element is its value times its descale (FA3 paper §3.3).
#pragma once

#include "hopper/abi.h"

namespace fa3jit::quantize_fp8 {

/// Entry `index` of the random +-1 diagonal D of `seed` (FA3 paper §3.3: Q and K are both multiplied by
/// H.D / sqrt(head_dim) with the same D, so Q.K^T is unchanged). splitmix64 of (seed, index); its lowest bit
/// picks the sign. The one definition: the kernel and every host reference call it.
FA3JIT_HOST_DEVICE constexpr float hadamard_sign(unsigned long long seed, int index) {
  unsigned long long z = seed + 0x9E3779B97F4A7C15ull * static_cast<unsigned long long>(index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (z & 1ull) ? -1.0f : 1.0f;
}

/// Largest finite e4m3 (OCP FP8 E4M3 "e4m3fn": S.1111.110 = 448).
inline constexpr float kE4m3Max = 448.0f;
/// amax is clamped into [kMinAmax, kMaxAmax] before the division, so a descale is always a finite, normal,
/// positive float: no 0 (the quantised value would be x / 0) and no infinity (an inf input saturates to 448).
inline constexpr float kMinAmax = 0x1p-100f;
inline constexpr float kMaxAmax = 0x1.fffffep127f;  // FLT_MAX

/// The descale of a block (or V channel) whose largest magnitude is `amax` (NaN elements are ignored by the
/// maximum, so amax is never NaN): 1 when amax is 0, else clamp(amax) / 448, correctly rounded (div.rn on the
/// device, IEEE division on the host: the same float for the same amax). Monotone non-decreasing in amax for
/// amax > 0, so the maximum of descales is the descale of the maximum (the V channel reduction relies on it).
FA3JIT_HOST_DEVICE inline float descale_from_amax(float amax) {
  if (!(amax > 0.0f)) return 1.0f;
  amax = amax < kMinAmax ? kMinAmax : (amax > kMaxAmax ? kMaxAmax : amax);
#if defined(__CUDA_ARCH__)
  float d;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(amax), "f"(kE4m3Max));
  return d;
#else
  return amax / kE4m3Max;
#endif
}

/// The three launches of one call, in stream order, each of its own entry point (emit.h: entry_name;
/// launch.cpp; device/quantize.cuh):
///   kPassQk      Q and K: load, RoPE, Hadamard, block amax, descale, quantise (one pass over the data);
///                also zeroes v_descale, the V channel accumulator of the next two passes;
///   kPassVAmax   V: per-channel amax of a chunk of tokens, merged into v_descale with red.global.max on the
///                bit pattern of descale_from_amax (non-negative floats order as unsigned integers);
///   kPassVQuant  V: quantise with the per-channel descale; writes 1 where the accumulator stayed 0.
enum Pass : int { kPassQk = 0, kPassVAmax = 1, kPassVQuant = 2 };
inline constexpr int kNumPasses = 3;

// Scalars are 32-bit where launch.cpp bounds them (block and chunk counts < 2^31); element strides 64-bit.
#define FA3JIT_QUANTIZE_FP8_PARAMS(FIELD)                                                                 \
  FIELD(const void*, q)            /* 16-bit input, see the layouts above */                              \
  FIELD(const void*, k)                                                                                   \
  FIELD(const void*, v)                                                                                   \
  FIELD(void*, q8)                 /* e4m3 outputs */                                                     \
  FIELD(void*, k8)                                                                                        \
  FIELD(void*, v8)                                                                                        \
  FIELD(float*, q_descale)                                                                                \
  FIELD(float*, k_descale)                                                                                \
  FIELD(float*, v_descale)         /* also the V amax accumulator between the passes */                   \
  FIELD(const float*, rope_cos)    /* null without RoPE */                                                \
  FIELD(const float*, rope_sin)                                                                           \
  FIELD(long long, q_stride_batch) /* elements; 0 for a dimension of extent 1 */                          \
  FIELD(long long, q_stride_seq)                                                                          \
  FIELD(long long, q_stride_head)                                                                         \
  FIELD(long long, k_stride_batch)                                                                        \
  FIELD(long long, k_stride_seq)                                                                          \
  FIELD(long long, k_stride_head)                                                                         \
  FIELD(long long, v_stride_batch)                                                                        \
  FIELD(long long, v_stride_seq)                                                                          \
  FIELD(long long, v_stride_head)                                                                         \
  FIELD(long long, q8_stride_batch)                                                                       \
  FIELD(long long, q8_stride_seq)                                                                         \
  FIELD(long long, q8_stride_head)                                                                        \
  FIELD(long long, k8_stride_batch)                                                                       \
  FIELD(long long, k8_stride_seq)                                                                         \
  FIELD(long long, k8_stride_head)                                                                        \
  FIELD(long long, v8_stride_batch)                                                                       \
  FIELD(long long, v8_stride_seq)                                                                         \
  FIELD(long long, v8_stride_head)                                                                        \
  FIELD(unsigned long long, seed)  /* of the Hadamard sign diagonal (hadamard_sign) */                    \
  FIELD(int, batch)                                                                                       \
  FIELD(int, seqlen_q)                                                                                    \
  FIELD(int, seqlen_k)                                                                                    \
  FIELD(int, num_heads)                                                                                   \
  FIELD(int, num_heads_kv)                                                                                \
  FIELD(int, q_blocks)             /* ceil(seqlen_q / q_block_rows): blocks per (batch, head) */          \
  FIELD(int, k_blocks)             /* ceil(seqlen_k / k_block_rows) */                                    \
  FIELD(int, q_num_blocks)         /* batch * num_heads * q_blocks: entries of q_descale */               \
  FIELD(int, k_num_blocks)         /* batch * num_heads_kv * k_blocks */                                  \
  FIELD(int, q_clusters)           /* kPassQk: clusters of Q blocks; the K clusters follow them */        \
  FIELD(int, v_chunks)             /* ceil(seqlen_k / v_rows_per_cta): V chunks per (batch, kv head) */   \
  FIELD(int, v_units)              /* batch * num_heads_kv * v_chunks: CTAs with V work */                \
  FIELD(int, v_descale_count)      /* batch * num_heads_kv * head_dim_v */

struct Params {
  FA3JIT_QUANTIZE_FP8_PARAMS(FA3JIT_PARAMS_DECLARE)
};

}  // namespace fa3jit::quantize_fp8

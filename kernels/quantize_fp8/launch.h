// FP8 pre-pass: the C++ API an FP8 attention caller runs before the attention kernel, and the launch path
// behind it.
//
//   fa3jit::Runtime rt;                                              // runtime/runtime.h
//   fa3jit::quantize_fp8::QuantizeArgs a = ...;                      // device pointers + sizes + strides
//   fa3jit::quantize_fp8::QuantizeOptions o;                         // hadamard, rope, block rows
//   o.q_block_rows = 128; o.k_block_rows = 176;                      // the attention kernel's block_m/block_n
//   fa3jit::quantize_fp8::quantize_fp8(rt, o, a, stream);            // compiled once, three launches
//
// Layouts (params.h says the same; strides in elements):
//   q            dtype (bf16 | fp16) (batch, seqlen_q, num_heads, head_dim)
//   k            dtype (batch, seqlen_k, num_heads_kv, head_dim)
//   v            dtype (batch, seqlen_k, num_heads_kv, head_dim_v)
//                inputs: last dimension contiguous, batch/seq/head strides free but multiples of 8 elements
//                (16 bytes), base 16-byte aligned (the kernel reads 16 bytes at a time); they may overlap
//                each other (e.g. one packed qkv tensor)
//   q8, k8, v8   e4m3 with the shapes of q, k, v; last dimension contiguous, strides multiples of 16 elements;
//                with v_layout d_major v8 is (batch, num_heads_kv, head_dim_v, seqlen_k rounded up to 16), its
//                stride_seq the stride between channels (kernels/attention_fwd/launch.h: ForwardArgs::v)
//                (16 bytes), base 16-byte aligned; a contiguous (batch, seqlen, heads, dim) tensor qualifies.
//                Each must not overlap itself or any other tensor
//   q_descale    fp32 (batch, num_heads, ceil(seqlen_q / q_block_rows)), contiguous
//   k_descale    fp32 (batch, num_heads_kv, ceil(seqlen_k / k_block_rows)), contiguous
//   v_descale    fp32 (batch, num_heads_kv, head_dim_v), contiguous: one per V channel over all seqlen_k tokens
//   rope_cos, rope_sin  fp32 (rope_max_seqlen, rotary_dim / 2), contiguous, 16-byte aligned; row s is token s
//                of Q and of K; required with RoPE (rope_max_seqlen >= max(seqlen_q, seqlen_k)), must be null
//                without
// The real value of a stored e4m3 element is its value times its descale; descale = amax / 448 of the
// transformed block (channel), 1 when amax is 0 (spec.h, params.h: descale_from_amax). With the Hadamard
// rotation, q8 and k8 hold H.D.(RoPE(x)) / sqrt(head_dim): Q.K^T is unchanged, the attention kernel uses them
// as they are. `seed` picks D (any value; the same for Q and K within a call, which one call guarantees).
//
// Launches (all on `stream`, in order, no allocation, no synchronisation; CUDA-graph capturable): the kernel
// of the spec three times (params.h: Pass): Q and K plus the reset of v_descale, the V channel amax (one
// red.global.max per channel and CTA into v_descale), V quantisation. V is read twice (the second read mostly
// from L2); Q and K once.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/quantize_fp8/spec.h"
#include "runtime/runtime.h"
#include "runtime/tensor_check.h"

namespace fa3jit::quantize_fp8 {

struct QuantizeArgs {
  DType dtype = DType::kBf16;  // of q, k, v
  int64_t batch = 0, seqlen_q = 0, seqlen_k = 0, num_heads = 0, num_heads_kv = 0;
  int64_t head_dim = 0, head_dim_v = 0;  // 64, 128, 256
  TensorView q, k, v;                    // inputs: data + batch/seq/head strides in elements
  TensorView q8, k8, v8;                 // e4m3 outputs
  float* q_descale = nullptr;
  float* k_descale = nullptr;
  float* v_descale = nullptr;
  const float* rope_cos = nullptr;       // with RoPE only
  const float* rope_sin = nullptr;
  int64_t rope_max_seqlen = 0;           // rows of rope_cos and rope_sin
  uint64_t seed = 0;                     // of the Hadamard sign diagonal (params.h: hadamard_sign)
};

/// The spec fields a caller chooses; dtype and head dims come from the arguments.
struct QuantizeOptions {
  bool hadamard = true;
  Rope rope = Rope::kNone;
  int rotary_dim = 0;  // 0: head_dim
  int q_block_rows = 128;
  int k_block_rows = 128;
  bool v_d_major = false;  // spec field v_layout "d_major": v8 is written transposed (spec.h)
};

/// seqlen and batch x heads x blocks above this are refused: the kernel's block, row and chunk indices are
/// 32-bit, with a cluster of headroom.
inline constexpr int64_t kMaxIndex = 0x7fffffff - 4096;

/// The spec of a call with `options`: args' dtype, head_dim, head_dim_v and the options, validated
/// (Error(kInvalidSpec) for bad options, Error(kUnsupported) for a dtype or head dim outside capabilities()).
Spec spec_for(const QuantizeArgs& args, const QuantizeOptions& options);

/// Checks `args` (see below), then launches the three passes of the kernel of spec_for(args, options) on
/// `stream` (a CUstream of the current context; null = its default stream). The current context must be on
/// q's device; with no current context, that device's primary context is made current.
/// Throws, before touching any tensor: Error(kUnsupported) for a dtype or head dim outside capabilities();
/// Error(kInvalidSpec) for bad options; Error(kInvalidArgument) naming the argument for a size < 1 or too
/// large, a null, misaligned or foreign pointer, tensors on different devices, a stride that is not a positive
/// multiple of 16 bytes, an output that overlaps itself or another tensor, an extent past its allocation, a
/// RoPE table that is missing, unexpected or shorter than the sequences, or a stream of another context;
/// Error(kNoDriver) without a driver; Error(kCompileFailed / kCacheError) when the kernel cannot be built;
/// Error(kDriverError) when a driver call (a launch included) fails. Asynchronous: the kernels may still run
/// when this returns.
void quantize_fp8(Runtime& runtime, const QuantizeOptions& options, const QuantizeArgs& args, void* stream);

/// Same with an explicit spec: args.dtype, head_dim and head_dim_v must equal the spec's, else
/// Error(kInvalidArgument) naming the argument and the spec's value; Error(kInvalidSpec) for a spec
/// validate() refuses.
void quantize_fp8(Runtime& runtime, const Spec& spec, const QuantizeArgs& args, void* stream);

/// The number of descales of each tensor for a call (what q_descale, k_descale, v_descale must hold).
struct DescaleCounts {
  int64_t q, k, v;
};
DescaleCounts descale_counts(const Spec& spec, const QuantizeArgs& args);

}  // namespace fa3jit::quantize_fp8

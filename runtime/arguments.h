// Validation of a forward call's arguments, before anything touches the GPU's memory.
//
// Every check throws Error(kInvalidArgument) (kUnsupported for e4m3) with a message naming the argument,
// its value and what is allowed. Beyond shapes and dtypes it guarantees what the kernel needs to stay in
// bounds: 16-byte aligned bases and strides (TMA), every element of q/k/v/out and every lse value inside the
// allocation that holds its base pointer, out neither overlapping itself nor k, v, lse (q only when out is q
// exactly, in place), all tensors on one device whose context is current, a stream of that context, index
// arithmetic that fits the kernel's 32-bit math, and a positive, finite softmax_scale.
#pragma once

#include <cstdint>

#include "runtime/attention.h"

namespace fa3jit {

/// A (batch, seqlen, heads, dim) tensor's logical shape, with its argument name for messages.
struct TensorShape {
  const char* name;
  int64_t batch, seqlen, heads, dim;
};

/// The arguments after validation, in the units the launcher needs.
struct ValidatedArgs {
  int device = -1;  // ordinal of q's device (also the current context's)
  int elem_bytes = 2;
  int64_t batch = 0, seqlen_q = 0, seqlen_k = 0, num_heads = 0, num_heads_kv = 0, head_dim = 0, head_dim_v = 0;
  float softmax_scale = 0.0f;  // resolved: 1/sqrt(head_dim) when the argument was 0
  TensorShape q, k, v, out;
};

/// Checks `a` against `spec` and the device state (current context, `stream`). Makes q's device's primary
/// context current when no context is current on this thread.
ValidatedArgs validate_forward_args(const Spec& spec, const ForwardArgs& a, void* stream);

/// Largest seqlen_q / seqlen_k accepted: the kernel's row and column indices are 32-bit with up to one
/// tile (256) of headroom.
inline constexpr int64_t kMaxSeqlen = 0x7fffffff - 1024;

}  // namespace fa3jit

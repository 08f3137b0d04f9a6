// The launch contract of the split-KV combine kernel, read by both compilers: the host (launch.cpp) and the
// generated unit (emit.cpp inlines this file). Params is the kernel's only argument, passed as
// `const __grid_constant__ Params`. Includes nothing beyond hopper/abi.h: NVRTC has no headers.
//
// Layouts (sizes in elements; "contiguous" = row-major, last dimension fastest):
//   out_partial  fp32 (num_splits, batch, seqlen_q, num_heads, head_dim_v), contiguous, 16-byte aligned
//   lse_partial  fp32 (num_splits, batch, num_heads, seqlen_q), contiguous, natural log, -inf = empty split
//   out          bf16 | fp16 (batch, seqlen_q, num_heads, head_dim_v), last dimension contiguous, the others
//                strided by out_stride_*: multiples of 4 elements, base 8-byte aligned
//   lse          fp32 (batch, num_heads, seqlen_q), contiguous, natural log; may be null
// A "row" is one (batch, head, query); the kernel numbers rows as lse does, row = (b * num_heads + h) *
// seqlen_q + q, so the LSEs of consecutive rows are adjacent in memory.
#pragma once

#include "hopper/abi.h"

namespace fa3jit::attention_combine {

// Scalars are 32-bit where launch.cpp bounds them (num_rows < 2^31); element offsets that can pass 2^31
// (strides, the split stride of out_partial) are 64-bit.
#define FA3JIT_ATTENTION_COMBINE_PARAMS(FIELD)                                                            \
  FIELD(const float*, out_partial) /* see the layouts above */                                            \
  FIELD(const float*, lse_partial)                                                                        \
  FIELD(void*, out)                /* 16-bit elements of the spec's out_dtype */                          \
  FIELD(float*, lse)               /* null: not written */                                                \
  FIELD(long long, out_stride_batch) /* elements */                                                       \
  FIELD(long long, out_stride_seq)                                                                        \
  FIELD(long long, out_stride_head)                                                                       \
  FIELD(long long, split_stride)   /* elements between two splits of out_partial: num_rows * head_dim_v */ \
  FIELD(int, num_rows)             /* batch * num_heads * seqlen_q; also the split stride of lse_partial */ \
  FIELD(int, num_splits)           /* in [1, max_splits] */                                               \
  FIELD(int, seqlen_q)                                                                                    \
  FIELD(int, num_heads)

struct Params {
  FA3JIT_ATTENTION_COMBINE_PARAMS(FA3JIT_PARAMS_DECLARE)
};

}  // namespace fa3jit::attention_combine

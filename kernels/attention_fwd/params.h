// The launch contract of the attention forward kernel, read by both compilers: the host (launch.cpp,
// tile_table.cpp) and the generated unit (emit.cpp inlines this file). One definition each of
//  - Params: the kernel's only argument, passed as `const __grid_constant__ Params`;
//  - smem_plan(): where Q, the K/V stages and the barriers live in dynamic shared memory, and how many bytes
//    the launch requests.
// Includes nothing beyond hopper/abi.h: NVRTC has no headers, and the host must not see device code.
#pragma once

#include "hopper/abi.h"

namespace fa3jit::attention_fwd {

// Tensor maps: 4-D {dim, seqlen, heads, batch}, box {64, rows, 1, 1}, 128-byte swizzle
// (docs/kernel-design.md §3). Scalars are 32-bit: the kernel's index math is 32-bit (launch.cpp checks).
#define FA3JIT_ATTENTION_FWD_PARAMS(FIELD)                                                              \
  FIELD(TmaDesc, tm_q)       /* q (batch, seqlen_q, num_heads, head_dim), box rows block_m */           \
  FIELD(TmaDesc, tm_k)       /* k (batch, seqlen_k, num_heads_kv, head_dim), box rows block_n/cluster */ \
  FIELD(TmaDesc, tm_v)       /* v (batch, seqlen_k, num_heads_kv, head_dim_v), as k */                  \
  FIELD(TmaDesc, tm_o)       /* out (batch, seqlen_q, num_heads, head_dim_v), box rows 64 */            \
  FIELD(float*, lse)         /* (batch, num_heads, seqlen_q) fp32, natural log; may be null */          \
  FIELD(int, seqlen_q)                                                                                  \
  FIELD(int, seqlen_k)                                                                                  \
  FIELD(int, num_heads)                                                                                 \
  FIELD(int, head_group)     /* num_heads / num_heads_kv (GQA): kv head = head / head_group */          \
  FIELD(int, batch)                                                                                     \
  FIELD(int, num_m_blocks)   /* row blocks per head, rounded up to a multiple of cluster_m */           \
  FIELD(int, section_heads)  /* causal tile order: (head, batch) pairs per L2 section (scheduler) */    \
  FIELD(float, softmax_scale) /* natural-log scale of Q.K^T */                                           \
  FIELD(float, scale_log2)   /* softmax_scale * log2(e), folded into one FFMA before ex2 */

struct Params {
  FA3JIT_ATTENTION_FWD_PARAMS(FA3JIT_PARAMS_DECLARE)
};

/// Byte offsets of one CTA's dynamic shared memory. Every tile starts on a 1024-byte boundary (128-byte
/// swizzle atoms, docs/kernel-design.md §2); the launch requests 1024 bytes of slack on top so the kernel
/// can align the base of the dynamic window.
struct SmemPlan {
  int q_bytes;          // block_m x head_dim (also the O staging tile of the epilogue)
  int k_stage_bytes;    // block_n x head_dim
  int v_stage_bytes;    // block_n x head_dim_v
  int q_offset, k_offset, v_offset, barrier_offset;
  int num_barriers;     // q_full + k_full, k_empty, v_full, v_empty per stage
  int launch_bytes;     // dynamic shared memory requested at launch
};

inline constexpr int kBarrierAreaBytes = 256;  // room for the mbarriers of up to 4 stages (17 x 8 bytes)
inline constexpr int kSmemAlignSlack = 1024;

FA3JIT_HOST_DEVICE constexpr SmemPlan smem_plan(int block_m, int block_n, int head_dim, int head_dim_v, int stages, int elem_bytes) {
  SmemPlan p{};
  p.q_bytes = block_m * head_dim * elem_bytes;
  p.k_stage_bytes = block_n * head_dim * elem_bytes;
  p.v_stage_bytes = block_n * head_dim_v * elem_bytes;
  p.q_offset = 0;
  p.k_offset = p.q_offset + p.q_bytes;
  p.v_offset = p.k_offset + stages * p.k_stage_bytes;
  p.barrier_offset = p.v_offset + stages * p.v_stage_bytes;
  p.num_barriers = 1 + 4 * stages;
  p.launch_bytes = p.barrier_offset + kBarrierAreaBytes + kSmemAlignSlack;
  return p;
}

}  // namespace fa3jit::attention_fwd

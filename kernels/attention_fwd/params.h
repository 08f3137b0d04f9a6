// The launch contract of the attention forward kernel, read by both compilers: the host (launch.cpp,
// tile_table.cpp) and the generated unit (emit.cpp inlines this file). One definition each of
//  - Params: the kernel's only argument, passed as `const __grid_constant__ Params`;
//  - smem_plan(): where Q, the K/V stages and the barriers live in dynamic shared memory, and how many bytes
//    the launch requests.
// Includes nothing beyond hopper/abi.h: NVRTC has no headers, and the host must not see device code.
#pragma once

#include "hopper/abi.h"
#include "kernels/attention_fwd/device/fp8_v_layout.h"  // fp8_key_position, d_major_keys

namespace fa3jit::attention_fwd {

// Tensor maps: 4-D {dim, seqlen, heads, batch}, box {64, rows, 1, 1}, 128-byte swizzle
// (docs/kernel-design.md §3). Scalars are 32-bit: the kernel's index math is 32-bit (launch.cpp checks).
#define FA3JIT_ATTENTION_FWD_PARAMS(FIELD)                                                              \
  FIELD(TmaDesc, tm_q)       /* q (batch, seqlen_q, num_heads, head_dim), box rows block_m */           \
  FIELD(TmaDesc, tm_k)       /* k (batch, seqlen_k, num_heads_kv, head_dim), box rows block_n/cluster */ \
  FIELD(TmaDesc, tm_v)       /* v (batch, seqlen_k, num_heads_kv, head_dim_v), as k */                  \
  FIELD(TmaDesc, tm_o)       /* out (batch, seqlen_q, num_heads, head_dim_v), box rows 64 */            \
  FIELD(float*, lse)         /* (batch, num_heads, seqlen_q) fp32, natural log; may be null */          \
  FIELD(int, seqlen_q)       /* dense: per sequence; varlen_q: total_q (rows of q) */                   \
  FIELD(int, seqlen_k)       /* dense: per sequence; varlen_k: total_k; paged: max_pages * page_size */  \
  FIELD(int, num_heads)                                                                                 \
  FIELD(int, head_group)     /* num_heads / num_heads_kv (GQA): kv head = head / head_group */          \
  FIELD(int, batch)                                                                                     \
  FIELD(int, num_m_blocks)   /* row blocks per head (of max_seqlen_q), rounded up to cluster_m */       \
  FIELD(int, section_heads)  /* causal tile order: (head, batch) pairs per L2 section (scheduler) */    \
  FIELD(int, num_tiles)      /* tiles of the call; a persistent grid's CTAs stride over them */          \
  FIELD(int*, tile_counter)  /* causal persistent grid: tiles handed out so far past the first gridDim.x, */ \
                             /* zero at launch (launch.cpp: the call's workspace); null: a static order */ \
  FIELD(const float*, q_descale) /* e4m3: launch.h ScaleView; null for 16-bit */                         \
  FIELD(const float*, k_descale)                                                                        \
  FIELD(const float*, v_descale)                                                                        \
  FIELD(int, q_descale_stride_batch) /* elements */                                                     \
  FIELD(int, q_descale_stride_head)                                                                     \
  FIELD(int, k_descale_stride_batch)                                                                    \
  FIELD(int, k_descale_stride_head)                                                                     \
  FIELD(int, v_descale_stride_batch)                                                                    \
  FIELD(int, v_descale_stride_head)                                                                     \
  FIELD(float, scale_log2)   /* softmax_scale * log2(e), folded into one FFMA before ex2 */                \
  /* serving layouts (spec fields varlen_q, varlen_k, paged_kv, pack_gqa, split_kv; launch.h ForwardArgs): */ \
  /* int32 tensors only the GPU reads; device/seqlen.cuh clamps every value into the tensors given */         \
  FIELD(const int*, cu_seqlens_q) /* (batch + 1); q, out (seqlen_q = total_q, heads, d), lse (heads, total_q) */ \
  FIELD(const int*, cu_seqlens_k) /* (batch + 1); k, v (seqlen_k = total_k, heads_kv, d) */                  \
  FIELD(const int*, seqused_k)    /* (batch) or null: keys used per sequence */                              \
  FIELD(const int*, page_table)   /* (batch, max_pages), row stride page_table_stride */                     \
  FIELD(int, page_table_stride)                                                                         \
  FIELD(int, max_pages)                                                                                 \
  FIELD(int, num_pages)                                                                                 \
  FIELD(int, page_size)                                                                                 \
  FIELD(int, page_box_rows)  /* gcd(page_size, block_n): rows of one K/V TMA box inside one page */      \
  /* paged_gather (any page size): k and v as the producer's cp.async rows read them, strides in bytes */      \
  FIELD(const char*, k_data)                                                                            \
  FIELD(const char*, v_data)                                                                            \
  FIELD(long long, k_stride_page)                                                                       \
  FIELD(long long, k_stride_row)                                                                        \
  FIELD(long long, k_stride_head)                                                                       \
  FIELD(long long, v_stride_page)                                                                       \
  FIELD(long long, v_stride_row)                                                                        \
  FIELD(long long, v_stride_head)                                                                       \
  FIELD(int, num_heads_kv)                                                                              \
  FIELD(int, pack_rows)      /* pack_gqa: queries per M tile, block_m / head_group; else block_m */     \
  FIELD(int, num_splits)     /* >= 1; > 1: partials into out_partial / lse_partial */                   \
  FIELD(float*, out_partial) /* fp32 (num_splits, lse_batch, seqlen_q, num_heads, head_dim_v) */        \
  FIELD(float*, lse_partial) /* fp32 (num_splits, lse_batch, num_heads, seqlen_q) */                    \
  FIELD(void*, out)          /* out's base: the epilogue's own stores (varlen_q, pack_gqa) */            \
  FIELD(long long, out_stride_batch) /* elements */                                                     \
  FIELD(long long, out_stride_seq)                                                                      \
  FIELD(long long, out_stride_head)                                                                     \
  /* attention variant (spec fields local, softcap, sinks; device/variant.cuh) */                        \
  FIELD(int, window_left)    /* local: keys i + d - left .. i + d + right (d = seqlen_k - seqlen_q), >= 0 */ \
  FIELD(int, window_right)   /* unbounded sides as 0x7fffffff; causal window: right 0 */                 \
  FIELD(float, softcap_log2) /* softcap: softcap * log2(e), > 0 */                                       \
  FIELD(const float*, sinks) /* sinks: (num_heads) fp32 logits, in the units of the scaled scores */

struct Params {
  FA3JIT_ATTENTION_FWD_PARAMS(FA3JIT_PARAMS_DECLARE)
};

/// How V reaches the P.V GEMM (spec fields dtype and v_layout; device/smem_layout.cuh). The one statement of it:
/// the host's plan, the kernel's layout and the producer derive from this value.
///   kVStageMnMajor   16-bit: TMA writes V as it is in memory (block_n rows of head_dim_v, 128-byte swizzle) and
///                    P.V reads it transposed (MN-major B, trans-b);
///   kVStageTransposed e4m3, v_layout "seq_major": TMA writes V into a V load stage and the producer warpgroup
///                    transposes it into the K-major V stage (device/transpose_v.cuh), 128-byte swizzle, column blocks
///                    of 128 keys;
///   kVStageDMajor    e4m3, v_layout "d_major": V is given transposed (launch.h), and TMA writes it straight into
///                    the K-major V stage in boxes of 32 keys x head_dim_v channels, 32-byte swizzle: one box per
///                    k32 step of P.V, so any block_n that is a multiple of 32 loads no key twice.
enum VStage : int { kVStageMnMajor = 0, kVStageTransposed = 1, kVStageDMajor = 2 };

/// Byte offsets of one CTA's dynamic shared memory. Every tile starts on a 1024-byte boundary (128-byte
/// swizzle atoms, docs/kernel-design.md §2); the launch requests 1024 bytes of slack on top so the kernel
/// can align the base of the dynamic window. Order: Q | V load stages (e4m3 seq_major) | O tail | K stages |
/// V stages | O tail (persistent) | P (p_in_smem) | barriers. The epilogue stages O
///  - one tile per CTA: from the start of Q over Q, the V load stages (all free by then) and the O tail before the K
///    stages: the bytes of O that Q and the load stages do not cover (an e4m3 d_major kernel's 16-bit O is twice its
///    Q; 0 for every other kernel);
///  - persistent grid: from the start of the V stages over them and the O tail after them, so that the next tile's Q
///    and first K blocks load while O is stored (FA3 aliases its O staging with V likewise).
struct SmemPlan {
  int q_bytes;          // block_m x head_dim
  int v_load_stage_bytes;  // kVStageTransposed: block_n x head_dim_v as TMA writes V (seqlen-major), which the
                           // producer transposes into a V stage; 0 otherwise
  int k_stage_bytes;    // block_n x head_dim
  int v_stage_bytes;    // kVStageMnMajor: block_n x head_dim_v; e4m3: transposed_v_rows(head_dim_v) rows of block_n
                        // keys (K-major), in ceil(block_n / 128) column blocks of 128 keys (kVStageTransposed) or
                        // block_n / 32 boxes of 32 keys (kVStageDMajor)
  int o_bytes;          // block_m x head_dim_v in the output dtype (the epilogue's staging tile)
  int o_tail_bytes;     // what O needs past the area it is staged over, rounded up to 1024
  int o_staging_bytes;  // what the epilogue may use: that area and the O tail
  int p_bytes;          // p_in_smem: block_m x block_n probabilities, the A operand of P.V (each consumer warpgroup's
                        // 64 rows K-major, 128-byte swizzled like Q); 0 otherwise. Its own area: a warpgroup may stage
                        // O while another still runs its last P.V
  int q_offset, v_load_offset, k_offset, v_offset, o_offset, p_offset, barrier_offset;
  int num_barriers;     // q_full + k_full, k_empty, v_full, v_empty per stage (+ v_load_full, v_load_empty with a
                        // V load stage, else + v_tail) (+ kPersistentBarriers on a persistent grid)
  int launch_bytes;     // dynamic shared memory requested at launch
};

inline constexpr int kBarrierAreaBytes = 256;  // room for the mbarriers of up to 4 stages (at most 32 x 8 bytes)
/// 8-byte entries after the stage barriers of a persistent grid (device/smem_layout.cuh): q_empty, o_empty, tile_full[2],
/// tile_empty[2] and the two int32 slots through which the producer hands a dynamically scheduled tile to the consumers.
inline constexpr int kPersistentBarriers = 7;
inline constexpr int kSmemAlignSlack = 1024;

/// Bytes of one tile row in shared memory: whole 128-byte swizzle rows (an e4m3 head_dim of 64 fills half of one;
/// TMA writes zeros past the tensor's last column).
FA3JIT_HOST_DEVICE constexpr int smem_row_bytes(int cols, int elem_bytes) { return (cols * elem_bytes + 127) / 128 * 128; }

/// e4m3: rows of a transposed V stage, head_dim_v rounded up to the V transpose's 32 channels (device/transpose_v.cuh;
/// the rows past head_dim_v hold the zeros TMA wrote past V's last column and are never read by P.V).
FA3JIT_HOST_DEVICE constexpr int transposed_v_rows(int head_dim_v) { return (head_dim_v + 31) / 32 * 32; }

/// Keys per TMA box and per P.V k-step of a kVStageDMajor V stage (32-byte swizzle rows).
inline constexpr int kDMajorBoxKeys = 32;


FA3JIT_HOST_DEVICE constexpr SmemPlan smem_plan(int block_m, int block_n, int head_dim, int head_dim_v, int stages,
                                                int elem_bytes, int out_elem_bytes, int v_stage, bool persistent,
                                                bool p_in_smem) {
  SmemPlan p{};
  const bool load_stages = v_stage == kVStageTransposed;
  p.q_bytes = block_m * smem_row_bytes(head_dim, elem_bytes);
  p.v_load_stage_bytes = load_stages ? block_n * smem_row_bytes(head_dim_v, elem_bytes) : 0;
  p.k_stage_bytes = block_n * smem_row_bytes(head_dim, elem_bytes);
  p.v_stage_bytes = v_stage == kVStageTransposed ? (block_n + 127) / 128 * transposed_v_rows(head_dim_v) * 128
                    : v_stage == kVStageDMajor   ? block_n * transposed_v_rows(head_dim_v)
                                                 : block_n * smem_row_bytes(head_dim_v, elem_bytes);
  p.o_bytes = block_m * smem_row_bytes(head_dim_v, out_elem_bytes);
  const auto tail = [&](int lent) { return p.o_bytes > lent ? (p.o_bytes - lent + 1023) / 1024 * 1024 : 0; };
  // One tile per CTA: O over Q and the load stages. Only an e4m3 d_major kernel has a tail there (its Q is half its O
  // and it has no load stages); a 16-bit head_dim_v past head_dim keeps the budget check's message (tile_table.cpp).
  const int lent = persistent ? stages * p.v_stage_bytes : p.q_bytes + stages * p.v_load_stage_bytes;
  p.o_tail_bytes = persistent || v_stage == kVStageDMajor ? tail(lent) : 0;
  p.o_staging_bytes = lent + p.o_tail_bytes;
  p.q_offset = 0;
  p.v_load_offset = p.q_offset + p.q_bytes;
  p.k_offset = p.v_load_offset + stages * p.v_load_stage_bytes + (persistent ? 0 : p.o_tail_bytes);
  p.v_offset = p.k_offset + stages * p.k_stage_bytes;
  p.o_offset = persistent ? p.v_offset : p.q_offset;
  p.p_bytes = p_in_smem ? block_m * smem_row_bytes(block_n, elem_bytes) : 0;
  p.p_offset = p.v_offset + stages * p.v_stage_bytes + (persistent ? p.o_tail_bytes : 0);
  p.barrier_offset = p.p_offset + p.p_bytes;
  p.num_barriers = 1 + (load_stages ? 6 * stages : 4 * stages + 1) + (persistent ? kPersistentBarriers : 0);
  p.launch_bytes = p.barrier_offset + kBarrierAreaBytes + kSmemAlignSlack;
  return p;
}

}  // namespace fa3jit::attention_fwd

// Attention forward tile table and resource budgets: the single source of the default tile per
// (dtype, head_dim, causal) and of the numbers the kernel and the launcher both derive from a Spec.
//
// The generator bakes these numbers into the kernel and the runtime reads the same table to pick a spec for
// a call, as FA3's tile_size_fwd_sm90() is shared by its host heuristics and kernels (FA3 hopper/tile_size.h;
// FA3 paper section 3).
#pragma once

#include "kernels/attention_fwd/params.h"
#include "kernels/attention_fwd/spec.h"

namespace fa3jit::attention_fwd {

/// Hopper limits used by the budgets (H100/H200, sm_90a).
inline constexpr int kMaxSharedMemoryPerBlock = 232448;  // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
inline constexpr int kRegistersPerSm = 65536;

/// Defaults for the kernel fields that a spec may leave out.
struct TileDefaults {
  int block_m;
  int block_n;
  int consumer_warpgroups;
  int stages;
  bool pingpong;
  bool intra_wg_overlap;
  int cluster_m = 1;
  bool fp32_two_level_accum = false;  // e4m3 only
  bool persistent = false;            // rows measured faster there (tile_table.cpp: persistent_row), where the
                                      // spec allows it (spec.h: persistent_conflict)
  bool rescale_o_before_pv = false;   // where intra_wg_overlap runs without fp32_two_level_accum
  bool load_k_ahead = false;          // where the producer is not e4m3's V-transposing one (spec.h: load_k_ahead_fits)
  bool mask_free_loop = false;        // tile_table.cpp: mask_free_loop_row
  bool softmax_in_mask_arms = false;  // tile_table.cpp: softmax_in_mask_arms_row
  bool lazy_rescale = false;          // tile_table.cpp: lazy_rescale_row, where the spec allows it
  bool l2_evict_hints = false;        // tile_table.cpp: l2_evict_hints_row
  bool p_in_smem = false;             // the row's tile (table_tile), where the spec allows it (spec.h: p_in_smem_fits)
  bool pin_pv_wait = false;           // tile_table.cpp: pin_pv_wait_row, where the spec allows it
};

/// Default tile for (dtype, head_dim, head_dim_v, causal), each dim of the dtype's rule (spec.h: HeadDimRule). The
/// table has rows for the tuned head dims (capabilities().tuned_head_dims: 64, 96, 128, 192, 256, and the pair
/// 192 / 128); any other size takes the row at or above it (its shared-memory rows and TMA boxes cover the next
/// 64-column block, zero-filled past the last column), a pair of different rows the row of the larger one with
/// block_n narrowed until the budgets fit. Error(kUnsupported) names both dims when no tile fits (e.g. head_dim 64
/// with head_dim_v 256: the output does not fit the shared memory it is staged in).
TileDefaults default_tile(DType dtype, int head_dim, int head_dim_v, bool causal);

/// The tile of the kernel the runtime (or a spec leaving the tile out) picks for (dtype, head dims, causal,
/// layout): the decode tile for layout.short_q, else the default tile of the mask (a sliding window takes the causal
/// one); e4m3 with softcap narrows block_n where tanh's extra live values made FA3's widest fp8 tiles spill (ptxas).
/// e4m3 with layout.v_d_major takes the d_major rows, except with quant per_block in the tile table's calls: their
/// per-block descales are laid out by the transposing kernel's tile (fa3jit_attention_quant_blocks for (head_dim,
/// causal) knows no V layout), so such a call keeps it; a written-out spec (layout.descale_rows_from_kernel, whose
/// caller asks the kernel for its descale rows) takes the d_major rows. Over gathered pages (layout.paged_gather) a
/// tile narrows block_n until the register estimate fits the gather kernel's register split (derive_config; with
/// softcap beside three warpgroups d64's 192 x 128 narrows to 192 x 112, which ptxas showed to spill otherwise).
TileDefaults variant_tile(DType dtype, int head_dim, int head_dim_v, bool causal, Quant quant, const Layout& layout);

/// Short causal calls: a dense causal call (no cu_seqlens, page table, pack_gqa or per_block descales) with seqlen_k
/// <= short_causal_max_seqlen_k takes the short-causal tile (layout.short_causal; variant_tile): 128 x 128 with two
/// consumer warpgroups, the rest of the causal row's fields. There the diagonal key block of every row block is a
/// large share of its work, and a narrower block computes fewer scores the mask discards: measured on the H200
/// (bench/NOTES.md, one process), bf16 d128 128x128 against 128x176 +12 % at 512 keys, +7 % at 1k, +4 % at 2k, -2 %
/// at 8k; d64 128x128 against 192x128 +10 % at 512 and 1k, -6 % at 2k. 0 (none) for the rows not measured (e4m3,
/// d96, d192, d256, pairs of different dims).
int short_causal_max_seqlen_k(DType dtype, int head_dim, int head_dim_v);

/// Tile of a call whose M tile holds at most 64 rows (a decode step, with or without pack_gqa): one consumer
/// warpgroup of 64 rows, the key block and stages sized so about 128 KB of K/V are in flight per CTA, since
/// such a call is bound by memory bandwidth, not by the tensor cores.
TileDefaults decode_tile(DType dtype, int head_dim, int head_dim_v);

/// Numbers derived from a valid Spec that the kernel and the launcher both need.
struct KernelConfig {
  Spec spec;
  int num_threads;             // 128 * (consumer_warpgroups + 1): one producer warpgroup
  int producer_registers;      // setmaxnreg.dec target of the producer warpgroup
  int consumer_registers;      // setmaxnreg.inc target of each consumer warpgroup
  int elem_bytes;              // of q, k, v (core/dtype.h)
  int out_elem_bytes;          // of out
  int pv_chunk_n;              // columns of O per P.V pass: head_dim_v, or less with fp32_two_level_accum
  int v_stage;                 // params.h VStage: how V reaches P.V (16-bit, e4m3 transposed in the kernel, d_major)
  SmemPlan smem;               // params.h: the plan the device code reads too
  int smem_bytes;              // smem.launch_bytes: dynamic shared memory requested at launch
  int estimated_consumer_registers;  // accumulators + P + overhead, checked against consumer_registers
};

/// Pure arithmetic on a spec whose fields are in range (validate() checks that first).
KernelConfig derive_config(const Spec& spec);

/// The resource part of validate(): throws Error(kInvalidSpec) when shared memory exceeds
/// kMaxSharedMemoryPerBlock or the register estimate exceeds the setmaxnreg budget, naming the fields.
void check_budgets(const Spec& spec, const KernelConfig& config);
/// The messages check_budgets throws (empty: the spec fits); the tile table narrows its tiles with it.
std::vector<std::string> budget_problems(const Spec& spec, const KernelConfig& config);

/// validate(spec), then derive_config(spec): the way every stage gets a KernelConfig.
KernelConfig make_kernel_config(const Spec& spec);

}  // namespace fa3jit::attention_fwd

// Attention forward: the kernel spec a user writes (JSON), its capability table, its one validator and its
// canonical form.
//
// JSON fields (all optional except dtype and head_dim; unknown keys are errors):
//   kind                "attention_fwd" (the default kind of a spec document, jit/family.h)
//   dtype               element type of q, k, v: a dtype of capabilities() ("fp16" | "bf16" | "e4m3")
//   out_dtype           element type of out: for fp16/bf16 the input dtype (the default; nothing else is
//                       allowed), for e4m3 "bf16" (default) or "fp16"
//   head_dim            a head dim of capabilities() for the dtype: fp16/bf16 a multiple of 8 in [8, 256], e4m3 a
//                       multiple of 16 in [16, 256]; each is generated directly (the sizes between the tile
//                       table's rows 64, 96, 128, 192, 256 run the next row's tile, with TMA's zero fill past the
//                       last column; docs/kernel-design.md, "Head dims")
//   head_dim_v          defaults to head_dim; any size of the same rule (DeepSeek's MLA prefill: 192 / 128), where
//                       a tile fits the shared-memory and register budgets (the tile table says which do not)
//   quant               e4m3 only: how q, k, v are scaled (the descale arguments, launch.h: ScaleView):
//                       "per_head" (default; FA3's contract: q_descale, k_descale, v_descale of shape
//                       (batch, num_heads_kv)) or "per_block" (q: one per (batch, head, block_m rows), k: one
//                       per (batch, kv head, block_n rows), v: one per (batch, kv head, head_dim_v channel));
//                       "none" for 16-bit dtypes (the default there, and the only value)
//   v_layout            how v is laid out in memory: "seq_major" (default; FlashAttention's (batch, seqlen_k,
//                       num_heads_kv, head_dim_v)) or, e4m3 only, "d_major": V given transposed, (batch, num_heads_kv,
//                       head_dim_v, seqlen_k rounded up to 16) with the keys of every 16 in the kernel's order
//                       (launch.h: ForwardArgs::v), so the kernel loads it straight into the K-major operand the FP8
//                       wgmma needs and skips the producer's V transpose; not with varlen_k or paged_kv
//   fp32_two_level_accum e4m3 only, bool: P.V of each key block goes into a fresh accumulator that is added to
//                       the fp32 O registers, so the FP8 tensor cores' limited accumulation precision does not
//                       grow with seqlen_k; default from the tile table
//   causal              bool, default false; bottom-right aligned mask (FA3 semantics)
//   tile {block_m, block_n}        defaults from the tile table (tile_table.h)
//   consumer_warpgroups 1..3, default from the tile table; must equal block_m / 64
//   stages              2..4, default from the tile table
//   pingpong            bool, default from the tile table (needs intra_wg_overlap and 2-3 warpgroups)
//   intra_wg_overlap    bool, default from the tile table
//   rescale_o_before_pv bool, default from the tile table; needs intra_wg_overlap and no fp32_two_level_accum: O is
//                       multiplied by the previous block's softmax factor between issuing S = Q.K^T and O += P.V,
//                       while the tensor cores run Q.K^T, instead of after P.V has completed (FA3's
//                       RescaleOBeforeGemm, which it takes for 16-bit head dims above 128)
//   load_k_ahead        bool, default from the tile table; not with e4m3 v_layout "seq_major" (its producer
//                       warpgroup transposes V one block behind the loads): the producer issues K of block j - 1
//                       before V of block j (FA3's load order under intra-warpgroup overlap) instead of K and V of
//                       block j together, so the K a Q.K^T waits for is not queued behind a V stage the consumers
//                       free only after their P.V; the outputs are the same bit for bit
//   mask_free_loop      bool, default from the tile table (tile_table.cpp: mask_free_loop_row): true runs the key
//                       blocks that need no mask (FA3's steady state) through a second copy of the key-block loop
//                       that holds no mask code; false runs every block through the masked copy, which checks per
//                       block whether to mask, and in the intra_wg_overlap schedule the first block too (peeled
//                       otherwise: it has no P.V yet); one copy of the body takes about half the NVRTC time of two
//                       copies and a peeled first block; the outputs are the same bit for bit; a spec that asks for
//                       softmax_in_mask_arms true and leaves this field out gets false (e4m3 too, whose table
//                       runs two copies)
//   softmax_in_mask_arms bool, default from the tile table (tile_table.cpp: softmax_in_mask_arms_row, which has
//                       the measurements); needs the one-copy loop of the intra_wg_overlap schedule without
//                       fp32_two_level_accum (softmax_in_mask_arms_fits): true emits the softmax in both arms of the
//                       per-block mask branch instead of after their join, so the wait for the block's P.V stays
//                       after the softmax (device/mainloop.cuh: softmax_step says why); the outputs are the same bit
//                       for bit
//   lazy_rescale        bool, default from the tile table (tile_table.cpp: lazy_rescale_row); 16-bit dtypes
//                       without rescale_o_before_pv (lazy_rescale_fits): a row keeps the maximum O was scaled to while a key block's maximum
//                       rises at most 8 (log2 units) above it, so P lies in [0, 256] and O is rescaled only when a
//                       row of the warp moves its maximum further (device/softmax.cuh); outputs and LSE agree with
//                       false to rounding, not bit for bit
//   l2_evict_hints      bool, default from the tile table (tile_table.cpp: l2_evict_hints_row): the TMA loads of K
//                       and V carry the L2 priority evict_last (every row block of the head reads them again) and
//                       those of Q evict_first (read once), FA3's hints (PTX ISA createpolicy, .L2::cache_hint;
//                       hopper/tma.cuh: L2Hint); cp.async gather copies carry none; not in the table for split_kv
//                       (a split reads Q again and its K/V range once); the outputs are the same bit for bit
//   p_in_smem           bool, default false (no tile-table row takes it; tile_table.cpp says why); 16-bit dtypes
//                       (p_in_smem_fits): each consumer warpgroup writes its probabilities P to shared memory
//                       (stmatrix, 128-byte swizzle) and P.V reads both operands from there (FA3's MmaPV_is_RS
//                       false), instead of holding P in registers as the A operand: block_n / 4 registers fewer per
//                       consumer thread, so wider key blocks fit (FA3's d64 192x192; d96 192x128), for
//                       block_m x block_n x 2 bytes of shared memory and the stores of P per key block; the
//                       outputs are the same bit for bit
//   pin_pv_wait         bool, default from the tile table (tile_table.cpp: pin_pv_wait_row, which gives the SASS
//                       counts), yielding where it spills (pin_pv_wait_spills); intra_wg_overlap (pin_pv_wait_fits):
//                       in the overlapped step thread 0 of each consumer warpgroup stores its row sum (a word no one
//                       reads) between the softmax of S_j and the wait for P_{j-1}.V_{j-1}, so that ptxas keeps that
//                       wait after the softmax's exp2 (it moves a wait above arithmetic, not above a shared store
//                       that precedes it) and the softmax runs under P.V, FA3's intra-warpgroup overlap (paper
//                       §3.2); the outputs are the same bit for bit
//   cluster_m           1 | 2, default from the tile table: CTAs per thread-block cluster along M; with 2,
//                       the two CTAs of a cluster (adjacent row blocks of one head) share each K/V tile
//                       through TMA multicast, halving L2 traffic (non-causal only)
//   persistent          bool, default from the tile table: one CTA per SM strides over the tiles (FA3's
//                       persistent scheduler; device/scheduler.cuh) instead of one CTA per tile, so the next tile's
//                       Q and first K block load while the current one finishes and its O is stored; dense
//                       layouts and, for e4m3, v_layout "d_major" (persistent_conflict says why not); with
//                       cluster_m 2 the two CTAs of a cluster take adjacent tiles in step (FA3's clusters on its
//                       persistent grid)
// Serving layouts (launch.h: ForwardArgs; FA3's flash_attn_varlen_func / flash_attn_with_kvcache), all bool,
// default false, each a compile-time switch of the kernel:
//   varlen_q            q and out packed (total_q, num_heads, d), sequences delimited by cu_seqlens_q
//   varlen_k            k and v packed (total_k, num_heads_kv, d), delimited by cu_seqlens_k
//   paged_kv            k and v in pages (num_pages, page_size, num_heads_kv, d) through a page table
//                       (exclusive with varlen_k), loaded as TMA boxes of gcd(page_size, block_n) rows: page
//                       sizes that are multiples of 8
//   paged_gather        with paged_kv: the producer warps copy K/V rows with cp.async instead (any page size,
//                       1 and 3 included); the runtime takes it for page sizes no TMA box fits
//   pack_gqa            the query heads of one KV head share an M tile (rows = queries x group): a decode
//                       step fills the tile with one token x the group; not with quant per_block
//   split_kv            the key range of a row block may be cut into num_splits ranges (FlashDecoding): fp32
//                       partials into the workspace, merged by the attention_combine family
// Each needs cluster_m 1.
// Attention variant (device/variant.cuh; launch.h: ForwardArgs window_left/right, softcap, sinks), all bool,
// default false, each a compile-time switch whose values come at run time:
//   local               sliding window (FA3's window_size): query i sees keys i + d - left .. i + d + right, d =
//                       seqlen_k - seqlen_q; a causal window is local with right 0, so local excludes causal;
//                       needs cluster_m 1
//   softcap             scores capped as softcap * tanh(score / softcap) before the softmax (FA3's softcap)
//   sinks               one learnable fp32 logit per query head joins every row's softmax normaliser (gpt-oss)
// Every kernel field left out takes its value from the tile table (per dtype, head_dim, causal), so a spec
// with defaults spelled out and one without map to the same Spec, kernel name and cache key. A problem
// shape is no part of a kernel: a spec file's "problem" section belongs to run/bench (testing/problem.h).
// A Hadamard rotation of Q and K cancels in Q.K^T, so it is no field of this kernel: it belongs to the FP8
// quantisation pre-pass.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"

namespace fa3jit::attention_fwd {

inline constexpr std::string_view kKind = "attention_fwd";

/// What this build of the family generates: the one statement of it. Spec parsing, launch checks, error
/// messages, `fa3jit_capabilities_json` and the Python package's capabilities() all read this table.
/// The head dims of a dtype: every multiple of `multiple` in [min, max] (head_dim and head_dim_v alike).
struct HeadDimRule {
  int min, max, multiple;
  bool allows(long long head_dim) const noexcept {
    return head_dim >= min && head_dim <= max && head_dim % multiple == 0;
  }
};

struct Capabilities {
  std::vector<DType> dtypes;          // element types of q, k, v
  std::vector<DType> reserved_dtypes;  // named by the spec language but not generated yet (kUnsupported)
  // 16-bit: k16 wgmma steps over head_dim (TMA zero-fills a partial step) and an n8 granule of head_dim_v; rows of
  // 16 bytes, as TMA's strides need. e4m3: k32 steps, and the V transpose works on 32 channels (zero rows past
  // head_dim_v).
  HeadDimRule head_dims;              // of the 16-bit dtypes
  HeadDimRule fp8_head_dims;          // of e4m3
  std::vector<int> tuned_head_dims;   // the tile table's rows; other sizes take the next row's tile (tile_table.h)
  std::vector<DType> fp8_out_dtypes;  // out dtypes of an e4m3 kernel
  bool head_dim_v_may_differ;         // head_dim_v may be any size of the rule (where a tile fits)
  std::vector<std::string> features;  // "causal", "gqa", ...
};
const Capabilities& capabilities();

bool supports_dtype(DType dtype) noexcept;
/// Whether head_dim and head_dim_v are sizes of the dtype's rule (a pair may still find no tile: tile_table.h).
bool supports_head_dims(DType dtype, int head_dim, int head_dim_v) noexcept;
const HeadDimRule& head_dim_rule(DType dtype) noexcept;
/// "a multiple of 8 in [8, 256]" / "one of \"fp16\", \"bf16\"": what a message says is allowed.
std::string allowed_head_dims(DType dtype);
std::string allowed_dtypes();

/// The output dtype of a kernel whose spec or call leaves it out: the input dtype for 16-bit, bf16 for e4m3.
DType default_out_dtype(DType dtype) noexcept;
/// Whether `out` is an output dtype of `dtype`'s kernels (the input dtype for 16-bit; capabilities().fp8_out_dtypes
/// for e4m3), and what a message says is allowed.
bool supports_out_dtype(DType dtype, DType out) noexcept;
std::string allowed_out_dtypes(DType dtype);

/// How an e4m3 kernel's inputs are scaled (spec field "quant"; launch.h: ScaleView for the tensors).
enum class Quant { kNone, kPerHead, kPerBlock };
/// "none", "per_head", "per_block".
const char* quant_name(Quant quant) noexcept;

/// How v is laid out (spec field "v_layout"; launch.h: ForwardArgs::v).
enum class VLayout { kSeqMajor, kDMajor };
/// "seq_major", "d_major".
const char* v_layout_name(VLayout layout) noexcept;

/// A fully resolved kernel spec: every field has a value (defaults filled in from the tile table).
struct Spec {
  DType dtype = DType::kBf16;
  DType out_dtype = DType::kBf16;   // = dtype for 16-bit; bf16 or fp16 for e4m3
  Quant quant = Quant::kNone;       // kNone for 16-bit; kPerHead or kPerBlock for e4m3
  bool fp32_two_level_accum = false;  // e4m3 only
  VLayout v_layout = VLayout::kSeqMajor;  // kDMajor: e4m3 only
  int head_dim = 128;
  int head_dim_v = 128;
  bool causal = false;
  int block_m = 128;
  int block_n = 128;
  int consumer_warpgroups = 2;
  int stages = 2;
  bool pingpong = false;
  bool intra_wg_overlap = false;
  bool rescale_o_before_pv = false;
  bool load_k_ahead = false;
  bool mask_free_loop = false;
  bool softmax_in_mask_arms = false;
  bool lazy_rescale = false;
  bool l2_evict_hints = false;
  bool p_in_smem = false;
  bool pin_pv_wait = false;
  int cluster_m = 1;
  bool persistent = false;
  bool varlen_q = false;
  bool varlen_k = false;
  bool paged_kv = false;
  bool paged_gather = false;
  bool pack_gqa = false;
  bool split_kv = false;
  bool local = false;
  bool softcap = false;
  bool sinks = false;
  bool operator==(const Spec&) const = default;
};

/// The serving-layout and variant fields of a Spec, as the runtime picks them for a call (launch.cpp).
struct Layout {
  bool varlen_q = false, varlen_k = false, paged_kv = false, pack_gqa = false, split_kv = false;
  /// With paged_kv: pages loaded row by row (a page size that is not a multiple of 8; pages_need_gather).
  bool paged_gather = false;
  /// The call's M tile holds at most 64 rows (a decode step): the tile table's decode tile (tile_table.h).
  bool short_q = false;
  /// A causal call with dense q and K/V whose keys fit the short-causal tile's bound (tile_table.h:
  /// short_causal_tile): the tile table's narrower key block for it.
  bool short_causal = false;
  bool local = false, softcap = false, sinks = false;
  /// e4m3 with v given transposed (spec field v_layout "d_major").
  bool v_d_major = false;
  /// A spec written out (parse_spec): its caller reads a per_block kernel's descale rows from the kernel itself
  /// (fa3jit_attention_quant_blocks with the kernel), so the tile may be the d_major one. The tile table's calls
  /// (kernel NULL) leave it false: their callers quantise with the answer for (head_dim, causal), the transposing
  /// kernel's tile whichever the V layout (tile_table.cpp: variant_tile).
  bool descale_rows_from_kernel = false;
};

/// Why `spec` cannot run on a persistent grid: the first spec field in the way ("varlen_q", "v_layout", ...), or
/// empty when it can. The one statement of the rule: validate() refuses a persistent spec with a conflict, and the
/// tile table's persistent default applies only where there is none.
std::string persistent_conflict(const Spec& spec);

/// Whether `spec`'s schedule can take rescale_o_before_pv (intra_wg_overlap without fp32_two_level_accum); validate()
/// refuses it elsewhere and the tile table's value applies only where it holds.
bool rescale_o_fits(const Spec& spec);

/// Whether `spec`'s producer can take load_k_ahead (every producer but e4m3's V-transposing warpgroup); validate()
/// refuses it elsewhere and the tile table's value applies only where it holds.
bool load_k_ahead_fits(const Spec& spec);

/// Whether `spec`'s loop can take softmax_in_mask_arms; validate() refuses it elsewhere and the tile table's value
/// applies only where it holds.
bool softmax_in_mask_arms_fits(const Spec& spec);

/// Whether `spec` can take lazy_rescale (16-bit dtypes: e4m3 P already spans the e4m3 range; not with
/// rescale_o_before_pv: the skip would branch between a warpgroup's GEMM issues); validate() refuses it elsewhere and
/// the tile table's value applies only where it holds.
bool lazy_rescale_fits(const Spec& spec);

/// Whether `spec` can take p_in_smem (16-bit dtypes: the e4m3 P.V takes P from registers, whose keys the V transpose
/// relabels, as FA3's FP8 path does); validate() refuses it elsewhere and the tile table's value applies only where it
/// holds.
bool p_in_smem_fits(const Spec& spec);
/// pin_pv_wait's store sits in the intra_wg_overlap step.
bool pin_pv_wait_fits(const Spec& spec);
/// Where pin_pv_wait spills (the table's value yields there): P in shared memory with block_n above 128, where the
/// probabilities held until P.V completes no longer fit (bf16 d64 block_n 192: 228 bytes stored, 160: 48).
bool pin_pv_wait_spills(const Spec& spec);

/// Reads and validates a spec. Throws Error(kInvalidSpec) naming the field (JSON path, e.g.
/// "tile.block_n"), the value and what is allowed; Error(kUnsupported) for values the language names but
/// this build does not generate (a head_dim / head_dim_v pair no tile fits). Never aborts.
Spec parse_spec(const nlohmann::json& doc);
/// Same, from JSON text; a syntax error is kInvalidSpec with the parser's position.
Spec parse_spec(const std::string& json_text);

/// The family's one validator: every rule on a Spec's values (ranges, combinations, the capability table,
/// shared-memory and register budgets). parse_spec runs it; so does make_kernel_config, for specs built in
/// code. Messages name the spec fields as they are spelled in JSON.
void validate(const Spec& spec);

/// The spec the runtime chooses for a call with no explicit spec: tile-table defaults for
/// (dtype, head_dim, head_dim_v, causal), validated. No JSON involved. out_dtype and quant apply to e4m3 (for
/// 16-bit dtypes they must be the dtype and kNone).
Spec default_spec(DType dtype, int head_dim, int head_dim_v, bool causal);
Spec default_spec(DType dtype, DType out_dtype, Quant quant, int head_dim, int head_dim_v, bool causal);
Spec default_spec(DType dtype, DType out_dtype, Quant quant, int head_dim, int head_dim_v, bool causal,
                  const Layout& layout);

struct TileDefaults;  // tile_table.h
/// The Spec of a tile and layout, not validated: default_spec's assembly, which the tile table also uses to check
/// a candidate tile's budgets (tile_table.cpp).
Spec tiled_spec(DType dtype, DType out_dtype, Quant quant, int head_dim, int head_dim_v, bool causal,
                const TileDefaults& tile, const Layout& layout);

/// Canonical JSON: "kind" and every kernel field, keys sorted, every default spelled out. Two specs
/// compile to the same kernel iff their canonical strings are equal.
nlohmann::json canonical_json(const Spec& spec);
std::string canonical_string(const Spec& spec);

/// Short human summary, e.g. "bf16 d128 causal 128x176 wg2 st2 pingpong overlap".
std::string spec_summary(const Spec& spec);

/// The part of the kernel name before the hash, e.g. "bf16_d128_causal" (jit/family.h: kernel_name).
std::string name_token(const Spec& spec);

}  // namespace fa3jit::attention_fwd

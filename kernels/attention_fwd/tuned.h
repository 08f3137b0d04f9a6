// Tuned kernel choices of the attention family: how `fa3jit tune` names a kernel class in the tuning database
// (jit/tune_db.h), which fields a recorded choice may set, and how the runtime's kernel choice reads them.
//
// A class is everything a call's kernel is chosen by except the tile: dtype, out_dtype, quant, head_dim, head_dim_v,
// the mask and the layout bits (varlen_q, varlen_k, paged_kv, paged_gather, pack_gqa, softcap, sinks, v_d_major). split_kv is not
// part of it: the runtime decides splits per call from the built-in tile, and tuned tiles apply to calls that do
// not split (prefill), never to the decode tile (layout.short_q); a short causal call (layout.short_causal) takes its class's tuned tile
// in place of the short-causal one. A choice sets the tile fields of a spec: "tile"
// (block_m, block_n), "consumer_warpgroups", "stages", "pingpong", "intra_wg_overlap", "rescale_o_before_pv", "load_k_ahead", "mask_free_loop", "softmax_in_mask_arms", "lazy_rescale", "l2_evict_hints", "p_in_smem", "pin_pv_wait", "cluster_m",
// "fp32_two_level_accum". For quant per_block the per-block descales are laid out by the built-in block_m and
// block_n (fa3jit_fp8_quant_blocks), so a choice must keep them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/attention_fwd/spec.h"
#include "kernels/attention_fwd/tile_table.h"
#include "runtime/runtime.h"

namespace fa3jit::attention_fwd {

inline constexpr const char* kTuneKind = "attention_fwd";

/// The class token of a call class, e.g. "bf16 out=bf16 d=128/128 causal" or
/// "e4m3/per_head out=bf16 d=128/128 full varlen_q+paged_kv".
std::string tune_class(DType dtype, DType out_dtype, Quant quant, int head_dim, int head_dim_v, bool causal,
                       const Layout& layout);
/// The class token of a spec's kernel (split_kv ignored).
std::string tune_class(const Spec& spec);

/// The spec the runtime runs for `spec`'s class (and split_kv) when no tuned choice applies: default_spec of its
/// dtype, out_dtype, quant, head dims, mask and layout.
Spec builtin_spec(const Spec& spec);

/// The fields of `spec` a choice records (the keys listed above).
nlohmann::json tune_choice(const Spec& spec);

/// The spec of class `base` (a valid spec of the class) with `choice` applied, validated: Error(kInvalidSpec) naming
/// the field for a key that is not a choice field, a value the spec rules reject, or, for quant per_block, a tile
/// that is not the built-in one.
Spec apply_choice(const Spec& base, const nlohmann::json& choice);

/// The tuned kernels `cache warm` compiles beside `spec`, the built-in kernel of a call: `spec`'s class with each of
/// the runtime's applied choices for it (Runtime::applied_choices: this build's toolchain, any device). None when the
/// launch path takes no tuned tile for the call: a split_kv kernel, or a decode step's tile (a spec that is not its
/// class's builtin_spec: layout.short_q). A choice that does not hold for the class is left out (the launch path
/// reports it when a call meets it).
std::vector<Spec> tuned_specs(Runtime& runtime, const Spec& spec);

/// The tuned tile of a call class on device `ordinal`: the applied record of the runtime's tuning database, when
/// there is one and it is valid for the class (an invalid one is reported once as a warning and ignored). Computed
/// once per (runtime, device, class); takes a lock, so the launch path memoises it.
std::optional<TileDefaults> tuned_tile(Runtime& runtime, int ordinal, DType dtype, DType out_dtype, Quant quant,
                                       int head_dim, int head_dim_v, bool causal, const Layout& layout);

}  // namespace fa3jit::attention_fwd

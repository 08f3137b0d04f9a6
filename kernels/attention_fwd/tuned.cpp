// Tuned kernel choices of the attention family (tuned.h).
#include "kernels/attention_fwd/tuned.h"

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_fields.h"
#include "core/log.h"

namespace fa3jit::attention_fwd {

namespace {

using nlohmann::json;

const std::vector<std::string>& choice_keys() {
  static const std::vector<std::string> keys = {
      "tile",           "consumer_warpgroups", "stages",       "pingpong",  "intra_wg_overlap", "rescale_o_before_pv",
      "load_k_ahead",   "mask_free_loop",      "softmax_in_mask_arms",      "lazy_rescale",     "l2_evict_hints",
      "p_in_smem",      "pin_pv_wait",         "cluster_m",                 "fp32_two_level_accum", "persistent"};
  return keys;
}

Layout layout_of_spec(const Spec& s) {
  Layout l;
  l.varlen_q = s.varlen_q;
  l.varlen_k = s.varlen_k;
  l.paged_kv = s.paged_kv;
  l.paged_gather = s.paged_gather;
  l.pack_gqa = s.pack_gqa;
  l.local = s.local;
  l.softcap = s.softcap;
  l.sinks = s.sinks;
  l.v_d_major = s.v_layout == VLayout::kDMajor;
  return l;
}

TileDefaults tile_of(const Spec& s) {
  TileDefaults t{s.block_m, s.block_n, s.consumer_warpgroups, s.stages, s.pingpong, s.intra_wg_overlap};
  t.cluster_m = s.cluster_m;
  t.fp32_two_level_accum = s.fp32_two_level_accum;
  t.persistent = s.persistent;
  t.rescale_o_before_pv = s.rescale_o_before_pv;
  t.load_k_ahead = s.load_k_ahead;
  t.mask_free_loop = s.mask_free_loop;
  t.softmax_in_mask_arms = s.softmax_in_mask_arms;
  t.lazy_rescale = s.lazy_rescale;
  t.l2_evict_hints = s.l2_evict_hints;
  t.p_in_smem = s.p_in_smem;
  t.pin_pv_wait = s.pin_pv_wait;
  return t;
}

// One entry per (runtime's database, device, class), filled on first use.
struct TunedTiles {
  std::mutex mu;
  std::map<std::pair<int, std::string>, std::optional<TileDefaults>> by_class;
};

}  // namespace

std::string tune_class(DType dtype, DType out_dtype, Quant quant, int head_dim, int head_dim_v, bool causal,
                       const Layout& l) {
  std::string token = dtype_name(dtype);
  if (dtype == DType::kE4m3) token += fmt::format("/{}", quant_name(quant));
  token += fmt::format(" out={} d={}/{} {}", dtype_name(out_dtype), head_dim, head_dim_v,
                       causal ? "causal" : l.local ? "local" : "full");
  std::vector<const char*> bits;
  if (l.varlen_q) bits.push_back("varlen_q");
  if (l.varlen_k) bits.push_back("varlen_k");
  if (l.paged_kv) bits.push_back("paged_kv");
  if (l.paged_gather) bits.push_back("paged_gather");
  if (l.pack_gqa) bits.push_back("pack_gqa");
  if (l.softcap) bits.push_back("softcap");
  if (l.sinks) bits.push_back("sinks");
  if (l.v_d_major) bits.push_back("v_d_major");
  if (causal && l.local) bits.push_back("local");
  if (!bits.empty()) token += fmt::format(" {}", fmt::join(bits, "+"));
  return token;
}

std::string tune_class(const Spec& spec) {
  return tune_class(spec.dtype, spec.out_dtype, spec.quant, spec.head_dim, spec.head_dim_v, spec.causal,
                    layout_of_spec(spec));
}

Spec builtin_spec(const Spec& spec) {
  Layout l = layout_of_spec(spec);
  l.split_kv = spec.split_kv;
  return default_spec(spec.dtype, spec.out_dtype, spec.quant, spec.head_dim, spec.head_dim_v, spec.causal, l);
}

json tune_choice(const Spec& spec) {
  const json all = canonical_json(spec);
  json choice = json::object();
  for (const std::string& key : choice_keys()) choice[key] = all.at(key);
  return choice;
}

Spec apply_choice(const Spec& base, const json& choice) {
  json_fields::require_object(choice, "choice");
  json_fields::reject_unknown_keys(choice, "choice", choice_keys());
  json doc = canonical_json(base);
  // A record written before one of these fields existed leaves it to the table (where the spec's schedule allows it).
  for (const char* added : {"rescale_o_before_pv", "load_k_ahead", "mask_free_loop", "softmax_in_mask_arms",
                            "lazy_rescale", "l2_evict_hints", "p_in_smem", "pin_pv_wait"})
    if (!choice.contains(added)) doc.erase(added);
  for (const auto& [key, value] : choice.items()) doc[key] = value;
  const Spec spec = parse_spec(doc);
  if (spec.quant == Quant::kPerBlock && (spec.block_m != base.block_m || spec.block_n != base.block_n))
    throw Error(ErrorCode::kInvalidSpec,
                fmt::format("choice.tile: {}x{} for quant per_block, whose descales are laid out by the built-in "
                            "{}x{} tile (fa3jit_fp8_quant_blocks); a per_block choice keeps block_m and block_n",
                            spec.block_m, spec.block_n, base.block_m, base.block_n));
  return spec;
}

std::vector<Spec> tuned_specs(Runtime& runtime, const Spec& spec) {
  std::vector<Spec> specs;
  // The built-in kernel of a call of the class: the row's tile, or the short-causal tile (layout.short_causal).
  Spec base = builtin_spec(spec);
  if (!(base == spec) && spec.causal) {
    Layout l = layout_of_spec(spec);
    l.short_causal = true;
    if (const Spec short_base = default_spec(spec.dtype, spec.out_dtype, spec.quant, spec.head_dim, spec.head_dim_v,
                                             spec.causal, l);
        short_base == spec)
      base = short_base;
  }
  if (spec.split_kv || !(base == spec)) return specs;
  for (const json& choice : runtime.applied_choices(kTuneKind, tune_class(spec))) {
    try {
      specs.push_back(apply_choice(base, choice));
    } catch (const Error&) {
      // not valid for the class: the launch path warns when a call of it meets this choice
    }
  }
  return specs;
}

std::optional<TileDefaults> tuned_tile(Runtime& runtime, int ordinal, DType dtype, DType out_dtype, Quant quant,
                                       int head_dim, int head_dim_v, bool causal, const Layout& layout) {
  if (layout.short_q || layout.split_kv || runtime.tune_db_path().empty()) return std::nullopt;
  const std::string token = tune_class(dtype, out_dtype, quant, head_dim, head_dim_v, causal, layout);
  TunedTiles& tiles = runtime.family_state<TunedTiles>();
  std::lock_guard<std::mutex> lock(tiles.mu);
  // The tile of a choice that leaves fields out is the base's in them, and a short causal call's base differs.
  const auto key = std::make_pair(ordinal, layout.short_causal ? token + " short_causal" : token);
  if (auto it = tiles.by_class.find(key); it != tiles.by_class.end()) return it->second;
  std::optional<TileDefaults> tile;
  if (const std::optional<json> choice = runtime.tuned_choice(kTuneKind, token, ordinal)) {
    try {
      const Spec base = default_spec(dtype, out_dtype, quant, head_dim, head_dim_v, causal, layout);
      tile = tile_of(apply_choice(base, *choice));
      log(LogLevel::kInfo, fmt::format("class \"{}\" on device {}: the tuned tile of {}", token, ordinal,
                                       runtime.tune_db_path()));
    } catch (const Error& e) {
      log(LogLevel::kWarn, fmt::format("tuning database {}: the applied choice for \"{}\" is not valid ({}); the "
                                       "built-in tile is used",
                                       runtime.tune_db_path(), token, e.what()));
    }
  }
  return tiles.by_class.emplace(key, tile).first->second;
}

}  // namespace fa3jit::attention_fwd

// Attention forward spec: capability table, JSON reading, the one validator, canonical form (spec.h).
//
// Reading (parse_spec) only turns JSON into a Spec: types, and which of block_m / consumer_warpgroups was
// given; every rule on the values lives in validate(), which also guards specs built in code.
#include "kernels/attention_fwd/spec.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_fields.h"
#include "kernels/attention_fwd/tile_table.h"

namespace fa3jit::attention_fwd {

namespace {

using nlohmann::json;
using namespace json_fields;

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::kInvalidSpec, message); }

constexpr int kBlockMs[] = {64, 128, 192};  // one 64-row consumer warpgroup per 64 rows, 1 to 3

template <class T>
bool contains(const std::vector<T>& values, const T& value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

void check_head_dims(DType dtype, int head_dim, int head_dim_v);

void check_dtype(DType dtype) {
  if (contains(capabilities().reserved_dtypes, dtype))
    throw Error(ErrorCode::kUnsupported, fmt::format("spec field \"dtype\": \"{}\" is not yet supported; supported "
                                                     "dtypes: {}",
                                                     dtype_name(dtype), allowed_dtypes()));
  if (!supports_dtype(dtype))
    invalid(fmt::format("spec field \"dtype\": {} is not allowed; expected {}", static_cast<int>(dtype),
                        allowed_dtypes()));
}

void check_head_dims(DType dtype, int head_dim, int head_dim_v) {
  const HeadDimRule& rule = head_dim_rule(dtype);
  if (!rule.allows(head_dim))
    invalid(fmt::format("spec field \"head_dim\": {} is not supported for dtype \"{}\"; expected {}", head_dim,
                        dtype_name(dtype), allowed_head_dims(dtype)));
  if (!rule.allows(head_dim_v))
    invalid(fmt::format("spec field \"head_dim_v\": {} is not supported for dtype \"{}\"; expected {}", head_dim_v,
                        dtype_name(dtype), allowed_head_dims(dtype)));
}

void check_precision(const Spec& spec) {
  if (spec.dtype != DType::kE4m3) {
    if (!supports_out_dtype(spec.dtype, spec.out_dtype))
      invalid(fmt::format("spec field \"out_dtype\": \"{}\" is not allowed with dtype \"{}\"; expected {}",
                          dtype_name(spec.out_dtype), dtype_name(spec.dtype), allowed_out_dtypes(spec.dtype)));
    if (spec.quant != Quant::kNone)
      invalid(fmt::format("spec field \"quant\": \"{}\" is not allowed with dtype \"{}\"; quantisation scales "
                          "belong to e4m3 inputs, expected \"none\"",
                          quant_name(spec.quant), dtype_name(spec.dtype)));
    if (spec.fp32_two_level_accum)
      invalid(fmt::format("spec field \"fp32_two_level_accum\": true is not allowed with dtype \"{}\"; it applies "
                          "to e4m3 only, expected false",
                          dtype_name(spec.dtype)));
    if (spec.v_layout != VLayout::kSeqMajor)
      invalid(fmt::format("spec field \"v_layout\": \"{}\" is not allowed with dtype \"{}\"; a 16-bit V is read "
                          "as it is (wgmma transposes it), expected \"seq_major\"",
                          v_layout_name(spec.v_layout), dtype_name(spec.dtype)));
    return;
  }
  if (!supports_out_dtype(spec.dtype, spec.out_dtype))
    invalid(fmt::format("spec field \"out_dtype\": \"{}\" is not allowed with dtype \"e4m3\"; expected {}",
                        dtype_name(spec.out_dtype), allowed_out_dtypes(spec.dtype)));
  if (spec.quant != Quant::kPerHead && spec.quant != Quant::kPerBlock)
    invalid(fmt::format("spec field \"quant\": \"{}\" is not allowed with dtype \"e4m3\"; expected \"per_head\" "
                        "or \"per_block\"",
                        quant_name(spec.quant)));
  // FP8 wgmma steps over 32 keys (k32), and P's A fragment is built per 32 columns of S.
  if (spec.block_n % 32 != 0)
    invalid(fmt::format("spec field \"tile.block_n\": {} is not allowed with dtype \"e4m3\"; expected a multiple "
                        "of 32 in [32, 256]",
                        spec.block_n));
  if (spec.cluster_m != 1)
    invalid(fmt::format("spec field \"cluster_m\": {} is not allowed with dtype \"e4m3\"; expected 1 (the producer "
                        "warpgroup transposes V and does not multicast)",
                        spec.cluster_m));
}

void check_layout(const Spec& spec) {
  if (spec.paged_kv && spec.varlen_k)
    invalid("spec fields \"paged_kv\" and \"varlen_k\" are both true; k and v are either paged or packed, expected "
            "at most one of them true");
  if (spec.paged_gather && !spec.paged_kv)
    invalid("spec field \"paged_gather\": true needs \"paged_kv\": true; it says how pages are loaded, expected false "
            "without a page table");
  const bool serving = spec.varlen_q || spec.varlen_k || spec.paged_kv || spec.pack_gqa || spec.split_kv;
  if (serving && spec.cluster_m != 1)
    invalid(fmt::format("spec field \"cluster_m\": {} is not allowed with varlen_q, varlen_k, paged_kv, pack_gqa or "
                        "split_kv; the CTAs of a cluster would see different sequences or key ranges, expected 1",
                        spec.cluster_m));
  if ((spec.varlen_q || spec.varlen_k || spec.paged_kv) && spec.quant == Quant::kPerBlock)
    invalid("spec field \"quant\": \"per_block\" is not allowed with varlen_q, varlen_k or paged_kv; per-block "
            "descales are laid out for dense tensors, expected \"per_head\"");
  if (spec.pack_gqa && spec.quant == Quant::kPerBlock)
    invalid("spec field \"pack_gqa\": true is not allowed with quant \"per_block\"; a packed M tile holds several "
            "query heads, whose per-block q descales differ, expected false or quant \"per_head\"");
  if (spec.v_layout == VLayout::kDMajor && (spec.varlen_k || spec.paged_kv))
    invalid(fmt::format("spec field \"v_layout\": \"d_major\" is not allowed with {} true; a transposed V is laid "
                        "out per (batch, kv head) of a dense tensor, expected \"seq_major\"",
                        spec.varlen_k ? "varlen_k" : "paged_kv"));
}

// The reason behind each conflict, for validate()'s message.
const char* persistent_reason(const std::string& field) {
  if (field == "v_layout")
    return "the producer warpgroup's V transpose stages V in shared memory the persistent O staging would share";
  return "its tiles' sequences and key ranges are known only on the device, where a static order cannot balance them";
}

VLayout read_v_layout(const json& doc) {
  if (!doc.contains("v_layout")) return VLayout::kSeqMajor;
  const char* allowed = "\"seq_major\" or \"d_major\"";
  const std::string name = read_string(doc.at("v_layout"), "v_layout", allowed);
  for (VLayout v : {VLayout::kSeqMajor, VLayout::kDMajor})
    if (name == v_layout_name(v)) return v;
  invalid(fmt::format("spec field \"v_layout\": {} is not allowed; expected {}", show(doc.at("v_layout")), allowed));
}

DType read_dtype_field(const json& doc, const char* key, const std::string& allowed) {
  const json& value = doc.at(key);
  const std::string name = read_string(value, key, allowed);
  DType dtype{};
  if (!dtype_from_name(name, dtype))
    invalid(fmt::format("spec field \"{}\": {} is not allowed; expected {}", key, show(value), allowed));
  return dtype;
}

Quant read_quant(const json& doc, DType dtype) {
  const Quant fallback = dtype == DType::kE4m3 ? Quant::kPerHead : Quant::kNone;
  if (!doc.contains("quant")) return fallback;
  const char* allowed = dtype == DType::kE4m3 ? "\"per_head\" or \"per_block\"" : "\"none\"";
  const std::string name = read_string(doc.at("quant"), "quant", allowed);
  for (Quant q : {Quant::kNone, Quant::kPerHead, Quant::kPerBlock})
    if (name == quant_name(q)) return q;
  invalid(fmt::format("spec field \"quant\": {} is not allowed; expected {}", show(doc.at("quant")), allowed));
}

DType read_dtype(const json& doc) {
  if (!doc.contains("dtype")) invalid("spec field \"dtype\" is missing; expected " + allowed_dtypes());
  const json& value = doc.at("dtype");
  const std::string name = read_string(value, "dtype", allowed_dtypes());
  DType dtype{};
  if (!dtype_from_name(name, dtype))
    invalid(fmt::format("spec field \"dtype\": {} is not allowed; expected {}", show(value), allowed_dtypes()));
  check_dtype(dtype);
  return dtype;
}

// Any integer: the range is the validator's business, the type is the reader's.
int read_any_int(const json& doc, const char* path, const std::string& allowed) {
  const int64_t v = read_int(doc.at(path), path, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(),
                             allowed);
  return static_cast<int>(v);
}

int read_head_dim(const json& doc) {
  const std::string allowed = allowed_head_dims(doc.contains("dtype") && doc.at("dtype") == "e4m3" ? DType::kE4m3
                                                                                                : DType::kBf16);
  if (!doc.contains("head_dim")) invalid("spec field \"head_dim\" is missing; expected " + allowed);
  return read_any_int(doc, "head_dim", allowed);
}

// block_m and consumer_warpgroups describe the same thing (one consumer warpgroup per 64 rows of Q): the one
// given determines the other; both given must agree (validate says so); neither given takes the table's.
void read_tile(const json& doc, const TileDefaults& defaults, Spec& spec) {
  std::optional<int> block_m, warpgroups;
  spec.block_n = defaults.block_n;
  if (doc.contains("tile")) {
    const json& tile = doc.at("tile");
    require_object(tile, "tile");
    reject_unknown_keys(tile, "tile", {"block_m", "block_n"});
    if (tile.contains("block_m"))
      block_m = static_cast<int>(read_int(tile.at("block_m"), "tile.block_m", std::numeric_limits<int>::min(),
                                          std::numeric_limits<int>::max(), "one of 64, 128, 192"));
    if (tile.contains("block_n"))
      spec.block_n = static_cast<int>(read_int(tile.at("block_n"), "tile.block_n", std::numeric_limits<int>::min(),
                                               std::numeric_limits<int>::max(), "a multiple of 16 in [16, 256]"));
  }
  if (doc.contains("consumer_warpgroups"))
    warpgroups = static_cast<int>(read_int(doc.at("consumer_warpgroups"), "consumer_warpgroups",
                                           std::numeric_limits<int>::min(), std::numeric_limits<int>::max(),
                                           "an integer in [1, 3]"));
  if (block_m && warpgroups) {
    spec.block_m = *block_m;
    spec.consumer_warpgroups = *warpgroups;
  } else if (block_m) {
    spec.block_m = *block_m;
    spec.consumer_warpgroups = std::max(1, *block_m / 64);
  } else if (warpgroups) {
    spec.consumer_warpgroups = *warpgroups;
    spec.block_m = 64 * std::clamp(*warpgroups, 1, 3);
  } else {
    spec.block_m = defaults.block_m;
    spec.consumer_warpgroups = defaults.consumer_warpgroups;
  }
}

bool read_knob(const json& doc, const char* key, bool fallback) {
  return doc.contains(key) ? read_bool(doc.at(key), key) : fallback;
}

}  // namespace

const Capabilities& capabilities() {
  static const Capabilities kCapabilities{
      {DType::kFp16, DType::kBf16, DType::kE4m3},
      {},
      {8, 256, 8},
      {16, 256, 16},
      {64, 96, 128, 192, 256},
      {DType::kBf16, DType::kFp16},
      true,
      {"causal", "gqa", "mqa", "lse", "strided", "fp8_per_head", "fp8_per_block", "fp8_two_level_accum", "fp8_v_d_major", "varlen",
       "paged_kv", "paged_gather", "split_kv", "pack_gqa", "seqused_k", "local", "softcap", "sinks"},
  };
  return kCapabilities;
}

bool supports_dtype(DType dtype) noexcept { return contains(capabilities().dtypes, dtype); }

const HeadDimRule& head_dim_rule(DType dtype) noexcept {
  return dtype == DType::kE4m3 ? capabilities().fp8_head_dims : capabilities().head_dims;
}

bool supports_head_dims(DType dtype, int head_dim, int head_dim_v) noexcept {
  const HeadDimRule& rule = head_dim_rule(dtype);
  return rule.allows(head_dim) && (head_dim_v == head_dim || (capabilities().head_dim_v_may_differ &&
                                                              rule.allows(head_dim_v)));
}

std::string allowed_head_dims(DType dtype) {
  const HeadDimRule& rule = head_dim_rule(dtype);
  return fmt::format("a multiple of {} in [{}, {}]", rule.multiple, rule.min, rule.max);
}

DType default_out_dtype(DType dtype) noexcept { return dtype == DType::kE4m3 ? DType::kBf16 : dtype; }

bool supports_out_dtype(DType dtype, DType out) noexcept {
  return dtype == DType::kE4m3 ? contains(capabilities().fp8_out_dtypes, out) : out == dtype;
}

std::string allowed_out_dtypes(DType dtype) {
  if (dtype != DType::kE4m3) return fmt::format("\"{}\" (the input dtype)", dtype_name(dtype));
  std::vector<std::string> names;
  for (DType d : capabilities().fp8_out_dtypes) names.push_back(fmt::format("\"{}\"", dtype_name(d)));
  return fmt::format("one of {}", fmt::join(names, ", "));
}

const char* quant_name(Quant quant) noexcept {
  switch (quant) {
    case Quant::kNone: return "none";
    case Quant::kPerHead: return "per_head";
    case Quant::kPerBlock: return "per_block";
  }
  return "unknown";
}

const char* v_layout_name(VLayout layout) noexcept {
  switch (layout) {
    case VLayout::kSeqMajor: return "seq_major";
    case VLayout::kDMajor: return "d_major";
  }
  return "unknown";
}

std::string allowed_dtypes() {
  std::vector<std::string> names;
  for (DType d : capabilities().dtypes) names.push_back(fmt::format("\"{}\"", dtype_name(d)));
  return fmt::format("one of {}", fmt::join(names, ", "));
}

// The intra_wg_overlap schedule rescales O between its two GEMMs; with fp32_two_level_accum P.V writes a fresh
// accumulator and O is rescaled as it is added (device/mainloop.cuh).
bool rescale_o_fits(const Spec& spec) { return spec.intra_wg_overlap && !spec.fp32_two_level_accum; }

// The one-copy loop of the intra_wg_overlap schedule; with fp32_two_level_accum the fresh accumulator is live across
// the softmax and the second copy of it spilled (e4m3 d128 128x128: 20 bytes, ptxas).
bool softmax_in_mask_arms_fits(const Spec& spec) {
  return spec.intra_wg_overlap && !spec.mask_free_loop && !spec.fp32_two_level_accum;
}

// e4m3 P is scaled by 2^8 to use the e4m3 range (device/softmax.cuh: kMaxOffset); a rise of its reference maximum
// would overflow it. With rescale_o_before_pv, O's multiplies sit between a warpgroup's two GEMM issues, where the
// per-warp branch that skips them lets the warps of one warpgroup reach its wgmma at different instructions
// (compute-sanitizer synccheck: "Mismatching warpgroup instruction pc between warps", fp16 d256, 2026-12-07).
bool lazy_rescale_fits(const Spec& spec) { return spec.dtype != DType::kE4m3 && !spec.rescale_o_before_pv; }

bool p_in_smem_fits(const Spec& spec) { return spec.dtype != DType::kE4m3; }

bool pin_pv_wait_fits(const Spec& spec) { return spec.intra_wg_overlap; }

bool pin_pv_wait_spills(const Spec& spec) { return spec.p_in_smem && spec.block_n > 128; }

bool load_k_ahead_fits(const Spec& spec) {
  return spec.dtype != DType::kE4m3 || spec.v_layout == VLayout::kDMajor;
}

std::string persistent_conflict(const Spec& spec) {
  if (spec.varlen_q) return "varlen_q";
  if (spec.varlen_k) return "varlen_k";
  if (spec.paged_kv) return "paged_kv";
  if (spec.pack_gqa) return "pack_gqa";
  if (spec.split_kv) return "split_kv";
  if (spec.dtype == DType::kE4m3 && spec.v_layout != VLayout::kDMajor) return "v_layout";
  return {};
}

void validate(const Spec& spec) {
  check_dtype(spec.dtype);
  check_head_dims(spec.dtype, spec.head_dim, spec.head_dim_v);
  if (spec.consumer_warpgroups < 1 || spec.consumer_warpgroups > 3)
    invalid(fmt::format("spec field \"consumer_warpgroups\": {} is not allowed; expected an integer in [1, 3]",
                        spec.consumer_warpgroups));
  if (std::find(std::begin(kBlockMs), std::end(kBlockMs), spec.block_m) == std::end(kBlockMs))
    invalid(fmt::format("spec field \"tile.block_m\": {} is not allowed; expected one of {}", spec.block_m,
                        fmt::join(kBlockMs, ", ")));
  if (spec.block_m != 64 * spec.consumer_warpgroups)
    invalid(fmt::format("spec fields \"tile.block_m\" ({}) and \"consumer_warpgroups\" ({}) disagree; "
                        "consumer_warpgroups must equal block_m / 64 = {}",
                        spec.block_m, spec.consumer_warpgroups, spec.block_m / 64));
  // k16 steps over block_n and a TMA box of at most 256 rows.
  if (spec.block_n < 16 || spec.block_n > 256 || spec.block_n % 16 != 0)
    invalid(fmt::format("spec field \"tile.block_n\": {} is not allowed; expected a multiple of 16 in [16, 256]",
                        spec.block_n));
  // The barrier area (params.h: kBarrierAreaBytes) holds the barriers of up to 4 stages.
  if (spec.stages < 2 || spec.stages > 4)
    invalid(fmt::format("spec field \"stages\": {} is not allowed; expected an integer in [2, 4]", spec.stages));
  // Pingpong hands GEMM turns round robin between two or three consumer warpgroups around the overlapped
  // mainloop (device/mainloop.cuh); with one warpgroup it would wait forever for its turn.
  if (spec.pingpong && !(spec.intra_wg_overlap && spec.consumer_warpgroups >= 2))
    invalid(fmt::format("spec field \"pingpong\": true is not allowed with intra_wg_overlap {} and consumer_warpgroups "
                        "{}; pingpong needs intra_wg_overlap true and consumer_warpgroups 2 or 3",
                        spec.intra_wg_overlap, spec.consumer_warpgroups));
  if (spec.rescale_o_before_pv && !rescale_o_fits(spec))
    invalid(fmt::format("spec field \"rescale_o_before_pv\": true is not allowed with intra_wg_overlap {} and "
                        "fp32_two_level_accum {}; it moves the rescale of O in the intra_wg_overlap schedule, expected "
                        "intra_wg_overlap true and fp32_two_level_accum false",
                        spec.intra_wg_overlap, spec.fp32_two_level_accum));
  if (spec.lazy_rescale && !lazy_rescale_fits(spec))
    invalid(fmt::format("spec field \"lazy_rescale\": true is not allowed with dtype \"{}\" and rescale_o_before_pv "
                        "{}: e4m3 P already spans the e4m3 range (no room for a stale maximum), and before P.V the "
                        "per-warp skip of O's multiplies would split a warpgroup between its GEMM issues; expected "
                        "dtype \"bf16\" or \"fp16\" and rescale_o_before_pv false",
                        dtype_name(spec.dtype), spec.rescale_o_before_pv));
  if (spec.load_k_ahead && !load_k_ahead_fits(spec))
    invalid("spec field \"load_k_ahead\": true is not allowed with dtype \"e4m3\" and v_layout \"seq_major\": that "
            "producer transposes V one block behind its loads; expected false, or v_layout \"d_major\"");
  if (spec.softmax_in_mask_arms && !softmax_in_mask_arms_fits(spec))
    invalid(fmt::format("spec field \"softmax_in_mask_arms\": true is not allowed with intra_wg_overlap {}, "
                        "mask_free_loop {} and fp32_two_level_accum {}; it places the softmax in the one-copy loop of "
                        "the intra_wg_overlap schedule, expected intra_wg_overlap true, mask_free_loop false and "
                        "fp32_two_level_accum false",
                        spec.intra_wg_overlap, spec.mask_free_loop, spec.fp32_two_level_accum));
  if (spec.p_in_smem && !p_in_smem_fits(spec))
    invalid(fmt::format("spec field \"p_in_smem\": true is not allowed with dtype \"{}\": the e4m3 P.V takes P from "
                        "registers (FA3's FP8 path likewise); expected false, or dtype \"bf16\" or \"fp16\"",
                        dtype_name(spec.dtype)));
  if (spec.pin_pv_wait && !pin_pv_wait_fits(spec))
    invalid("spec field \"pin_pv_wait\": true is not allowed with intra_wg_overlap false: it keeps the P.V wait of the "
            "intra_wg_overlap step behind the softmax; expected false, or intra_wg_overlap true");
  if (spec.cluster_m != 1 && spec.cluster_m != 2)
    invalid(fmt::format("spec field \"cluster_m\": {} is not allowed; expected 1 or 2", spec.cluster_m));
  // K/V multicast pairs two CTAs that walk the same KV blocks: only without a causal mask (FA3 likewise).
  if (spec.cluster_m == 2 && (spec.causal || spec.local))
    invalid(fmt::format("spec field \"cluster_m\": 2 is not allowed with {} true; the two CTAs of a cluster must "
                        "visit the same KV blocks, expected 1",
                        spec.causal ? "causal" : "local"));
  if (spec.causal && spec.local)
    invalid("spec fields \"causal\" and \"local\" are both true; a causal sliding window is local with "
            "window_right 0, expected at most one of them true");
  check_precision(spec);
  check_layout(spec);
  if (spec.persistent) {
    if (const std::string field = persistent_conflict(spec); !field.empty()) {
      const std::string value = field == "cluster_m"  ? std::to_string(spec.cluster_m)
                                : field == "v_layout" ? fmt::format("\"{}\"", v_layout_name(spec.v_layout))
                                                      : std::string("true");
      invalid(fmt::format("spec field \"persistent\": true is not allowed with {} {}: {}; expected false", field,
                          value, persistent_reason(field)));
    }
  }
  check_budgets(spec, derive_config(spec));
}

Spec parse_spec(const json& doc) {
  require_object(doc, "");
  if (doc.contains("hadamard"))
    invalid("spec field \"hadamard\" is not a field of the attention kernel: a rotation of Q and K by the same "
            "orthogonal matrix cancels in Q.K^T (FA3 paper §3.3), so it belongs to the FP8 quantisation pre-pass");
  reject_unknown_keys(doc, "",
                      {"kind", "dtype", "out_dtype", "quant", "v_layout", "fp32_two_level_accum", "head_dim", "head_dim_v",
                       "causal", "tile", "consumer_warpgroups", "stages", "pingpong", "intra_wg_overlap",
                       "rescale_o_before_pv", "load_k_ahead", "mask_free_loop", "softmax_in_mask_arms", "lazy_rescale",
                       "l2_evict_hints", "p_in_smem", "pin_pv_wait", "cluster_m", "persistent", "varlen_q", "varlen_k",
                       "paged_kv", "paged_gather", "pack_gqa",
                       "split_kv", "local", "softcap", "sinks"});
  if (doc.contains("kind") && read_string(doc.at("kind"), "kind", "\"attention_fwd\"") != kKind)
    invalid(fmt::format("spec field \"kind\": {} is not this family; expected \"{}\"", show(doc.at("kind")), kKind));
  Spec spec;
  spec.dtype = read_dtype(doc);
  spec.head_dim = read_head_dim(doc);
  spec.head_dim_v = doc.contains("head_dim_v") ? read_any_int(doc, "head_dim_v", allowed_head_dims(spec.dtype))
                                               : spec.head_dim;
  check_head_dims(spec.dtype, spec.head_dim, spec.head_dim_v);  // the tile table is indexed by them
  spec.causal = read_knob(doc, "causal", false);
  const bool fp8 = spec.dtype == DType::kE4m3;
  spec.out_dtype = doc.contains("out_dtype") ? read_dtype_field(doc, "out_dtype", allowed_out_dtypes(spec.dtype))
                                             : default_out_dtype(spec.dtype);
  spec.quant = read_quant(doc, spec.dtype);
  spec.v_layout = read_v_layout(doc);

  spec.varlen_q = read_knob(doc, "varlen_q", false);
  spec.varlen_k = read_knob(doc, "varlen_k", false);
  spec.paged_kv = read_knob(doc, "paged_kv", false);
  spec.paged_gather = read_knob(doc, "paged_gather", false);
  spec.pack_gqa = read_knob(doc, "pack_gqa", false);
  spec.split_kv = read_knob(doc, "split_kv", false);
  spec.local = read_knob(doc, "local", false);
  spec.softcap = read_knob(doc, "softcap", false);
  spec.sinks = read_knob(doc, "sinks", false);
  const bool serving = spec.varlen_q || spec.varlen_k || spec.paged_kv || spec.pack_gqa || spec.split_kv;
  // The fields of the call's layout the tile table reads (variant_tile), so a spec that leaves the tile out gets the
  // kernel the runtime picks for such a call, other than a decode step (short_q) or a short causal call.
  Layout variant;
  variant.paged_kv = spec.paged_kv;
  variant.paged_gather = spec.paged_gather;
  variant.local = spec.local;
  variant.softcap = spec.softcap;
  variant.v_d_major = spec.v_layout == VLayout::kDMajor;
  variant.descale_rows_from_kernel = true;
  const TileDefaults defaults =
      variant_tile(spec.dtype, spec.head_dim, spec.head_dim_v, spec.causal, spec.quant, variant);
  spec.fp32_two_level_accum = read_knob(doc, "fp32_two_level_accum", fp8 && defaults.fp32_two_level_accum);
  read_tile(doc, defaults, spec);
  spec.stages = doc.contains("stages") ? read_any_int(doc, "stages", "an integer in [2, 4]") : defaults.stages;
  spec.intra_wg_overlap = read_knob(doc, "intra_wg_overlap", defaults.intra_wg_overlap);
  // The table's pingpong applies only where pingpong can run; asked for explicitly, validate() judges it.
  spec.pingpong = read_knob(doc, "pingpong",
                            defaults.pingpong && spec.intra_wg_overlap && spec.consumer_warpgroups >= 2);
  // As pingpong: the table's value where the schedule can take it; asked for explicitly, validate() judges.
  spec.rescale_o_before_pv =
      read_knob(doc, "rescale_o_before_pv", defaults.rescale_o_before_pv && rescale_o_fits(spec));
  spec.load_k_ahead = read_knob(doc, "load_k_ahead", defaults.load_k_ahead && load_k_ahead_fits(spec));
  // The table's two copies yield to an explicit softmax_in_mask_arms true, which needs the one-copy loop (as pingpong
  // yields to the schedule); asked for together, validate() judges.
  spec.mask_free_loop =
      read_knob(doc, "mask_free_loop", defaults.mask_free_loop && !read_knob(doc, "softmax_in_mask_arms", false));
  spec.l2_evict_hints = read_knob(doc, "l2_evict_hints", defaults.l2_evict_hints && !spec.split_kv);
  // As pingpong: the table's value where the loop can take it; asked for explicitly, validate() judges.
  spec.softmax_in_mask_arms =
      read_knob(doc, "softmax_in_mask_arms", defaults.softmax_in_mask_arms && softmax_in_mask_arms_fits(spec));
  spec.lazy_rescale = read_knob(doc, "lazy_rescale", defaults.lazy_rescale && lazy_rescale_fits(spec));
  spec.p_in_smem = read_knob(doc, "p_in_smem", defaults.p_in_smem && p_in_smem_fits(spec));
  // As pingpong: the table's value where the schedule can take it; asked for explicitly, validate() judges.
  spec.pin_pv_wait =
      read_knob(doc, "pin_pv_wait", defaults.pin_pv_wait && pin_pv_wait_fits(spec) && !pin_pv_wait_spills(spec));
  spec.cluster_m = doc.contains("cluster_m") ? read_any_int(doc, "cluster_m", "1 or 2")
                                             : (spec.causal || spec.local || serving ? 1 : defaults.cluster_m);
  // As pingpong: the table's value where the spec's other fields allow it; asked for explicitly, validate() judges.
  spec.persistent = read_knob(doc, "persistent", false);
  if (!doc.contains("persistent")) spec.persistent = defaults.persistent && persistent_conflict(spec).empty();
  validate(spec);
  return spec;
}

Spec parse_spec(const std::string& json_text) { return parse_spec(parse_text(json_text)); }

Spec default_spec(DType dtype, int head_dim, int head_dim_v, bool causal) {
  return default_spec(dtype, default_out_dtype(dtype),
                      dtype == DType::kE4m3 ? Quant::kPerHead : Quant::kNone, head_dim, head_dim_v, causal);
}

Spec default_spec(DType dtype, DType out_dtype, Quant quant, int head_dim, int head_dim_v, bool causal) {
  return default_spec(dtype, out_dtype, quant, head_dim, head_dim_v, causal, Layout{});
}

Spec tiled_spec(DType dtype, DType out_dtype, Quant quant, int head_dim, int head_dim_v, bool causal,
                const TileDefaults& d, const Layout& layout) {
  const bool serving = layout.varlen_q || layout.varlen_k || layout.paged_kv || layout.pack_gqa || layout.split_kv;
  Spec spec;
  spec.dtype = dtype;
  spec.out_dtype = out_dtype;
  spec.quant = quant;
  spec.fp32_two_level_accum = dtype == DType::kE4m3 && d.fp32_two_level_accum;
  spec.v_layout = layout.v_d_major ? VLayout::kDMajor : VLayout::kSeqMajor;
  spec.head_dim = head_dim;
  spec.head_dim_v = head_dim_v;
  spec.causal = causal;
  spec.block_m = d.block_m;
  spec.block_n = d.block_n;
  spec.consumer_warpgroups = d.consumer_warpgroups;
  spec.stages = d.stages;
  spec.intra_wg_overlap = d.intra_wg_overlap;
  spec.pingpong = d.pingpong && d.intra_wg_overlap && d.consumer_warpgroups >= 2;
  spec.rescale_o_before_pv = d.rescale_o_before_pv && rescale_o_fits(spec);
  spec.load_k_ahead = d.load_k_ahead && load_k_ahead_fits(spec);
  spec.mask_free_loop = d.mask_free_loop;
  spec.softmax_in_mask_arms = d.softmax_in_mask_arms && softmax_in_mask_arms_fits(spec);
  spec.lazy_rescale = d.lazy_rescale && lazy_rescale_fits(spec);
  spec.p_in_smem = d.p_in_smem && p_in_smem_fits(spec);
  spec.pin_pv_wait = d.pin_pv_wait && pin_pv_wait_fits(spec) && !pin_pv_wait_spills(spec);
  // A split reads its Q once per split and its K/V range once: the hints of l2_evict_hints_row are for prefill.
  spec.l2_evict_hints = d.l2_evict_hints && !layout.split_kv;
  spec.cluster_m = causal || layout.local || serving ? 1 : d.cluster_m;
  spec.varlen_q = layout.varlen_q;
  spec.varlen_k = layout.varlen_k;
  spec.paged_kv = layout.paged_kv;
  spec.paged_gather = layout.paged_gather;
  spec.pack_gqa = layout.pack_gqa;
  spec.split_kv = layout.split_kv;
  spec.local = layout.local;
  spec.softcap = layout.softcap;
  spec.sinks = layout.sinks;
  spec.persistent = d.persistent && persistent_conflict(spec).empty();
  return spec;
}

Spec default_spec(DType dtype, DType out_dtype, Quant quant, int head_dim, int head_dim_v, bool causal,
                  const Layout& layout) {
  check_dtype(dtype);
  check_head_dims(dtype, head_dim, head_dim_v);
  const Spec spec = tiled_spec(dtype, out_dtype, quant, head_dim, head_dim_v, causal,
                               variant_tile(dtype, head_dim, head_dim_v, causal, quant, layout), layout);
  validate(spec);
  return spec;
}

json canonical_json(const Spec& spec) {
  // nlohmann::json objects are std::map, so dump() writes the keys sorted.
  return json{
      {"kind", kKind},
      {"dtype", dtype_name(spec.dtype)},
      {"out_dtype", dtype_name(spec.out_dtype)},
      {"quant", quant_name(spec.quant)},
      {"v_layout", v_layout_name(spec.v_layout)},
      {"fp32_two_level_accum", spec.fp32_two_level_accum},
      {"head_dim", spec.head_dim},
      {"head_dim_v", spec.head_dim_v},
      {"causal", spec.causal},
      {"tile", json{{"block_m", spec.block_m}, {"block_n", spec.block_n}}},
      {"consumer_warpgroups", spec.consumer_warpgroups},
      {"stages", spec.stages},
      {"pingpong", spec.pingpong},
      {"intra_wg_overlap", spec.intra_wg_overlap},
      {"rescale_o_before_pv", spec.rescale_o_before_pv},
      {"load_k_ahead", spec.load_k_ahead},
      {"mask_free_loop", spec.mask_free_loop},
      {"softmax_in_mask_arms", spec.softmax_in_mask_arms},
      {"lazy_rescale", spec.lazy_rescale},
      {"l2_evict_hints", spec.l2_evict_hints},
      {"p_in_smem", spec.p_in_smem},
      {"pin_pv_wait", spec.pin_pv_wait},
      {"cluster_m", spec.cluster_m},
      {"persistent", spec.persistent},
      {"varlen_q", spec.varlen_q},
      {"varlen_k", spec.varlen_k},
      {"paged_kv", spec.paged_kv},
      {"paged_gather", spec.paged_gather},
      {"pack_gqa", spec.pack_gqa},
      {"split_kv", spec.split_kv},
      {"local", spec.local},
      {"softcap", spec.softcap},
      {"sinks", spec.sinks},
  };
}

std::string canonical_string(const Spec& spec) { return canonical_json(spec).dump(); }

std::string spec_summary(const Spec& spec) {
  std::string text = fmt::format("{} d{}", dtype_name(spec.dtype), spec.head_dim);
  if (spec.dtype == DType::kE4m3)
    text += fmt::format(" {}->{}{}", quant_name(spec.quant), dtype_name(spec.out_dtype),
                        spec.fp32_two_level_accum ? " two-level" : "");
  if (spec.v_layout == VLayout::kDMajor) text += " v_d_major";
  if (spec.head_dim_v != spec.head_dim) text += fmt::format("/v{}", spec.head_dim_v);
  if (spec.causal) text += " causal";
  text += fmt::format(" {}x{} wg{} st{}", spec.block_m, spec.block_n, spec.consumer_warpgroups, spec.stages);
  // The call's layout before the schedule's knobs: the C ABI's summary field (FA3JIT_SUMMARY_CAPACITY) cuts the tail.
  if (spec.varlen_q) text += " varlen_q";
  if (spec.varlen_k) text += " varlen_k";
  if (spec.paged_kv) text += spec.paged_gather ? " paged(gather)" : " paged";
  if (spec.pack_gqa) text += " pack_gqa";
  if (spec.split_kv) text += " split";
  if (spec.local) text += " local";
  if (spec.softcap) text += " softcap";
  if (spec.sinks) text += " sinks";
  if (spec.pingpong) text += " pingpong";
  if (spec.intra_wg_overlap) text += " overlap";
  if (spec.rescale_o_before_pv) text += " rescale-early";
  if (spec.load_k_ahead) text += " k-ahead";
  if (spec.mask_free_loop) text += " mask-free-loop";
  if (spec.softmax_in_mask_arms) text += " softmax-in-arms";
  if (spec.lazy_rescale) text += " lazy-rescale";
  if (spec.l2_evict_hints) text += " l2-hints";
  if (spec.p_in_smem) text += " p-smem";
  if (spec.pin_pv_wait) text += " pv-pin";
  if (spec.cluster_m > 1) text += fmt::format(" cluster{}", spec.cluster_m);
  if (spec.persistent) text += " persistent";
  return text;
}

std::string name_token(const Spec& spec) {
  std::string token = fmt::format("{}_d{}", dtype_name(spec.dtype), spec.head_dim);
  if (spec.dtype == DType::kE4m3) token = fmt::format("e4m3_{}_d{}", quant_name(spec.quant), spec.head_dim);
  if (spec.head_dim_v != spec.head_dim) token += fmt::format("v{}", spec.head_dim_v);
  if (spec.v_layout == VLayout::kDMajor) token += "_vt";
  token += spec.causal ? "_causal" : spec.local ? "_local" : "_full";
  if (spec.varlen_q || spec.varlen_k) token += "_varlen";
  if (spec.paged_kv) token += spec.paged_gather ? "_pagedgather" : "_paged";
  if (spec.pack_gqa) token += "_packgqa";
  if (spec.split_kv) token += "_split";
  if (spec.softcap) token += "_softcap";
  if (spec.sinks) token += "_sinks";
  return token;
}

}  // namespace fa3jit::attention_fwd

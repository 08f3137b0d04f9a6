// fa3jit problem spec: JSON -> validated, fully resolved Spec, and back to canonical JSON (spec.h).
//
// Every rejection is one Error whose message names the JSON path of the field, the value given and
// what is allowed. Fields left out are filled from the tile table, so the canonical form (and thus the
// cache key) does not depend on key order or on which defaults were spelled out.
#include "generator/spec.h"

#include <cstdint>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "generator/error.h"
#include "generator/tile_table.h"

namespace fa3jit {

namespace {

// Scheduling knobs whose kernel code paths are not written yet. Setting one to true here is all it
// takes to accept the knob: parse_spec then passes it into the Spec and make_kernel_config budgets it.
constexpr bool kPingpongImplemented = true;
constexpr bool kIntraWgOverlapImplemented = true;

constexpr int64_t kMaxProblemDim = std::numeric_limits<int32_t>::max();  // kernel grid/index math is 32-bit

using nlohmann::json;

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

// The value as the user wrote it, shortened so a huge array does not flood the message.
std::string show(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

std::string join_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

void require_object(const json& value, const std::string& path) {
  if (!value.is_object()) {
    fail(ErrorCode::kInvalidSpec,
         path.empty() ? fmt::format("spec must be a JSON object, got {}", show(value))
                      : fmt::format("spec field \"{}\": {} has the wrong type; expected an object", path,
                                    show(value)));
  }
}

void reject_unknown_keys(const json& object, const std::string& path, const std::vector<std::string>& known) {
  for (const auto& item : object.items()) {
    bool found = false;
    for (const auto& k : known) found = found || item.key() == k;
    if (!found) {
      fail(ErrorCode::kInvalidSpec,
           fmt::format("spec field \"{}\" is unknown; known keys {}: {}", join_path(path, item.key()),
                       path.empty() ? "at the top level" : fmt::format("in \"{}\"", path),
                       fmt::join(known, ", ")));
    }
  }
}

bool read_bool(const json& value, const std::string& path) {
  if (!value.is_boolean()) {
    fail(ErrorCode::kInvalidSpec,
         fmt::format("spec field \"{}\": {} has the wrong type; expected true or false", path, show(value)));
  }
  return value.get<bool>();
}

// An integer in [lo, hi]; `allowed` says what is accepted, for the message.
int64_t read_int(const json& value, const std::string& path, int64_t lo, int64_t hi, const std::string& allowed) {
  if (!value.is_number_integer()) {
    fail(ErrorCode::kInvalidSpec,
         fmt::format("spec field \"{}\": {} has the wrong type; expected an integer, {}", path, show(value),
                     allowed));
  }
  // Unsigned values above int64 max cannot be in range; compare before converting.
  const bool too_big = value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(hi);
  if (too_big || value.get<int64_t>() < lo || value.get<int64_t>() > hi) {
    fail(ErrorCode::kInvalidSpec,
         fmt::format("spec field \"{}\": {} is not allowed; expected {}", path, show(value), allowed));
  }
  return value.get<int64_t>();
}

DType read_dtype(const json& doc) {
  if (!doc.contains("dtype")) {
    fail(ErrorCode::kInvalidSpec, "spec field \"dtype\" is missing; expected one of \"fp16\", \"bf16\"");
  }
  const json& value = doc.at("dtype");
  if (!value.is_string()) {
    fail(ErrorCode::kInvalidSpec,
         fmt::format("spec field \"dtype\": {} has the wrong type; expected a string, one of \"fp16\", \"bf16\"",
                     show(value)));
  }
  const std::string name = value.get<std::string>();
  if (name == "fp16") return DType::kFp16;
  if (name == "bf16") return DType::kBf16;
  if (name == "e4m3") {
    fail(ErrorCode::kUnsupported,
         "spec field \"dtype\": \"e4m3\" is not yet supported; supported dtypes: \"fp16\", \"bf16\"");
  }
  fail(ErrorCode::kInvalidSpec,
       fmt::format("spec field \"dtype\": {} is not allowed; expected one of \"fp16\", \"bf16\"", show(value)));
}

int read_head_dim(const json& doc) {
  const std::string allowed = "one of 64, 128, 256";
  if (!doc.contains("head_dim")) {
    fail(ErrorCode::kInvalidSpec, "spec field \"head_dim\" is missing; expected " + allowed);
  }
  const json& value = doc.at("head_dim");
  const int64_t head_dim = read_int(value, "head_dim", std::numeric_limits<int64_t>::min(),
                                    std::numeric_limits<int64_t>::max(), allowed);
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) {
    fail(ErrorCode::kInvalidSpec,
         fmt::format("spec field \"head_dim\": {} is not supported; expected {}", show(value), allowed));
  }
  return static_cast<int>(head_dim);
}

// A knob that is valid but may not have a kernel path yet.
bool read_knob(const json& doc, const char* key, bool fallback, bool implemented) {
  if (!doc.contains(key)) return fallback;
  const bool on = read_bool(doc.at(key), key);
  if (on && !implemented) {
    fail(ErrorCode::kUnsupported,
         fmt::format("spec field \"{}\": true is not yet implemented in this release; expected false", key));
  }
  return on;
}

// block_m and consumer_warpgroups describe the same thing (one consumer warpgroup per 64 rows of Q):
// the one given determines the other; both given must agree; neither given takes the tile table's.
void read_tile(const json& doc, const TileDefaults& defaults, Spec& spec) {
  std::optional<int> block_m, warpgroups;
  spec.block_n = defaults.block_n;
  if (doc.contains("tile")) {
    const json& tile = doc.at("tile");
    require_object(tile, "tile");
    reject_unknown_keys(tile, "tile", {"block_m", "block_n"});
    if (tile.contains("block_m")) {
      const json& value = tile.at("block_m");
      const int64_t m = read_int(value, "tile.block_m", std::numeric_limits<int64_t>::min(),
                                 std::numeric_limits<int64_t>::max(), "one of 64, 128, 192");
      if (m != 64 && m != 128 && m != 192) {
        fail(ErrorCode::kInvalidSpec,
             fmt::format("spec field \"tile.block_m\": {} is not allowed; expected one of 64, 128, 192",
                         show(value)));
      }
      block_m = static_cast<int>(m);
    }
    if (tile.contains("block_n")) {
      const json& value = tile.at("block_n");
      const std::string allowed = "a multiple of 16 in [16, 256]";
      const int64_t n = read_int(value, "tile.block_n", 16, 256, allowed);
      if (n % 16 != 0) {
        fail(ErrorCode::kInvalidSpec,
             fmt::format("spec field \"tile.block_n\": {} is not allowed; expected {}", show(value), allowed));
      }
      spec.block_n = static_cast<int>(n);
    }
  }
  if (doc.contains("consumer_warpgroups")) {
    warpgroups = static_cast<int>(
        read_int(doc.at("consumer_warpgroups"), "consumer_warpgroups", 1, 3, "an integer in [1, 3]"));
  }
  if (block_m && warpgroups && *block_m != 64 * *warpgroups) {
    fail(ErrorCode::kInvalidSpec,
         fmt::format("spec fields \"tile.block_m\" ({}) and \"consumer_warpgroups\" ({}) disagree; "
                     "consumer_warpgroups must equal block_m / 64 = {}",
                     *block_m, *warpgroups, *block_m / 64));
  }
  if (block_m) {
    spec.block_m = *block_m;
    spec.consumer_warpgroups = *block_m / 64;
  } else if (warpgroups) {
    spec.block_m = 64 * *warpgroups;
    spec.consumer_warpgroups = *warpgroups;
  } else {
    spec.block_m = defaults.block_m;
    spec.consumer_warpgroups = defaults.consumer_warpgroups;
  }
}

Problem read_problem(const json& value) {
  require_object(value, "problem");
  reject_unknown_keys(value, "problem", {"batch", "seqlen_q", "seqlen_k", "num_heads", "num_heads_kv"});
  const std::string allowed = fmt::format("an integer in [1, {}]", kMaxProblemDim);
  const auto field = [&](const char* key, std::optional<int64_t> fallback) -> int64_t {
    const std::string path = std::string("problem.") + key;
    if (!value.contains(key)) {
      if (fallback) return *fallback;
      fail(ErrorCode::kInvalidSpec, fmt::format("spec field \"{}\" is missing; expected {}", path, allowed));
    }
    return read_int(value.at(key), path, 1, kMaxProblemDim, allowed);
  };
  Problem problem;
  problem.batch = field("batch", 1);
  problem.seqlen_q = field("seqlen_q", std::nullopt);
  problem.seqlen_k = field("seqlen_k", std::nullopt);
  problem.num_heads = field("num_heads", std::nullopt);
  problem.num_heads_kv = field("num_heads_kv", problem.num_heads);
  if (problem.num_heads % problem.num_heads_kv != 0) {
    fail(ErrorCode::kInvalidSpec,
         fmt::format("spec fields \"problem.num_heads\" ({}) and \"problem.num_heads_kv\" ({}) disagree; "
                     "num_heads must be a multiple of num_heads_kv (grouped-query attention)",
                     problem.num_heads, problem.num_heads_kv));
  }
  return problem;
}

// JSON text -> json, rejecting duplicate keys: nlohmann keeps the last one silently, which would let two
// different-looking documents mean different things depending on the parser.
json parse_text(const std::string& text) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  const json::parser_callback_t callback = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !open_objects.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json doc;
  try {
    doc = json::parse(text, callback);
  } catch (const json::parse_error& e) {
    fail(ErrorCode::kInvalidSpec, fmt::format("spec is not valid JSON: {}", e.what()));
  }
  if (!duplicate.empty()) {
    fail(ErrorCode::kInvalidSpec, fmt::format("spec key \"{}\" appears twice in one object; give each key once",
                                              duplicate));
  }
  return doc;
}

}  // namespace

const char* dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFp16: return "fp16";
    case DType::kBf16: return "bf16";
    case DType::kE4m3: return "e4m3";
  }
  return "unknown";
}

int dtype_size(DType dtype) noexcept { return dtype == DType::kE4m3 ? 1 : 2; }

Spec parse_spec(const json& doc) {
  require_object(doc, "");
  reject_unknown_keys(doc, "",
                      {"dtype", "head_dim", "head_dim_v", "causal", "hadamard", "tile", "consumer_warpgroups",
                       "stages", "pingpong", "intra_wg_overlap", "cluster_m", "problem"});
  Spec spec;
  spec.dtype = read_dtype(doc);
  spec.head_dim = read_head_dim(doc);
  spec.head_dim_v = spec.head_dim;
  if (doc.contains("head_dim_v")) {
    const json& value = doc.at("head_dim_v");
    const int64_t v = read_int(value, "head_dim_v", std::numeric_limits<int64_t>::min(),
                               std::numeric_limits<int64_t>::max(),
                               fmt::format("equal to head_dim ({})", spec.head_dim));
    if (v != spec.head_dim) {
      fail(ErrorCode::kUnsupported,
           fmt::format("spec field \"head_dim_v\": {} is not supported; head_dim_v must equal head_dim ({}) "
                       "in this release",
                       show(value), spec.head_dim));
    }
  }
  spec.causal = doc.contains("causal") ? read_bool(doc.at("causal"), "causal") : false;
  spec.hadamard = doc.contains("hadamard") ? read_bool(doc.at("hadamard"), "hadamard") : false;
  if (spec.hadamard && spec.dtype != DType::kE4m3) {
    fail(ErrorCode::kInvalidSpec,
         fmt::format("spec field \"hadamard\": true is not allowed with dtype \"{}\"; hadamard applies to e4m3 "
                     "only, expected false",
                     dtype_name(spec.dtype)));
  }

  const TileDefaults defaults = default_tile(spec.dtype, spec.head_dim, spec.causal);
  read_tile(doc, defaults, spec);
  spec.stages = doc.contains("stages")
                    ? static_cast<int>(read_int(doc.at("stages"), "stages", 2, 4, "an integer in [2, 4]"))
                    : defaults.stages;
  spec.intra_wg_overlap =
      read_knob(doc, "intra_wg_overlap", defaults.intra_wg_overlap, kIntraWgOverlapImplemented);
  // Pingpong hands GEMM turns round robin between two or three consumer warpgroups around the overlapped
  // mainloop (templates/mainloop.cuh); the table's default applies only where that holds.
  const bool pingpong_possible = spec.intra_wg_overlap && spec.consumer_warpgroups >= 2;
  spec.pingpong = read_knob(doc, "pingpong", defaults.pingpong && pingpong_possible, kPingpongImplemented);
  if (spec.pingpong && !pingpong_possible) {
    fail(ErrorCode::kInvalidSpec,
         fmt::format("spec field \"pingpong\": true is not allowed with intra_wg_overlap {} and consumer_warpgroups "
                     "{}; pingpong needs intra_wg_overlap true and consumer_warpgroups 2 or 3",
                     spec.intra_wg_overlap, spec.consumer_warpgroups));
  }
  // K/V multicast pairs two CTAs that walk the same KV blocks: only without a causal mask (FA3 likewise).
  spec.cluster_m = doc.contains("cluster_m")
                       ? static_cast<int>(read_int(doc.at("cluster_m"), "cluster_m", 1, 2, "1 or 2"))
                       : (spec.causal ? 1 : defaults.cluster_m);
  if (spec.cluster_m == 2 && spec.causal) {
    fail(ErrorCode::kInvalidSpec,
         "spec field \"cluster_m\": 2 is not allowed with causal true; the two CTAs of a cluster must visit the "
         "same KV blocks, expected 1");
  }
  if (doc.contains("problem")) spec.problem = read_problem(doc.at("problem"));

  // Shared memory and register budgets: an infeasible tile is reported now, not at compile or launch.
  make_kernel_config(spec);
  return spec;
}

Spec parse_spec(const std::string& json_text) { return parse_spec(parse_text(json_text)); }

Spec load_spec_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCode::kIoError, fmt::format("cannot read spec file \"{}\"", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(ErrorCode::kIoError, fmt::format("cannot read spec file \"{}\"", path));
  try {
    return parse_spec(text.str());
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", path, e.what()));
  }
}

json canonical_kernel_json(const Spec& spec) {
  // nlohmann::json objects are std::map, so dump() writes the keys sorted.
  return json{
      {"dtype", dtype_name(spec.dtype)},
      {"head_dim", spec.head_dim},
      {"head_dim_v", spec.head_dim_v},
      {"causal", spec.causal},
      {"hadamard", spec.hadamard},
      {"tile", json{{"block_m", spec.block_m}, {"block_n", spec.block_n}}},
      {"consumer_warpgroups", spec.consumer_warpgroups},
      {"stages", spec.stages},
      {"pingpong", spec.pingpong},
      {"intra_wg_overlap", spec.intra_wg_overlap},
      {"cluster_m", spec.cluster_m},
  };
}

std::string canonical_kernel_string(const Spec& spec) { return canonical_kernel_json(spec).dump(); }

json spec_to_json(const Spec& spec) {
  json doc = canonical_kernel_json(spec);
  if (spec.problem) {
    const Problem& p = *spec.problem;
    doc["problem"] = json{{"batch", p.batch},
                          {"seqlen_q", p.seqlen_q},
                          {"seqlen_k", p.seqlen_k},
                          {"num_heads", p.num_heads},
                          {"num_heads_kv", p.num_heads_kv}};
  }
  return doc;
}

std::string spec_summary(const Spec& spec) {
  std::string text = fmt::format("{} d{}", dtype_name(spec.dtype), spec.head_dim);
  if (spec.head_dim_v != spec.head_dim) text += fmt::format("/v{}", spec.head_dim_v);
  if (spec.causal) text += " causal";
  if (spec.hadamard) text += " hadamard";
  text += fmt::format(" {}x{} wg{} st{}", spec.block_m, spec.block_n, spec.consumer_warpgroups, spec.stages);
  if (spec.pingpong) text += " pingpong";
  if (spec.intra_wg_overlap) text += " overlap";
  if (spec.cluster_m > 1) text += fmt::format(" cluster{}", spec.cluster_m);
  return text;
}

}  // namespace fa3jit

// fa3jit problem spec: the JSON document a user writes, parsed, validated and canonicalised.
//
// JSON fields (all optional except dtype and head_dim; unknown keys are errors):
//   dtype               "fp16" | "bf16" ("e4m3" is parsed and rejected as not yet supported)
//   head_dim            64 | 128 | 256
//   head_dim_v          defaults to head_dim; must equal head_dim in this release
//   causal              bool, default false; bottom-right aligned mask (FA3 semantics)
//   hadamard            bool, default false; only meaningful for e4m3 (rejected for 16-bit dtypes)
//   tile {block_m, block_n}        defaults from the tile table (tile_table.h)
//   consumer_warpgroups 1..3, default from the tile table; must equal block_m / 64
//   stages              2..4, default 2
//   pingpong            bool, default from the tile table
//   intra_wg_overlap    bool, default from the tile table
//   cluster_m           1 | 2, default from the tile table: CTAs per thread-block cluster along M; with 2,
//                       the two CTAs of a cluster (adjacent row blocks of one head) share each K/V tile
//                       through TMA multicast, halving L2 traffic (non-causal only)
//   problem {batch, seqlen_q, seqlen_k, num_heads, num_heads_kv}  optional, used by run/bench only
// Every kernel field left out takes its value from the tile table (per dtype, head_dim, causal), so a
// spec with defaults spelled out and one without map to the same Spec and the same cache key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace fa3jit {

enum class DType { kFp16, kBf16, kE4m3 };

/// "fp16", "bf16", "e4m3".
const char* dtype_name(DType dtype) noexcept;
/// Size of one element in bytes (2 for fp16/bf16, 1 for e4m3).
int dtype_size(DType dtype) noexcept;

/// Shape of one attention call, (batch, seqlen, heads, head_dim) layout. Used by run/bench.
struct Problem {
  int64_t batch = 1;
  int64_t seqlen_q = 1;
  int64_t seqlen_k = 1;
  int64_t num_heads = 1;
  int64_t num_heads_kv = 1;
  bool operator==(const Problem&) const = default;
};

/// A fully resolved kernel spec: every field has a value (defaults filled in from the tile table).
struct Spec {
  DType dtype = DType::kBf16;
  int head_dim = 128;
  int head_dim_v = 128;
  bool causal = false;
  bool hadamard = false;
  int block_m = 128;
  int block_n = 128;
  int consumer_warpgroups = 2;
  int stages = 2;
  bool pingpong = false;
  bool intra_wg_overlap = false;
  int cluster_m = 1;
  std::optional<Problem> problem;
  bool operator==(const Spec&) const = default;
};

/// Parses and validates a spec. Throws Error(kInvalidSpec) naming the field (JSON path, e.g.
/// "tile.block_n"), the value and what is allowed; Error(kUnsupported) for values that are valid
/// but not implemented yet (e4m3, pingpong, ...). Never aborts.
Spec parse_spec(const nlohmann::json& doc);
/// Same, from text; a JSON syntax error is reported as kInvalidSpec with the parser's position.
Spec parse_spec(const std::string& json_text);
/// Reads and parses a spec file; kIoError when the file cannot be read.
Spec load_spec_file(const std::string& path);

/// Canonical JSON of the kernel fields only (no "problem"), keys sorted, every default spelled out.
/// Two specs compile to the same kernel iff their canonical JSON strings are equal.
nlohmann::json canonical_kernel_json(const Spec& spec);
std::string canonical_kernel_string(const Spec& spec);

/// Full JSON (kernel fields + problem when present), for printing.
nlohmann::json spec_to_json(const Spec& spec);

/// Short human summary, e.g. "bf16 d128 causal 128x128 wg2 st2".
std::string spec_summary(const Spec& spec);

}  // namespace fa3jit

// Attention forward: the kernel spec a user writes (JSON), its capability table, its one validator and its
// canonical form.
//
// JSON fields (all optional except dtype and head_dim; unknown keys are errors):
//   kind                "attention_fwd" (the default kind of a spec document, jit/family.h)
//   dtype               a dtype of capabilities() ("fp16" | "bf16"; "e4m3" is reserved and rejected)
//   head_dim            a head dim of capabilities() (64 | 128 | 256)
//   head_dim_v          defaults to head_dim; capabilities() says which pairs exist (equal ones today)
//   causal              bool, default false; bottom-right aligned mask (FA3 semantics)
//   tile {block_m, block_n}        defaults from the tile table (tile_table.h)
//   consumer_warpgroups 1..3, default from the tile table; must equal block_m / 64
//   stages              2..4, default from the tile table
//   pingpong            bool, default from the tile table (needs intra_wg_overlap and 2-3 warpgroups)
//   intra_wg_overlap    bool, default from the tile table
//   cluster_m           1 | 2, default from the tile table: CTAs per thread-block cluster along M; with 2,
//                       the two CTAs of a cluster (adjacent row blocks of one head) share each K/V tile
//                       through TMA multicast, halving L2 traffic (non-causal only)
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
struct Capabilities {
  std::vector<DType> dtypes;          // element types of q, k, v (and out)
  std::vector<DType> reserved_dtypes;  // named by the spec language but not generated yet (kUnsupported)
  std::vector<int> head_dims;
  bool head_dim_v_may_differ;         // false: head_dim_v must equal head_dim
  std::vector<std::string> features;  // "causal", "gqa", ...
};
const Capabilities& capabilities();

bool supports_dtype(DType dtype) noexcept;
bool supports_head_dims(int head_dim, int head_dim_v) noexcept;
/// "one of 64, 128, 256" / "one of \"fp16\", \"bf16\"": what a message says is allowed.
std::string allowed_head_dims();
std::string allowed_dtypes();

/// A fully resolved kernel spec: every field has a value (defaults filled in from the tile table).
struct Spec {
  DType dtype = DType::kBf16;
  int head_dim = 128;
  int head_dim_v = 128;
  bool causal = false;
  int block_m = 128;
  int block_n = 128;
  int consumer_warpgroups = 2;
  int stages = 2;
  bool pingpong = false;
  bool intra_wg_overlap = false;
  int cluster_m = 1;
  bool operator==(const Spec&) const = default;
};

/// Reads and validates a spec. Throws Error(kInvalidSpec) naming the field (JSON path, e.g.
/// "tile.block_n"), the value and what is allowed; Error(kUnsupported) for values the language names but
/// this build does not generate (e4m3, head_dim_v != head_dim). Never aborts.
Spec parse_spec(const nlohmann::json& doc);
/// Same, from JSON text; a syntax error is kInvalidSpec with the parser's position.
Spec parse_spec(const std::string& json_text);

/// The family's one validator: every rule on a Spec's values (ranges, combinations, the capability table,
/// shared-memory and register budgets). parse_spec runs it; so does make_kernel_config, for specs built in
/// code. Messages name the spec fields as they are spelled in JSON.
void validate(const Spec& spec);

/// The spec the runtime chooses for a call with no explicit spec: tile-table defaults for
/// (dtype, head_dim, head_dim_v, causal), validated. No JSON involved.
Spec default_spec(DType dtype, int head_dim, int head_dim_v, bool causal);

/// Canonical JSON: "kind" and every kernel field, keys sorted, every default spelled out. Two specs
/// compile to the same kernel iff their canonical strings are equal.
nlohmann::json canonical_json(const Spec& spec);
std::string canonical_string(const Spec& spec);

/// Short human summary, e.g. "bf16 d128 causal 128x176 wg2 st2 pingpong overlap".
std::string spec_summary(const Spec& spec);

/// The part of the kernel name before the hash, e.g. "bf16_d128_causal" (jit/family.h: kernel_name).
std::string name_token(const Spec& spec);

}  // namespace fa3jit::attention_fwd

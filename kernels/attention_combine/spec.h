// Split-KV combine: the kernel spec a user writes (JSON), its capability table, its one validator and its
// canonical form.
//
// Split-KV decoding (FlashDecoding; FA3 hopper/flash_fwd_combine_kernel.h) runs the attention of each
// (batch, head) in num_splits parts over disjoint key ranges. Split s writes a partial output O_s that is
// already normalised by its own softmax sum (fp32) and its log-sum-exp L_s (fp32, natural log; -inf for a
// split that saw no key). This kernel merges the splits of every row:
//   L = log(sum_s exp(L_s))           (with the maximum subtracted first, so no exp overflows)
//   O = sum_s exp(L_s - L) * O_s
// A row whose splits all have L_s = -inf gives O = 0 and L = -inf, never NaN.
//
// JSON fields (unknown keys are errors):
//   kind          "attention_combine" (required in a spec document: the default kind is attention_fwd)
//   out_dtype     element type of the output O: "bf16" | "fp16" (required)
//   head_dim_v    elements per row of O: a multiple of 8 in [8, 512] (required)
//   max_splits    the largest num_splits a launch may pass: an integer in [1, 256], default 128. It sizes the
//                 shared-memory table of LSEs, so a smaller bound gives a smaller CTA footprint.
//   rows_per_cta  tuning: rows one CTA combines, a power of two; with lanes_per_row threads per row
//                 (geometry.h) the CTA has 32 to 1024 threads and its LSE table fits 48 KB. Default from
//                 default_rows_per_cta() (geometry.h).
// A field left out takes its default, so a spec with defaults spelled out and one without map to the same
// Spec, kernel name and cache key. Problem sizes (num_splits, batch, seqlen_q, num_heads) are launch
// arguments (launch.h), never spec fields.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"

namespace fa3jit::attention_combine {

inline constexpr std::string_view kKind = "attention_combine";

/// What this build of the family generates: the one statement of it. Spec parsing, launch checks, error
/// messages and the family's capabilities JSON all read this table.
struct Capabilities {
  std::vector<DType> out_dtypes;  // element types of O (the partials and both LSEs are always fp32)
  int head_dim_v_min;             // head_dim_v: a multiple of head_dim_v_multiple in [min, max]
  int head_dim_v_max;
  int head_dim_v_multiple;
  int max_splits_limit;           // max_splits in [1, max_splits_limit]
  int default_max_splits;
  std::vector<std::string> features;
};
const Capabilities& capabilities();

bool supports_out_dtype(DType dtype) noexcept;
bool supports_head_dim_v(long long head_dim_v) noexcept;
/// What a message says is allowed: "one of \"fp16\", \"bf16\"", "a multiple of 8 in [8, 512]",
/// "an integer in [1, 256]".
std::string allowed_out_dtypes();
std::string allowed_head_dim_v();
std::string allowed_max_splits();

/// A fully resolved kernel spec: every field has a value.
struct Spec {
  DType out_dtype = DType::kBf16;
  int head_dim_v = 128;
  int max_splits = 128;
  int rows_per_cta = 4;
  bool operator==(const Spec&) const = default;
};

/// Reads and validates a spec ("kind" may be present and must be "attention_combine"). Throws
/// Error(kInvalidSpec) naming the field, the value as written and what is allowed. Never aborts.
Spec parse_spec(const nlohmann::json& doc);
/// Same, from JSON text; a syntax error is kInvalidSpec with the parser's position.
Spec parse_spec(const std::string& json_text);

/// The family's one validator: every rule on a Spec's values (the capability table, the rows_per_cta
/// geometry and the shared-memory budget). parse_spec and default_spec run it; so does the emitter, for specs
/// built in code. Error(kInvalidSpec) with the field's JSON name.
void validate(const Spec& spec);

/// The spec a launch with no explicit spec uses: default rows_per_cta for (out_dtype, head_dim_v,
/// max_splits), validated.
Spec default_spec(DType out_dtype, int head_dim_v, int max_splits);

/// Canonical JSON: "kind" and every field, keys sorted, defaults spelled out. Two specs compile to the same
/// kernel iff their canonical strings are equal.
nlohmann::json canonical_json(const Spec& spec);
std::string canonical_string(const Spec& spec);

/// Short human summary, e.g. "combine bf16 dv128 splits<=128 rows4 lanes32 threads128".
std::string spec_summary(const Spec& spec);

/// The part of the kernel name before the hash, e.g. "bf16_dv128_s128" (jit/family.h: kernel_name).
std::string name_token(const Spec& spec);

}  // namespace fa3jit::attention_combine

// Split-KV combine spec: capability table, JSON reading, the one validator, canonical form (spec.h).
//
// Reading (parse_spec) only turns JSON into a Spec (types, defaults); every rule on the values lives in
// validate(), which also guards specs built in code. Its first half (check_shape_fields) also runs before the
// default rows_per_cta is derived from head_dim_v and max_splits.
#include "kernels/attention_combine/spec.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_fields.h"
#include "kernels/attention_combine/geometry.h"

namespace fa3jit::attention_combine {

namespace {

using nlohmann::json;
using namespace json_fields;

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::kInvalidSpec, message); }

// Any integer: the range is the validator's business, the type is the reader's.
int read_any_int(const json& doc, const char* key, const std::string& allowed) {
  return static_cast<int>(read_int(doc.at(key), key, std::numeric_limits<int>::min(),
                                   std::numeric_limits<int>::max(), allowed));
}

DType read_out_dtype(const json& doc) {
  if (!doc.contains("out_dtype")) invalid("spec field \"out_dtype\" is missing; expected " + allowed_out_dtypes());
  const json& value = doc.at("out_dtype");
  const std::string name = read_string(value, "out_dtype", allowed_out_dtypes());
  DType dtype{};
  if (!dtype_from_name(name, dtype) || !supports_out_dtype(dtype))
    invalid(fmt::format("spec field \"out_dtype\": {} is not allowed; expected {}", show(value),
                        allowed_out_dtypes()));
  return dtype;
}

std::string rows_per_cta_list(int head_dim_v, int max_splits) {
  return fmt::format("one of {}", fmt::join(allowed_rows_per_cta(head_dim_v, max_splits), ", "));
}

}  // namespace

const Capabilities& capabilities() {
  static const Capabilities kCapabilities{
      {DType::kFp16, DType::kBf16},  // out_dtypes
      8,                             // head_dim_v_min
      512,                           // head_dim_v_max (MLA's value head dim)
      8,                             // head_dim_v_multiple
      256,                           // max_splits_limit
      128,                           // default_max_splits
      // lse: L is written when asked; strided_out: free batch/seq/head strides of out; empty_splits: splits
      // with L_s = -inf are skipped and never read.
      {"lse", "strided_out", "empty_splits"},
  };
  return kCapabilities;
}

bool supports_out_dtype(DType dtype) noexcept {
  const auto& dtypes = capabilities().out_dtypes;
  return std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end();
}

bool supports_head_dim_v(long long head_dim_v) noexcept {
  const Capabilities& c = capabilities();
  return head_dim_v >= c.head_dim_v_min && head_dim_v <= c.head_dim_v_max && head_dim_v % c.head_dim_v_multiple == 0;
}

std::string allowed_out_dtypes() {
  std::vector<std::string> names;
  for (DType d : capabilities().out_dtypes) names.push_back(fmt::format("\"{}\"", dtype_name(d)));
  return fmt::format("one of {}", fmt::join(names, ", "));
}

std::string allowed_head_dim_v() {
  const Capabilities& c = capabilities();
  return fmt::format("a multiple of {} in [{}, {}]", c.head_dim_v_multiple, c.head_dim_v_min, c.head_dim_v_max);
}

std::string allowed_max_splits() { return fmt::format("an integer in [1, {}]", capabilities().max_splits_limit); }

namespace {

// The fields rows_per_cta depends on: judged first, so a bad head_dim_v is reported as such rather than as a
// rows_per_cta problem.
void check_shape_fields(const Spec& spec) {
  if (!supports_out_dtype(spec.out_dtype))
    invalid(fmt::format("spec field \"out_dtype\": \"{}\" is not allowed; expected {}", dtype_name(spec.out_dtype),
                        allowed_out_dtypes()));
  // Multiples of 8: a row is whole 16-byte fp32 vectors (loads) and whole 8-byte groups of 16-bit outputs
  // (stores), with rows of the partials starting on 32-byte sectors.
  if (!supports_head_dim_v(spec.head_dim_v))
    invalid(fmt::format("spec field \"head_dim_v\": {} is not allowed; expected {}", spec.head_dim_v,
                        allowed_head_dim_v()));
  if (spec.max_splits < 1 || spec.max_splits > capabilities().max_splits_limit)
    invalid(fmt::format("spec field \"max_splits\": {} is not allowed; expected {}", spec.max_splits,
                        allowed_max_splits()));
}

}  // namespace

void validate(const Spec& spec) {
  check_shape_fields(spec);
  if (!rows_per_cta_fits(spec.head_dim_v, spec.max_splits, spec.rows_per_cta))
    invalid(fmt::format("spec field \"rows_per_cta\": {} is not allowed with head_dim_v {} ({} lanes per row) and "
                        "max_splits {}; expected {} (a power of two giving {} to {} threads per CTA and an LSE table "
                        "of at most {} bytes)",
                        spec.rows_per_cta, spec.head_dim_v, lanes_per_row(spec.head_dim_v), spec.max_splits,
                        rows_per_cta_list(spec.head_dim_v, spec.max_splits), kMinThreads, kMaxThreads,
                        kMaxStaticSmemBytes));
}

Spec parse_spec(const json& doc) {
  require_object(doc, "");
  reject_unknown_keys(doc, "", {"kind", "out_dtype", "head_dim_v", "max_splits", "rows_per_cta"});
  if (doc.contains("kind") && read_string(doc.at("kind"), "kind", fmt::format("\"{}\"", kKind)) != kKind)
    invalid(fmt::format("spec field \"kind\": {} is not this family; expected \"{}\"", show(doc.at("kind")), kKind));
  Spec spec;
  spec.out_dtype = read_out_dtype(doc);
  if (!doc.contains("head_dim_v")) invalid("spec field \"head_dim_v\" is missing; expected " + allowed_head_dim_v());
  spec.head_dim_v = read_any_int(doc, "head_dim_v", allowed_head_dim_v());
  spec.max_splits = doc.contains("max_splits") ? read_any_int(doc, "max_splits", allowed_max_splits())
                                               : capabilities().default_max_splits;
  check_shape_fields(spec);  // the default and the allowed set of rows_per_cta depend on them
  spec.rows_per_cta = doc.contains("rows_per_cta") ? read_any_int(doc, "rows_per_cta", "a power of two")
                                                   : default_rows_per_cta(spec.head_dim_v, spec.max_splits);
  validate(spec);
  return spec;
}

Spec parse_spec(const std::string& json_text) { return parse_spec(parse_text(json_text)); }

Spec default_spec(DType out_dtype, int head_dim_v, int max_splits) {
  Spec spec;
  spec.out_dtype = out_dtype;
  spec.head_dim_v = head_dim_v;
  spec.max_splits = max_splits;
  check_shape_fields(spec);
  spec.rows_per_cta = default_rows_per_cta(head_dim_v, max_splits);
  validate(spec);
  return spec;
}

json canonical_json(const Spec& spec) {
  // nlohmann::json objects are std::map, so dump() writes the keys sorted.
  return json{
      {"kind", kKind},
      {"out_dtype", dtype_name(spec.out_dtype)},
      {"head_dim_v", spec.head_dim_v},
      {"max_splits", spec.max_splits},
      {"rows_per_cta", spec.rows_per_cta},
  };
}

std::string canonical_string(const Spec& spec) { return canonical_json(spec).dump(); }

std::string spec_summary(const Spec& spec) {
  const Geometry g = derive_geometry(spec);
  return fmt::format("combine {} dv{} splits<={} rows{} lanes{} threads{}", dtype_name(spec.out_dtype),
                     spec.head_dim_v, spec.max_splits, spec.rows_per_cta, g.lanes_per_row, g.num_threads);
}

std::string name_token(const Spec& spec) {
  return fmt::format("{}_dv{}_s{}", dtype_name(spec.out_dtype), spec.head_dim_v, spec.max_splits);
}

}  // namespace fa3jit::attention_combine

// FP8 pre-pass spec: capability table, parsing, the one validator, canonical form (spec.h).
#include "kernels/quantize_fp8/spec.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_fields.h"
#include "kernels/quantize_fp8/geometry.h"

namespace fa3jit::quantize_fp8 {

namespace {

using nlohmann::json;
using namespace json_fields;

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::kInvalidSpec, message); }

constexpr Rope kRopes[] = {Rope::kNone, Rope::kNeox, Rope::kInterleaved};

// Any integer: the range is the validator's business, the type is the reader's.
int read_any_int(const json& doc, const char* key, const std::string& allowed) {
  return static_cast<int>(read_int(doc.at(key), key, std::numeric_limits<int>::min(),
                                   std::numeric_limits<int>::max(), allowed));
}

DType read_dtype(const json& doc) {
  if (!doc.contains("dtype")) invalid("spec field \"dtype\" is missing; expected " + allowed_dtypes());
  const json& value = doc.at("dtype");
  const std::string name = read_string(value, "dtype", allowed_dtypes());
  DType dtype{};
  if (!dtype_from_name(name, dtype) || !supports_dtype(dtype))
    invalid(fmt::format("spec field \"dtype\": {} is not allowed; expected {}", show(value), allowed_dtypes()));
  return dtype;
}

Rope read_rope(const json& doc) {
  const json& value = doc.at("rope");
  const std::string name = read_string(value, "rope", allowed_ropes());
  for (Rope r : kRopes)
    if (name == rope_name(r)) return r;
  invalid(fmt::format("spec field \"rope\": {} is not allowed; expected {}", show(value), allowed_ropes()));
}

bool power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

bool rotary_dim_fits(Rope rope, int head_dim, int rotary_dim) {
  switch (rope) {
    case Rope::kNone: return rotary_dim == head_dim;
    // Whole 8-element chunks are rotated, and a chunk's 4 cos/sin values are one aligned 16-byte load.
    case Rope::kInterleaved: return rotary_dim >= 8 && rotary_dim <= head_dim && rotary_dim % 8 == 0;
    // Pairs (i, i + rotary_dim / 2) one index bit apart, whole chunks: a power of two >= 16.
    case Rope::kNeox: return rotary_dim >= 16 && rotary_dim <= head_dim && power_of_two(rotary_dim);
  }
  return false;
}

}  // namespace

const char* rope_name(Rope rope) noexcept {
  switch (rope) {
    case Rope::kNone: return "none";
    case Rope::kNeox: return "neox";
    case Rope::kInterleaved: return "interleaved";
  }
  return "unknown";
}

const Capabilities& capabilities() {
  static const Capabilities kCapabilities{
      {DType::kFp16, DType::kBf16},  // dtypes
      {64, 128, 256},                // head_dims (head_dim and head_dim_v)
      16,                            // block_rows_min
      256,                           // block_rows_max
      16,                            // block_rows_multiple
      128,                           // default_block_rows
      // hadamard: H.D rotation of Q and K; rope: neox / interleaved before it; strided_inputs/outputs: free
      // batch/seq/head strides (16-byte multiples); gqa: num_heads and num_heads_kv independent.
      {"hadamard", "rope", "strided_inputs", "strided_outputs", "gqa"},
  };
  return kCapabilities;
}

bool supports_dtype(DType dtype) noexcept {
  const auto& dtypes = capabilities().dtypes;
  return std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end();
}

bool supports_head_dim(long long head_dim) noexcept {
  const auto& dims = capabilities().head_dims;
  return std::find(dims.begin(), dims.end(), head_dim) != dims.end();
}

bool supports_block_rows(long long rows) noexcept {
  const Capabilities& c = capabilities();
  return rows >= c.block_rows_min && rows <= c.block_rows_max && rows % c.block_rows_multiple == 0;
}

std::string allowed_dtypes() {
  std::vector<std::string> names;
  for (DType d : capabilities().dtypes) names.push_back(fmt::format("\"{}\"", dtype_name(d)));
  return fmt::format("one of {}", fmt::join(names, ", "));
}

std::string allowed_head_dims() { return fmt::format("one of {}", fmt::join(capabilities().head_dims, ", ")); }

std::string allowed_block_rows() {
  const Capabilities& c = capabilities();
  return fmt::format("a multiple of {} in [{}, {}]", c.block_rows_multiple, c.block_rows_min, c.block_rows_max);
}

std::string allowed_ropes() {
  std::vector<std::string> names;
  for (Rope r : kRopes) names.push_back(fmt::format("\"{}\"", rope_name(r)));
  return fmt::format("one of {}", fmt::join(names, ", "));
}

std::string allowed_rotary_dim(Rope rope, int head_dim) {
  switch (rope) {
    case Rope::kNone:
      return fmt::format("{} (head_dim; rotary_dim has no effect with rope \"none\")", head_dim);
    case Rope::kInterleaved: return fmt::format("a multiple of 8 in [8, {}] (head_dim)", head_dim);
    case Rope::kNeox: return fmt::format("a power of two in [16, {}] (head_dim)", head_dim);
  }
  return "?";
}

namespace {

// The fields every other rule depends on: judged first, so a bad head_dim is reported as such rather than as
// a rotary_dim problem.
void check_shape_fields(const Spec& spec) {
  if (!supports_dtype(spec.dtype))
    invalid(fmt::format("spec field \"dtype\": \"{}\" is not allowed; expected {}", dtype_name(spec.dtype),
                        allowed_dtypes()));
  if (!supports_head_dim(spec.head_dim))
    invalid(fmt::format("spec field \"head_dim\": {} is not allowed; expected {}", spec.head_dim,
                        allowed_head_dims()));
  if (!supports_head_dim(spec.head_dim_v))
    invalid(fmt::format("spec field \"head_dim_v\": {} is not allowed; expected {}", spec.head_dim_v,
                        allowed_head_dims()));
}

}  // namespace

void validate(const Spec& spec) {
  check_shape_fields(spec);
  if (spec.rope != Rope::kNone && spec.rope != Rope::kNeox && spec.rope != Rope::kInterleaved)
    invalid(fmt::format("spec field \"rope\": {} is not allowed; expected {}", static_cast<int>(spec.rope),
                        allowed_ropes()));
  if (!rotary_dim_fits(spec.rope, spec.head_dim, spec.rotary_dim))
    invalid(fmt::format("spec field \"rotary_dim\": {} is not allowed with rope \"{}\" and head_dim {}; expected {}",
                        spec.rotary_dim, rope_name(spec.rope), spec.head_dim,
                        allowed_rotary_dim(spec.rope, spec.head_dim)));
  // Multiples of 16: a block is whole warps for every head_dim (16 * 64 elements = one warp's 1024 values).
  if (!supports_block_rows(spec.q_block_rows))
    invalid(fmt::format("spec field \"q_block_rows\": {} is not allowed; expected {}", spec.q_block_rows,
                        allowed_block_rows()));
  if (!supports_block_rows(spec.k_block_rows))
    invalid(fmt::format("spec field \"k_block_rows\": {} is not allowed; expected {}", spec.k_block_rows,
                        allowed_block_rows()));
}

Spec parse_spec(const json& doc) {
  require_object(doc, "");
  reject_unknown_keys(doc, "",
                      {"kind", "dtype", "head_dim", "head_dim_v", "hadamard", "rope", "rotary_dim", "q_block_rows",
                       "k_block_rows", "v_layout"});
  if (doc.contains("kind") && read_string(doc.at("kind"), "kind", fmt::format("\"{}\"", kKind)) != kKind)
    invalid(fmt::format("spec field \"kind\": {} is not this family; expected \"{}\"", show(doc.at("kind")), kKind));
  Spec spec;
  spec.dtype = read_dtype(doc);
  if (!doc.contains("head_dim")) invalid("spec field \"head_dim\" is missing; expected " + allowed_head_dims());
  spec.head_dim = read_any_int(doc, "head_dim", allowed_head_dims());
  spec.head_dim_v =
      doc.contains("head_dim_v") ? read_any_int(doc, "head_dim_v", allowed_head_dims()) : spec.head_dim;
  check_shape_fields(spec);  // rotary_dim's default and rules depend on head_dim
  spec.hadamard = doc.contains("hadamard") ? read_bool(doc.at("hadamard"), "hadamard") : true;
  spec.rope = doc.contains("rope") ? read_rope(doc) : Rope::kNone;
  spec.rotary_dim = doc.contains("rotary_dim")
                        ? read_any_int(doc, "rotary_dim", allowed_rotary_dim(spec.rope, spec.head_dim))
                        : spec.head_dim;
  const int rows = capabilities().default_block_rows;
  spec.q_block_rows = doc.contains("q_block_rows") ? read_any_int(doc, "q_block_rows", allowed_block_rows()) : rows;
  spec.k_block_rows = doc.contains("k_block_rows") ? read_any_int(doc, "k_block_rows", allowed_block_rows()) : rows;
  if (doc.contains("v_layout")) {
    const char* allowed = "\"seq_major\" or \"d_major\"";
    const std::string layout = read_string(doc.at("v_layout"), "v_layout", allowed);
    if (layout != "seq_major" && layout != "d_major")
      invalid(fmt::format("spec field \"v_layout\": {} is not allowed; expected {}", show(doc.at("v_layout")), allowed));
    spec.v_d_major = layout == "d_major";
  }
  validate(spec);
  return spec;
}

Spec parse_spec(const std::string& json_text) { return parse_spec(parse_text(json_text)); }

Spec default_spec(DType dtype, int head_dim, int head_dim_v) {
  Spec spec;
  spec.dtype = dtype;
  spec.head_dim = head_dim;
  spec.head_dim_v = head_dim_v;
  spec.rotary_dim = head_dim;
  spec.q_block_rows = spec.k_block_rows = capabilities().default_block_rows;
  validate(spec);
  return spec;
}

json canonical_json(const Spec& spec) {
  // nlohmann::json objects are std::map, so dump() writes the keys sorted.
  return json{
      {"kind", kKind},
      {"dtype", dtype_name(spec.dtype)},
      {"head_dim", spec.head_dim},
      {"head_dim_v", spec.head_dim_v},
      {"hadamard", spec.hadamard},
      {"rope", rope_name(spec.rope)},
      {"rotary_dim", spec.rotary_dim},
      {"q_block_rows", spec.q_block_rows},
      {"k_block_rows", spec.k_block_rows},
      {"v_layout", spec.v_d_major ? "d_major" : "seq_major"},
  };
}

std::string canonical_string(const Spec& spec) { return canonical_json(spec).dump(); }

std::string spec_summary(const Spec& spec) {
  const Geometry g = derive_geometry(spec);
  return fmt::format("quantize_fp8 {} d{} dv{} {} rope {}{} q{} k{}{} warps{} cluster{}", dtype_name(spec.dtype),
                     spec.head_dim, spec.head_dim_v, spec.hadamard ? "hadamard" : "no-hadamard",
                     rope_name(spec.rope), spec.rope == Rope::kNone ? "" : fmt::format("/{}", spec.rotary_dim),
                     spec.q_block_rows, spec.k_block_rows, spec.v_d_major ? " v_d_major" : "", g.warps_per_cta,
                     g.cluster_size);
}

std::string name_token(const Spec& spec) {
  std::string token = fmt::format("{}_d{}_dv{}", dtype_name(spec.dtype), spec.head_dim, spec.head_dim_v);
  if (spec.hadamard) token += "_h";
  if (spec.rope != Rope::kNone) token += fmt::format("_{}{}", rope_name(spec.rope), spec.rotary_dim);
  token += fmt::format("_q{}_k{}", spec.q_block_rows, spec.k_block_rows);
  if (spec.v_d_major) token += "_vt";
  return token;
}

}  // namespace fa3jit::quantize_fp8

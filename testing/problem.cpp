// Problem sections of spec files (problem.h).
#include "testing/problem.h"

#include <limits>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_fields.h"
#include "jit/family.h"

namespace fa3jit::testing {

namespace {
constexpr int64_t kMaxProblemDim = std::numeric_limits<int32_t>::max();  // kernel grid/index math is 32-bit
}

Problem read_problem(const nlohmann::json& value) {
  using namespace json_fields;
  require_object(value, "problem");
  reject_unknown_keys(value, "problem", {"batch", "seqlen_q", "seqlen_k", "num_heads", "num_heads_kv", "hadamard"});
  const std::string allowed = fmt::format("an integer in [1, {}]", kMaxProblemDim);
  const auto field = [&](const char* key, std::optional<int64_t> fallback) -> int64_t {
    const std::string path = std::string("problem.") + key;
    if (!value.contains(key)) {
      if (fallback) return *fallback;
      fail(fmt::format("spec field \"{}\" is missing; expected {}", path, allowed));
    }
    return read_int(value.at(key), path, 1, kMaxProblemDim, allowed);
  };
  Problem p;
  p.batch = field("batch", 1);
  p.seqlen_q = field("seqlen_q", std::nullopt);
  p.seqlen_k = field("seqlen_k", std::nullopt);
  p.num_heads = field("num_heads", std::nullopt);
  p.num_heads_kv = field("num_heads_kv", p.num_heads);
  p.hadamard = value.contains("hadamard") && read_bool(value.at("hadamard"), "problem.hadamard");
  if (p.num_heads % p.num_heads_kv != 0)
    fail(fmt::format("spec fields \"problem.num_heads\" ({}) and \"problem.num_heads_kv\" ({}) disagree; num_heads "
                     "must be a multiple of num_heads_kv (grouped-query attention)",
                     p.num_heads, p.num_heads_kv));
  return p;
}

AttentionCase attention_case_from_json(const nlohmann::json& doc) {
  const SpecDocument d = split_spec_document(doc);
  if (d.kind != attention_fwd::kKind)
    throw Error(ErrorCode::kInvalidSpec, fmt::format("spec field \"kind\": {} cannot be run by this command; it "
                                                     "runs \"{}\" specs",
                                                     json_fields::show(nlohmann::json(d.kind)), attention_fwd::kKind));
  AttentionCase c;
  c.spec = attention_fwd::parse_spec(d.spec);
  if (d.problem) c.problem = read_problem(*d.problem);
  return c;
}

AttentionCase load_attention_case(const std::string& path) {
  const std::string text = json_fields::read_file(path);
  try {
    return attention_case_from_json(json_fields::parse_text(text));
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", path, e.what()));
  }
}

const Problem& require_problem(const AttentionCase& c) {
  if (!c.problem)
    throw Error(ErrorCode::kInvalidSpec,
                "spec has no \"problem\" section; add e.g. \"problem\": {\"batch\": 2, \"seqlen_q\": 8192, "
                "\"seqlen_k\": 8192, \"num_heads\": 16, \"num_heads_kv\": 16}");
  return *c.problem;
}

std::string case_summary(const AttentionCase& c) {
  std::string s = attention_fwd::spec_summary(c.spec);
  if (c.problem) {
    const Problem& p = *c.problem;
    s += fmt::format(" | batch {}, seqlen_q {}, seqlen_k {}, heads {}/{}", p.batch, p.seqlen_q, p.seqlen_k,
                     p.num_heads, p.num_heads_kv);
  }
  return s;
}

}  // namespace fa3jit::testing

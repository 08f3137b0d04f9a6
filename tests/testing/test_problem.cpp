// The "problem" section of spec files (testing/problem.h): read by run/bench/tune, never part of a kernel.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"
#include "testing/problem.h"

using fa3jit::Error;
using fa3jit::ErrorCode;
using fa3jit::testing::AttentionCase;
using fa3jit::testing::Problem;
using Catch::Matchers::Contains;

namespace {

AttentionCase load(const std::string& text) {
  return fa3jit::testing::attention_case_from_json(fa3jit::json_fields::parse_text(text));
}

struct BadCase {
  const char* name;
  const char* json;
  std::vector<std::string> fragments;
};

const std::vector<BadCase> kBadCases = {
    {"unknown problem key",
     R"({"dtype": "bf16", "head_dim": 128, "problem": {"seqlen": 10, "seqlen_q": 1, "seqlen_k": 1, "num_heads": 1}})",
     {"\"problem.seqlen\"", "unknown", "seqlen_q", "num_heads_kv"}},
    {"problem null", R"({"dtype": "bf16", "head_dim": 128, "problem": null})", {"\"problem\"", "null", "object"}},
    {"problem missing seqlen_q", R"({"dtype": "bf16", "head_dim": 128, "problem": {"seqlen_k": 8, "num_heads": 8}})",
     {"\"problem.seqlen_q\"", "missing", "[1, 2147483647]"}},
    {"problem negative batch",
     R"({"dtype": "bf16", "head_dim": 128, "problem": {"batch": -1, "seqlen_q": 8, "seqlen_k": 8, "num_heads": 8}})",
     {"\"problem.batch\"", "-1", "[1, 2147483647]"}},
    {"problem seqlen over 2^31-1",
     R"({"dtype": "bf16", "head_dim": 128, "problem": {"seqlen_q": 2147483648, "seqlen_k": 8, "num_heads": 8}})",
     {"\"problem.seqlen_q\"", "2147483648", "[1, 2147483647]"}},
    {"problem seqlen over uint64",
     R"({"dtype": "bf16", "head_dim": 128, "problem": {"seqlen_q": 8, "seqlen_k": 18446744073709551615, "num_heads": 8}})",
     {"\"problem.seqlen_k\"", "18446744073709551615", "[1, 2147483647]"}},
    {"problem seqlen float",
     R"({"dtype": "bf16", "head_dim": 128, "problem": {"seqlen_q": 8.0, "seqlen_k": 8, "num_heads": 8}})",
     {"\"problem.seqlen_q\"", "8.0", "wrong type"}},
    {"num_heads_kv zero",
     R"({"dtype": "bf16", "head_dim": 128, "problem": {"seqlen_q": 8, "seqlen_k": 8, "num_heads": 8, "num_heads_kv": 0}})",
     {"\"problem.num_heads_kv\"", "0", "[1, 2147483647]"}},
    {"num_heads not a multiple of num_heads_kv",
     R"({"dtype": "bf16", "head_dim": 128, "problem": {"seqlen_q": 8, "seqlen_k": 8, "num_heads": 32, "num_heads_kv": 5}})",
     {"\"problem.num_heads\" (32)", "\"problem.num_heads_kv\" (5)", "multiple"}},
    {"a family run cannot time",
     R"({"kind": "attention_combine", "out_dtype": "bf16", "head_dim_v": 128, "problem": {"seqlen_q": 8, "seqlen_k": 8, "num_heads": 8}})",
     {"\"kind\"", "attention_combine", "cannot be run"}},
    {"a kind with a NUL, echoed escaped (a raw NUL would end the message there)",
     R"({"kind": "attention_combine\u0000x", "out_dtype": "bf16", "head_dim_v": 128})",
     {R"(spec field "kind": "attention_combine\u0000x" cannot be run by this command)"}},
};

}  // namespace

TEST_CASE("bad problem sections are rejected naming the field, the value and what is allowed", "[spec][problem]") {
  for (const BadCase& c : kBadCases) {
    INFO("case: " << c.name << "\nspec: " << c.json);
    try {
      load(c.json);
      FAIL_CHECK("accepted a bad problem");
    } catch (const Error& e) {
      INFO("message: " << e.what());
      CHECK(e.code() == ErrorCode::kInvalidSpec);
      for (const std::string& fragment : c.fragments) CHECK_THAT(std::string(e.what()), Contains(fragment));
    }
  }
}

TEST_CASE("problem defaults and limits; the problem is no part of the kernel", "[spec][problem]") {
  const AttentionCase c = load(R"({"dtype": "bf16", "head_dim": 128,
      "problem": {"seqlen_q": 2147483647, "seqlen_k": 77, "num_heads": 12}})");
  REQUIRE(c.problem.has_value());
  CHECK(*c.problem == Problem{1, 2147483647, 77, 12, 12});
  const AttentionCase gqa = load(R"({"dtype": "bf16", "head_dim": 128,
      "problem": {"batch": 3, "seqlen_q": 1, "seqlen_k": 9, "num_heads": 12, "num_heads_kv": 4}})");
  CHECK(*gqa.problem == Problem{3, 1, 9, 12, 4});
  CHECK(gqa.spec == load(R"({"dtype": "bf16", "head_dim": 128})").spec);
  CHECK_FALSE(load(R"({"dtype": "bf16", "head_dim": 128})").problem.has_value());
  CHECK(fa3jit::testing::case_summary(gqa) ==
        "bf16 d128 128x176 wg2 st2 pingpong overlap mask-free-loop l2-hints persistent | batch 3, seqlen_q 1, seqlen_k 9, heads 12/4");
  try {
    fa3jit::testing::require_problem(load(R"({"dtype": "bf16", "head_dim": 128})"));
    FAIL_CHECK("a spec without a problem section was accepted by require_problem");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Contains("no \"problem\" section"));
  }
}

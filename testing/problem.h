// The problem section of a spec file: the shape `fa3jit run`, `bench` and `tune` time a kernel on. No part of
// a kernel's identity (jit/family.h: SpecDocument keeps it beside the spec).
//   "problem": {"batch": 2, "seqlen_q": 4096, "seqlen_k": 4096, "num_heads": 32, "num_heads_kv": 8}
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/attention_fwd/spec.h"

namespace fa3jit::testing {

/// Shape of one attention call, (batch, seqlen, heads, head_dim) layout.
struct Problem {
  int64_t batch = 1;
  int64_t seqlen_q = 1;
  int64_t seqlen_k = 1;
  int64_t num_heads = 1;
  int64_t num_heads_kv = 1;
  bool hadamard = false;  // e4m3 specs: `run` also measures the inputs rotated by the Hadamard pre-pass transform
  bool operator==(const Problem&) const = default;
};

/// Reads a "problem" object: batch (default 1), seqlen_q, seqlen_k, num_heads (required), num_heads_kv
/// (default num_heads), each in [1, 2^31 - 1], num_heads a multiple of num_heads_kv; hadamard (bool, default
/// false; e4m3 specs). Error(kInvalidSpec)
/// naming "problem.<field>", the value and what is allowed.
Problem read_problem(const nlohmann::json& value);

/// An attention spec file: the kernel spec and, when the file has one, its problem.
struct AttentionCase {
  attention_fwd::Spec spec;
  std::optional<Problem> problem;
};
/// Loads a spec file of kind attention_fwd; errors name the file.
AttentionCase load_attention_case(const std::string& path);
AttentionCase attention_case_from_json(const nlohmann::json& doc);

/// The case's problem, or Error(kInvalidSpec) `spec has no "problem" section`.
const Problem& require_problem(const AttentionCase& c);

/// "bf16 d128 causal 128x128 wg2 st2 | batch 2, seqlen_q 8192, seqlen_k 8192, heads 16/16".
std::string case_summary(const AttentionCase& c);

}  // namespace fa3jit::testing

// Shared by the GPU tests: whether a GPU is here, one process-wide runtime (cache from the environment, like a
// serving process), row sampling and the expected-error check. Problems come from testing/attention_problem.h
// (dense) and testing/serving_problem.h (varlen, paged, split-KV).
#pragma once

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "jit/driver.h"
#include "kernels/attention_fwd/launch.h"
#include "testing/attention_problem.h"

namespace fa3jit::test {

using testing::AttentionProblem;
using testing::ProblemShape;

/// True when a GPU is present; otherwise prints why the GPU tests are skipped (once) and returns false.
inline bool have_gpu() {
  static const bool available = [] {
    const bool ok = gpu_available();
    if (!ok) std::printf("GPU tests skipped: no CUDA driver or device on this machine\n");
    if (ok) ensure_context(0);
    return ok;
  }();
  return available;
}

inline Runtime& runtime() {
  static Runtime rt;
  return rt;
}

/// The `dense` (seqlen_q, seqlen_k) pairs of tests/data/seqlens.json (FA3's test matrix).
inline std::vector<std::pair<int64_t, int64_t>> dense_pairs() {
  std::ifstream in(FA3JIT_SOURCE_DIR "/tests/data/seqlens.json");
  REQUIRE(in.good());
  const auto doc = nlohmann::json::parse(in);
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (const auto& p : doc.at("dense")) pairs.emplace_back(p.at(0).get<int64_t>(), p.at(1).get<int64_t>());
  REQUIRE(pairs.size() >= 20);
  return pairs;
}

/// Every row of a problem whose rows x seqlen_k is at most `full_limit` (the float64 reference stays cheap), else
/// `sampled` random rows plus the first and last block_m rows (testing/reference.h: sample_rows).
inline std::vector<RowIndex> rows_to_check(const ProblemShape& s, int block_m, int64_t full_limit = int64_t{1} << 24,
                                           int64_t sampled = 384) {
  const int64_t rows = s.batch * s.num_heads * s.seqlen_q;
  if (rows * s.seqlen_k <= full_limit) return all_rows(s.batch, s.num_heads, s.seqlen_q);
  return sample_rows(s.batch, s.num_heads, s.seqlen_q, block_m, sampled, 7);
}

/// A forward call with `a` must throw Error(code) whose message contains `fragment` (the argument's name).
inline void expect_forward_error(const attention_fwd::ForwardArgs& a, ErrorCode code, const std::string& fragment) {
  try {
    attention_fwd::forward(runtime(), a, nullptr);
    FAIL("expected an error containing: " << fragment);
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.code() == code);
    CHECK(std::string(e.what()).find(fragment) != std::string::npos);
  }
}

}  // namespace fa3jit::test

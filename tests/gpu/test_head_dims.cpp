// GPU correctness of the head dims beyond the tile table's first rows (run on an H200; skipped elsewhere):
// Phi-3's 96, 192, DeepSeek's MLA prefill 192 / 128, other head_dim_v != head_dim pairs, and sizes between the
// table's rows (8, 40, 72, 200: generated directly, TMA zero-filling the columns past head_dim in shared memory,
// the output's columns past head_dim_v never stored), for fp16/bf16 and e4m3, causal and not, MHA and GQA, over
// every other `dense` (seqlen_q, seqlen_k) pair of FA3's matrix, against the float64 reference with FA3's rule.
#include <catch2/catch.hpp>

#include <utility>

#include "gpu_test.h"

using namespace fa3jit;
using namespace fa3jit::test;
using namespace fa3jit::attention_fwd;

namespace {

struct HeadDims {
  int64_t head_dim, head_dim_v;
};

}  // namespace

TEST_CASE("head dims 96, 192, 192/128 and sizes between the table's rows match the float64 reference",
          "[gpu][forward][head_dims]") {
  if (!have_gpu()) return;
  const auto all_pairs = dense_pairs();
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (size_t i = 0; i < all_pairs.size(); i += 2) pairs.push_back(all_pairs[i]);
  int failures = 0, total = 0;
  const HeadDims sixteen_bit[] = {{96, 96}, {192, 192}, {192, 128}, {128, 64}, {8, 8}, {40, 40}, {72, 72}, {200, 200}};
  const HeadDims fp8[] = {{96, 96}, {192, 192}, {192, 128}, {80, 80}, {48, 48}};
  for (DType dtype : {DType::kFp16, DType::kBf16, DType::kE4m3})
    for (const HeadDims& hd : dtype == DType::kE4m3 ? std::vector<HeadDims>(std::begin(fp8), std::end(fp8))
                                                    : std::vector<HeadDims>(std::begin(sixteen_bit), std::end(sixteen_bit)))
      for (bool causal : {false, true})
        for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{6, 6}, {8, 2}})
          for (auto [sq, sk] : pairs) {
            ProblemShape s{dtype, 2, sq, sk, hq, hkv, hd.head_dim, causal};
            s.head_dim_v = hd.head_dim_v;
            if (dtype == DType::kE4m3) s.quant = total % 2 ? Quant::kPerBlock : Quant::kPerHead;
            AttentionProblem p(s, 9000 + total);
            p.run(runtime());
            const Spec spec = default_spec(dtype, static_cast<int>(hd.head_dim), static_cast<int>(hd.head_dim_v),
                                           causal);
            const CheckResult r = dtype == DType::kE4m3
                                      ? p.check(rows_to_check(s, static_cast<int>(p.shape.quant_block_m),
                                                              int64_t{1} << 23, 256))
                                      : p.check(rows_to_check(s, spec.block_m));
            ++total;
            if (!r.passed) ++failures;
            std::printf("%-5s d%ld/%ld %-6s %ld/%-2ld %6ld %6ld  %-10.3e %-10.3e %-10.3e %s %s\n", dtype_name(dtype),
                        hd.head_dim, hd.head_dim_v, causal ? "causal" : "full", hq, hkv, sq, sk, r.max_abs_err,
                        r.tolerance, r.lse_max_err, r.passed ? "PASS" : "FAIL", r.failure.c_str());
            INFO(dtype_name(dtype) << " d" << hd.head_dim << "/" << hd.head_dim_v << " " << sq << "x" << sk << ": "
                                   << format_check(r));
            CHECK(r.passed);
          }
  std::printf("head dims matrix: %d of %d cases passed\n", total - failures, total);
}

TEST_CASE("a head dim pair with no tile and head dims off the rule are errors naming them", "[gpu][arguments]") {
  if (!have_gpu()) return;
  ProblemShape s{DType::kBf16, 1, 64, 64, 2, 2, 64, false};
  s.head_dim_v = 256;
  AttentionProblem p(s, 1);
  expect_forward_error(p.args(), ErrorCode::kUnsupported, "\"head_dim_v\" (256)");
}

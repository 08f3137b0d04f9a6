// GPU correctness of the forward kernel (run on an H200; skipped with a message elsewhere).
// Matrix: fp16/bf16 x head_dim {64, 128, 256} x causal x {MHA 6/6, GQA 4:1 8/2} x the `dense`
// (seqlen_q, seqlen_k) pairs of cases/seqlens.json (FA3's test matrix), against the float64 reference
// with FA3's rule (testing/reference.h). Large pairs are checked on a row sample.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <vector>
#include <nlohmann/json.hpp>

#include "gpu_test.h"
#include "testing/half.h"

using namespace fa3jit;
using namespace fa3jit::test;
using namespace fa3jit::attention_fwd;

TEST_CASE("forward matches the float64 reference over the FA3 test matrix", "[gpu][forward]") {
  if (!have_gpu()) return;
  const auto pairs = dense_pairs();
  int failures = 0, total = 0;
  std::printf("%-5s %4s %-6s %-4s %6s %6s  %-10s %-10s %-10s %s\n", "dtype", "d", "causal", "heads", "sq", "sk",
              "max_err", "tol", "lse_err", "result");
  for (DType dtype : {DType::kFp16, DType::kBf16})
    for (int64_t d : {64, 128, 256})
      for (bool causal : {false, true})
        for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{6, 6}, {8, 2}})
          for (auto [sq, sk] : pairs) {
            ProblemShape s{dtype, 2, sq, sk, hq, hkv, d, causal};
            AttentionProblem p(s, 1000 + total);
            p.run(runtime());
            const Spec spec = default_spec(dtype, static_cast<int>(d), static_cast<int>(d), causal);
            const CheckResult r = p.check(rows_to_check(s, spec.block_m));
            ++total;
            if (!r.passed) ++failures;
            std::printf("%-5s %4ld %-6s %ld/%-2ld %6ld %6ld  %-10.3e %-10.3e %-10.3e %s %s\n", dtype_name(dtype), d,
                        causal ? "yes" : "no", hq, hkv, sq, sk, r.max_abs_err, r.tolerance, r.lse_max_err,
                        r.passed ? "PASS" : "FAIL", r.failure.c_str());
            CHECK(r.passed);
          }
  std::printf("forward matrix: %d of %d cases passed\n", total - failures, total);
}

TEST_CASE("B1: causal with seqlen_q > seqlen_k gives O = 0 and lse = -inf for rows that see no key",
          "[gpu][cases]") {
  if (!have_gpu()) return;
  for (auto [sq, sk] : {std::pair<int64_t, int64_t>{799, 3}, {239, 1}}) {
    ProblemShape s{DType::kBf16, 2, sq, sk, 4, 2, 128, true};
    AttentionProblem p(s, 42);
    p.run(runtime());
    int64_t empty_rows = 0;
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.num_heads; ++h)
        for (int64_t i = 0; i < sq - sk; ++i) {  // row i sees keys j <= i + sk - sq < 0: none
          ++empty_rows;
          REQUIRE(std::isinf(p.lse[(b * s.num_heads + h) * sq + i]));
          REQUIRE(p.lse[(b * s.num_heads + h) * sq + i] < 0);
          for (int64_t c = 0; c < s.head_dim; ++c) REQUIRE(p.out.data[p.out.offset(b, i, h, c)] == 0);
        }
    CHECK(empty_rows == s.batch * s.num_heads * (sq - sk));
    const CheckResult r = p.check();
    INFO(format_check(r));
    CHECK(r.passed);
    CHECK(r.nan_count == 0);
  }
}

TEST_CASE("B2: a causal decode step (seqlen_q = 1) equals the non-causal result", "[gpu][cases]") {
  if (!have_gpu()) return;
  ProblemShape s{DType::kBf16, 3, 1, 339, 8, 2, 128, true};
  AttentionProblem causal(s, 5);
  causal.run(runtime());
  s.causal = false;
  AttentionProblem full(s, 5);  // same seed: same inputs
  full.run(runtime());
  REQUIRE(causal.q.data == full.q.data);
  CHECK(causal.out.data == full.out.data);
  CHECK(causal.check().passed);
}

TEST_CASE("forward is bit-exact over repeated runs (no races)", "[gpu][forward]") {
  if (!have_gpu()) return;
  for (bool causal : {false, true}) {
    ProblemShape s{DType::kBf16, 2, 1023, 1024, 8, 2, 128, causal};
    AttentionProblem p(s, 11);
    p.run(runtime());
    const auto first = p.out.data;
    const auto first_lse = p.lse;
    for (int i = 0; i < 20; ++i) {
      p.run(runtime());
      REQUIRE(p.out.data == first);
      REQUIRE(std::memcmp(p.lse.data(), first_lse.data(), first_lse.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("non-default specs (other tiles, stages, schedules) run and pass", "[gpu][forward]") {
  if (!have_gpu()) return;
  // Other tiles, stage counts and schedules (sequential mainloop, no pingpong) than the tile table picks.
  for (const char* json : {R"({"dtype":"bf16","head_dim":128,"intra_wg_overlap":false,"pingpong":false})",
                           R"({"dtype":"bf16","head_dim":256,"causal":true,"intra_wg_overlap":false,"pingpong":false})",
                           R"({"dtype":"fp16","head_dim":128,"causal":true,"pingpong":false})",
                           R"({"dtype":"bf16","head_dim":64,"causal":true,"intra_wg_overlap":false})",
                           R"({"dtype":"bf16","head_dim":128,"cluster_m":2})",
                           R"({"dtype":"fp16","head_dim":64,"cluster_m":2,"pingpong":false})",
                           R"({"dtype":"fp16","head_dim":128,"causal":true,"stages":3,"tile":{"block_n":128}})",
                           R"({"dtype":"bf16","head_dim":64,"tile":{"block_m":128,"block_n":128}})",
                           R"({"dtype":"bf16","head_dim":128,"tile":{"block_m":64,"block_n":128}})"}) {
    const Spec spec = parse_spec(std::string(json));
    // 800 rows: an odd number of 128-row blocks, so a 2-CTA cluster pads its last pair.
    ProblemShape s{spec.dtype, 2, 800, 1111, 4, 2, spec.head_dim, spec.causal};
    AttentionProblem p(s, 3);
    p.run(runtime(), load_kernel(runtime(), spec).get());
    const CheckResult r = p.check();
    INFO(json << ": " << format_check(r));
    CHECK(r.passed);
  }
}

namespace {

// A problem of one spec's kernel pair (two specs that differ in one knob): the spec's dtypes, head dims, mask,
// quantisation (per_block descales by the spec's tile) and V layout, on the given sizes.
struct PairCase {
  const char* spec;
  int64_t batch, seqlen_q, seqlen_k, heads, heads_kv;
};

ProblemShape shape_of(const Spec& spec, const PairCase& c) {
  ProblemShape s{spec.dtype, c.batch, c.seqlen_q, c.seqlen_k, c.heads, c.heads_kv, spec.head_dim, spec.causal};
  s.head_dim_v = spec.head_dim_v;
  s.out_dtype = spec.out_dtype;
  s.quant = spec.quant;
  s.quant_block_m = spec.block_m;
  s.quant_block_n = spec.block_n;
  s.v_d_major = spec.v_layout == VLayout::kDMajor;
  return s;
}

}  // namespace

// Runs two specs of one problem on the same inputs: the second's outputs must pass the reference check and agree
// with the first's to the bit.
static void check_pair_bit_identical(const Spec& off, const Spec& on, const PairCase& c) {
  INFO(spec_summary(off) << " | " << spec_summary(on) << " batch " << c.batch << " sq " << c.seqlen_q << " sk "
                         << c.seqlen_k);
  const ProblemShape s = shape_of(on, c);
  AttentionProblem a(s, 5), b(s, 5);
  a.run(runtime(), load_kernel(runtime(), off).get());
  b.run(runtime(), load_kernel(runtime(), on).get());
  const CheckResult r = b.check(rows_to_check(s, on.block_m));
  INFO(format_check(r));
  CHECK(r.passed);
  CHECK(a.out.data == b.out.data);
  CHECK(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0);
}

// Runs every case's spec with the boolean `knob` false and true on the same inputs: the outputs must pass the
// reference check and agree to the bit (the knob moves instructions or loads, never the arithmetic). `held`: spec
// fields both sides take where a case leaves them out (so that only the knob differs where the table would move
// another field with it).
static void check_knob_bit_identical(const char* knob, const std::vector<PairCase>& cases,
                                     const nlohmann::json& held = nlohmann::json::object()) {
  for (const PairCase& c : cases) {
    nlohmann::json doc = nlohmann::json::parse(c.spec);
    for (const auto& [key, value] : held.items())
      if (!doc.contains(key)) doc[key] = value;
    doc[knob] = false;
    const Spec off = parse_spec(doc);
    doc[knob] = true;
    check_pair_bit_identical(off, parse_spec(doc), c);
  }
}

TEST_CASE("a 2-CTA cluster gives the one-CTA grid's out and lse bit for bit", "[gpu][forward][cluster]") {
  if (!have_gpu()) return;
  // The cluster shares K/V loads (multicast) and releases each stage on both CTAs' barriers; each tile's arithmetic
  // is the grid's, so the two must agree to the bit: a difference or a hang is a stage overwritten or released
  // early. An odd number of row blocks (the last pair padded), GQA, both schedules, k-ahead, 64 to 256.
  const PairCase cases[] = {
      {R"({"dtype":"bf16","head_dim":128})", 2, 1023, 1111, 8, 2},
      {R"({"dtype":"bf16","head_dim":128})", 3, 800, 4224, 16, 4},
      {R"({"dtype":"fp16","head_dim":256})", 2, 799, 1023, 16, 4},
      {R"({"dtype":"bf16","head_dim":256,"load_k_ahead":false})", 1, 4224, 799, 4, 4},
      {R"({"dtype":"bf16","head_dim":192,"head_dim_v":128})", 2, 239, 1500, 8, 8},
      {R"({"dtype":"fp16","head_dim":64,"pingpong":false})", 2, 1023, 1111, 8, 2},
      {R"({"dtype":"bf16","head_dim":128,"intra_wg_overlap":false,"pingpong":false})", 2, 1023, 799, 8, 2},
      {R"({"dtype":"bf16","head_dim":128})", 1, 113, 1, 4, 1},  // one key block, one row block
      {R"({"dtype":"bf16","head_dim":128})", 4, 4224, 1023, 16, 4},  // 34 x 64 tiles: 17 rounds per CTA pair
  };
  for (const PairCase& c : cases) {
    nlohmann::json doc = nlohmann::json::parse(c.spec);
    doc["persistent"] = false;
    doc["cluster_m"] = 1;
    const Spec grid = parse_spec(doc);
    for (bool persistent : {false, true}) {
      // On the persistent grid the two CTAs of a cluster take adjacent tiles of each round: several rounds per CTA
      // (the multicast of the next tile's V waits for both CTAs' O stores), the padded last pair.
      doc["cluster_m"] = 2;
      doc["persistent"] = persistent;
      check_pair_bit_identical(grid, parse_spec(doc), c);
    }
  }
}

TEST_CASE("rescale_o_before_pv gives the same out and lse bit for bit", "[gpu][forward][rescale]") {
  if (!have_gpu()) return;
  // O is multiplied by the same factor before the same P.V in either place of the overlapped schedule (only the
  // point in the instruction stream moves), so the two kernels must agree to the bit: a difference is a missing
  // fence between the multiplies and the P.V that reads O. d256 pins lazy_rescale off, which the table takes there
  // and rescale_o_before_pv excludes (it changes the rounding, not only the order).
  check_knob_bit_identical("rescale_o_before_pv",
                           {
                               {R"({"dtype":"bf16","head_dim":256,"lazy_rescale":false})", 2, 799, 1023, 8, 2},
                               {R"({"dtype":"fp16","head_dim":256,"causal":true,"lazy_rescale":false})", 2, 1023, 4224, 8, 8},
                               {R"({"dtype":"bf16","head_dim":128,"causal":true})", 3, 1023, 1111, 8, 2},
                               {R"({"dtype":"bf16","head_dim":192,"head_dim_v":128,"causal":true})", 2, 239, 799, 16, 16},
                               // one key block: only the last P.V's rescale
                               {R"({"dtype":"bf16","head_dim":64})", 1, 113, 1, 4, 1},
                               {R"({"dtype":"e4m3","head_dim":256,"v_layout":"d_major"})", 2, 1023, 1111, 8, 2},
                           });
}

TEST_CASE("load_k_ahead gives the same out and lse bit for bit", "[gpu][forward][load_k_ahead]") {
  if (!have_gpu()) return;
  // Only the order of the producer's loads changes, so the two kernels must agree to the bit; a hang or a difference
  // is a stage handed over too early. Both schedules, pingpong with 2 and 3 warpgroups, 2-4 stages, persistent grids
  // whose CTAs run several tiles (the next tile's first K and Q under the previous tile's end, its first V after
  // o_empty), a one-block tile, 2-CTA clusters, and e4m3 with V given d_major.
  check_knob_bit_identical(
      "load_k_ahead",
      {
          {R"({"dtype":"bf16","head_dim":128})", 4, 1023, 1111, 8, 2},
          {R"({"dtype":"bf16","head_dim":128,"causal":true})", 4, 1023, 4224, 8, 8},
          {R"({"dtype":"fp16","head_dim":256})", 2, 799, 1023, 16, 4},
          {R"({"dtype":"bf16","head_dim":64,"causal":true})", 3, 2049, 2049, 8, 2},
          {R"({"dtype":"bf16","head_dim":64,"stages":4})", 2, 1023, 4224, 40, 8},
          {R"({"dtype":"bf16","head_dim":192,"head_dim_v":128,"causal":true})", 2, 239, 799, 16, 16},
          {R"({"dtype":"bf16","head_dim":96})", 2, 1023, 1500, 12, 4},
          {R"({"dtype":"bf16","head_dim":128,"intra_wg_overlap":false,"pingpong":false})", 2, 1023, 799, 8, 2},
          {R"({"dtype":"bf16","head_dim":128,"causal":true,"stages":3,"tile":{"block_n":128}})", 2, 1023, 1023, 16, 2},
          {R"({"dtype":"bf16","head_dim":128,"persistent":false,"cluster_m":2})", 2, 1023, 799, 8, 2},
          {R"({"dtype":"bf16","head_dim":64})", 1, 113, 1, 4, 1},  // one key block
          {R"({"dtype":"e4m3","head_dim":128,"v_layout":"d_major"})", 2, 1023, 1111, 16, 4},
          {R"({"dtype":"e4m3","head_dim":256,"causal":true,"v_layout":"d_major","quant":"per_block"})", 2, 1023,
           1023, 8, 2},
      });
}

TEST_CASE("mask_free_loop gives the same out and lse bit for bit", "[gpu][forward][mask_free_loop]") {
  if (!have_gpu()) return;
  // The blocks that need no mask run the same arithmetic in either copy of the key-block body (the masked copy
  // checks per block and skips the mask), so the two kernels must agree to the bit. Both schedules, causal tiles
  // with masked diagonal blocks and a masked seqlen_k tail, a persistent grid, three warpgroups, e4m3.
  check_knob_bit_identical(
      "mask_free_loop",
      {
          {R"({"dtype":"bf16","head_dim":128})", 4, 1023, 1111, 8, 2},
          {R"({"dtype":"bf16","head_dim":128,"causal":true})", 4, 1023, 4224, 8, 8},
          {R"({"dtype":"fp16","head_dim":256,"causal":true})", 2, 799, 1023, 16, 4},
          {R"({"dtype":"bf16","head_dim":64,"causal":true})", 3, 2049, 2049, 8, 2},
          {R"({"dtype":"bf16","head_dim":192,"head_dim_v":128,"causal":true})", 2, 239, 799, 16, 16},
          {R"({"dtype":"bf16","head_dim":96})", 2, 1023, 1500, 12, 4},
          {R"({"dtype":"bf16","head_dim":128,"intra_wg_overlap":false,"pingpong":false,"causal":true})", 2, 1023, 799,
           8, 2},
          {R"({"dtype":"bf16","head_dim":64})", 1, 113, 1, 4, 1},  // one key block
          {R"({"dtype":"e4m3","head_dim":128,"causal":true})", 2, 1023, 1111, 16, 4},
          {R"({"dtype":"e4m3","head_dim":256,"v_layout":"d_major","quant":"per_block"})", 2, 1023, 1023, 8, 2},
          // false also runs the first key block through the loop body (its step issues no P.V): the schedules that
          // touch O or the fresh accumulator around the P.V issue.
          {R"({"dtype":"e4m3","head_dim":128,"fp32_two_level_accum":true,"tile":{"block_n":128},"causal":true})", 2, 799,
           1023, 8, 2},
          {R"({"dtype":"bf16","head_dim":128,"rescale_o_before_pv":true,"causal":true})", 2, 1023, 1111, 8, 2},
          {R"({"dtype":"bf16","head_dim":256,"load_k_ahead":true})", 2, 1, 799, 8, 2},
      });
}

TEST_CASE("softmax_in_mask_arms gives the same out and lse bit for bit", "[gpu][forward][softmax_arms]") {
  if (!have_gpu()) return;
  // The same softmax in each arm of the mask branch as after its join: only the place of the wait for P.V in the
  // instruction stream moves, so the two kernels must agree to the bit. Masked and unmasked blocks (causal diagonals,
  // seqlen_k tails), 1-3 warpgroups, a persistent grid, the first block's step without P.V, O rescaled before P.V,
  // e4m3 with one copy. Both sides run one copy of the loop (the field needs it; the table runs two
  // copies for most of these specs).
  check_knob_bit_identical(
      "softmax_in_mask_arms",
      {
          {R"({"dtype":"bf16","head_dim":128})", 4, 1023, 1111, 8, 2},
          {R"({"dtype":"bf16","head_dim":128,"causal":true})", 4, 1023, 4224, 8, 8},
          {R"({"dtype":"fp16","head_dim":256,"causal":true})", 2, 799, 1023, 16, 4},
          {R"({"dtype":"bf16","head_dim":256})", 2, 1, 799, 8, 2},
          {R"({"dtype":"bf16","head_dim":64,"causal":true})", 3, 2049, 2049, 8, 2},
          {R"({"dtype":"bf16","head_dim":192,"head_dim_v":128,"causal":true})", 2, 239, 799, 16, 16},
          {R"({"dtype":"bf16","head_dim":96})", 2, 1023, 1500, 12, 4},
          {R"({"dtype":"bf16","head_dim":64})", 1, 113, 1, 4, 1},  // one key block
          {R"({"dtype":"bf16","head_dim":128,"rescale_o_before_pv":true,"causal":true})", 2, 1023, 1111, 8, 2},
          {R"({"dtype":"e4m3","head_dim":128,"causal":true})", 2, 1023, 1111, 16, 4},
          {R"({"dtype":"bf16","head_dim":128,"tile":{"block_m":64},"pingpong":false,"causal":true})", 2, 1023, 799, 8,
           2},  // one warpgroup
      },
      {{"mask_free_loop", false}});
}

TEST_CASE("l2_evict_hints gives the same out and lse bit for bit", "[gpu][forward][l2_hints]") {
  if (!have_gpu()) return;
  // L2 priorities change where lines live, never what a load returns: the two kernels must agree to the bit. Dense,
  // causal, GQA, e4m3 with V d_major (its own V boxes), a 2-CTA cluster (multicast boxes). The serving layouts' boxes
  // (pack_gqa's 5-D Q, paged K/V) take the hints in the serving tests, against the float64 reference.
  check_knob_bit_identical(
      "l2_evict_hints",
      {
          {R"({"dtype":"bf16","head_dim":128})", 2, 1023, 1111, 8, 2},
          {R"({"dtype":"bf16","head_dim":128,"causal":true})", 2, 1023, 4224, 8, 8},
          {R"({"dtype":"fp16","head_dim":256,"causal":true})", 2, 799, 1023, 16, 4},
          {R"({"dtype":"bf16","head_dim":64})", 1, 113, 1, 4, 1},
          {R"({"dtype":"bf16","head_dim":192,"head_dim_v":128,"causal":true})", 2, 239, 799, 16, 16},
          {R"({"dtype":"e4m3","head_dim":128,"v_layout":"d_major"})", 2, 1023, 1111, 8, 2},
          {R"({"dtype":"bf16","head_dim":128,"cluster_m":2,"persistent":false})", 2, 1023, 1111, 8, 2},
      });
}

TEST_CASE("pin_pv_wait gives the same out and lse bit for bit", "[gpu][forward][pin_pv_wait]") {
  if (!have_gpu()) return;
  // The store only moves where the P.V wait issues: the same values in the same order, so the two kernels must agree to
  // the bit. Every 16-bit row's tile (both copies of the loop: causal diagonals and seqlen_k tails), GQA, one key block,
  // d256's one-copy loop asked for it, one warpgroup, a persistent grid whose CTAs run several tiles, P in shared
  // memory, e4m3 with V transposed in the kernel and given d-major.
  check_knob_bit_identical(
      "pin_pv_wait",
      {
          {R"({"dtype":"bf16","head_dim":128})", 2, 1023, 1111, 8, 2},
          {R"({"dtype":"bf16","head_dim":128,"causal":true})", 2, 1023, 4224, 8, 8},
          {R"({"dtype":"fp16","head_dim":64,"causal":true})", 3, 2049, 2049, 8, 2},
          {R"({"dtype":"bf16","head_dim":64})", 1, 113, 1, 4, 1},
          {R"({"dtype":"bf16","head_dim":96})", 2, 1023, 1500, 12, 4},
          {R"({"dtype":"bf16","head_dim":96,"causal":true})", 2, 799, 1023, 12, 4},
          {R"({"dtype":"bf16","head_dim":192,"causal":true})", 2, 239, 799, 16, 16},
          {R"({"dtype":"bf16","head_dim":192,"head_dim_v":128})", 2, 1023, 1111, 16, 4},
          {R"({"dtype":"fp16","head_dim":256,"causal":true,"pin_pv_wait":true})", 2, 799, 1023, 16, 4},
          {R"({"dtype":"bf16","head_dim":128,"tile":{"block_m":64},"pingpong":false,"causal":true})", 2, 1023, 799, 8,
           2},
          {R"({"dtype":"bf16","head_dim":64,"p_in_smem":true})", 2, 1023, 1111, 8, 2},
          {R"({"dtype":"e4m3","head_dim":128,"causal":true})", 2, 1023, 1111, 16, 4},
          {R"({"dtype":"e4m3","head_dim":256,"v_layout":"d_major"})", 2, 799, 1023, 8, 2},
      });
}

TEST_CASE("p_in_smem gives the same out and lse bit for bit", "[gpu][forward][p_in_smem]") {
  if (!have_gpu()) return;
  // The same 16-bit P goes through shared memory instead of registers into the same P.V, so the two kernels must agree
  // to the bit: a difference is a P row stored to the wrong swizzled chunk, or read before its warp's stores (or
  // overwritten before the last P.V read it). Tiles that fit both ways: 1-3 warpgroups, both schedules, pingpong,
  // persistent grids whose CTAs run several tiles, causal diagonals and seqlen_k tails, one key block, GQA, d256's one
  // copy with lazy_rescale, 192 / 128, rescale_o_before_pv.
  check_knob_bit_identical(
      "p_in_smem",
      {
          {R"({"dtype":"bf16","head_dim":64})", 4, 1023, 1111, 8, 2},
          {R"({"dtype":"fp16","head_dim":64,"causal":true})", 3, 2049, 2049, 8, 2},
          {R"({"dtype":"bf16","head_dim":96,"causal":true})", 2, 1023, 1500, 12, 4},
          {R"({"dtype":"bf16","head_dim":128,"tile":{"block_n":128}})", 4, 1023, 1111, 8, 2},
          {R"({"dtype":"bf16","head_dim":128,"causal":true,"tile":{"block_n":128}})", 4, 1023, 4224, 8, 8},
          {R"({"dtype":"bf16","head_dim":128,"tile":{"block_n":128},"intra_wg_overlap":false,"pingpong":false,)"
           R"("causal":true})", 2, 1023, 799, 8, 2},
          {R"({"dtype":"bf16","head_dim":128,"tile":{"block_m":64,"block_n":128},"pingpong":false})", 2, 799, 1023, 8,
           2},
          {R"({"dtype":"fp16","head_dim":256,"causal":true,"tile":{"block_n":64}})", 2, 799, 1023, 16, 4},
          {R"({"dtype":"bf16","head_dim":192,"head_dim_v":128,"causal":true,"tile":{"block_n":96}})", 2, 239, 799,
           16, 16},
          {R"({"dtype":"bf16","head_dim":128,"tile":{"block_n":128},"rescale_o_before_pv":true})", 2, 1023, 1111, 8,
           2},
          {R"({"dtype":"bf16","head_dim":64})", 1, 113, 1, 4, 1},  // one key block
      });
}

TEST_CASE("p_in_smem tiles that fit only with P in shared memory pass the reference", "[gpu][forward][p_in_smem]") {
  if (!have_gpu()) return;
  // FA3's d64 192x192 and the d96 192x128 key block: P in registers does not fit their consumers' 160 registers.
  for (const char* json :
       {R"({"dtype":"bf16","head_dim":64,"tile":{"block_n":192},"p_in_smem":true})",
        R"({"dtype":"fp16","head_dim":64,"causal":true,"tile":{"block_n":192},"p_in_smem":true})",
        R"({"dtype":"bf16","head_dim":96,"tile":{"block_n":128},"p_in_smem":true})",
        R"({"dtype":"bf16","head_dim":96,"causal":true,"tile":{"block_n":128},"p_in_smem":true})",
        R"({"dtype":"bf16","head_dim":88,"tile":{"block_n":128},"p_in_smem":true,"persistent":true})"}) {
    const Spec spec = parse_spec(std::string(json));
    for (const auto& [sq, sk] : {std::pair<int64_t, int64_t>{800, 1111}, {1, 4224}, {239, 113}}) {
      ProblemShape s{spec.dtype, 2, sq, sk, 6, 2, spec.head_dim, spec.causal};
      AttentionProblem p(s, 7);
      p.run(runtime(), load_kernel(runtime(), spec).get());
      const CheckResult r = p.check();
      INFO(json << " sq " << sq << " sk " << sk << ": " << format_check(r));
      CHECK(r.passed);
    }
  }
}

// Multiplies key j's row of every (batch, kv head) of `p` by gain(j / seqlen_k), rounded to the input dtype, on the
// host (which the reference reads) and on the device: the scores' scale, and so each row's block maximum, then
// rises or falls along the keys.
static void scale_keys(AttentionProblem& p, float (*gain)(double)) {
  HostTensor& k = p.k;
  for (int64_t b = 0; b < k.batch; ++b)
    for (int64_t j = 0; j < k.seqlen; ++j) {
      const float g = gain(static_cast<double>(j) / static_cast<double>(k.seqlen));
      for (int64_t h = 0; h < k.heads; ++h)
        for (int64_t d = 0; d < k.dim; ++d) {
          uint16_t& bits = k.data[static_cast<size_t>(k.offset(b, j, h, d))];
          bits = float_to_bits(k.dtype, g * bits_to_float(k.dtype, bits));
        }
    }
  p.d_k.upload(k.data.data(), k.size_bytes());
}

TEST_CASE("lazy_rescale passes the float64 reference where block maxima rise, fall and jump", "[gpu][forward][lazy_rescale]") {
  if (!have_gpu()) return;
  // lazy_rescale changes the reference maximum O is scaled to, so its outputs differ from the eager kernel's in
  // rounding only: both must pass FA3's rule. Key gains make the maxima move: the loop visits key blocks from the
  // last to the first, so a gain falling along the keys raises the maximum block after block (rises below and above
  // the slack of 8 in log2 units: a gain of 9 lifts the largest score of a row by about 2.7 x 9 x 1.44 = 35), a
  // rising gain keeps the first block's maximum, and a step jumps once. 1-3 warpgroups, causal diagonals, seqlen_k
  // tails, odd sizes, one key, GQA, fp16's narrower range, the mask-free loop, decode-shaped rows.
  struct Gain {
    const char* name;
    float (*gain)(double);
  };
  const Gain gains[] = {
      {"fa3 distribution", [](double) { return 1.f; }},
      {"falling 9 -> 1", [](double x) { return static_cast<float>(9.0 - 8.0 * x); }},
      {"rising 1 -> 9", [](double x) { return static_cast<float>(1.0 + 8.0 * x); }},
      {"step 8x in the first fifth", [](double x) { return x < 0.2 ? 8.f : 1.f; }},
  };
  const PairCase cases[] = {
      {R"({"dtype":"bf16","head_dim":128})", 2, 1023, 4224, 8, 2},
      {R"({"dtype":"bf16","head_dim":128,"causal":true})", 2, 1023, 1111, 8, 8},
      {R"({"dtype":"fp16","head_dim":64,"causal":true})", 2, 2049, 2049, 6, 2},
      {R"({"dtype":"bf16","head_dim":256})", 2, 799, 1023, 8, 2},
      {R"({"dtype":"fp16","head_dim":96})", 1, 239, 1500, 12, 4},
      {R"({"dtype":"bf16","head_dim":192,"head_dim_v":128,"causal":true})", 1, 799, 799, 16, 16},
      {R"({"dtype":"bf16","head_dim":128,"intra_wg_overlap":false,"pingpong":false})", 2, 799, 1111, 4, 2},
      {R"({"dtype":"bf16","head_dim":64})", 3, 1, 4224, 8, 1},  // one query row per head
      {R"({"dtype":"bf16","head_dim":128,"causal":true})", 1, 113, 1, 4, 1},  // one key
      {R"({"dtype":"bf16","head_dim":128,"causal":true,"mask_free_loop":false})", 2, 1023, 1111, 8, 2},  // one copy
  };
  int passed = 0, total = 0;
  for (const PairCase& c : cases) {
    nlohmann::json doc = nlohmann::json::parse(c.spec);
    doc["lazy_rescale"] = false;
    const Spec eager = parse_spec(doc);
    doc["lazy_rescale"] = true;
    const Spec spec = parse_spec(doc);
    REQUIRE(spec.lazy_rescale);
    const ProblemShape s = shape_of(spec, c);
    for (const Gain& g : gains) {
      AttentionProblem p(s, 17);
      scale_keys(p, g.gain);
      p.run(runtime(), load_kernel(runtime(), spec).get());
      const CheckResult r = p.check(rows_to_check(s, spec.block_m));
      INFO(spec_summary(spec) << ", " << g.name << ", batch " << c.batch << " sq " << c.seqlen_q << " sk "
                              << c.seqlen_k << ": " << format_check(r));
      CHECK(r.passed);
      ++total;
      if (r.passed) ++passed;
      // Where the maxima rise block after block over several key blocks, the kept reference must show in the
      // rounding of some output or LSE (a kernel that ignored the field would agree with the eager one to the bit).
      if (g.gain(0.0) > 8.f && c.seqlen_k > 4 * spec.block_n) {
        AttentionProblem e(s, 17);
        scale_keys(e, g.gain);
        e.run(runtime(), load_kernel(runtime(), eager).get());
        CHECK((e.out.data != p.out.data || std::memcmp(e.lse.data(), p.lse.data(), e.lse.size() * sizeof(float)) != 0));
      }
    }
  }
  std::printf("lazy_rescale: %d of %d cases passed\n", passed, total);
}

TEST_CASE("a persistent grid gives the one-tile-per-CTA kernel's out and lse bit for bit", "[gpu][forward][persistent]") {
  if (!have_gpu()) return;
  // Each tile runs the same code in the same order on either grid, so the two must agree to the bit, and a causal
  // persistent grid with its tile counter (the workspace, poisoned before each run) and without (a static order) as
  // well. Sizes: tiles
  // past the 132 CTAs (each CTA runs several: the K/V ring, Q and the O staging handed over between tiles), a single
  // tile, causal rows that see no key (tiles with no key block among the others). Windows, softcap and sinks on a
  // persistent grid: test_serving.cpp, dense q.
  const PairCase cases[] = {
      {R"({"dtype":"bf16","head_dim":128})", 4, 1023, 1111, 8, 2},
      {R"({"dtype":"bf16","head_dim":128,"causal":true})", 4, 1023, 4224, 8, 8},
      {R"({"dtype":"fp16","head_dim":128,"causal":true})", 2, 4224, 799, 6, 2},  // rows 0..3424 see no key
      {R"({"dtype":"bf16","head_dim":64,"causal":true})", 3, 2049, 2049, 8, 2},
      {R"({"dtype":"fp16","head_dim":256})", 2, 799, 1023, 16, 4},
      {R"({"dtype":"bf16","head_dim":128})", 1, 113, 239, 1, 1},  // one tile
      {R"({"dtype":"bf16","head_dim":128,"intra_wg_overlap":false,"pingpong":false})", 2, 1023, 799, 8, 2},
      {R"({"dtype":"bf16","head_dim":128,"causal":true,"stages":3,"tile":{"block_n":128}})", 2, 1023, 1023, 16, 2},
      // Causal, 8 tiles per CTA of 33 row blocks per head, one L2 section (the persistent order).
      {R"({"dtype":"bf16","head_dim":128,"causal":true})", 2, 4224, 4224, 16, 4},
      {R"({"dtype":"bf16","head_dim":96,"causal":true})", 2, 1023, 1500, 12, 4},
      {R"({"dtype":"bf16","head_dim":192,"head_dim_v":128})", 2, 799, 1023, 16, 16},
      {R"({"dtype":"e4m3","head_dim":128,"v_layout":"d_major"})", 2, 1023, 1111, 16, 4},
      {R"({"dtype":"e4m3","head_dim":256,"causal":true,"v_layout":"d_major","quant":"per_block"})", 2, 1023, 1023, 8,
       2},
      {R"({"dtype":"e4m3","head_dim":64,"v_layout":"d_major","fp32_two_level_accum":true,"tile":{"block_n":96}})", 2, 799, 4224, 16, 2},
  };
  int identical = 0;
  for (const PairCase& c : cases) {
    nlohmann::json doc = nlohmann::json::parse(c.spec);
    doc["persistent"] = false;
    const Spec grid = parse_spec(doc);
    doc["persistent"] = true;
    const Spec persistent = parse_spec(doc);
    REQUIRE(persistent.persistent);
    INFO(spec_summary(persistent) << " batch " << c.batch << " sq " << c.seqlen_q << " sk " << c.seqlen_k);
    const ProblemShape s = shape_of(grid, c);
    AttentionProblem a(s, 77), b(s, 77);
    a.run(runtime(), load_kernel(runtime(), grid).get());
    b.run(runtime(), load_kernel(runtime(), persistent).get());
    const CheckResult r = b.check(rows_to_check(s, grid.block_m));
    INFO(format_check(r));
    CHECK(r.passed);
    const bool same = a.out.data == b.out.data && a.lse.size() == b.lse.size() &&
                      std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0;
    CHECK(same);
    identical += same;
    // Repeats are bit-exact too (a race between tiles would move them).
    for (int i = 0; i < 3; ++i) {
      b.run(runtime(), load_kernel(runtime(), persistent).get());
      CHECK(b.out.data == a.out.data);
    }
    // Without a workspace a causal grid runs its static order instead of the counter: the same tiles again.
    b.use_workspace = false;
    b.run(runtime(), load_kernel(runtime(), persistent).get());
    CHECK(b.out.data == a.out.data);
  }
  std::printf("persistent grid: %d of %zu cases bit-identical to the one-tile-per-CTA grid\n", identical,
              std::size(cases));
}

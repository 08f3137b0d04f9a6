// The representative set the device script runs under compute-sanitizer (memcheck, racecheck, synccheck):
// every attention mainloop variant once on odd sizes (2 consumer warpgroups causal, 3-warpgroup pingpong,
// head_dim 256, a 2-CTA cluster, the sequential mainloop on a decode step; e4m3 with the producer's V
// transpose, per-head and per-block descales, two-level accumulation, with and without pingpong, V given transposed
// (d_major); head dims 96, 72, 80, 192 / 128), each checked against the float64 reference. The combine kernel's GPU tests run under the same
// tools. Also part of the normal GPU tests.
#include <catch2/catch.hpp>

#include "gpu_test.h"

using namespace fa3jit;
using namespace fa3jit::test;

namespace {

struct Case {
  const char* spec;
  int64_t seqlen_q, seqlen_k;
  int64_t batch = 2, num_heads = 4, num_heads_kv = 2;
};

template <size_t N>
void run_sanitize_cases(const Case (&cases)[N]) {
  for (const Case& c : cases) {
    INFO(c.spec);
    const attention_fwd::Spec spec = attention_fwd::parse_spec(std::string(c.spec));
    ProblemShape shape{spec.dtype, c.batch, c.seqlen_q, c.seqlen_k, c.num_heads, c.num_heads_kv, spec.head_dim,
                       spec.causal};
    shape.head_dim_v = spec.head_dim_v;
    shape.out_dtype = spec.out_dtype;
    shape.quant = spec.quant;
    shape.quant_block_m = spec.block_m;
    shape.quant_block_n = spec.block_n;
    shape.v_d_major = spec.v_layout == attention_fwd::VLayout::kDMajor;
    AttentionProblem p(shape, 21);
    p.run(runtime(), attention_fwd::load_kernel(runtime(), spec).get());
    const CheckResult r = p.check();
    INFO(format_check(r));
    CHECK(r.passed);
  }
}

}  // namespace

TEST_CASE("sanitizer set: every attention mainloop variant once, on odd sizes", "[gpu][sanitize]") {
  if (!have_gpu()) return;
  const Case cases[] = {
      {R"({"dtype":"bf16","head_dim":128,"causal":true})", 239, 1023},
      {R"({"dtype":"fp16","head_dim":64})", 113, 799},
      {R"({"dtype":"bf16","head_dim":256,"causal":true})", 239, 300},
      {R"({"dtype":"bf16","head_dim":128,"cluster_m":2,"persistent":false})", 300, 1023},
      // A cluster on the persistent grid: 18 padded row blocks x 16 heads, two or three rounds per CTA pair.
      {R"({"dtype":"bf16","head_dim":128,"cluster_m":2})", 2100, 300, 2, 8, 2},
      {R"({"dtype":"fp16","head_dim":128,"causal":true,"intra_wg_overlap":false,"pingpong":false})", 1, 799},
      {R"({"dtype":"e4m3","head_dim":128,"causal":true})", 239, 1023},
      {R"({"dtype":"e4m3","head_dim":256,"quant":"per_block"})", 113, 799},
      {R"({"dtype":"e4m3","head_dim":64,"causal":true})", 300, 239},
      {R"({"dtype":"e4m3","head_dim":128,"fp32_two_level_accum":true,"tile":{"block_n":128},"quant":"per_block"})",
       300, 1023},
      // e4m3 without pingpong (the tuner's choice in most e4m3 cells): both consumer warpgroups reach the epilogue
      // together, whose O stores reuse the V load stages the producer's transpose reads.
      {R"({"dtype":"e4m3","head_dim":128,"causal":true,"tile":{"block_m":128,"block_n":160},"pingpong":false})", 239,
       1023},
      {R"({"dtype":"e4m3","head_dim":256,"quant":"per_block","tile":{"block_m":128,"block_n":96},"pingpong":false})",
       113, 799},
      // V given transposed: TMA boxes of 32 keys with 32-byte swizzle into the K-major V stage, the O tail past Q.
      {R"({"dtype":"e4m3","head_dim":128,"causal":true,"v_layout":"d_major"})", 239, 1023},
      {R"({"dtype":"e4m3","head_dim":256,"quant":"per_block","v_layout":"d_major"})", 113, 799},
  };
  run_sanitize_cases(cases);
}

TEST_CASE("sanitizer set: head dims off the 64-column grid and head_dim_v != head_dim, on odd sizes",
          "[gpu][sanitize][sanitize_features]") {
  if (!have_gpu()) return;
  // Partial column blocks in Q/K/V/O, a partial k-step (72, 80), head_dim_v != head_dim, 3 warpgroups at d96.
  const Case cases[] = {
      {R"({"dtype":"bf16","head_dim":96,"causal":true})", 239, 799},
      {R"({"dtype":"fp16","head_dim":192,"head_dim_v":128})", 113, 1023},
      {R"({"dtype":"bf16","head_dim":72})", 300, 239},
      {R"({"dtype":"e4m3","head_dim":192,"head_dim_v":128,"causal":true})", 239, 1023},
      {R"({"dtype":"e4m3","head_dim":80,"quant":"per_block"})", 113, 799},
  };
  run_sanitize_cases(cases);
}

TEST_CASE("sanitizer set: persistent grids whose CTAs run several tiles, and the one-tile-per-CTA grid",
          "[gpu][sanitize][persistent]") {
  if (!have_gpu()) return;
  // The cases above are small enough that every CTA of a persistent grid runs one tile; these have 2-4 tiles per
  // CTA (132 SMs), so the hand-over of Q, the K/V ring and the O staging between tiles runs under the tools: both
  // schedules (overlapped with pingpong, sequential), 3 warpgroups, e4m3 d_major with its O tail, tiles without keys.
  const Case cases[] = {
      {R"({"dtype":"bf16","head_dim":128,"causal":true,"persistent":true})", 1023, 300, 2, 32, 8},
      {R"({"dtype":"fp16","head_dim":64,"causal":true,"persistent":true})", 1023, 1023, 3, 40, 8},
      {R"({"dtype":"fp16","head_dim":128,"intra_wg_overlap":false,"pingpong":false})", 1023, 239, 2, 32, 8},
      {R"({"dtype":"bf16","head_dim":64})", 1023, 113, 2, 48, 8},
      {R"({"dtype":"e4m3","head_dim":64,"v_layout":"d_major"})", 799, 239, 2, 64, 16},
      {R"({"dtype":"bf16","head_dim":128,"causal":true,"persistent":false})", 239, 1023},
      // The short-causal tiles (tile_table.h: short_causal_max_seqlen_k): d64 on two warpgroups, d128 128x128, and
      // rescale_o_before_pv on d256; load_k_ahead (the table's d256 default) on d128 with three stages on a persistent
      // grid whose CTAs run several tiles, and on e4m3 with V d_major.
      {R"({"dtype":"bf16","head_dim":64,"causal":true,"tile":{"block_m":128,"block_n":128},"consumer_warpgroups":2})",
       1023, 1023, 3, 40, 8},
      {R"({"dtype":"fp16","head_dim":128,"causal":true,"tile":{"block_n":128}})", 799, 799, 2, 48, 8},
      {R"({"dtype":"bf16","head_dim":256,"rescale_o_before_pv":true})", 239, 1023},
      {R"({"dtype":"bf16","head_dim":128,"load_k_ahead":true,"stages":3,"tile":{"block_n":128}})", 1023, 799, 2, 32, 8},
      {R"({"dtype":"e4m3","head_dim":128,"v_layout":"d_major","load_k_ahead":true})", 239, 1023},
      // Both copies of the key-block loop: mask_free_loop false (the first block through the loop body, its empty
      // wgmma group) on a persistent causal grid whose CTAs run several tiles, and true.
      {R"({"dtype":"bf16","head_dim":128,"causal":true,"mask_free_loop":false})", 1023, 799, 2, 32, 8},
      {R"({"dtype":"e4m3","head_dim":128,"fp32_two_level_accum":true,"tile":{"block_n":128},"mask_free_loop":false})",
       239, 1023},
      {R"({"dtype":"fp16","head_dim":64,"causal":true,"mask_free_loop":true})", 799, 1023},
      // lazy_rescale: the warp vote before O's multiplies, after P.V's wait (synccheck: the warps of a warpgroup reach
      // each wgmma at one instruction); on d128, and the table's d256 kernel.
      {R"({"dtype":"bf16","head_dim":128,"causal":true,"lazy_rescale":true})", 1023, 799, 2, 32, 8},
      {R"({"dtype":"fp16","head_dim":256})", 239, 1023},
  };
  run_sanitize_cases(cases);
}

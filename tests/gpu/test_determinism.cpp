// Determinism: every default kernel gives bit-identical output over 1000 repeated calls, while other work
// (a larger attention call) runs concurrently on a second, non-blocking stream. A difference between calls
// means a race (an unordered shared-memory or barrier access), which must be fixed before anything else.
// Run on an H200; skipped elsewhere.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "gpu_test.h"
#include "kernels/attention_combine/launch.h"

using namespace fa3jit;
using namespace fa3jit::test;

namespace {

constexpr int kRepeats = 1000;

// A stream that does not synchronise with the legacy default stream, so work on it overlaps.
struct SideStream {
  CUstream stream = nullptr;
  SideStream() { check_cu(driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); }
  ~SideStream() { driver().cuStreamDestroy(stream); }
};

}  // namespace

TEST_CASE("every default attention kernel is bit-identical over 1000 calls with work on another stream",
          "[gpu][determinism]") {
  if (!have_gpu()) return;
  SideStream side;
  int kernels = 0;
  // The tile table's rows (head dims 64, 96, 128, 192, 192 / 128, 256) for every dtype and mask.
  const std::pair<int64_t, int64_t> rows[] = {{64, 64}, {96, 96}, {128, 128}, {192, 192}, {192, 128}, {256, 256}};
  for (DType dtype : {DType::kFp16, DType::kBf16, DType::kE4m3})
    for (const auto& [d, dv] : rows)
      for (bool causal : {false, true}) {
        INFO(dtype_name(dtype) << " d" << d << "/" << dv << (causal ? " causal" : ""));
        ProblemShape shape{dtype, 2, 1000, 1037, 4, 2, d, causal};
        shape.head_dim_v = dv;
        ProblemShape load_shape{dtype, 2, 2048, 2048, 8, 8, d, !causal};
        load_shape.head_dim_v = dv;
        AttentionProblem p(shape, 77);
        AttentionProblem load(load_shape, 78);
        p.run(runtime());
        REQUIRE(p.check(sample_rows(2, 4, 1000, 128, 64, 1)).passed);
        const std::vector<uint16_t> first = p.out.data;
        const std::vector<float> first_lse = p.lse;
        const attention_fwd::ForwardArgs args = p.args();
        const attention_fwd::ForwardArgs load_args = load.args();
        int differing = 0;
        for (int i = 0; i < kRepeats; ++i) {
          attention_fwd::forward(runtime(), load_args, side.stream);
          attention_fwd::forward(runtime(), args, nullptr);
          p.d_out.download(p.out.data.data(), p.out.size_bytes());  // waits for this call only
          p.d_lse.download(p.lse.data(), p.lse.size() * sizeof(float));
          if (p.out.data != first || std::memcmp(p.lse.data(), first_lse.data(), first_lse.size() * 4) != 0)
            ++differing;
        }
        check_cu(driver().cuStreamSynchronize(side.stream), "cuStreamSynchronize");
        CHECK(differing == 0);
        ++kernels;
      }
  std::printf("determinism: %d default attention kernels x %d calls, bit-identical\n", kernels, kRepeats);
}

TEST_CASE("the combine kernel is bit-identical over 1000 calls with work on another stream", "[gpu][determinism]") {
  if (!have_gpu()) return;
  SideStream side;
  const int64_t splits = 7, batch = 2, seqlen_q = 3, heads = 8, dv = 128;
  const int64_t rows = batch * heads * seqlen_q;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> out_partial(static_cast<size_t>(splits * rows * dv)), lse_partial(static_cast<size_t>(splits * rows));
  for (float& x : out_partial) x = normal(rng);
  for (float& x : lse_partial) x = 4.f * normal(rng);
  testing::DeviceBuffer d_op(out_partial.size() * 4), d_lp(lse_partial.size() * 4);
  testing::DeviceBuffer d_out(static_cast<size_t>(rows * dv * 2)), d_lse(static_cast<size_t>(rows * 4));
  d_op.upload(out_partial.data(), out_partial.size() * 4);
  d_lp.upload(lse_partial.data(), lse_partial.size() * 4);
  attention_combine::CombineArgs a;
  a.out_dtype = DType::kBf16;
  a.num_splits = splits;
  a.batch = batch, a.seqlen_q = seqlen_q, a.num_heads = heads, a.head_dim_v = dv;
  a.out_partial = static_cast<const float*>(d_op.get());
  a.lse_partial = static_cast<const float*>(d_lp.get());
  a.out = TensorView{d_out.get(), seqlen_q * heads * dv, heads * dv, dv};
  a.lse = static_cast<float*>(d_lse.get());
  AttentionProblem load({DType::kBf16, 2, 2048, 2048, 8, 8, 128, true}, 79);
  const attention_fwd::ForwardArgs load_args = load.args();
  std::vector<uint16_t> first(static_cast<size_t>(rows * dv)), out(first.size());
  std::vector<float> first_lse(static_cast<size_t>(rows)), lse(first_lse.size());
  attention_combine::combine(runtime(), a, nullptr);
  d_out.download(first.data(), first.size() * 2);
  d_lse.download(first_lse.data(), first_lse.size() * 4);
  int differing = 0;
  for (int i = 0; i < kRepeats; ++i) {
    attention_fwd::forward(runtime(), load_args, side.stream);
    attention_combine::combine(runtime(), a, nullptr);
    d_out.download(out.data(), out.size() * 2);
    d_lse.download(lse.data(), lse.size() * 4);
    if (out != first || lse != first_lse) ++differing;
  }
  check_cu(driver().cuStreamSynchronize(side.stream), "cuStreamSynchronize");
  CHECK(differing == 0);
}

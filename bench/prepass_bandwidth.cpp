// Bandwidth of the FP8 pre-pass (kernels/quantize_fp8: RoPE, Hadamard rotation, block quantisation) on a GPU, and
// the time of pre-pass + e4m3 attention against the attention alone, with V written as it is (the kernel transposes
// it) and written transposed (v_layout d_major, the d_major kernel):
//
//   build/fa3jit_prepass_bandwidth [--json PATH] [--head-dim 128|256] [--hadamard yes|no]
//
// --head-dim and --hadamard keep only those rows (a profiler's first launches are then the row's three passes).
//
// Shapes: FA3's benchmark convention, 16k tokens and hidden 2048 (batch 2 x seqlen 8192 x 16 heads x d128, and
// batch 2 x 8192 x 8 heads x d256), MHA. Bytes counted: the 16-bit inputs read once and the e4m3 outputs written
// once (the descales are negligible); the kernel reads V twice (the second time mostly from L2), which this count
// does not credit. Median of 30 timed runs after 5 warm-up runs, CUDA events around each run; the copy bandwidth
// of the H200 is about 4.3 TB/s (bench/NOTES.md).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jit/driver.h"
#include "kernels/attention_fwd/launch.h"
#include "kernels/quantize_fp8/launch.h"
#include "testing/attention_problem.h"
#include "testing/device_memory.h"

using namespace fa3jit;
using namespace fa3jit::testing;
namespace af = fa3jit::attention_fwd;
namespace qf = fa3jit::quantize_fp8;

namespace {

// Median ms of 30 timed calls after 5 warm-up ones (testing::time_calls).
double median_ms(const std::function<void()>& fn) { return time_calls(fn, 5, 30).median_ms; }

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  int64_t only_head_dim = 0;  // 0: both
  int only_hadamard = -1;     // -1: both
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      json_path = argv[++i];
    } else if (!std::strcmp(argv[i], "--head-dim") && i + 1 < argc &&
               (!std::strcmp(argv[i + 1], "128") || !std::strcmp(argv[i + 1], "256"))) {
      only_head_dim = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--hadamard") && i + 1 < argc &&
               (!std::strcmp(argv[i + 1], "yes") || !std::strcmp(argv[i + 1], "no"))) {
      only_hadamard = !std::strcmp(argv[++i], "yes") ? 1 : 0;
    } else {
      std::fprintf(stderr, "usage: %s [--json PATH] [--head-dim 128|256] [--hadamard yes|no]\n", argv[0]);
      return 2;
    }
  }
  try {
    if (!open_gpu(0)) {
      std::fprintf(stderr, "no GPU\n");
      return 2;
    }
    Runtime rt;
    nlohmann::json report = nlohmann::json::array();
    std::printf("%-5s %-9s %-5s %-9s %-9s %9s %8s %7s %11s %11s %9s\n", "d", "hadamard", "rope", "quant", "v_layout",
                "prepass_ms", "GB/s", "of_4.3", "attn_ms", "total_ms", "prepass%");
    for (int64_t d : {128, 256})
      for (bool d_major : {false, true}) {
      if (only_head_dim != 0 && d != only_head_dim) continue;
      const int64_t batch = 2, seqlen = 8192, heads = 2048 / d;
      // 16-bit inputs (FA3 Table 3 distribution) and the e4m3 outputs, all contiguous; with d_major, v8 transposed
      // (batch, heads, d, keys) for the d_major attention kernel, whose tile the descale blocks follow.
      AttentionProblem src(ProblemShape{DType::kBf16, batch, seqlen, seqlen, heads, heads, d, false}, 1);
      const int64_t elems = batch * seqlen * heads * d;
      const int64_t keys = af::d_major_keys(seqlen);
      DeviceBuffer q8(elems), k8(elems), v8(d_major ? batch * heads * d * keys : elems);
      af::Layout layout;
      layout.v_d_major = d_major;
      const af::Spec attn = af::default_spec(DType::kE4m3, DType::kBf16, af::Quant::kPerBlock, static_cast<int>(d),
                                             static_cast<int>(d), false, layout);
      const int64_t m_blocks = (seqlen + attn.block_m - 1) / attn.block_m;
      const int64_t n_blocks = (seqlen + attn.block_n - 1) / attn.block_n;
      DeviceBuffer qs(batch * heads * m_blocks * 4), ks(batch * heads * n_blocks * 4), vs(batch * heads * d * 4);
      std::vector<float> cos_sin(static_cast<size_t>(seqlen * d / 2), 0.5f);
      DeviceBuffer rope_cos(cos_sin.size() * 4), rope_sin(cos_sin.size() * 4);
      rope_cos.upload(cos_sin.data(), cos_sin.size() * 4);
      rope_sin.upload(cos_sin.data(), cos_sin.size() * 4);
      const int64_t hd = heads * d;
      qf::QuantizeArgs a;
      a.dtype = DType::kBf16;
      a.batch = batch;
      a.seqlen_q = a.seqlen_k = seqlen;
      a.num_heads = a.num_heads_kv = heads;
      a.head_dim = a.head_dim_v = d;
      a.q = {src.d_q.get(), seqlen * hd, hd, d};
      a.k = {src.d_k.get(), seqlen * hd, hd, d};
      a.v = {src.d_v.get(), seqlen * hd, hd, d};
      a.q8 = {q8.get(), seqlen * hd, hd, d};
      a.k8 = {k8.get(), seqlen * hd, hd, d};
      a.v8 = d_major ? TensorView{v8.get(), heads * d * keys, keys, d * keys} : TensorView{v8.get(), seqlen * hd, hd, d};
      a.q_descale = static_cast<float*>(qs.get());
      a.k_descale = static_cast<float*>(ks.get());
      a.v_descale = static_cast<float*>(vs.get());
      af::ForwardArgs f;
      f.dtype = DType::kE4m3;
      f.quant = af::Quant::kPerBlock;
      f.v_layout = d_major ? af::VLayout::kDMajor : af::VLayout::kSeqMajor;
      f.batch = batch;
      f.seqlen_q = f.seqlen_k = seqlen;
      f.num_heads = f.num_heads_kv = heads;
      f.head_dim = f.head_dim_v = d;
      f.q = a.q8;
      f.k = a.k8;
      f.v = a.v8;
      f.out = {src.d_out.get(), seqlen * hd, hd, d};
      f.q_descale = {a.q_descale, heads * m_blocks, m_blocks};
      f.k_descale = {a.k_descale, heads * n_blocks, n_blocks};
      f.v_descale = {a.v_descale, heads * d, d};
      const double attn_ms = median_ms([&] { af::forward(rt, f, nullptr); });
      for (bool hadamard : {false, true})
        for (qf::Rope rope : {qf::Rope::kNone, qf::Rope::kNeox}) {
          if (only_hadamard != -1 && hadamard != (only_hadamard == 1)) continue;
          qf::QuantizeOptions o;
          o.hadamard = hadamard;
          o.rope = rope;
          o.q_block_rows = attn.block_m;
          o.k_block_rows = attn.block_n;
          o.v_d_major = d_major;
          a.rope_cos = rope == qf::Rope::kNone ? nullptr : static_cast<const float*>(rope_cos.get());
          a.rope_sin = rope == qf::Rope::kNone ? nullptr : static_cast<const float*>(rope_sin.get());
          a.rope_max_seqlen = rope == qf::Rope::kNone ? 0 : seqlen;
          const double ms = median_ms([&] { qf::quantize_fp8(rt, o, a, nullptr); });
          const double total = median_ms([&] {
            qf::quantize_fp8(rt, o, a, nullptr);
            af::forward(rt, f, nullptr);
          });
          const double bytes = 3.0 * static_cast<double>(elems) * (2 + 1);
          const double gbs = bytes / (ms * 1e-3) / 1e9;
          const char* v_layout = d_major ? "d_major" : "seq_major";
          std::printf("%-5ld %-9s %-5s %-9s %-9s %9.4f %8.0f %6.0f%% %11.4f %11.4f %8.1f%%\n", d,
                      hadamard ? "yes" : "no", qf::rope_name(rope), "per_block", v_layout, ms, gbs, 100.0 * gbs / 4300.0,
                      attn_ms, total, 100.0 * ms / total);
          report.push_back({{"head_dim", d}, {"hadamard", hadamard}, {"rope", qf::rope_name(rope)},
                            {"v_layout", v_layout}, {"prepass_ms", ms}, {"gb_per_s", gbs}, {"attention_ms", attn_ms},
                            {"total_ms", total}});
        }
      }
    check_cu(driver().cuCtxSynchronize(nullptr), "cuCtxSynchronize");
    if (!json_path.empty()) std::ofstream(json_path) << report.dump(2) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fa3jit_prepass_bandwidth: %s\n", e.what());
    return 2;
  }
}

// `fa3jit run` and `fa3jit bench` on a quantize_fp8 spec (the FP8 pre-pass, kernels/quantize_fp8): 16-bit inputs
// from FA3's Table 3 distribution, the pre-pass on the GPU, and
//   run:   its e4m3 outputs and descales checked against the float64 host model (testing/fp8_prepass.h) on a
//          problem of the same heads and head dims with at most kCheckTokens tokens per sequence and batch 1 (the
//          model rotates with the explicit O(d^2) matrix), then the timing of the spec's problem;
//   bench: the timing only.
// Bandwidth counts the 16-bit inputs read once and the e4m3 outputs written once.
#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "jit/driver.h"
#include "jit/family.h"
#include "kernels/quantize_fp8/emit.h"
#include "kernels/attention_fwd/device/fp8_v_layout.h"
#include "kernels/quantize_fp8/launch.h"
#include "testing/attention_problem.h"
#include "testing/fp8_prepass.h"
#include "testing/problem.h"
#include "tools/cli/commands.h"

namespace fa3jit::cli {

namespace {

namespace qf = fa3jit::quantize_fp8;
using testing::DeviceBuffer;

constexpr int64_t kCheckTokens = 1024;

// One pre-pass problem on the device: inputs, outputs (poisoned), RoPE tables when the spec rotates.
struct PrepassProblem {
  testing::AttentionProblem inputs;
  DeviceBuffer q8, k8, v8, q_descale, k_descale, v_descale, rope_cos, rope_sin;
  qf::QuantizeArgs args;

  PrepassProblem(const qf::Spec& spec, const testing::Problem& p, uint64_t seed)
      : inputs(testing::ProblemShape{spec.dtype, p.batch, p.seqlen_q, p.seqlen_k, p.num_heads, p.num_heads_kv,
                                     spec.head_dim, false, spec.head_dim_v},
               seed) {
    const HostTensor& q = inputs.q;
    const HostTensor& k = inputs.k;
    const HostTensor& v = inputs.v;
    args.dtype = spec.dtype;
    args.batch = p.batch;
    args.seqlen_q = p.seqlen_q;
    args.seqlen_k = p.seqlen_k;
    args.num_heads = p.num_heads;
    args.num_heads_kv = p.num_heads_kv;
    args.head_dim = spec.head_dim;
    args.head_dim_v = spec.head_dim_v;
    args.seed = seed;
    auto view = [](const HostTensor& t, const DeviceBuffer& b) {
      return TensorView{b.get(), t.stride_batch, t.stride_seq, t.stride_head};
    };
    args.q = view(q, inputs.d_q);
    args.k = view(k, inputs.d_k);
    args.v = view(v, inputs.d_v);
    auto output = [](DeviceBuffer& b, const HostTensor& t) {
      b = DeviceBuffer(t.data.size());
      b.fill_bytes(0xFF);
      return TensorView{b.get(), t.stride_batch, t.stride_seq, t.stride_head};
    };
    args.q8 = output(q8, q);
    args.k8 = output(k8, k);
    args.v8 = output(v8, v);
    if (spec.v_d_major) {  // (batch, heads_kv, head_dim_v, keys), contiguous: stride_seq is the channel stride
      const int64_t keys = attention_fwd::d_major_keys(p.seqlen_k);
      v8 = DeviceBuffer(static_cast<size_t>(p.batch * p.num_heads_kv * spec.head_dim_v * keys));
      v8.fill_bytes(0xFF);
      args.v8 = TensorView{v8.get(), p.num_heads_kv * spec.head_dim_v * keys, keys, spec.head_dim_v * keys};
    }
    const qf::DescaleCounts n = qf::descale_counts(spec, args);
    q_descale = DeviceBuffer(n.q * 4);
    k_descale = DeviceBuffer(n.k * 4);
    v_descale = DeviceBuffer(n.v * 4);
    args.q_descale = static_cast<float*>(q_descale.get());
    args.k_descale = static_cast<float*>(k_descale.get());
    args.v_descale = static_cast<float*>(v_descale.get());
    if (spec.rope != qf::Rope::kNone) {
      // Standard rotary angles: token s, pair i -> s / 10000^(2i / rotary_dim).
      const int64_t rows = std::max(p.seqlen_q, p.seqlen_k), half = spec.rotary_dim / 2;
      std::vector<float> cos_table(rows * half), sin_table(rows * half);
      for (int64_t s = 0; s < rows; ++s)
        for (int64_t i = 0; i < half; ++i) {
          const double angle = static_cast<double>(s) / std::pow(10000.0, 2.0 * i / spec.rotary_dim);
          cos_table[s * half + i] = static_cast<float>(std::cos(angle));
          sin_table[s * half + i] = static_cast<float>(std::sin(angle));
        }
      rope_cos = DeviceBuffer(cos_table.size() * 4);
      rope_sin = DeviceBuffer(sin_table.size() * 4);
      rope_cos.upload(cos_table.data(), cos_table.size() * 4);
      rope_sin.upload(sin_table.data(), sin_table.size() * 4);
      args.rope_cos = static_cast<const float*>(rope_cos.get());
      args.rope_sin = static_cast<const float*>(rope_sin.get());
      args.rope_max_seqlen = rows;
      host_cos = std::move(cos_table);
      host_sin = std::move(sin_table);
    }
  }

  double bytes() const {
    const double elems = static_cast<double>(inputs.q.data.size() + inputs.k.data.size() + inputs.v.data.size());
    return elems * (2 + 1);
  }

  std::vector<float> host_cos, host_sin;
};

std::vector<float> download_floats(const DeviceBuffer& b) {
  std::vector<float> out(b.bytes() / 4);
  b.download(out.data(), b.bytes());
  return out;
}

std::vector<uint8_t> download_bytes(const DeviceBuffer& b) {
  std::vector<uint8_t> out(b.bytes());
  b.download(out.data(), b.bytes());
  return out;
}

testing::Timing time_prepass(Runtime& runtime, const qf::Spec& spec, const PrepassProblem& problem, int warmup,
                             int iters) {
  return testing::time_calls([&] { qf::quantize_fp8(runtime, spec, problem.args, nullptr); }, warmup, iters);
}

struct Loaded {
  qf::Spec spec;
  testing::Problem problem;
};

Loaded load(const std::string& path) {
  const SpecDocument doc = load_spec_document(path);
  try {
    Loaded l{qf::parse_spec(doc.spec), {}};
    if (!doc.problem)
      throw Error(ErrorCode::kInvalidSpec, "spec has no \"problem\" section; run and bench need one (batch, "
                                           "seqlen_q, seqlen_k, num_heads, num_heads_kv)");
    l.problem = testing::read_problem(*doc.problem);
    if (l.problem.hadamard)
      throw Error(ErrorCode::kInvalidSpec, "spec field \"problem.hadamard\" belongs to e4m3 attention specs; the "
                                           "pre-pass spec says \"hadamard\" itself");
    return l;
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", path, e.what()));
  }
}

}  // namespace

bool is_quantize_spec(const std::string& path) { return load_spec_document(path).kind == qf::kKind; }

int cmd_run_quantize(const GlobalOptions& global, const RunOptions& options) {
  const Loaded l = load(options.spec_path);
  Runtime runtime(RuntimeOptions{global.cache_dir});
  print_kernel_report(runtime.prepare(qf::make_request(l.spec)));
  if (!testing::open_gpu(options.device)) {
    fmt::print("no GPU found: emitted and compiled only\n");
    return 0;
  }
  const testing::Problem& p = l.problem;
  fmt::print("problem         batch {}, seqlen_q {}, seqlen_k {}, num_heads {}, num_heads_kv {}\n", p.batch,
             p.seqlen_q, p.seqlen_k, p.num_heads, p.num_heads_kv);

  // Check on a problem the float64 model can afford: the same heads and head dims, batch 1, short sequences.
  testing::Problem small = p;
  small.batch = 1;
  small.seqlen_q = std::min(p.seqlen_q, kCheckTokens);
  small.seqlen_k = std::min(p.seqlen_k, kCheckTokens);
  PrepassProblem check(l.spec, small, options.seed);
  qf::quantize_fp8(runtime, l.spec, check.args, nullptr);
  check_cu(driver().cuCtxSynchronize(nullptr), "cuCtxSynchronize after the pre-pass");
  testing::Fp8PrepassInputs in;
  in.q = &check.inputs.q;
  in.k = &check.inputs.k;
  in.v = &check.inputs.v;
  in.rope_cos = check.host_cos.empty() ? nullptr : check.host_cos.data();
  in.rope_sin = check.host_sin.empty() ? nullptr : check.host_sin.data();
  in.seed = options.seed;
  const testing::Fp8PrepassReference ref = testing::fp8_prepass_reference(l.spec, in);
  testing::Fp8CheckResult result;
  auto layout = [](const HostTensor& t) {
    return testing::Fp8OutputLayout{t.stride_batch, t.stride_seq, t.stride_head};
  };
  testing::check_fp8_tensor("q8", ref.q, download_bytes(check.q8), layout(check.inputs.q),
                            download_floats(check.q_descale), l.spec.q_block_rows, false, result);
  testing::check_fp8_tensor("k8", ref.k, download_bytes(check.k8), layout(check.inputs.k),
                            download_floats(check.k_descale), l.spec.k_block_rows, false, result);
  std::vector<uint8_t> v8 = download_bytes(check.v8);
  bool pad_zero = true;
  if (l.spec.v_d_major) {
    // Back to the seq-major image the reference is laid out in; a key position the kernel did not write keeps the
    // 0xFF poison (NaN) and fails there. The padding past seqlen_k must be zeros.
    const HostTensor& v = check.inputs.v;
    const int64_t keys = attention_fwd::d_major_keys(v.seqlen);
    std::vector<uint8_t> seq(v.data.size(), 0xFF);
    for (int64_t b = 0; b < v.batch; ++b)
      for (int64_t h = 0; h < v.heads; ++h)
        for (int64_t d = 0; d < v.dim; ++d) {
          const uint8_t* row = v8.data() + ((b * v.heads + h) * v.dim + d) * keys;
          for (int64_t s = 0; s < keys; ++s) {
            const uint8_t x = row[s / 16 * 16 + attention_fwd::fp8_key_position(static_cast<int>(s % 16))];
            if (s < v.seqlen) seq[static_cast<size_t>(v.offset(b, s, h, d))] = x;
            else pad_zero = pad_zero && x == 0;
          }
        }
    v8 = std::move(seq);
  }
  testing::check_fp8_tensor("v8", ref.v, v8, layout(check.inputs.v), download_floats(check.v_descale), 0, false,
                            result);
  if (!pad_zero && result.passed) {
    result.passed = false;
    result.failure = "v8 (d_major) holds non-zero bytes past seqlen_k";
  }
  fmt::print("checked         batch 1, seqlen_q {}, seqlen_k {}: {} elements, worst error / tolerance {:.3f}\n",
             small.seqlen_q, small.seqlen_k, result.checked, result.worst_ratio);
  fmt::print("check           {}\n", result.passed ? "PASS" : "FAIL: " + result.failure);

  PrepassProblem timed(l.spec, p, options.seed);
  const testing::Timing t = time_prepass(runtime, l.spec, timed, options.warmup, options.iters);
  fmt::print("time            median {:.4f} ms over {} runs (min {:.4f}, max {:.4f}) after {} warm-up\n",
             t.median_ms, t.iters, t.min_ms, t.max_ms, options.warmup);
  fmt::print("bandwidth       {:.0f} GB/s (16-bit inputs read once + e4m3 written once)\n",
             timed.bytes() / (t.median_ms * 1e-3) / 1e9);
  return result.passed ? 0 : 1;
}

int cmd_bench_quantize(const GlobalOptions& global, const RunOptions& options) {
  const Loaded l = load(options.spec_path);
  Runtime runtime(RuntimeOptions{global.cache_dir});
  const PreparedKernel kernel = runtime.prepare(qf::make_request(l.spec));
  if (!testing::open_gpu(options.device))
    throw Error(ErrorCode::kNoDriver, "bench needs a GPU: no CUDA driver or device found");
  PrepassProblem problem(l.spec, l.problem, options.seed);
  const testing::Timing t = time_prepass(runtime, l.spec, problem, options.warmup, options.iters);
  const double gbs = problem.bytes() / (t.median_ms * 1e-3) / 1e9;
  if (options.json) {
    fmt::print("{}\n", nlohmann::json{{"kernel", kernel.compiled->kernel_name},
                                      {"cache_key", kernel.key},
                                      {"spec", qf::canonical_json(l.spec)},
                                      {"median_ms", t.median_ms},
                                      {"min_ms", t.min_ms},
                                      {"max_ms", t.max_ms},
                                      {"iters", t.iters},
                                      {"gb_per_s", gbs}}
                           .dump());
  } else {
    fmt::print("{}: median {:.4f} ms, {:.0f} GB/s ({} runs, min {:.4f} ms, max {:.4f} ms)\n", qf::spec_summary(l.spec),
               t.median_ms, gbs, t.iters, t.min_ms, t.max_ms);
  }
  return 0;
}

}  // namespace fa3jit::cli

// `fa3jit run` (emit, compile, check against the CPU reference, time) and `fa3jit bench` (time only).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/attention_fwd/emit.h"
#include "testing/attention_problem.h"
#include "testing/fp8_accuracy.h"
#include "tools/cli/commands.h"

namespace fa3jit::cli {

using testing::AttentionCase;
using testing::AttentionProblem;

namespace {

// What quantisation costs on 16-bit data of this shape (FA3's Table 3 distribution): RMSE and max error against
// the float64 attention of the unquantised inputs, for this spec (with the Hadamard rotation when the problem
// asks for it) and for per-tensor scales without rotation (testing/fp8_accuracy.h).
void print_fp8_accuracy(Runtime& runtime, const attention_fwd::Spec& spec, const testing::Problem& p, uint64_t seed) {
  testing::AccuracyProblem a;
  a.batch = p.batch;
  a.seqlen_q = p.seqlen_q;
  a.seqlen_k = p.seqlen_k;
  a.heads = p.num_heads;
  a.heads_kv = p.num_heads_kv;
  a.d = spec.head_dim;
  a.causal = spec.causal;
  testing::fill_table3(a.q, static_cast<size_t>(a.batch * a.seqlen_q * a.heads * a.d), seed + 10);
  testing::fill_table3(a.k, static_cast<size_t>(a.batch * a.seqlen_k * a.kv_heads() * a.d), seed + 11);
  testing::fill_table3(a.v, static_cast<size_t>(a.batch * a.seqlen_k * a.kv_heads() * a.d), seed + 12);
  const testing::SampledRows rows = testing::sample_rows(a, 128, seed);
  const std::vector<double> reference = testing::reference_rows(a, rows);
  const testing::Scale scale =
      spec.quant == attention_fwd::Quant::kPerBlock ? testing::Scale::kBlock : testing::Scale::kHead;
  attention_fwd::Spec per_tensor = spec;
  per_tensor.quant = attention_fwd::Quant::kPerHead;
  const testing::Rmse mine = testing::measure(runtime, spec, a, rows, reference, scale, p.hadamard);
  const testing::Rmse base = testing::measure(runtime, per_tensor, a, rows, reference, testing::Scale::kTensor, false);
  fmt::print("fp8 accuracy    vs float64 on the unquantised inputs (FA3 Table 3 data, {} rows):\n", rows.s.size());
  fmt::print("  {:<24} rmse {:.3e}  max error {:.3e}\n",
             fmt::format("{}{}", attention_fwd::quant_name(spec.quant), p.hadamard ? " + hadamard" : ""),
             mine.vs_reference, mine.max_err);
  fmt::print("  {:<24} rmse {:.3e}  max error {:.3e}\n", "per_tensor", base.vs_reference, base.max_err);
}

}  // namespace

int cmd_run(const GlobalOptions& global, const RunOptions& options) {
  if (is_quantize_spec(options.spec_path)) return cmd_run_quantize(global, options);
  const AttentionCase c = testing::load_attention_case(options.spec_path);
  const attention_fwd::Spec& spec = c.spec;
  Runtime runtime(RuntimeOptions{global.cache_dir});
  const PreparedKernel kernel = runtime.prepare(attention_fwd::make_request(attention_fwd::make_kernel_config(spec)));
  print_kernel_report(kernel);
  if (!testing::open_gpu(options.device)) {
    fmt::print("no GPU found: emitted and compiled only\n");
    return 0;
  }
  const testing::Problem& p = testing::require_problem(c);
  fmt::print("problem         batch {}, seqlen_q {}, seqlen_k {}, num_heads {}, num_heads_kv {}{}\n", p.batch,
             p.seqlen_q, p.seqlen_k, p.num_heads, p.num_heads_kv, spec.causal ? ", causal" : "");
  const auto loaded = attention_fwd::load_kernel(runtime, spec);
  AttentionProblem problem(testing::shape_of(c), options.seed);
  problem.run(runtime, loaded.get());
  const CheckResult check = problem.check_sampled(spec.block_m, options.check_rows, options.seed);
  fmt::print("rows checked    {} ({} values)\n", check.rows_checked, check.values_checked);
  fmt::print("max error       {:.4e}\n", check.max_abs_err);
  fmt::print("mean error      {:.4e}\n", check.mean_abs_err);
  fmt::print("tolerance       {:.4e} (2 x baseline {:.4e} + 2 x rounding noise {:.4e})\n", check.tolerance,
             check.baseline_max_err, check.rounding_noise);
  fmt::print("lse max error   {:.4e}\n", check.lse_max_err);
  fmt::print("nan/inf         {}/{}\n", check.nan_count, check.inf_count);
  fmt::print("check           {}\n", check.passed ? "PASS" : "FAIL: " + check.failure);

  const testing::Timing t = problem.time(runtime, loaded.get(), options.warmup, options.iters);
  fmt::print("time            median {:.4f} ms over {} runs (min {:.4f}, max {:.4f}) after {} warm-up\n",
             t.median_ms, t.iters, t.min_ms, t.max_ms, options.warmup);
  fmt::print("throughput      {:.1f} TFLOPS{}\n", t.tflops, spec.causal ? " (causal FLOPs halved, FA3 convention)" : "");
  if (spec.dtype == DType::kE4m3) print_fp8_accuracy(runtime, spec, p, options.seed);
  return check.passed ? 0 : 1;
}

int cmd_bench(const GlobalOptions& global, const RunOptions& options) {
  if (is_quantize_spec(options.spec_path)) return cmd_bench_quantize(global, options);
  const AttentionCase c = testing::load_attention_case(options.spec_path);
  const attention_fwd::Spec& spec = c.spec;
  testing::require_problem(c);
  Runtime runtime(RuntimeOptions{global.cache_dir});
  const PreparedKernel kernel = runtime.prepare(attention_fwd::make_request(attention_fwd::make_kernel_config(spec)));
  if (!testing::open_gpu(options.device)) {
    throw Error(ErrorCode::kNoDriver, "bench needs a GPU: no CUDA driver or device found");
  }
  const auto loaded = attention_fwd::load_kernel(runtime, spec);
  AttentionProblem problem(testing::shape_of(c), options.seed);
  const testing::Timing t = problem.time(runtime, loaded.get(), options.warmup, options.iters);
  if (options.json) {
    nlohmann::json doc = {
        {"kernel", kernel.compiled->kernel_name},
        {"cache_key", kernel.key},
        {"spec", attention_fwd::canonical_json(spec)},
        {"median_ms", t.median_ms},
        {"min_ms", t.min_ms},
        {"max_ms", t.max_ms},
        {"iters", t.iters},
        {"warmup", options.warmup},
        {"flops", problem.flops()},
        {"tflops", t.tflops},
        {"registers", kernel.compiled->report.registers},
        {"spill_store_bytes", kernel.compiled->report.spill_store_bytes},
        {"spill_load_bytes", kernel.compiled->report.spill_load_bytes},
        {"smem_bytes", kernel.request.launch.smem_bytes},
    };
    fmt::print("{}\n", doc.dump());
  } else {
    fmt::print("{}: median {:.4f} ms, {:.1f} TFLOPS ({} runs, min {:.4f} ms, max {:.4f} ms)\n",
               testing::case_summary(c), t.median_ms, t.tflops, t.iters, t.min_ms, t.max_ms);
  }
  return 0;
}

}  // namespace fa3jit::cli

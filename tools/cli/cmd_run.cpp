// `fa3jit run` (emit, compile, check against the CPU reference, time) and `fa3jit bench` (time only).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/attention_fwd/emit.h"
#include "testing/attention_problem.h"
#include "tools/cli/commands.h"

namespace fa3jit::cli {

using testing::AttentionCase;
using testing::AttentionProblem;

int cmd_run(const GlobalOptions& global, const RunOptions& options) {
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
  return check.passed ? 0 : 1;
}

int cmd_bench(const GlobalOptions& global, const RunOptions& options) {
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

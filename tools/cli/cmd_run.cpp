// `fa3jit run` (emit, compile, check against the CPU reference, time) and `fa3jit bench` (time only).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "generator/error.h"
#include "tools/cli/commands.h"
#include "tools/cli/forward_harness.h"

namespace fa3jit::cli {

int cmd_run(const GlobalOptions& global, const RunOptions& options) {
  const Spec spec = load_spec_file(options.spec_path);
  Runtime runtime(RuntimeOptions{global.cache_dir});
  const PreparedKernel kernel = runtime.prepare(spec);
  print_kernel_report(kernel);
  if (!open_gpu(options.device)) {
    fmt::print("no GPU found: emitted and compiled only\n");
    return 0;
  }
  const Problem& p = require_problem(spec);
  fmt::print("problem         batch {}, seqlen_q {}, seqlen_k {}, num_heads {}, num_heads_kv {}{}\n", p.batch,
             p.seqlen_q, p.seqlen_k, p.num_heads, p.num_heads_kv, spec.causal ? ", causal" : "");
  ForwardBuffers buffers = ForwardBuffers::create(spec, options.seed);
  const CheckResult check = run_and_check(runtime, spec, buffers, options.check_rows, options.seed);
  fmt::print("rows checked    {} ({} values)\n", check.rows_checked, check.values_checked);
  fmt::print("max error       {:.4e}\n", check.max_abs_err);
  fmt::print("mean error      {:.4e}\n", check.mean_abs_err);
  fmt::print("tolerance       {:.4e} (2 x baseline {:.4e} + 2 x rounding noise {:.4e})\n", check.tolerance,
             check.baseline_max_err, check.rounding_noise);
  fmt::print("lse max error   {:.4e}\n", check.lse_max_err);
  fmt::print("nan/inf         {}/{}\n", check.nan_count, check.inf_count);
  fmt::print("check           {}\n", check.passed ? "PASS" : "FAIL: " + check.failure);

  const Timing t = time_forward(runtime, spec, buffers, options.warmup, options.iters);
  fmt::print("time            median {:.4f} ms over {} runs (min {:.4f}, max {:.4f}) after {} warm-up\n",
             t.median_ms, t.iters, t.min_ms, t.max_ms, options.warmup);
  fmt::print("throughput      {:.1f} TFLOPS{}\n", t.tflops, spec.causal ? " (causal FLOPs halved, FA3 convention)" : "");
  return check.passed ? 0 : 1;
}

int cmd_bench(const GlobalOptions& global, const RunOptions& options) {
  const Spec spec = load_spec_file(options.spec_path);
  require_problem(spec);
  Runtime runtime(RuntimeOptions{global.cache_dir});
  const PreparedKernel kernel = runtime.prepare(spec);
  if (!open_gpu(options.device)) {
    throw Error(ErrorCode::kNoDriver, "bench needs a GPU: no CUDA driver or device found");
  }
  ForwardBuffers buffers = ForwardBuffers::create(spec, options.seed);
  const Timing t = time_forward(runtime, spec, buffers, options.warmup, options.iters);
  if (options.json) {
    nlohmann::json doc = {
        {"kernel", kernel.compiled->kernel_name},
        {"cache_key", kernel.key},
        {"spec", spec_to_json(spec)},
        {"median_ms", t.median_ms},
        {"min_ms", t.min_ms},
        {"max_ms", t.max_ms},
        {"iters", t.iters},
        {"warmup", options.warmup},
        {"flops", forward_flops(spec)},
        {"tflops", t.tflops},
        {"registers", kernel.compiled->report.registers},
        {"spill_store_bytes", kernel.compiled->report.spill_store_bytes},
        {"spill_load_bytes", kernel.compiled->report.spill_load_bytes},
        {"smem_bytes", kernel.config.smem_bytes},
    };
    fmt::print("{}\n", doc.dump());
  } else {
    fmt::print("{}: median {:.4f} ms, {:.1f} TFLOPS ({} runs, min {:.4f} ms, max {:.4f} ms)\n",
               problem_summary(spec), t.median_ms, t.tflops, t.iters, t.min_ms, t.max_ms);
  }
  return 0;
}

}  // namespace fa3jit::cli

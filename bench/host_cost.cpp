// Host cost of one attention forward call in C++, on a GPU: the fa3jit work a warmed call does before the
// launch (argument checks, plan lookup, parameters and 4 tensor maps: attention_fwd::prepare_launch), the
// driver's cuLaunchKernelEx of the same plan, and the whole forward() call, each in µs per call.
//
//   build/fa3jit_host_cost [--iters N] [--json PATH]
//
// Problem: bf16, batch 1, seqlen 128, 16 heads (GQA 16/4), head_dim 128, non-causal, lse written (a tiny
// call, where host cost matters most). The loops synchronise every 256 launches so the launch queue never
// fills (a full queue would time the GPU, not the host), and the time spent waiting in those synchronisations
// is excluded; prepare_launch launches nothing and is not synced.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jit/driver.h"
#include "kernels/attention_fwd/launch.h"
#include "testing/attention_problem.h"

using namespace fa3jit;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Host µs per call of `body`, median over `reps` repetitions of `iters` calls each; `sync` runs after every
// 256 calls and its time is not counted.
template <class Body, class Sync>
double per_call_us(int iters, int reps, Body&& body, Sync&& sync) {
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    double us = 0.0;
    for (int i = 0; i < iters;) {
      const int n = std::min(256, iters - i);
      const auto t0 = Clock::now();
      for (int j = 0; j < n; ++j) body();
      us += std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      sync();
      i += n;
    }
    samples.push_back(us / iters);
  }
  return median(samples);
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20000;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::max(256, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
  }
  try {
    if (!testing::open_gpu(0)) {
      std::printf("host_cost: no GPU found\n");
      return 2;
    }
    Runtime runtime;
    testing::ProblemShape shape{DType::kBf16, 1, 128, 128, 16, 4, 128, false};
    testing::AttentionProblem problem(shape, 1);
    const attention_fwd::ForwardArgs args = problem.args();
    problem.run(runtime);  // compiles or loads the kernel, warms the plan cache
    const CheckResult check = problem.check();
    CUcontext ctx = nullptr;
    check_cu(driver().cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
    auto sync = [&] { check_cu(driver().cuCtxSynchronize(ctx), "cuCtxSynchronize"); };

    const int reps = 5;
    const double prepare_us = per_call_us(iters, reps, [&] {
      attention_fwd::LaunchPlan plan = attention_fwd::prepare_launch(runtime, args, nullptr);
      asm volatile("" : : "r"(&plan) : "memory");
    }, [] {});
    attention_fwd::LaunchPlan plan = attention_fwd::prepare_launch(runtime, args, nullptr);
    const double launch_us = per_call_us(iters, reps, [&] { attention_fwd::launch(plan); }, sync);
    const double forward_us =
        per_call_us(iters, reps, [&] { attention_fwd::forward(runtime, args, nullptr); }, sync);

    std::printf("problem: bf16 batch 1, seqlen 128, heads 16/4, head_dim 128 (check %s)\n",
                check.passed ? "PASS" : "FAIL");
    std::printf("| measure | µs per call |\n|---|---|\n");
    std::printf("| fa3jit work before the launch (prepare_launch) | %.2f |\n", prepare_us);
    std::printf("| cuLaunchKernelEx of the prepared plan | %.2f |\n", launch_us);
    std::printf("| forward() (both) | %.2f |\n", forward_us);
    if (!json_path.empty()) {
      nlohmann::json doc{{"prepare_launch_us", prepare_us},
                         {"launch_us", launch_us},
                         {"forward_us", forward_us},
                         {"iters", iters},
                         {"check_passed", check.passed}};
      std::ofstream(json_path) << doc.dump(2) << "\n";
    }
    return check.passed ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "host_cost: %s\n", e.what());
    return 2;
  }
}

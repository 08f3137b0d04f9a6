// Shared by the GPU tests: whether a GPU is here, and one process-wide runtime (cache from the environment,
// like a serving process). Problems come from testing/attention_problem.h.
#pragma once

#include <cstdio>

#include "jit/driver.h"
#include "kernels/attention_fwd/launch.h"
#include "testing/attention_problem.h"

namespace fa3jit::test {

using testing::AttentionProblem;
using testing::ProblemShape;

/// True when a GPU is present; otherwise prints why the GPU tests are skipped (once) and returns false.
inline bool have_gpu() {
  static const bool available = [] {
    const bool ok = gpu_available();
    if (!ok) std::printf("GPU tests skipped: no CUDA driver or device on this machine\n");
    if (ok) ensure_context(0);
    return ok;
  }();
  return available;
}

inline Runtime& runtime() {
  static Runtime rt;
  return rt;
}

}  // namespace fa3jit::test

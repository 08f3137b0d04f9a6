// A compiled kernel loaded into the driver (a context-independent CUlibrary), its per-context functions with
// the shared-memory attribute set, and the one launch every family uses: one parameter struct, passed as the
// kernel's only argument.
#pragma once

#include <cuda.h>

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "jit/compiler.h"
#include "jit/family.h"

namespace fa3jit {

class LoadedKernel {
 public:
  /// Loads the cubin; Error(kNoDriver / kDriverError) when the driver refuses it.
  LoadedKernel(std::shared_ptr<const CompiledKernel> compiled, LaunchInvariants launch);
  ~LoadedKernel();
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;

  const LaunchInvariants& launch() const { return launch_; }
  const CompiledKernel& compiled() const { return *compiled_; }

  /// The function of entry point `entry` (an index into compiled().entries, 0 for a one-entry kernel) for
  /// `ctx`, with its dynamic shared-memory limit raised (once per context).
  CUfunction function_for(CUcontext ctx, size_t entry = 0);

  /// How many clusters of entry 0's launch (its block, shared memory and cluster_x CTAs) can run at once on the
  /// device of `ctx` (cuOccupancyMaxActiveClusters, Driver API §Occupancy: the SMs of a GPC that cannot pair up
  /// hold none), asked once per context; at least 1. 0 for a kernel launched without clusters. A persistent grid
  /// of clusters is sized by it, so that no cluster waits for another to finish.
  int active_clusters(CUcontext ctx);

 private:
  std::shared_ptr<const CompiledKernel> compiled_;
  LaunchInvariants launch_;
  CUlibrary library_ = nullptr;
  std::vector<CUkernel> kernels_;  // one per entry point
  struct ContextFunction {
    std::vector<CUfunction> functions;  // one per entry point
    int active_clusters = 0;
  };
  ContextFunction& entry_for(CUcontext ctx);  // under mu_

  std::mutex mu_;
  std::map<CUcontext, ContextFunction> functions_;
};

/// cuLaunchKernelEx of `function` on `stream` with grid (grid_x, 1, 1), the block, shared memory and
/// cluster of `launch`, and `params` (the family's Params struct) as the only kernel argument.
/// Error(kDriverError) "launching <what>: ..." when the driver refuses the launch.
void launch_kernel(CUfunction function, const LaunchInvariants& launch, unsigned grid_x, void* params, CUstream stream,
                   const char* what);

}  // namespace fa3jit

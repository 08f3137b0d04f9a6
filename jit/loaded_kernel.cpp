// Loading and launching compiled kernels (loaded_kernel.h).
#include "jit/loaded_kernel.h"

#include <fmt/format.h>

#include "core/error.h"
#include "jit/driver.h"

namespace fa3jit {

LoadedKernel::LoadedKernel(std::shared_ptr<const CompiledKernel> compiled, LaunchInvariants launch)
    : compiled_(std::move(compiled)), launch_(launch) {
  const Driver& d = driver();
  check_cu(d.cuLibraryLoadData(&library_, compiled_->cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
           "cuLibraryLoadData (loading a compiled kernel)");
  try {
    for (const CompiledEntry& entry : compiled_->entries) {
      CUkernel kernel = nullptr;
      check_cu(d.cuLibraryGetKernel(&kernel, library_, entry.name.c_str()), "cuLibraryGetKernel");
      kernels_.push_back(kernel);
    }
    if (kernels_.empty()) throw Error(ErrorCode::kInternal, "a compiled kernel without entry points was loaded");
  } catch (...) {
    d.cuLibraryUnload(library_);
    throw;
  }
}

LoadedKernel::~LoadedKernel() {
  try {
    driver().cuLibraryUnload(library_);
  } catch (...) {
  }
}

namespace {

// The launch configuration of `launch` with a grid of `grid_x` CTAs (cuLaunchKernelEx's, and the occupancy query's).
struct LaunchConfig {
  CUlaunchConfig config{};
  CUlaunchAttribute attrs[2]{};
  LaunchConfig(const LaunchInvariants& launch, unsigned grid_x, CUstream stream) {
    config.gridDimX = grid_x;
    config.gridDimY = 1;
    config.gridDimZ = 1;
    config.blockDimX = static_cast<unsigned>(launch.num_threads);
    config.blockDimY = 1;
    config.blockDimZ = 1;
    config.sharedMemBytes = static_cast<unsigned>(launch.smem_bytes);
    config.hStream = stream;
    unsigned num_attrs = 0;
    if (launch.cluster_x > 1) {
      CUlaunchAttribute& cluster = attrs[num_attrs++];
      cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      cluster.value.clusterDim.x = static_cast<unsigned>(launch.cluster_x);
      cluster.value.clusterDim.y = 1;
      cluster.value.clusterDim.z = 1;
    }
    if (launch.waits_for_prerequisites) {
      CUlaunchAttribute& serialization = attrs[num_attrs++];
      serialization.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      serialization.value.programmaticStreamSerializationAllowed = 1;
    }
    config.attrs = num_attrs ? attrs : nullptr;
    config.numAttrs = num_attrs;
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

}  // namespace

LoadedKernel::ContextFunction& LoadedKernel::entry_for(CUcontext ctx) {
  auto it = functions_.find(ctx);
  if (it != functions_.end()) return it->second;
  const Driver& d = driver();
  ContextFunction e;
  for (CUkernel kernel : kernels_) {
    CUfunction function = nullptr;
    check_cu(d.cuKernelGetFunction(&function, kernel), "cuKernelGetFunction");
    check_cu(d.cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, launch_.smem_bytes),
             "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    e.functions.push_back(function);
  }
  return functions_.emplace(ctx, std::move(e)).first->second;
}

CUfunction LoadedKernel::function_for(CUcontext ctx, size_t entry) {
  if (entry >= kernels_.size()) {
    throw Error(ErrorCode::kInternal, fmt::format("entry point {} of kernel '{}' asked for; it has {}", entry,
                                                  compiled_->kernel_name, kernels_.size()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  return entry_for(ctx).functions[entry];
}

int LoadedKernel::active_clusters(CUcontext ctx) {
  if (launch_.cluster_x <= 1) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  ContextFunction& e = entry_for(ctx);
  if (e.active_clusters == 0) {  // asked on first use: only persistent grids of clusters need it
    // The grid only has to be a multiple of the cluster; the context is the current one (ctx, made current by the
    // caller), as a null stream says.
    const LaunchConfig lc(launch_, static_cast<unsigned>(launch_.cluster_x), nullptr);
    int n = 0;
    check_cu(driver().cuOccupancyMaxActiveClusters(&n, e.functions[0], &lc.config), "cuOccupancyMaxActiveClusters");
    e.active_clusters = n < 1 ? 1 : n;
  }
  return e.active_clusters;
}

void launch_kernel(CUfunction function, const LaunchInvariants& launch, unsigned grid_x, void* params, CUstream stream,
                   const char* what) {
  const LaunchConfig lc(launch, grid_x, stream);
  void* args[] = {params};
  const CUresult r = driver().cuLaunchKernelEx(&lc.config, function, args, nullptr);
  if (r != CUDA_SUCCESS) check_cu(r, what);
}

}  // namespace fa3jit

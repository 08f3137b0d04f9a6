// Loading and launching compiled kernels (loaded_kernel.h).
#include "jit/loaded_kernel.h"

#include "jit/driver.h"

namespace fa3jit {

LoadedKernel::LoadedKernel(std::shared_ptr<const CompiledKernel> compiled, LaunchInvariants launch)
    : compiled_(std::move(compiled)), launch_(launch) {
  const Driver& d = driver();
  check_cu(d.cuLibraryLoadData(&library_, compiled_->cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
           "cuLibraryLoadData (loading a compiled kernel)");
  check_cu(d.cuLibraryGetKernel(&kernel_, library_, compiled_->kernel_name.c_str()), "cuLibraryGetKernel");
}

LoadedKernel::~LoadedKernel() {
  try {
    driver().cuLibraryUnload(library_);
  } catch (...) {
  }
}

CUfunction LoadedKernel::function_for(CUcontext ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = functions_.find(ctx);
  if (it != functions_.end()) return it->second;
  const Driver& d = driver();
  CUfunction f = nullptr;
  check_cu(d.cuKernelGetFunction(&f, kernel_), "cuKernelGetFunction");
  check_cu(d.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, launch_.smem_bytes),
           "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  functions_.emplace(ctx, f);
  return f;
}

void launch_kernel(CUfunction function, const LaunchInvariants& launch, unsigned grid_x, void* params, CUstream stream,
                   const char* what) {
  CUlaunchConfig config{};
  config.gridDimX = grid_x;
  config.gridDimY = 1;
  config.gridDimZ = 1;
  config.blockDimX = static_cast<unsigned>(launch.num_threads);
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = static_cast<unsigned>(launch.smem_bytes);
  config.hStream = stream;
  CUlaunchAttribute attrs[2]{};
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
  void* args[] = {params};
  const CUresult r = driver().cuLaunchKernelEx(&config, function, args, nullptr);
  if (r != CUDA_SUCCESS) check_cu(r, what);
}

}  // namespace fa3jit

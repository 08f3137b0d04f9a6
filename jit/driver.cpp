// Driver API loading: dlopen("libcuda.so.1") + cuGetProcAddress at cudaVersion 13000
// (docs/kernel-design.md §5). Nothing links against libcuda.
#include "jit/driver.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <string>

#include "core/error.h"

namespace fa3jit {
namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

struct Loaded {
  Driver table{};
  std::string error;  // non-empty when loading failed
};

template <class Fn>
void resolve(GetProcAddress get, const char* name, Fn& slot, std::string& error) {
  if (!error.empty()) return;
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  const CUresult r = get(name, &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (r != CUDA_SUCCESS || fn == nullptr || status != CU_GET_PROC_ADDRESS_SUCCESS) {
    error = fmt::format("the CUDA driver has no entry point {} for CUDA 13.0 (cuGetProcAddress result {}, status {}); "
                        "a driver of release 580 or newer is required",
                        name, static_cast<int>(r), static_cast<int>(status));
    return;
  }
  slot = reinterpret_cast<Fn>(fn);
}

Loaded load() {
  Loaded out;
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    out.error = fmt::format("no CUDA driver: libcuda.so.1 could not be opened ({}); emit and compile work without a "
                            "GPU, running a kernel needs an NVIDIA driver",
                            why ? why : "unknown reason");
    return out;
  }
  auto get = reinterpret_cast<GetProcAddress>(dlsym(handle, "cuGetProcAddress_v2"));
  if (get == nullptr) {
    out.error = "the CUDA driver in libcuda.so.1 lacks cuGetProcAddress_v2; a driver of release 580 or newer is required";
    return out;
  }
  Driver& d = out.table;
  std::string& e = out.error;
#define FA3JIT_RESOLVE(name) resolve(get, #name, d.name, e)
  FA3JIT_RESOLVE(cuInit);
  FA3JIT_RESOLVE(cuDriverGetVersion);
  FA3JIT_RESOLVE(cuGetErrorName);
  FA3JIT_RESOLVE(cuGetErrorString);
  FA3JIT_RESOLVE(cuDeviceGet);
  FA3JIT_RESOLVE(cuDeviceGetCount);
  FA3JIT_RESOLVE(cuDeviceGetName);
  FA3JIT_RESOLVE(cuDeviceGetAttribute);
  FA3JIT_RESOLVE(cuDevicePrimaryCtxRetain);
  FA3JIT_RESOLVE(cuCtxSetCurrent);
  FA3JIT_RESOLVE(cuCtxGetCurrent);
  FA3JIT_RESOLVE(cuCtxGetDevice);
  FA3JIT_RESOLVE(cuStreamGetCtx);
  FA3JIT_RESOLVE(cuLibraryLoadData);
  FA3JIT_RESOLVE(cuLibraryUnload);
  FA3JIT_RESOLVE(cuLibraryGetKernel);
  FA3JIT_RESOLVE(cuKernelGetFunction);
  FA3JIT_RESOLVE(cuFuncSetAttribute);
  FA3JIT_RESOLVE(cuFuncGetAttribute);
  FA3JIT_RESOLVE(cuLaunchKernelEx);
  FA3JIT_RESOLVE(cuOccupancyMaxActiveClusters);
  FA3JIT_RESOLVE(cuTensorMapEncodeTiled);
  FA3JIT_RESOLVE(cuPointerGetAttribute);
  FA3JIT_RESOLVE(cuPointerGetAttributes);
  FA3JIT_RESOLVE(cuMemAlloc);
  FA3JIT_RESOLVE(cuMemFree);
  FA3JIT_RESOLVE(cuMemcpyHtoD);
  FA3JIT_RESOLVE(cuMemcpyDtoH);
  FA3JIT_RESOLVE(cuMemsetD8);
  FA3JIT_RESOLVE(cuMemsetD32Async);
  FA3JIT_RESOLVE(cuStreamSynchronize);
  FA3JIT_RESOLVE(cuStreamIsCapturing);
  FA3JIT_RESOLVE(cuStreamCreate);
  FA3JIT_RESOLVE(cuStreamDestroy);
  FA3JIT_RESOLVE(cuCtxSynchronize);
  FA3JIT_RESOLVE(cuEventCreate);
  FA3JIT_RESOLVE(cuEventRecord);
  FA3JIT_RESOLVE(cuEventSynchronize);
  FA3JIT_RESOLVE(cuEventElapsedTime);
  FA3JIT_RESOLVE(cuEventDestroy);
#undef FA3JIT_RESOLVE
  if (e.empty()) {
    const CUresult r = d.cuInit(0);
    if (r != CUDA_SUCCESS) {
      const char* name = nullptr;
      d.cuGetErrorName(r, &name);
      e = fmt::format("the CUDA driver failed to initialise: cuInit returned {} ({})", name ? name : "?",
                      static_cast<int>(r));
    }
  }
  return out;
}

const Loaded& loaded() {
  static const Loaded kLoaded = load();  // thread-safe one-time initialisation
  return kLoaded;
}

}  // namespace

const Driver& driver() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw Error(ErrorCode::kNoDriver, l.error);
  return l.table;
}

bool gpu_available() noexcept {
  try {
    int count = 0;
    return driver().cuDeviceGetCount(&count) == CUDA_SUCCESS && count > 0;
  } catch (...) {
    return false;
  }
}

void check_cu(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  const Driver& d = driver();
  d.cuGetErrorName(result, &name);
  d.cuGetErrorString(result, &text);
  throw Error(ErrorCode::kDriverError, fmt::format("{}: {} ({})", what, name ? name : fmt::format("CUresult {}",
                                                   static_cast<int>(result)), text ? text : "no description"));
}

void ensure_context(int device) {
  const Driver& d = driver();
  CUcontext current = nullptr;
  check_cu(d.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current != nullptr) return;  // the caller (e.g. torch) already has a context on this thread
  static std::mutex mu;
  static CUcontext retained[64] = {};
  if (device < 0 || device >= 64) throw Error(ErrorCode::kInvalidArgument, fmt::format("device {} is out of range", device));
  std::lock_guard<std::mutex> lock(mu);
  if (retained[device] == nullptr) {
    CUdevice dev = 0;
    check_cu(d.cuDeviceGet(&dev, device), "cuDeviceGet");
    check_cu(d.cuDevicePrimaryCtxRetain(&retained[device], dev), "cuDevicePrimaryCtxRetain");
  }
  check_cu(d.cuCtxSetCurrent(retained[device]), "cuCtxSetCurrent");
}

int multiprocessor_count(int ordinal) {
  static std::atomic<int> counts[64] = {};
  if (ordinal < 0 || ordinal >= 64)
    throw Error(ErrorCode::kInvalidArgument, fmt::format("device {} is out of range", ordinal));
  int n = counts[ordinal].load(std::memory_order_relaxed);
  if (n > 0) return n;
  const Driver& d = driver();
  CUdevice dev = 0;
  check_cu(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  check_cu(d.cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
           "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  if (n < 1) n = 1;
  counts[ordinal].store(n, std::memory_order_relaxed);
  return n;
}

}  // namespace fa3jit

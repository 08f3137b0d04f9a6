// A fake CUDA driver, built as libcuda.so.1, for testing the launch path on machines without a GPU.
//
// It implements cuGetProcAddress_v2 and every entry point runtime/driver.cpp resolves, for FAKE_CUDA_DEVICES
// devices (environment, 1 to 8, default 1), each with one primary context; device d has 132 - 18 d SMs, so a
// value taken from the wrong device shows. Allocations get fake device addresses that are never dereferenced and
// belong to the device of the context current at cuMemAlloc; cuPointerGetAttribute answers from the allocation
// table, cuTensorMapEncodeTiled applies the documented parameter rules (cuda.h), and cuLaunchKernelEx records what
// would reach the GPU (fake_cuda.h). As the real driver, it refuses a launch whose function was fetched in another
// context than the current one, on a stream of another context, or with more dynamic shared memory than the
// function's MAX_DYNAMIC_SHARED_SIZE_BYTES attribute allows.
#include "fake_cuda.h"

#include <cuda.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

struct Allocation {
  uint64_t start, size;
  int device;
};

struct EncodedMap {
  uint64_t dims[4] = {}, strides[3] = {};
  uint32_t box[4] = {};
};

std::mutex g_mu;
std::map<uint64_t, Allocation> g_allocations;  // by start address
uint64_t g_next_address = 0x7f0000000000ull;
std::vector<std::string> g_kernel_names;       // CUkernel / CUfunction handle = index + 1
std::vector<EncodedMap> g_encoded;             // since the last launch
FakeCudaLaunch g_last_launch{};
int g_launches = 0;
uint64_t g_param_bytes = 0;
int g_max_active_clusters = 0;  // fake_cuda_set_max_active_clusters; 0: every SM pairs up
std::vector<std::pair<std::string, uint64_t>> g_param_bytes_by_prefix;  // kernels of another family's Params
constexpr int kHistory = 8;
FakeCudaLaunch g_history[kHistory];  // launch n (1-based) at [(n - 1) % kHistory]

uint64_t param_bytes_of(const std::string& kernel_name) {
  for (const auto& [prefix, bytes] : g_param_bytes_by_prefix)
    if (kernel_name.rfind(prefix, 0) == 0) return bytes;
  return g_param_bytes;
}

// Opaque handles: distinct non-null values, never dereferenced by the runtime.
constexpr int kMaxDevices = 8;
CUcontext context_of(int device) { return reinterpret_cast<CUcontext>(static_cast<uintptr_t>(0xc0 + 0x10 * device)); }
CUlibrary const kLibrary = reinterpret_cast<CUlibrary>(0x11b);
thread_local CUcontext t_current = nullptr;
std::map<uint64_t, int> g_function_smem;  // CUfunction -> its MAX_DYNAMIC_SHARED_SIZE_BYTES

int device_count() {
  static const int n = [] {
    const char* v = std::getenv("FAKE_CUDA_DEVICES");
    const int k = v ? std::atoi(v) : 1;
    return k < 1 ? 1 : k > kMaxDevices ? kMaxDevices : k;
  }();
  return n;
}
// The device of a context, -1 for an unknown one.
int device_of(CUcontext c) {
  for (int d = 0; d < device_count(); ++d)
    if (c == context_of(d)) return d;
  return -1;
}
int current_device() { return t_current ? device_of(t_current) : -1; }
// Streams made by cuStreamCreate carry their device; any other handle counts as the current context's.
CUstream stream_of(int device) { return reinterpret_cast<CUstream>(static_cast<uintptr_t>(0x5e00 + device)); }
int stream_device(CUstream s) {
  const auto h = reinterpret_cast<uintptr_t>(s);
  return h >= 0x5e00 && h < 0x5e00 + kMaxDevices ? static_cast<int>(h - 0x5e00) : current_device();
}
// A CUfunction is its kernel's index (1-based) and the device of the context it was fetched in.
CUfunction function_handle(uintptr_t kernel_index, int device) {
  return reinterpret_cast<CUfunction>(kernel_index | (static_cast<uintptr_t>(device) << 32));
}

const Allocation* find_allocation(uint64_t address) {  // caller holds g_mu
  auto it = g_allocations.upper_bound(address);
  if (it == g_allocations.begin()) return nullptr;
  --it;
  return address < it->second.start + it->second.size ? &it->second : nullptr;
}

bool range_valid(uint64_t address, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  const Allocation* a = find_allocation(address);
  return a != nullptr && bytes <= a->start + a->size - address;
}

CUresult fake_cuInit(unsigned int) { return CUDA_SUCCESS; }
CUresult fake_cuDriverGetVersion(int* v) { *v = 13000; return CUDA_SUCCESS; }

CUresult fake_cuGetErrorName(CUresult r, const char** s) {
  switch (r) {
    case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; return CUDA_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_DEVICE: *s = "CUDA_ERROR_INVALID_DEVICE"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; return CUDA_SUCCESS;
    default: *s = nullptr; return CUDA_ERROR_INVALID_VALUE;
  }
}
CUresult fake_cuGetErrorString(CUresult r, const char** s) {
  *s = r == CUDA_SUCCESS ? "no error" : "error reported by the fake CUDA driver";
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
CUresult fake_cuDeviceGetCount(int* n) { *n = device_count(); return CUDA_SUCCESS; }
CUresult fake_cuDeviceGetName(char* name, int len, CUdevice d) {
  if (d < 0 || d >= device_count() || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::strncpy(name, "fake sm_90a device", static_cast<size_t>(len) - 1);
  name[len - 1] = '\0';
  return CUDA_SUCCESS;
}
CUresult fake_cuDeviceGetAttribute(int* value, CUdevice_attribute attr, CUdevice d) {
  if (d < 0 || d >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  switch (attr) {  // an H200's values (device 0)
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 132 - 18 * d; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; break;
    default: *value = 0; break;
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) {
  if (d < 0 || d >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *c = context_of(d);
  return CUDA_SUCCESS;
}
CUresult fake_cuCtxSetCurrent(CUcontext c) {
  if (c != nullptr && device_of(c) < 0) return CUDA_ERROR_INVALID_CONTEXT;
  t_current = c;
  return CUDA_SUCCESS;
}
CUresult fake_cuCtxGetCurrent(CUcontext* c) { *c = t_current; return CUDA_SUCCESS; }
CUresult fake_cuCtxGetDevice(CUdevice* d, CUcontext c) {
  if (c == nullptr) c = t_current;
  if (device_of(c) < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *d = device_of(c);
  return CUDA_SUCCESS;
}
CUresult fake_cuStreamGetCtx(CUstream s, CUcontext* c, CUgreenCtx* green) {
  const int d = stream_device(s);
  *c = context_of(d < 0 ? 0 : d);
  if (green) *green = nullptr;
  return CUDA_SUCCESS;
}
CUresult fake_cuCtxSynchronize(CUcontext) { return CUDA_SUCCESS; }
CUresult fake_cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
CUresult fake_cuStreamIsCapturing(CUstream, CUstreamCaptureStatus* status) {
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
CUresult fake_cuStreamCreate(CUstream* s, unsigned int) {
  if (current_device() < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *s = stream_of(current_device());
  return CUDA_SUCCESS;
}
CUresult fake_cuStreamDestroy(CUstream) { return CUDA_SUCCESS; }

CUresult fake_cuLibraryLoadData(CUlibrary* lib, const void* image, CUjit_option*, void**, unsigned int, CUlibraryOption*,
                           void**, unsigned int) {
  if (image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *lib = kLibrary;
  return CUDA_SUCCESS;
}
CUresult fake_cuLibraryUnload(CUlibrary) { return CUDA_SUCCESS; }
CUresult fake_cuLibraryGetKernel(CUkernel* k, CUlibrary, const char* name) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_kernel_names.emplace_back(name);
  *k = reinterpret_cast<CUkernel>(static_cast<uintptr_t>(g_kernel_names.size()));
  return CUDA_SUCCESS;
}
CUresult fake_cuKernelGetFunction(CUfunction* f, CUkernel k) {
  // The kernel's index, so that the launch can name its kernel, and the current context's device.
  if (current_device() < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *f = function_handle(reinterpret_cast<uintptr_t>(k), current_device());
  return CUDA_SUCCESS;
}
CUresult fake_cuFuncSetAttribute(CUfunction f, CUfunction_attribute attr, int value) {
  if (attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_function_smem[reinterpret_cast<uint64_t>(f)] = value;
  }
  return CUDA_SUCCESS;
}
CUresult fake_cuFuncGetAttribute(int* value, CUfunction_attribute, CUfunction) { *value = 0; return CUDA_SUCCESS; }

// As the driver documents it: the cluster size comes from the config (these kernels set no required size), the grid
// is a multiple of it; the answer is the SM count over the cluster size unless a test set another.
CUresult fake_cuOccupancyMaxActiveClusters(int* n, CUfunction f, const CUlaunchConfig* c) {
  if (n == nullptr || c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const int device = static_cast<int>(reinterpret_cast<uintptr_t>(f) >> 32);
  if ((reinterpret_cast<uintptr_t>(f) & 0xffffffffu) == 0 || device != current_device()) return CUDA_ERROR_INVALID_HANDLE;
  unsigned cluster = 0;
  for (unsigned i = 0; i < c->numAttrs; ++i)
    if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) cluster = c->attrs[i].value.clusterDim.x;
  if (cluster == 0 || c->gridDimX % cluster != 0) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  int sms = 0;
  fake_cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
  std::lock_guard<std::mutex> lock(g_mu);
  *n = g_max_active_clusters > 0 ? g_max_active_clusters : sms / static_cast<int>(cluster);
  return CUDA_SUCCESS;
}

CUresult fake_cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  if (c == nullptr || params == nullptr || extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mu);
  const auto index = reinterpret_cast<uintptr_t>(f) & 0xffffffffu;
  const int device = static_cast<int>(reinterpret_cast<uintptr_t>(f) >> 32);
  if (index == 0 || index > g_kernel_names.size()) return CUDA_ERROR_INVALID_VALUE;
  // A function belongs to the context it was fetched in; so does a created stream.
  if (device != current_device() || stream_device(c->hStream) != device) return CUDA_ERROR_INVALID_HANDLE;
  const auto smem = g_function_smem.find(reinterpret_cast<uint64_t>(f));
  if (c->sharedMemBytes > 48 * 1024 &&
      (smem == g_function_smem.end() || c->sharedMemBytes > static_cast<unsigned>(smem->second)))
    return CUDA_ERROR_INVALID_VALUE;
  FakeCudaLaunch r{};
  r.device = device;
  r.grid[0] = c->gridDimX, r.grid[1] = c->gridDimY, r.grid[2] = c->gridDimZ;
  r.block[0] = c->blockDimX, r.block[1] = c->blockDimY, r.block[2] = c->blockDimZ;
  r.shared_mem_bytes = c->sharedMemBytes;
  r.cluster_x = 1;
  for (unsigned i = 0; i < c->numAttrs; ++i)
    if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
      r.cluster_x = c->attrs[i].value.clusterDim.x;
    else if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
      r.programmatic_serialization = c->attrs[i].value.programmaticStreamSerializationAllowed;
  std::strncpy(r.kernel_name, g_kernel_names[index - 1].c_str(), sizeof(r.kernel_name) - 1);
  r.params_address = reinterpret_cast<uint64_t>(params[0]);
  std::memcpy(r.params, params[0], param_bytes_of(g_kernel_names[index - 1]));
  const size_t n = g_encoded.size() < 4 ? g_encoded.size() : 4;
  for (size_t i = 0; i < n; ++i) {
    const EncodedMap& m = g_encoded[g_encoded.size() - n + i];
    std::memcpy(r.tensor_map_dims[i], m.dims, sizeof(m.dims));
    std::memcpy(r.tensor_map_strides[i], m.strides, sizeof(m.strides));
    std::memcpy(r.tensor_map_box[i], m.box, sizeof(m.box));
  }
  g_encoded.clear();
  g_last_launch = r;
  g_history[g_launches % kHistory] = r;
  ++g_launches;
  return CUDA_SUCCESS;
}

int element_bytes(CUtensorMapDataType t) {
  switch (t) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8: return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16: case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16: return 2;
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64: case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_UINT64: return 8;
    default: return 4;
  }
}

// The rules cuda.h documents for cuTensorMapEncodeTiled (non-interleaved layouts).
CUresult fake_cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* address,
                                const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                const cuuint32_t* element_strides, CUtensorMapInterleave interleave,
                                CUtensorMapSwizzle swizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
  if (map == nullptr || rank < 1 || rank > 5 || reinterpret_cast<uintptr_t>(address) % 16 != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE) return CUDA_ERROR_INVALID_VALUE;  // not modelled
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > (uint64_t{1} << 32)) return CUDA_ERROR_INVALID_VALUE;
    if (box[i] == 0 || box[i] > 256) return CUDA_ERROR_INVALID_VALUE;
    if (element_strides[i] == 0 || element_strides[i] > 8) return CUDA_ERROR_INVALID_VALUE;
  }
  for (cuuint32_t i = 0; i + 1 < rank; ++i)
    if (strides[i] % 16 != 0 || strides[i] >= (uint64_t{1} << 40)) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t inner_bytes = uint64_t{box[0]} * element_bytes(type);
  if (inner_bytes % 16 != 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t swizzle_limit = swizzle == CU_TENSOR_MAP_SWIZZLE_128B  ? 128
                                 : swizzle == CU_TENSOR_MAP_SWIZZLE_64B ? 64
                                 : swizzle == CU_TENSOR_MAP_SWIZZLE_32B ? 32
                                                                        : UINT64_MAX;
  if (inner_bytes > swizzle_limit) return CUDA_ERROR_INVALID_VALUE;
  std::memset(map, 0, sizeof(*map));
  EncodedMap m;
  for (cuuint32_t i = 0; i < rank && i < 4; ++i) m.dims[i] = dims[i], m.box[i] = box[i];
  for (cuuint32_t i = 0; i + 1 < rank && i < 3; ++i) m.strides[i] = strides[i];
  std::lock_guard<std::mutex> lock(g_mu);
  g_encoded.push_back(m);
  return CUDA_SUCCESS;
}

CUresult fake_cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  std::lock_guard<std::mutex> lock(g_mu);
  const Allocation* a = find_allocation(ptr);
  if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;  // like a host pointer unknown to the driver
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = a->device; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = a->start; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<size_t*>(data) = a->size; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// Several attributes at once, as the real driver: an unknown pointer fails the whole call.
CUresult fake_cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attrs, void** data, CUdeviceptr ptr) {
  for (unsigned int i = 0; i < count; ++i) {
    const CUresult r = fake_cuPointerGetAttribute(data[i], attrs[i], ptr);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuMemAlloc(CUdeviceptr* ptr, size_t bytes) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mu);
  const uint64_t start = g_next_address;
  // 256-byte aligned like the real allocator, with a gap so no two allocations touch.
  g_next_address += (bytes + 255) / 256 * 256 + 4096;
  g_allocations[start] = {start, bytes, current_device() < 0 ? 0 : current_device()};
  *ptr = start;
  return CUDA_SUCCESS;
}
CUresult fake_cuMemFree(CUdeviceptr ptr) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_allocations.erase(ptr) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult fake_cuMemcpyHtoD(CUdeviceptr dst, const void*, size_t bytes) {
  return range_valid(dst, bytes) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult fake_cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t bytes) {
  if (!range_valid(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
  std::memset(dst, 0, bytes);  // the fake keeps no contents
  return CUDA_SUCCESS;
}
CUresult fake_cuMemsetD8(CUdeviceptr dst, unsigned char, size_t bytes) {
  return range_valid(dst, bytes) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult fake_cuMemsetD32Async(CUdeviceptr dst, unsigned int, size_t count, CUstream) {
  return range_valid(dst, count * 4) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_cuEventCreate(CUevent* e, unsigned int) { *e = reinterpret_cast<CUevent>(0xe0); return CUDA_SUCCESS; }
CUresult fake_cuEventRecord(CUevent, CUstream) { return CUDA_SUCCESS; }
CUresult fake_cuEventSynchronize(CUevent) { return CUDA_SUCCESS; }
CUresult fake_cuEventElapsedTime(float* ms, CUevent, CUevent) { *ms = 0.0f; return CUDA_SUCCESS; }
CUresult fake_cuEventDestroy(CUevent) { return CUDA_SUCCESS; }

}  // namespace

extern "C" {

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* symbol, void** fn, int, cuuint64_t,
                                                                     CUdriverProcAddressQueryResult* status) {
#define FAKE_ENTRY(name) {#name, reinterpret_cast<void*>(&fake_##name)}
  static const std::map<std::string, void*> kEntries = {
      FAKE_ENTRY(cuInit), FAKE_ENTRY(cuDriverGetVersion), FAKE_ENTRY(cuGetErrorName), FAKE_ENTRY(cuGetErrorString),
      FAKE_ENTRY(cuDeviceGet), FAKE_ENTRY(cuDeviceGetCount), FAKE_ENTRY(cuDeviceGetName),
      FAKE_ENTRY(cuDeviceGetAttribute), FAKE_ENTRY(cuDevicePrimaryCtxRetain), FAKE_ENTRY(cuCtxSetCurrent),
      FAKE_ENTRY(cuCtxGetCurrent), FAKE_ENTRY(cuCtxGetDevice), FAKE_ENTRY(cuStreamGetCtx),
      FAKE_ENTRY(cuLibraryLoadData), FAKE_ENTRY(cuLibraryUnload), FAKE_ENTRY(cuLibraryGetKernel),
      FAKE_ENTRY(cuKernelGetFunction), FAKE_ENTRY(cuFuncSetAttribute), FAKE_ENTRY(cuFuncGetAttribute),
      FAKE_ENTRY(cuLaunchKernelEx), FAKE_ENTRY(cuOccupancyMaxActiveClusters), FAKE_ENTRY(cuTensorMapEncodeTiled), FAKE_ENTRY(cuPointerGetAttribute), FAKE_ENTRY(cuPointerGetAttributes),
      FAKE_ENTRY(cuMemAlloc), FAKE_ENTRY(cuMemFree), FAKE_ENTRY(cuMemcpyHtoD), FAKE_ENTRY(cuMemcpyDtoH),
      FAKE_ENTRY(cuMemsetD8), FAKE_ENTRY(cuMemsetD32Async), FAKE_ENTRY(cuStreamSynchronize), FAKE_ENTRY(cuStreamIsCapturing), FAKE_ENTRY(cuStreamCreate), FAKE_ENTRY(cuStreamDestroy), FAKE_ENTRY(cuCtxSynchronize),
      FAKE_ENTRY(cuEventCreate), FAKE_ENTRY(cuEventRecord), FAKE_ENTRY(cuEventSynchronize),
      FAKE_ENTRY(cuEventElapsedTime), FAKE_ENTRY(cuEventDestroy)};
#undef FAKE_ENTRY
  auto it = kEntries.find(symbol ? symbol : "");
  *fn = it == kEntries.end() ? nullptr : it->second;
  if (status) *status = it == kEntries.end() ? CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND : CU_GET_PROC_ADDRESS_SUCCESS;
  return it == kEntries.end() ? CUDA_ERROR_NOT_FOUND : CUDA_SUCCESS;
}

__attribute__((visibility("default"))) void fake_cuda_set_param_bytes(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_param_bytes = bytes < sizeof(FakeCudaLaunch::params) ? bytes : sizeof(FakeCudaLaunch::params);
}

__attribute__((visibility("default"))) void fake_cuda_set_param_bytes_for(const char* kernel_prefix, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_param_bytes_by_prefix.emplace_back(kernel_prefix,
                                       bytes < sizeof(FakeCudaLaunch::params) ? bytes : sizeof(FakeCudaLaunch::params));
}

__attribute__((visibility("default"))) int fake_cuda_launch(int n, FakeCudaLaunch* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (n < 1 || n > g_launches || n <= g_launches - kHistory) return 0;
  if (out != nullptr) *out = g_history[(n - 1) % kHistory];
  return 1;
}

__attribute__((visibility("default"))) int fake_cuda_last_launch(FakeCudaLaunch* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_launches > 0 && out != nullptr) *out = g_last_launch;
  return g_launches;
}

__attribute__((visibility("default"))) uint64_t fake_cuda_alloc(uint64_t bytes) {
  CUdeviceptr p = 0;
  return fake_cuMemAlloc(&p, bytes) == CUDA_SUCCESS ? p : 0;
}

__attribute__((visibility("default"))) uint64_t fake_cuda_alloc_on(int device, uint64_t bytes) {
  if (device < 0 || device >= device_count() || bytes == 0) return 0;
  std::lock_guard<std::mutex> lock(g_mu);
  const uint64_t start = g_next_address;
  g_next_address += (bytes + 255) / 256 * 256 + 4096;
  g_allocations[start] = {start, bytes, device};
  return start;
}

__attribute__((visibility("default"))) int fake_cuda_device_count() { return device_count(); }

__attribute__((visibility("default"))) void fake_cuda_set_max_active_clusters(int n) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_max_active_clusters = n;
}

__attribute__((visibility("default"))) int fake_cuda_make_current(int device) {
  if (device < 0 || device >= device_count()) return 0;
  t_current = context_of(device);
  return 1;
}

}  // extern "C"

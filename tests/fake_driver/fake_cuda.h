// What the fake CUDA driver (fake_cuda.cpp, built as libcuda.so.1) records, shared with the tests that read it.
//
// The fake lets the launch path of fa3jit::Runtime::forward run on a machine without a GPU: validation,
// tensor-map encoding and the launch configuration are real, only the driver is replaced. Tests reach these
// functions with dlsym on the already-loaded "libcuda.so.1" (the runtime dlopens it; nothing links it).
#pragma once

#include <cstdint>

extern "C" {

/// The last cuLaunchKernelEx call. Dimensions as passed; `cluster_x` is 1 without a cluster attribute.
struct FakeCudaLaunch {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_mem_bytes;
  unsigned cluster_x;
  char kernel_name[256];          // the name the function's kernel was fetched by (cuLibraryGetKernel)
  unsigned char params[4096];     // copy of kernel argument 0 (a family's Params), fake_cuda_set_param_bytes long
  uint64_t params_address;        // where argument 0 lived at the launch
  uint64_t tensor_map_dims[4][4];  // the 4 most recent cuTensorMapEncodeTiled calls before the launch (q, k, v, out)
  uint64_t tensor_map_strides[4][3];  // bytes
  uint32_t tensor_map_box[4][4];
  unsigned programmatic_serialization;  // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION's value, 0 without it
  int device;                     // the device of the function's (and the current) context
};

/// How many bytes of kernel argument 0 the next launches record (the launched family's sizeof(Params);
/// every family passes one parameter struct). At most sizeof(FakeCudaLaunch::params); 0 records none.
void fake_cuda_set_param_bytes(uint64_t bytes);

/// The bytes of kernel argument 0 that launches of kernels whose name starts with `kernel_prefix` record (another
/// family's sizeof(Params); the value of fake_cuda_set_param_bytes applies to the others).
void fake_cuda_set_param_bytes_for(const char* kernel_prefix, uint64_t bytes);

/// A copy of launch number n (1-based, one of the last 8); returns 1, or 0 when it is not kept (`out` untouched).
int fake_cuda_launch(int n, FakeCudaLaunch* out);

/// A copy of the last launch; returns the number of launches so far (0: `out` untouched).
int fake_cuda_last_launch(FakeCudaLaunch* out);

/// Fake device address of a new allocation of `bytes` (same as cuMemAlloc: on the current context's device, device
/// 0 without one), 0 on failure.
uint64_t fake_cuda_alloc(uint64_t bytes);

/// The same on `device`, whatever context is current; 0 for a device the fake does not have.
uint64_t fake_cuda_alloc_on(int device, uint64_t bytes);

/// What cuOccupancyMaxActiveClusters answers from now on (a device whose GPCs do not pair up every SM); 0 (the
/// default): the SM count over the cluster size.
void fake_cuda_set_max_active_clusters(int n);

/// FAKE_CUDA_DEVICES (1 to 8, default 1): how many devices the fake driver has.
int fake_cuda_device_count();

/// Makes `device`'s primary context current on the calling thread (cuCtxSetCurrent); 0 for an unknown device.
int fake_cuda_make_current(int device);

}  // extern "C"

// fa3jit driver: the CUDA Driver API opened at run time (dlopen "libcuda.so.1" + cuGetProcAddress).
//
// libcuda is never linked, so emit/compile/tests run on machines without a GPU; a missing driver is an
// Error(kNoDriver) with a clear message, not a loader failure. Entry points are fetched by base name
// with cudaVersion 13000 (docs/kernel-design.md §5: the version picks the ABI, e.g. cuCtxSynchronize_v2).
// cuda.h is included for types only.
#pragma once

#include <cuda.h>

#include <string>

namespace fa3jit {

struct Driver {
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxGetDevice)(CUdevice*, CUcontext);  // _v13000: context argument (null = current)
  CUresult (*cuStreamGetCtx)(CUstream, CUcontext*, CUgreenCtx*);  // _v12050 at 13000
  CUresult (*cuLibraryLoadData)(CUlibrary*, const void*, CUjit_option*, void**, unsigned int,
                                CUlibraryOption*, void**, unsigned int);
  CUresult (*cuLibraryUnload)(CUlibrary);
  CUresult (*cuLibraryGetKernel)(CUkernel*, CUlibrary, const char*);
  CUresult (*cuKernelGetFunction)(CUfunction*, CUkernel);
  CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*cuFuncGetAttribute)(int*, CUfunction_attribute, CUfunction);
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**);
  CUresult (*cuOccupancyMaxActiveClusters)(int*, CUfunction, const CUlaunchConfig*);
  CUresult (*cuTensorMapEncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                     const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                     const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                     CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  CUresult (*cuPointerGetAttribute)(void*, CUpointer_attribute, CUdeviceptr);
  CUresult (*cuPointerGetAttributes)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned int, size_t, CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus*);
  CUresult (*cuStreamCreate)(CUstream*, unsigned int);
  CUresult (*cuStreamDestroy)(CUstream);  // _v2 at 13000
  CUresult (*cuCtxSynchronize)(CUcontext);  // _v2 at 13000: takes the context (null = current)
  CUresult (*cuEventCreate)(CUevent*, unsigned int);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);  // _v2 at 13000
  CUresult (*cuEventDestroy)(CUevent);
};

/// The process-wide driver table, loaded on first use (thread-safe). Throws Error(kNoDriver) when
/// libcuda.so.1 cannot be opened or an entry point is missing (message says which).
const Driver& driver();

/// True when libcuda.so.1 can be opened and at least one device exists (never throws).
bool gpu_available() noexcept;

/// Throws Error(kDriverError) "<what>: <CUDA_ERROR_NAME> (<description>)" when `result` is not CUDA_SUCCESS.
void check_cu(CUresult result, const char* what);

/// Makes the primary context of `device` current on this thread (retaining it once per device).
void ensure_context(int device);

/// Streaming multiprocessors of device `ordinal` (CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), asked once per device
/// and kept: launch heuristics (split-KV) call it on every call.
int multiprocessor_count(int ordinal);

}  // namespace fa3jit

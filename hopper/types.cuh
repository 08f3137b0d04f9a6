// Basic types for NVRTC-compiled kernels. NVRTC 13 ships no headers (docs/kernel-design.md §5), so the
// integer typedefs are our own; the tensor-map struct comes from hopper/abi.h.
#pragma once

#include "hopper/abi.h"

namespace fa3jit {

// Inside our namespace, so the unit also compiles under nvcc, whose host headers define ::int64_t etc.
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef int int32_t;
typedef long long int64_t;

/// 32-bit shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

/// 32-bit store and load at a shared-memory address (ordered for other threads by an mbarrier arrive / wait).
__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t value) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(value) : "memory");
}
/// Zeroes the 16 bytes at a 16-byte-aligned shared-memory address.
__device__ __forceinline__ void st_shared_zero_16(uint32_t addr) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(addr), "r"(0u) : "memory");
}
__device__ __forceinline__ uint32_t ld_shared_u32(uint32_t addr) {
  uint32_t value;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(value) : "r"(addr) : "memory");
  return value;
}

}  // namespace fa3jit

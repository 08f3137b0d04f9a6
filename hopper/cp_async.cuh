// Per-thread asynchronous global -> shared copies (cp.async, PTX ISA "Data Movement and Conversion
// Instructions: cp.async"), for loads whose rows TMA cannot address as boxes (the paged gather path of the
// attention producer, kernels/attention_fwd/device/mainloop.cuh). Writes through the generic proxy: a reader
// through the async proxy (wgmma) needs fence_proxy_async_smem() by the writing thread once the copies are
// complete (cp_async_wait_group), before it signals them.
#pragma once

#include "hopper/types.cuh"

namespace fa3jit {

/// 16 bytes from global `src` to shared `dst` (both 16-byte aligned), through L2 only (.cg). src_bytes 0 writes
/// 16 zero bytes and reads nothing (src must still be a valid generic address of global memory: any in-bounds
/// one); 16 copies the whole chunk.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

/// Closes this thread's not yet committed cp.async operations into one group.
__device__ __forceinline__ void cp_async_commit_group() { asm volatile("cp.async.commit_group;" ::: "memory"); }

/// Waits until at most kPending of this thread's most recent groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

}  // namespace fa3jit

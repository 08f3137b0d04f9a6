// WGMMA (warpgroup matrix multiply-accumulate) helpers: ordering instructions and shared-memory
// matrix descriptors. PTX ISA §9.7.15 (wgmma); descriptor bits in §9.7.15.5.1; layouts verified on an
// H200 (docs/kernel-design.md §1-2). The mma_async wrappers for the exact shapes of a kernel are emitted by
// the generator (generator/emit.cpp) because their register lists depend on block_n and head_dim.
#pragma once

#include "hopper/types.cuh"

namespace fa3jit {

/// Must precede the first wgmma of a batch and any wgmma whose register operands were touched since.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }

/// Waits until at most N committed groups of this warpgroup are still in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/// Keeps the compiler from moving reads/writes of accumulator registers across wgmma issue/wait.
template <int N>
__device__ __forceinline__ void fence_operands(float (&regs)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(regs[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_operands(uint32_t (&regs)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(regs[i])::"memory");
}

/// 64-bit shared-memory matrix descriptor, 128-byte swizzle (layout type 1), base offset 0: the tile
/// must start on a 1024-byte boundary. lbo/sbo in bytes (encoded >> 4).
__device__ __forceinline__ uint64_t make_smem_desc_sw128(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

/// The same with 32-byte swizzle (layout type 3): rows of 32 bytes, 8-row atoms of 256 bytes (the tile must start on
/// a 256-byte boundary); TMA's CU_TENSOR_MAP_SWIZZLE_32B writes this layout. K-major with one k-step of 32 bytes per
/// row (an e4m3 k32 step): sbo = 256 between 8-row groups, lbo unused (16).
__device__ __forceinline__ uint64_t make_smem_desc_sw32(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32) | (3ull << 62);
}

/// `desc` with its start address moved by `bytes` (a multiple of 16). The start address is the low 14 bits of
/// (address >> 4) and shared-memory addresses stay below 2^18, so a move inside the shared memory never carries out
/// of that field: one 32-bit add of the low word instead of a new descriptor (CUTLASS's descriptor iterator does the
/// same). PTX ISA §9.7.15.5.1, matrix descriptor format.
/// desc_advance_16 takes the move in 16-byte units (a run-time stage index times a stage's units: one multiply-add).
__device__ __forceinline__ uint64_t desc_advance_16(uint64_t desc, uint32_t units) {
  const uint32_t lo = static_cast<uint32_t>(desc) + units;
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) { return desc_advance_16(desc, bytes >> 4); }

/// Packs two floats into a 16-bit pair (first argument in the low half), bf16 or fp16 by kIsBf16.
template <bool kIsBf16>
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  uint32_t r;
  if constexpr (kIsBf16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

}  // namespace fa3jit

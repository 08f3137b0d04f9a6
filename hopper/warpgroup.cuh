// Warpgroup-level control: register re-balancing (setmaxnreg, PTX ISA §9.7.17.1) and named barriers
// (bar.sync / bar.arrive, PTX ISA §9.7.13.1). Barrier 0 is __syncthreads; ids 1..15 are ours.
#pragma once

#include "hopper/types.cuh"

namespace fa3jit {

template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

__device__ __forceinline__ void named_barrier_sync(int id, int num_threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

__device__ __forceinline__ void named_barrier_arrive(int id, int num_threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

/// Warpgroup index of the calling thread, made warp-uniform so role branches stay convergent.
__device__ __forceinline__ int warpgroup_index() {
  return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
}

/// Named barrier ids used by the kernel.
enum NamedBarrier : int {
  kBarrierEpilogueBase = 1,   // + consumer warpgroup index: its 128 threads before the O store (ids 1..3)
  kBarrierSchedulerBase = 4,  // + consumer warpgroup index: pingpong GEMM turns (ids 4..6)
  kBarrierOStaging = 7,       // every consumer thread before a persistent CTA stages O over the V stages
};

}  // namespace fa3jit

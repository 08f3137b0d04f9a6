// mbarrier: 8-byte shared-memory barriers with a phase bit and a transaction-byte count.
// PTX ISA §9.7.13.15 (mbarrier); parity semantics verified on an H200 (docs/kernel-design.md §4).
#pragma once

#include "hopper/types.cuh"

namespace fa3jit {

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}

/// Makes initialised barriers visible to the async proxy (TMA) and other threads; follow with a CTA barrier.
__device__ __forceinline__ void mbarrier_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/// One arrival plus `bytes` expected transaction bytes (the TMA loads that follow complete them).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

/// The parity of the barrier's current, incomplete phase: 1 once a phase of parity 0 has completed and the next has
/// not (PTX ISA, mbarrier.test_wait.parity: true when the phase of the given parity has completed). The phase to
/// wait for next, for a barrier whose every phase this thread waits for before the next one starts; saves the
/// caller a register carried across its loop.
__device__ __forceinline__ uint32_t mbarrier_current_parity(uint32_t bar) {
  uint32_t odd;
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "mbarrier.test_wait.parity.shared::cta.b64 done, [%1], 0;\n"
      "selp.u32 %0, 1, 0, done;\n"
      "}\n"
      : "=r"(odd)
      : "r"(bar)
      : "memory");
  return odd;
}

// The wait loop of mbarrier_wait and mbarrier_wait_cluster, `sem` the try_wait's semantics qualifiers ("" is the
// default, .acquire at .cta scope). Operands: %0 the barrier, %1 the parity, %2 the suspend-time hint in ns.
#define FA3JIT_MBARRIER_WAIT_LOOP(sem)                                      \
  "{\n"                                                                     \
  ".reg .pred done;\n"                                                      \
  "wait_%=:\n"                                                              \
  "mbarrier.try_wait.parity" sem ".shared::cta.b64 done, [%0], %1, %2;\n"   \
  "@!done bra wait_%=;\n"                                                   \
  "}\n"

/// Blocks until the phase with parity `parity` has completed. Each try_wait may suspend the thread until the phase
/// completes or the suspend-time hint (ns) runs out (PTX ISA, mbarrier.try_wait): 10 ms, as CUTLASS's
/// ClusterBarrier::wait, so a waiting warp re-issues the instruction rarely instead of after the default limit
/// (the producer warp executed 1.2 M try_waits for 47 k loads under ncu, FA3's about 49 k; bench/NOTES.md).
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(FA3JIT_MBARRIER_WAIT_LOOP("") ::"r"(bar), "r"(parity), "r"(10000000u) : "memory");
}

/// mbarrier_wait with acquire semantics at cluster scope (PTX ISA, mbarrier.try_wait .acquire.cluster): for a phase
/// completed by another CTA of the cluster, e.g. by the complete-tx of st.async, whose release is at cluster scope; a
/// .cta-scope acquire does not include the peer thread, so only this form orders the peer's stores before the reads
/// that follow.
__device__ __forceinline__ void mbarrier_wait_cluster(uint32_t bar, uint32_t parity) {
  asm volatile(FA3JIT_MBARRIER_WAIT_LOOP(".acquire.cluster") ::"r"(bar), "r"(parity), "r"(10000000u) : "memory");
}

#undef FA3JIT_MBARRIER_WAIT_LOOP

/// Ring position in a pipeline of kStages stages: stage index and the parity of its current phase.
template <int kStages>
struct PipelineState {
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

}  // namespace fa3jit

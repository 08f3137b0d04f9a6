// Thread-block clusters (PTX ISA 9.0 §9.7.13.4 barrier.cluster, §9.7.9.20 mapa, §9.7.13.15.12 remote
// mbarrier.arrive): a CTA's rank in its cluster, a cluster-wide barrier, and an arrival on the mbarrier at
// the same shared-memory offset in another CTA of the cluster.
#pragma once

#include "hopper/types.cuh"

namespace fa3jit {

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

/// All threads of all CTAs of the cluster; orders shared-memory writes before (release/acquire).
/// Every warp must reach it converged (.aligned).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/// One arrival on the mbarrier at shared address `bar` (this CTA's offset) in CTA `rank` of the cluster, with the
/// instruction's default semantics (.release at .cta scope; CUTLASS's ClusterBarrier::arrive is the same). For
/// arrivals that publish nothing to the peer, such as releasing a buffer whose reads have completed (a stage after
/// wgmma.wait_group): where the caller's own writes must become visible to the peer, use a .release.cluster arrive
/// or a fence instead (on sm_90a a .cluster-scope release compiles to MEMBAR.ALL.GPU; bench/NOTES.md, 2026-12-05).
__device__ __forceinline__ void mbarrier_arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}

/// `value` into the float at shared address `slot` (this CTA's offset) in CTA `rank` of the cluster, completing 4
/// bytes of the transaction count of the mbarrier at `bar` (this CTA's offset) in that CTA (PTX ISA §9.7.9.12,
/// st.async): the receiver waits on its barrier with a cluster-scope acquire (mbarrier_wait_cluster: the complete-tx
/// releases at cluster scope); no cluster-wide barrier and no release fence are needed.
__device__ __forceinline__ void st_async_cluster_f32(uint32_t slot, uint32_t bar, uint32_t rank, float value) {
  asm volatile(
      "{\n"
      ".reg .b32 rslot, rbar;\n"
      "mapa.shared::cluster.u32 rslot, %0, %2;\n"
      "mapa.shared::cluster.u32 rbar, %1, %2;\n"
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [rslot], %3, [rbar];\n"
      "}\n" ::"r"(slot),
      "r"(bar), "r"(rank), "f"(value)
      : "memory");
}

}  // namespace fa3jit

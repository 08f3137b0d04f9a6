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
/// instruction's default semantics (.release at .cta scope), as CUTLASS's ClusterBarrier::arrive. It releases a
/// stage the caller's wgmma has finished reading (wgmma.wait_group returned), so nothing of the caller's needs to be
/// made visible to the peer: a .cluster scope compiles to MEMBAR.ALL.GPU before the arrival (SASS, sm_90a), which
/// cost the 2-CTA cluster kernel about a third of its speed (bench/NOTES.md, 2026-12-05).
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

}  // namespace fa3jit

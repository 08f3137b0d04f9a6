// Kernel body: shared-memory plan, barrier set-up, and the warp-specialised split into one producer
// warpgroup (registers lowered with setmaxnreg.dec) and Cfg::kConsumerWarpgroups consumer warpgroups
// (registers raised with setmaxnreg.inc). FA3 paper §3.1 (warp specialisation); register splits from FA3
// hopper/ (24/240 for two consumer warpgroups, 32/160 for three).
// The generator emits, before this file, `struct KernelConfig` and the wgmma_qk / wgmma_pv wrappers, and
// after it the extern "C" __global__ entry point that calls attention_forward<KernelConfig>.
#pragma once

#include "epilogue.cuh"
#include "hopper/cluster.cuh"
#include "hopper/warpgroup.cuh"
#include "mainloop.cuh"

namespace fa3jit {

template <class Cfg>
__device__ __forceinline__ void attention_forward(const TmaDesc& tm_q, const TmaDesc& tm_k, const TmaDesc& tm_v,
                                                  const TmaDesc& tm_o, const FwdParams& params) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const SmemLayout<Cfg> sm{(smem_u32(smem_raw) + 1023u) & ~1023u};
  const int wg = warpgroup_index();
  const TileCoord tile = tile_for<Cfg::kCausal>(static_cast<int>(blockIdx.x), params);
  const int n_block_max =
      num_n_blocks<Cfg::kBlockM, Cfg::kBlockN, Cfg::kCausal>(tile.m_block, params.seqlen_q, params.seqlen_k);

  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(&tm_q);
    tma_prefetch_descriptor(&tm_k);
    tma_prefetch_descriptor(&tm_v);
    tma_prefetch_descriptor(&tm_o);
    Mainloop<Cfg>::init_barriers(sm);
    mbarrier_fence_init();
  }
  // With a cluster, the peer CTA multicasts into our stages and arrives on our barriers: both CTAs' barriers
  // must be initialised before either starts.
  if constexpr (Cfg::kClusterM > 1) {
    cluster_sync();
  } else {
    __syncthreads();
  }

  if (wg == 0) {
    setmaxnreg_dec<Cfg::kProducerRegisters>();
    if (threadIdx.x == 0) {
      Mainloop<Cfg>::produce(sm, &tm_q, &tm_k, &tm_v, tile, tile.head / params.head_group, n_block_max);
    }
  } else {
    setmaxnreg_inc<Cfg::kConsumerRegisters>();
    float o[Cfg::kHeadDimV / 2];
#pragma unroll
    for (int i = 0; i < Cfg::kHeadDimV / 2; ++i) o[i] = 0.f;
    OnlineSoftmax<Cfg::kBlockN> softmax;
    softmax.init();
    Mainloop<Cfg>::consume(sm, wg - 1, tile, n_block_max, params, o, softmax);
    store_output<Cfg>(sm, &tm_o, wg - 1, tile, params, o, softmax);
  }
  // The peer CTA's consumers may still release stages by arriving on our barriers: keep this CTA's shared
  // memory alive until both are done.
  if constexpr (Cfg::kClusterM > 1) {
    __syncwarp();
    cluster_sync();
  }
}

}  // namespace fa3jit

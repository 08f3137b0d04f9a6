// Epilogue: normalise O by the row sums, stage it in shared memory (the warpgroup's own Q rows, free
// once its last S = Q.K^T has completed) in the 128B-swizzled layout, and store it with TMA, which drops
// rows past seqlen_q. LSE (natural log) goes straight from registers. FA3 paper §3; docs/kernel-design.md §3.
#pragma once

#include "hopper/tma.cuh"
#include "hopper/warpgroup.cuh"
#include "hopper/wgmma.cuh"
#include "scheduler.cuh"
#include "smem_layout.cuh"
#include "softmax.cuh"

namespace fa3jit {

template <class Cfg>
__device__ __forceinline__ void store_output(const SmemLayout<Cfg>& sm, const TmaDesc* tm_o, int wg, TileCoord tile,
                                             const FwdParams& params, float (&o)[Cfg::kHeadDimV / 2],
                                             OnlineSoftmax<Cfg::kBlockN>& softmax) {
  float inv_sum[2], lse[2];
  softmax.finalize(params.softmax_scale, inv_sum, lse);
  const int tid = threadIdx.x % 128;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int row_in_tile = wg * 64 + warp * 16 + lane / 4;

  // Registers (i, i+1) hold row r + 8*((i>>1)&1), columns c, c+1 with c = 2*(lane%4) + 8*(i>>2).
#pragma unroll
  for (int i = 0; i < Cfg::kHeadDimV / 2; i += 2) {
    const int h = (i >> 1) & 1;
    const int r = row_in_tile + 8 * h;
    const int col = 2 * (lane % 4) + 8 * (i >> 2);
    const int byte = (col % 64) * 2;
    const uint32_t addr = sm.q() + (col / 64) * Cfg::kBlockM * 128 + r * 128 + ((((byte >> 4) ^ (r & 7)) & 7) << 4) +
                          (byte & 15);
    const uint32_t packed = pack_half2<Cfg::kIsBf16>(o[i] * inv_sum[h], o[i + 1] * inv_sum[h]);
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(packed) : "memory");
  }
  fence_proxy_async_smem();
  named_barrier_sync(kBarrierEpilogueBase + wg, 128);
  if (tid == 0) {
#pragma unroll
    for (int cb = 0; cb < Cfg::kHeadDimV / 64; ++cb) {
      tma_store_4d(tm_o, sm.q() + cb * Cfg::kBlockM * 128 + wg * 64 * 128, 64 * cb,
                   tile.m_block * Cfg::kBlockM + wg * 64, tile.head, tile.batch);
    }
    tma_store_commit();
    tma_store_wait_read();
  }

  if (params.lse != nullptr && lane % 4 == 0) {
    const int row0 = tile.m_block * Cfg::kBlockM + row_in_tile;
    float* lse_row = params.lse + (static_cast<int64_t>(tile.batch) * params.num_heads + tile.head) * params.seqlen_q;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (row0 + 8 * h < params.seqlen_q) lse_row[row0 + 8 * h] = lse[h];
  }
}

}  // namespace fa3jit

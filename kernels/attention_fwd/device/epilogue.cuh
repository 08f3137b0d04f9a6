// Epilogue: normalise O by the row sums (finalised through the variant's row-sum hook, variant.cuh) and the v
// descale (device/descale.cuh), stage it in shared memory in the output dtype (over the warpgroup's own Q rows,
// free once its last S = Q.K^T has completed, and for e4m3 the V load stages, free once the last V stage was
// transposed) in the 128B-swizzled layout (hopper/swizzle.cuh), and store it with TMA, which drops rows past
// seqlen_q. LSE (natural log) goes
// straight from registers. FA3 paper §3; docs/kernel-design.md §3.
#pragma once

#include "hopper/fragment.cuh"
#include "hopper/swizzle.cuh"
#include "hopper/tma.cuh"
#include "hopper/warpgroup.cuh"
#include "hopper/wgmma.cuh"
#include "kernels/attention_fwd/device/descale.cuh"
#include "kernels/attention_fwd/device/scheduler.cuh"
#include "kernels/attention_fwd/device/smem_layout.cuh"
#include "kernels/attention_fwd/device/mainloop.cuh"
#include "kernels/attention_fwd/device/softmax.cuh"
#include "kernels/attention_fwd/device/variant.cuh"

namespace fa3jit::attention_fwd {

template <class Cfg>
__device__ __forceinline__ void store_output(const SmemLayout<Cfg>& sm, const TmaDesc* tm_o, int wg, TileCoord tile,
                                             const Params& params, const Descale<Cfg>& descale,
                                             float (&o)[Cfg::kHeadDimV / 2], typename Mainloop<Cfg>::Softmax& softmax) {
  using Frag = AccFragment<Cfg::kHeadDimV>;
  constexpr int kOutElemBytes = Cfg::kOutElemBytes;  // O is staged and stored as bf16/fp16 (pack_half2)
  static_assert(kOutElemBytes == 2, "the output is 16-bit");
  float inv_sum[2], lse[2];
  softmax.template finalize<AttentionVariant<Cfg>>(inv_sum, lse);
  const int tid = threadIdx.x % 128;
  const int lane = tid % 32;
  const int row_in_tile = Frag::row_base(wg * 64, lane, tid / 32);  // of row half 0, in the CTA's block_m rows
  const int col_in_tile = Frag::col_base(0, lane);                  // of register 0
  descale.apply_v(o, inv_sum, col_in_tile);

  // Registers (i, i+1), i even, are adjacent columns of one row: one 32-bit store of the packed pair.
#pragma unroll
  for (int i = 0; i < Frag::kRegs; i += 2) {
    const int h = Frag::row_half(i);
    const uint32_t addr =
        sm.o() + swizzle_128b_tile<Cfg::kBlockM, kOutElemBytes>(Frag::row(h, row_in_tile), Frag::col(i, col_in_tile));
    const uint32_t packed = pack_half2<Cfg::kOutIsBf16>(o[i] * inv_sum[h], o[i + 1] * inv_sum[h]);
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(packed) : "memory");
  }
  fence_proxy_async_smem();
  named_barrier_sync(kBarrierEpilogueBase + wg, 128);
  if (tid == 0) {
#pragma unroll
    for (int cb = 0; cb < Cfg::kHeadDimV / 64; ++cb) {
      tma_store_4d(tm_o, sm.o() + cb * Cfg::kBlockM * 128 + wg * 64 * 128, 64 * cb,
                   tile.m_block * Cfg::kBlockM + wg * 64, tile.head, tile.batch);
    }
    tma_store_commit();
    tma_store_wait_read();
  }

  if (params.lse != nullptr && lane % 4 == 0) {
    const int row0 = tile.m_block * Cfg::kBlockM + row_in_tile;
    float* lse_row = params.lse + (static_cast<int64_t>(tile.batch) * params.num_heads + tile.head) * params.seqlen_q;
#pragma unroll
    for (int h = 0; h < Frag::kRowHalves; ++h)
      if (Frag::row(h, row0) < params.seqlen_q) lse_row[Frag::row(h, row0)] = lse[h];
  }
}

}  // namespace fa3jit::attention_fwd

// Epilogue: normalise O by the row sums (with the variant's sink, variant.cuh, when it has one) and the v
// descale (device/descale.cuh), stage it in shared memory in the output dtype (over the warpgroup's own Q rows,
// free once its last S = Q.K^T has completed, and for e4m3 the V load stages, free once the last V stage was
// transposed) in the 128B-swizzled layout (hopper/swizzle.cuh), and store it with TMA, which drops rows past
// seqlen_q; with varlen_q or pack_gqa the tile's rows are no box of the output, and the threads copy the rows that
// hold a query with 16-byte stores. With split-KV (num_splits > 1) O and the LSE go to the fp32 partials instead,
// straight from registers. LSE (natural log) goes straight from registers. FA3 paper §3; docs/kernel-design.md §3.
#pragma once

#include "hopper/fragment.cuh"
#include "hopper/swizzle.cuh"
#include "hopper/tma.cuh"
#include "hopper/warpgroup.cuh"
#include "hopper/wgmma.cuh"
#include "kernels/attention_fwd/device/descale.cuh"
#include "kernels/attention_fwd/device/scheduler.cuh"
#include "kernels/attention_fwd/device/seqlen.cuh"
#include "kernels/attention_fwd/device/smem_layout.cuh"
#include "kernels/attention_fwd/device/mainloop.cuh"
#include "kernels/attention_fwd/device/softmax.cuh"
#include "kernels/attention_fwd/device/variant.cuh"

namespace fa3jit::attention_fwd {

/// 64-bit element offset of (batch b, row, head) in a (batch, seqlen, heads, ...) tensor with these strides.
__device__ __forceinline__ int64_t offset3(int b, int64_t stride_b, int row, int64_t stride_row, int head,
                                           int64_t stride_head) {
  return b * stride_b + row * stride_row + head * stride_head;
}

template <class Cfg>
__device__ __forceinline__ void store_output(const SmemLayout<Cfg>& sm, int wg, const TileWork& w, const Params& params,
                                             const Descale<Cfg>& descale, float (&o)[Cfg::kHeadDimV / 2],
                                             typename Mainloop<Cfg>::Softmax& softmax) {
  using Frag = AccFragment<Cfg::kHeadDimV>;
  constexpr int kOutElemBytes = Cfg::kOutElemBytes;  // O is staged and stored as bf16/fp16 (pack_half2)
  static_assert(kOutElemBytes == 2, "the output is 16-bit");
  using Variant = AttentionVariant<Cfg>;
  const int tid = threadIdx.x % 128;
  const int lane = tid % 32;
  const int row_in_tile = Frag::row_base(wg * 64, lane, tid / 32);  // of row half 0, in the CTA's block_m rows
  const int col_in_tile = Frag::col_base(0, lane);                  // of register 0

  // The thread's two rows: whether they hold a query of the sequence, which query and head, and the row of lse.
  const RowMap<Cfg> rows = RowMap<Cfg>::make(params, w.tile);
  bool valid[2];
  int query[2], head[2];
  float sink_log2[2];
#pragma unroll
  for (int h = 0; h < Frag::kRowHalves; ++h) {
    const int r = Frag::row(h, row_in_tile);
    valid[h] = rows.valid(r, w.seq.seqlen_q, params);
    query[h] = w.seq.q_row0 + rows.query(r);  // row in q / out / lse's seqlen dimension
    head[h] = rows.head(r, w.tile);           // a query head even for a row that holds no query
    sink_log2[h] = Variant::sink_log2(params, head[h], w.tile.split);
  }
  float inv_sum[2], lse[2];
  softmax.template finalize<Variant::kSinks>(inv_sum, lse, sink_log2);
  descale.apply_v(o, inv_sum, col_in_tile);
  const int lse_batch = Cfg::kVarlenQ ? 1 : params.batch;  // lse is (num_heads, total_q) with varlen_q

  if constexpr (Cfg::kSplitKv) {
    if (params.num_splits > 1) {
      // Split-KV: this split's O (normalised by its own row sum) and LSE, fp32, in the layouts of
      // kernels/attention_combine/params.h, straight from registers (a quad writes 32 contiguous bytes per row).
      const int64_t sb = static_cast<int64_t>(w.tile.split) * lse_batch + w.seq.q_batch;
#pragma unroll
      for (int h = 0; h < Frag::kRowHalves; ++h) {
        if (!valid[h]) continue;
        float* dst = params.out_partial +
                     ((sb * params.seqlen_q + query[h]) * params.num_heads + head[h]) * Cfg::kHeadDimV;
#pragma unroll
        for (int j = 0; j < Frag::kRegsPerRowHalf; j += 2) {
          const int i = Frag::reg(h, j);
          asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(dst + Frag::col(i, col_in_tile)),
                       "f"(o[i] * inv_sum[h]), "f"(o[i + 1] * inv_sum[h])
                       : "memory");
        }
        if (lane % 4 == 0) params.lse_partial[(sb * params.num_heads + head[h]) * params.seqlen_q + query[h]] = lse[h];
      }
      return;
    }
  }

  // Persistent grid: O is staged over the V stages, which the other consumer warpgroups may still read (their last
  // P.V): all of them meet first. (Over Q, each warpgroup's rows are its own, free after its own last S = Q.K^T.)
  if constexpr (Cfg::kPersistent) named_barrier_sync(kBarrierOStaging, 128 * Cfg::kConsumerWarpgroups);
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
  if constexpr (Cfg::kVarlenQ || Cfg::kPackGqa) {
    // The tile's rows are not one box of the output tensor (a sequence ends inside the tile, or the rows are several
    // heads): each thread copies 16-byte chunks of the warpgroup's 64 staged rows that hold a query.
    constexpr int kChunksPerRow = Cfg::kHeadDimV * kOutElemBytes / 16;
    for (int c = tid; c < 64 * kChunksPerRow; c += 128) {
      const int r = wg * 64 + c / kChunksPerRow;
      const int col = (c % kChunksPerRow) * (16 / kOutElemBytes);
      if (!rows.valid(r, w.seq.seqlen_q, params)) continue;
      uint32_t x0, x1, x2, x3;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                   : "r"(sm.o() + swizzle_128b_tile<Cfg::kBlockM, kOutElemBytes>(r, col)));
      uint16_t* dst = static_cast<uint16_t*>(params.out) +
                      offset3(w.seq.q_batch, params.out_stride_batch, w.seq.q_row0 + rows.query(r),
                              params.out_stride_seq, rows.head(r, w.tile), params.out_stride_head) +
                      col;
      asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "r"(x0), "r"(x1), "r"(x2), "r"(x3)
                   : "memory");
    }
  } else if (tid == 0) {
#pragma unroll
    for (int cb = 0; cb < (Cfg::kHeadDimV + 63) / 64; ++cb) {  // TMA drops the columns past head_dim_v
      tma_store_4d(&params.tm_o, sm.o() + cb * Cfg::kBlockM * 128 + wg * 64 * 128, 64 * cb,
                   w.tile.m_block * Cfg::kBlockM + wg * 64, w.tile.head, w.tile.batch);
    }
    tma_store_commit();
    tma_store_wait_read();
    // Persistent grid: this warpgroup's rows of the staging area are read; the producer may load V over them, and
    // with a cluster the peer's producer too (it multicasts V into both CTAs): an arrival on every CTA's o_empty.
    if constexpr (Cfg::kPersistent) {
      if constexpr (Cfg::kClusterM == 1) {
        mbarrier_arrive(sm.o_empty());
      } else {
#pragma unroll
        for (uint32_t rank = 0; rank < Cfg::kClusterM; ++rank) mbarrier_arrive_cluster(sm.o_empty(), rank);
      }
    }
  }

  if (params.lse != nullptr && lane % 4 == 0) {
#pragma unroll
    for (int h = 0; h < Frag::kRowHalves; ++h)
      if (valid[h])
        params.lse[(static_cast<int64_t>(w.seq.q_batch) * params.num_heads + head[h]) * params.seqlen_q + query[h]] =
            lse[h];
  }
}

/// Persistent grid: the output of a tile with no key block (a causal or windowed row block that sees no key: every
/// row is empty), O = 0 and the LSE the staged epilogue would write (softmax.cuh: finalize; -inf, or the sink), stored
/// from registers so that the tile touches no shared memory and no barrier (kernel.cuh). Dense layouts only.
template <class Cfg>
__device__ __forceinline__ void store_empty_output(int wg, const TileWork& w, const Params& params) {
  static_assert(!(Cfg::kVarlenQ || Cfg::kPackGqa || Cfg::kSplitKv), "a persistent grid runs dense layouts");
  using Frag = AccFragment<Cfg::kHeadDimV>;
  using Variant = AttentionVariant<Cfg>;
  const int tid = threadIdx.x % 128;
  const int lane = tid % 32;
  const int row_in_tile = Frag::row_base(wg * 64, lane, tid / 32);
  const int col_in_tile = Frag::col_base(0, lane);
  const RowMap<Cfg> rows = RowMap<Cfg>::make(params, w.tile);
  typename Mainloop<Cfg>::Softmax softmax;
  softmax.init();
  const float sink = Variant::sink_log2(params, w.tile.head, w.tile.split);
  const float sink_log2[2] = {sink, sink};
  float inv_sum[2], lse[2];
  softmax.template finalize<Variant::kSinks>(inv_sum, lse, sink_log2);  // every lane: finalize reduces over the quad
#pragma unroll
  for (int h = 0; h < Frag::kRowHalves; ++h) {
    const int r = Frag::row(h, row_in_tile);
    if (!rows.valid(r, w.seq.seqlen_q, params)) continue;
    const int query = w.seq.q_row0 + rows.query(r);
    uint16_t* row = static_cast<uint16_t*>(params.out) + offset3(w.seq.q_batch, params.out_stride_batch, query,
                                                                 params.out_stride_seq, w.tile.head,
                                                                 params.out_stride_head);
#pragma unroll
    for (int j = 0; j < Frag::kRegsPerRowHalf; j += 2) {
      const int col = Frag::col(Frag::reg(h, j), col_in_tile);
      if (col < Cfg::kHeadDimV) asm volatile("st.global.u32 [%0], %1;" ::"l"(row + col), "r"(0u) : "memory");
    }
    if (params.lse != nullptr && lane % 4 == 0)
      params.lse[(static_cast<int64_t>(w.seq.q_batch) * params.num_heads + w.tile.head) * params.seqlen_q + query] =
          lse[h];
  }
}

}  // namespace fa3jit::attention_fwd

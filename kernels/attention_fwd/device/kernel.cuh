// Kernel body: shared-memory plan, barrier set-up, and the warp-specialised split into one producer
// warpgroup (registers lowered with setmaxnreg.dec) and Cfg::kConsumerWarpgroups consumer warpgroups
// (registers raised with setmaxnreg.inc). FA3 paper §3.1 (warp specialisation); register splits from FA3
// hopper/ (24/240 for two consumer warpgroups, 32/160 for three).
// The generator (kernels/attention_fwd/emit.cpp) emits, before this file, `struct KernelConfig` and the
// wgmma_qk / wgmma_pv wrappers, and after it the extern "C" __global__ entry point, whose only argument is
// `const __grid_constant__ Params` (params.h), which calls attention_forward<KernelConfig>.
//
// Where things live (kernels/attention_fwd/device/ unless a path is given):
//   scheduler.cuh    which tile (m_block, head, batch) a CTA computes; its host half, which sizes the grid and
//                    fills the scheduler fields of Params, is kernels/attention_fwd/scheduler.{h,cpp}
//   variant.cuh      the attention variant: key-block range, masks (causal, sliding window), softcap, sinks,
//                    split-KV ranges; the file to open for a new mask or score transform
//   seqlen.cuh       where the tile's sequence lies (dense, varlen, paged; seqused_k) and which query and head each
//                    row is (pack_gqa); the values from the caller's int32 tensors are clamped there
//   mainloop.cuh     producer (TMA into the K/V ring) and consumer KV loop (GEMMs, softmax step, pingpong,
//                    intra-warpgroup overlap)
//   softmax.cuh      online softmax; mask.cuh the masking primitive the variant calls
//   epilogue.cuh     O through shared memory and TMA, LSE from registers
//   descale.cuh      e4m3 dequantisation scales, folded into the softmax scale and the epilogue
//   transpose_v.cuh  e4m3: the producer warpgroup's V transpose (fp8 wgmma reads K-major operands only)
//   smem_layout.cuh  the shared-memory plan
//   hopper/          PTX wrappers and the layouts behind the index math: fragment.cuh (which accumulator element
//                    a register holds), swizzle.cuh (128-byte swizzle), wgmma, tma, mbarrier, warpgroup, cluster
#pragma once

#include "hopper/cluster.cuh"
#include "hopper/grid_dependency.cuh"
#include "hopper/warpgroup.cuh"
#include "kernels/attention_fwd/device/descale.cuh"
#include "kernels/attention_fwd/device/epilogue.cuh"
#include "kernels/attention_fwd/device/mainloop.cuh"
#include "kernels/attention_fwd/device/seqlen.cuh"
#include "kernels/attention_fwd/device/variant.cuh"

namespace fa3jit::attention_fwd {

template <class Cfg>
__device__ __forceinline__ void attention_forward(const Params& params) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // A split kernel's combine kernel is launched behind it with programmatic stream serialization: let it be
  // scheduled once every CTA here has started (it waits for this grid's completion before reading partials).
  if constexpr (Cfg::kSplitKv) launch_dependent_grids();
  const SmemLayout<Cfg> sm{(smem_u32(smem_raw) + 1023u) & ~1023u};
  const int wg = warpgroup_index();
  using Variant = AttentionVariant<Cfg>;
  TileWork w;
  w.tile = tile_for<Cfg>(static_cast<int>(blockIdx.x), params);
  w.seq = SeqInfo::load<Cfg>(params, w.tile.batch);
  w.q_first = RowMap<Cfg>::make(params, w.tile).q_first;
  // A row block past its sequence's end (varlen_q: the grid is sized by max_seqlen_q) has nothing to do; no CTA
  // of a cluster can be in this case (serving layouts need cluster_m 1), so it may leave before the barriers.
  if constexpr (Cfg::kVarlenQ) {
    if (w.q_first >= w.seq.seqlen_q) return;
  }
  const int q_end = min(w.q_first + RowMap<Cfg>::queries(params), w.seq.seqlen_q);
  w.window = Variant::window(params, w.seq.seqlen_q, w.seq.seqlen_k);
  w.softcap_log2 = params.softcap_log2;
  w.inv_softcap_log2 = 1.f / params.softcap_log2;
  w.range = Variant::n_block_range(w.q_first, q_end, w.seq.seqlen_q, w.seq.seqlen_k, w.window);
  if constexpr (Cfg::kSplitKv) w.range = Variant::split_range(w.range, w.tile.split, params.num_splits);
  w.first_masked = Variant::first_masked_block(w.q_first, w.seq.seqlen_q, w.seq.seqlen_k, w.window);
  w.unmasked_min = Variant::unmasked_min_block(q_end, w.seq.seqlen_q, w.seq.seqlen_k, w.window);

  if (threadIdx.x == 0) {
    tma_prefetch_descriptor(&params.tm_q);
    if constexpr (!Cfg::kPagedGather) {  // paged_gather: k and v have no tensor maps
      tma_prefetch_descriptor(&params.tm_k);
      tma_prefetch_descriptor(&params.tm_v);
    }
    if constexpr (!(Cfg::kVarlenQ || Cfg::kPackGqa)) tma_prefetch_descriptor(&params.tm_o);
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
    if constexpr (SmemLayout<Cfg>::kTransposeV) {
      Mainloop<Cfg>::produce_transposing(sm, params, w);
    } else if (threadIdx.x < 32 * (Cfg::kPagedGather ? Mainloop<Cfg>::kGatherWarps : 1)) {
      Mainloop<Cfg>::produce(sm, params, w);
    }
  } else {
    setmaxnreg_inc<Cfg::kConsumerRegisters>();
    const Descale<Cfg> descale = Descale<Cfg>::load(params, w.tile, w.tile.kv_head);
    float o[AccFragment<Cfg::kHeadDimV>::kRegs];
#pragma unroll
    for (int i = 0; i < AccFragment<Cfg::kHeadDimV>::kRegs; ++i) o[i] = 0.f;
    typename Mainloop<Cfg>::Softmax softmax;
    softmax.init();
    Mainloop<Cfg>::consume(sm, wg - 1, w, params, descale, o, softmax);
    store_output<Cfg>(sm, wg - 1, w, params, descale, o, softmax);
  }
  // The peer CTA's consumers may still release stages by arriving on our barriers: keep this CTA's shared
  // memory alive until both are done.
  if constexpr (Cfg::kClusterM > 1) {
    __syncwarp();
    cluster_sync();
  }
}

}  // namespace fa3jit::attention_fwd

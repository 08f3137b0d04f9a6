// Kernel body: shared-memory plan, barrier set-up, and the warp-specialised split into one producer
// warpgroup (registers lowered with setmaxnreg.dec) and Cfg::kConsumerWarpgroups consumer warpgroups
// (registers raised with setmaxnreg.inc). FA3 paper §3.1 (warp specialisation); register splits from FA3
// hopper/ (24/240 for two consumer warpgroups, 32/160 for three).
// The generator (kernels/attention_fwd/emit.cpp) emits, before this file, `struct KernelConfig` and the
// wgmma_qk / wgmma_pv wrappers, and after it the extern "C" __global__ entry point, whose only argument is
// `const __grid_constant__ Params` (params.h), which calls attention_forward<KernelConfig>.
//
// Where things live (kernels/attention_fwd/device/ unless a path is given):
//   scheduler.cuh    which tile (m_block, head, batch) a CTA computes (a persistent CTA: which tiles, in turn); its host half, which sizes the grid and
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

/// Where tile `tile`'s sequence, rows and key blocks lie (the tile from scheduler.cuh: tile_for, persistent_tile).
template <class Cfg>
__device__ __forceinline__ TileWork make_tile_work(const Params& params, const TileCoord& tile) {
  using Variant = AttentionVariant<Cfg>;
  TileWork w;
  w.tile = tile;
  w.seq = SeqInfo::load<Cfg>(params, w.tile.batch);
  w.q_first = RowMap<Cfg>::make(params, w.tile).q_first;
  const int q_end = min(w.q_first + RowMap<Cfg>::queries(params), w.seq.seqlen_q);
  w.window = Variant::window(params, w.seq.seqlen_q, w.seq.seqlen_k);
  w.softcap_log2 = params.softcap_log2;
  w.inv_softcap_log2 = 1.f / params.softcap_log2;
  w.range = Variant::n_block_range(w.q_first, q_end, w.seq.seqlen_q, w.seq.seqlen_k, w.window);
  if constexpr (Cfg::kSplitKv) w.range = Variant::split_range(w.range, w.tile.split, params.num_splits);
  w.first_masked = Variant::first_masked_block(w.q_first, w.seq.seqlen_q, w.seq.seqlen_k, w.window);
  w.unmasked_min = Variant::unmasked_min_block(q_end, w.seq.seqlen_q, w.seq.seqlen_k, w.window);
  return w;
}

/// Thread 0's set-up of the barriers and tensor maps, then the whole CTA (cluster) waits for it.
template <class Cfg>
__device__ __forceinline__ void set_up_cta(const SmemLayout<Cfg>& sm, const Params& params) {
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
}

/// A consumer warpgroup's whole tile: the descales, a fresh O accumulator and softmax state, the KV loop, the epilogue.
/// `loaded`: the tiles with key blocks this CTA ran before (the phase of the per-tile barriers; 0 on a grid).
template <class Cfg>
__device__ __forceinline__ void consume_tile(const SmemLayout<Cfg>& sm, int consumer, const TileWork& w,
                                             const Params& params, PipelineState<Cfg::kStages>& pipe, int loaded) {
  const Descale<Cfg> descale = Descale<Cfg>::load(params, w.tile, w.tile.kv_head);
  float o[AccFragment<Cfg::kHeadDimV>::kRegs];
#pragma unroll
  for (int i = 0; i < AccFragment<Cfg::kHeadDimV>::kRegs; ++i) o[i] = 0.f;
  typename Mainloop<Cfg>::Softmax softmax;
  softmax.init();
  Mainloop<Cfg>::consume(sm, consumer, w, params, descale, o, softmax, pipe, loaded);
  store_output<Cfg>(sm, consumer, w, params, descale, o, softmax);
}

/// One CTA per tile (the grid is the tile count, the hardware's block dispatch is the scheduler).
template <class Cfg>
__device__ __forceinline__ void attention_forward_grid(const Params& params, const SmemLayout<Cfg>& sm) {
  const int wg = warpgroup_index();
  const TileWork w = make_tile_work<Cfg>(params, tile_for<Cfg>(static_cast<int>(blockIdx.x), params));
  // A row block past its sequence's end (varlen_q: the grid is sized by max_seqlen_q) has nothing to do; no CTA
  // of a cluster can be in this case (serving layouts need cluster_m 1), so it may leave before the barriers.
  if constexpr (Cfg::kVarlenQ) {
    if (w.q_first >= w.seq.seqlen_q) return;
  }
  set_up_cta<Cfg>(sm, params);

  PipelineState<Cfg::kStages> pipe;
  if (wg == 0) {
    setmaxnreg_dec<Cfg::kProducerRegisters>();
    if constexpr (SmemLayout<Cfg>::kTransposeV) {
      Mainloop<Cfg>::produce_transposing(sm, params, w);
    } else if (threadIdx.x < 32 * (Cfg::kPagedGather ? Mainloop<Cfg>::kGatherWarps : 1)) {
      Mainloop<Cfg>::produce(sm, params, w, pipe, 0);
    }
  } else {
    setmaxnreg_inc<Cfg::kConsumerRegisters>();
    consume_tile<Cfg>(sm, wg - 1, w, params, pipe, 0);
  }
  // The peer CTA's consumers may still release stages by arriving on our barriers: keep this CTA's shared
  // memory alive until both are done.
  if constexpr (Cfg::kClusterM > 1) {
    __syncwarp();
    cluster_sync();
  }
}

/// The tiles of a persistent CTA, in turn, as both of its sides see them. Statically (non-causal, or a causal call
/// without a counter) each side computes the sequence itself (scheduler.cuh: persistent_tile). Dynamically (causal
/// with params.tile_counter; FA3's dynamic persistent scheduler) CTA b runs tile b first, and the producer takes each
/// next index from the counter (atomicAdd + gridDim.x, so the call's tiles go out in tile_for's longest-first order to
/// whichever CTA frees up first) one tile ahead, and hands it to the consumers through tile slot t % 2: tile_full when
/// written, tile_empty once every consumer thread has read it. The index past the last tile ends both walks.
template <class Cfg>
struct PersistentTiles {
  const Params& params;
  const SmemLayout<Cfg>& sm;
  bool dynamic;
  // Read where used (special registers and the constant bank), not held across the role split: a value computed
  // before setmaxnreg and live in the 24-register producer spilled.
  static __device__ __forceinline__ int cta() { return static_cast<int>(blockIdx.x); }
  static __device__ __forceinline__ int grid() { return static_cast<int>(gridDim.x); }

  /// Producer (one warp): the index of its tile `t`, given `linear` the one it took for it; publishes it.
  __device__ __forceinline__ void publish(int t, int linear) const {
    const int slot = t & 1;
    if ((threadIdx.x & 31) == 0) {
      if (t >= 2) mbarrier_wait(sm.tile_empty(slot), static_cast<uint32_t>((t >> 1) - 1) & 1u);
      st_shared_u32(sm.tile_slot(slot), static_cast<uint32_t>(linear));
      mbarrier_arrive(sm.tile_full(slot));
    }
  }
  /// Producer: the index of its tile t + 1.
  __device__ __forceinline__ int take_next(int t) const {
    if (!dynamic) return persistent_tile<Cfg>(t + 1, cta(), grid());
    int next = 0;
    if ((threadIdx.x & 31) == 0) next = atomicAdd(params.tile_counter, 1) + grid();
    return __shfl_sync(0xffffffffu, next, 0);
  }
  /// Consumers: the index of tile t (waits for the producer's when dynamic).
  __device__ __forceinline__ int consumer_tile(int t) const {
    if (!dynamic) return persistent_tile<Cfg>(t, cta(), grid());
    const int slot = t & 1;
    mbarrier_wait(sm.tile_full(slot), static_cast<uint32_t>(t >> 1) & 1u);
    const int linear = static_cast<int>(ld_shared_u32(sm.tile_slot(slot)));
    mbarrier_arrive(sm.tile_empty(slot));  // every reader itself, so each read is ordered before the next write
    return linear;
  }
};

/// Persistent grid (spec field persistent; FA3's persistent tile scheduler): one CTA per SM, which runs the tiles
/// PersistentTiles gives it one after the other. Producer and consumers walk the same sequence of tiles; the K/V
/// ring's stages and phases run on across tiles, and three barriers hand the per-tile buffers over
/// (smem_layout.cuh): q_full (the tile's Q loaded), q_empty (every consumer warp's last S = Q.K^T of the tile has
/// completed: the next Q may load) and o_empty (every consumer warpgroup's O store has read the staging area over the
/// V stages: the next V may load). So the next tile's first K block and its Q load while the current tile's last P.V
/// and O store run. A tile with no key block (a causal or windowed row block that sees no key) loads nothing, touches
/// no per-tile barrier and stores its zeros and -inf from registers (epilogue.cuh: store_empty_output), so every
/// barrier phase is waited on in order by both sides. With cluster_m 2 (non-causal, the static order) CTAs 2c and
/// 2c + 1 are one cluster and take tiles 2k and 2k + 1 of each round, adjacent row blocks of one head (num_m_blocks
/// is even: scheduler.cpp), so both walk the same key blocks in step, as the K/V multicast needs.
template <class Cfg>
__device__ __forceinline__ void attention_forward_persistent(const Params& params, const SmemLayout<Cfg>& sm) {
  const int wg = warpgroup_index();
  const PersistentTiles<Cfg> tiles{params, sm, Cfg::kCausal && params.tile_counter != nullptr};
  set_up_cta<Cfg>(sm, params);
  PipelineState<Cfg::kStages> pipe;
  int loaded = 0;  // tiles with key blocks done so far: the phase of q_full, q_empty and o_empty
  if (wg == 0) {
    setmaxnreg_dec<Cfg::kProducerRegisters>();
    if (threadIdx.x < 32) {
      int linear = persistent_tile<Cfg>(0, tiles.cta(), tiles.grid());
      for (int t = 0;; ++t) {
        if (tiles.dynamic) tiles.publish(t, linear);
        if (linear >= params.num_tiles) break;
        const TileWork w = make_tile_work<Cfg>(params, tile_for<Cfg>(linear, params));
        if (!w.range.empty()) {
          Mainloop<Cfg>::produce(sm, params, w, pipe, loaded);
          ++loaded;
        }
        // Taken once this tile's loads are issued: its consumers are still at work on it (and the next Q waits for
        // their q_empty), so the atomic's latency is off their path.
        linear = tiles.take_next(t);
      }
    }
  } else {
    setmaxnreg_inc<Cfg::kConsumerRegisters>();
    for (int t = 0;; ++t) {
      const int linear = tiles.consumer_tile(t);
      if (linear >= params.num_tiles) break;
      const TileWork w = make_tile_work<Cfg>(params, tile_for<Cfg>(linear, params));
      if (w.range.empty()) {
        store_empty_output<Cfg>(wg - 1, w, params);
        continue;
      }
      consume_tile<Cfg>(sm, wg - 1, w, params, pipe, loaded);
      ++loaded;
    }
  }
  // With a cluster the peer's consumers may still arrive on this CTA's empty and o_empty barriers: keep its shared
  // memory alive until both CTAs are done. (Without one, every thread may leave as soon as it is done.)
  if constexpr (Cfg::kClusterM > 1) {
    __syncwarp();
    cluster_sync();
  }
}

template <class Cfg>
__device__ __forceinline__ void attention_forward(const Params& params) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // A split kernel's combine kernel is launched behind it with programmatic stream serialization: let it be
  // scheduled once every CTA here has started (it waits for this grid's completion before reading partials).
  if constexpr (Cfg::kSplitKv) launch_dependent_grids();
  const SmemLayout<Cfg> sm{(smem_u32(smem_raw) + 1023u) & ~1023u};
  if constexpr (Cfg::kPersistent) {
    attention_forward_persistent<Cfg>(params, sm);
  } else {
    attention_forward_grid<Cfg>(params, sm);
  }
}

}  // namespace fa3jit::attention_fwd

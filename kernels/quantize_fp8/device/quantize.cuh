// FP8 pre-pass kernel body (FA3 paper §3.3: incoherent processing and block quantisation): 16-bit Q, K, V ->
// e4m3 q8, k8, v8 and fp32 descales (layouts: params.h). Three passes, each an entry point of its own that
// instantiates quantize_fp8_pass<Cfg, kPass>, launched in stream order kPassQk, kPassVAmax, kPassVQuant
// (launch.cpp):
//
// kPassQk (one CTA cluster = cluster_size CTAs, its warps cut into blocks of warps_per_block warps, geometry.h;
// each cluster quantises qk_units units, a unit being the blocks of one cluster index: quantize_qk_units)
//   1. each thread issues the 16-byte loads of its row (device/layout.cuh): unit 0's into registers, the later units'
//      into shared memory (cp.async); the CTA computes the Hadamard signs (one ballot per 32 elements) and, with
//      clusters, announces that it runs (barrier.cluster.arrive); then per unit:
//   2. RoPE (device/rope.cuh), then H.D (device/hadamard.cuh), all in registers;
//   3. warp amax by shuffles; each warp's amax goes to the unit's slot of its cluster warp index in the shared memory
//      of every CTA of the cluster (st.async after barrier.cluster.wait, completing the bytes of the receiver's
//      unit mbarrier, which it waits on with a cluster-scope acquire; without clusters a plain store and a CTA
//      barrier), then each warp reduces its block's slots: the block amax, without a second read;
//   4. descale = descale_from_amax(amax / sqrt(head_dim)), written by the block's first lane; values scaled
//      by 1/(sqrt(head_dim) descale), converted (cvt.rn.satfinite.e4m3x2), exchanged with the neighbouring
//      lane (shfl.xor 1) and stored 16 bytes at a time.
//   The same launch zeroes v_descale, the accumulator of the V passes.
// kPassVAmax: a CTA reduces the per-channel amax of v_rows_per_cta tokens of one (batch, kv head) (shuffles,
//   then a shared table) and merges it into v_descale with one red.global.max per channel, on the bit
//   pattern of descale_from_amax (monotone, so the maximum of descales is the descale of the maximum).
// The V passes start while the pass before them finishes (programmatic dependent launch): their V loads are issued
// before griddepcontrol.wait, the accumulator is touched only after it.
// kPassVQuant: the same CTAs in reverse order (the V data the previous pass read last is still in L2) read
//   the accumulator row once (its reciprocals into shared memory), quantise and store 8 channels per lane; the first chunk's CTA writes 1 where a channel's
//   accumulator stayed 0 (an all-zero channel, quantised to 0 with any descale).
//
// The generator (kernels/quantize_fp8/emit.cpp) emits, before this file, struct QuantizeConfig (geometry.h),
// and after it the extern "C" entry points taking `const __grid_constant__ Params`, one per pass.
#pragma once

#include "hopper/cluster.cuh"
#include "hopper/cp_async.cuh"
#include "hopper/grid_dependency.cuh"
#include "hopper/mbarrier.cuh"
#include "hopper/types.cuh"
#include "kernels/quantize_fp8/device/convert.cuh"
#include "kernels/quantize_fp8/device/hadamard.cuh"
#include "kernels/quantize_fp8/device/layout.cuh"
#include "kernels/quantize_fp8/device/rope.cuh"
#include "kernels/attention_fwd/device/fp8_v_layout.h"
#include "kernels/quantize_fp8/params.h"

namespace fa3jit::quantize_fp8 {

// ---- cluster helpers (PTX ISA §9.7.13.4 barrier.cluster, §9.7.9.20 mapa) ------------------------------------

/// First half of the start-up barrier: the CTA runs (no memory ordering needed: nothing is published yet).
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
/// Second half: every CTA of the cluster runs, so its shared memory may be written (CUDA programming guide,
/// "Distributed shared memory").
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// ---- Q and K ---------------------------------------------------------------------------------------------

/// One of Q, K as kPassQk sees it (strides in elements; outputs are bytes).
struct QkTensor {
  const char* in;
  long long in_batch, in_seq, in_head;
  char* out;
  long long out_batch, out_seq, out_head;
  float* descale;
  int seqlen, heads, blocks_per_seq, num_blocks;
};

__device__ __forceinline__ QkTensor q_tensor(const Params& p) {
  return {static_cast<const char*>(p.q), p.q_stride_batch, p.q_stride_seq, p.q_stride_head,
          static_cast<char*>(p.q8), p.q8_stride_batch, p.q8_stride_seq, p.q8_stride_head,
          p.q_descale, p.seqlen_q, p.num_heads, p.q_blocks, p.q_num_blocks};
}
__device__ __forceinline__ QkTensor k_tensor(const Params& p) {
  return {static_cast<const char*>(p.k), p.k_stride_batch, p.k_stride_seq, p.k_stride_head,
          static_cast<char*>(p.k8), p.k8_stride_batch, p.k8_stride_seq, p.k8_stride_head,
          p.k_descale, p.seqlen_k, p.num_heads_kv, p.k_blocks, p.k_num_blocks};
}

/// 1 / sqrt(head_dim): the normalisation of H (exact for 64 and 256; the nearest float for 128).
template <int kHeadDim>
__device__ __forceinline__ constexpr float hadamard_norm() {
  return kHeadDim == 64 ? 0.125f : (kHeadDim == 128 ? 0.08838834764831844055f : 0.0625f);
}

/// Where a thread's row of a Q/K block lies: the block of cluster `cluster_index` of tensor t its warp works on
/// (Blk: QuantizeConfig::QBlocks or KBlocks), and the row in it of this lane's row group.
struct QkRow {
  int block_in_cluster, warp_in_block;
  int block;    // index into t.descale
  bool active;  // the warp has a block (warp-uniform)
  bool row_ok;  // and the row is inside the sequence
  int b, h, row;
};

template <class Cfg, class Blk>
__device__ __forceinline__ QkRow qk_row(const QkTensor& t, int cluster_index) {
  constexpr int kLanes = row_lanes(Cfg::kHeadDim);
  constexpr int kRowsPerWarp = 32 / kLanes;
  constexpr int kW = Blk::kWarpsPerBlock;
  static_assert(Blk::kBlockRows == kW * kRowsPerWarp, "a block is whole warps");
  static_assert(Blk::kBlocksPerCluster * kW <= Cfg::kClusterSize * Cfg::kWarps, "blocks fit the cluster");
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int rank = static_cast<int>(blockIdx.x % Cfg::kClusterSize);  // 1-D clusters tile the grid along x
  const int cluster_warp = rank * Cfg::kWarps + static_cast<int>(threadIdx.x / 32);
  QkRow r{};
  r.block_in_cluster = cluster_warp / kW;
  r.warp_in_block = cluster_warp % kW;
  r.block = cluster_index * Blk::kBlocksPerCluster + r.block_in_cluster;
  r.active = r.block_in_cluster < Blk::kBlocksPerCluster && r.block < t.num_blocks;
  if (r.active) {
    const int row_block = r.block % t.blocks_per_seq;
    const int bh = r.block / t.blocks_per_seq;  // descale layout: (batch, heads, blocks_per_seq)
    r.h = bh % t.heads;
    r.b = bh / t.heads;
    r.row = row_block * Blk::kBlockRows + r.warp_in_block * kRowsPerWarp + lane / kLanes;
  }
  r.row_ok = r.active && r.row < t.seqlen;
  return r;
}

/// The 16-bit input row of r for this lane: the address of chunk k is qk_src(...) + k * row_lanes * 16 bytes.
template <class Cfg>
__device__ __forceinline__ const char* qk_src(const QkTensor& t, const QkRow& r) {
  const int lane_in_row = static_cast<int>(threadIdx.x % 32) % row_lanes(Cfg::kHeadDim);
  return t.in + 2 * (r.b * t.in_batch + static_cast<long long>(r.row) * t.in_seq + r.h * t.in_head) + 16 * lane_in_row;
}

/// Step 1: this lane's chunks of its row into registers (zeros outside the sequence).
template <class Cfg>
__device__ __forceinline__ void qk_load(const QkTensor& t, const QkRow& r, uint32_t (&raw)[kRowChunks][4]) {
  const char* src = qk_src<Cfg>(t, r);
#pragma unroll
  for (int k = 0; k < kRowChunks; ++k) {
    if (r.row_ok) {
      load_chunk(src + k * row_lanes(Cfg::kHeadDim) * 16, raw[k]);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) raw[k][i] = 0u;
    }
  }
}

/// Step 2: unpack, RoPE and H.D in registers.
template <class Cfg>
__device__ __forceinline__ void qk_rotate(const Params& p, const QkRow& r, const uint32_t (&raw)[kRowChunks][4],
                                          const uint32_t* s_signs, float (&x)[kRowChunks][kChunkElems]) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int lane_in_row = lane % row_lanes(Cfg::kHeadDim);
#pragma unroll
  for (int k = 0; k < kRowChunks; ++k) unpack_chunk<Cfg::kIsBf16>(raw[k], x[k]);
  if constexpr (Cfg::kRope != kRopeNone) {
    const long long table_row = static_cast<long long>(r.row) * (Cfg::kRotaryDim / 2);
    apply_rope<Cfg>(x, p.rope_cos + table_row, p.rope_sin + table_row, lane_in_row, r.row_ok);
  }
  if constexpr (Cfg::kHadamard) {
    hadamard_rotate<Cfg::kHeadDim>(x, thread_sign_bits<Cfg::kHeadDim>(s_signs, lane_in_row), lane);
  }
}

/// The warp's amax of its rows' values.
__device__ __forceinline__ float qk_warp_amax(const float (&x)[kRowChunks][kChunkElems]) {
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kRowChunks; ++k)
#pragma unroll
    for (int j = 0; j < kChunkElems; ++j) amax = fmaxf(amax, fabsf(x[k][j]));
  return warp_max(amax);
}

/// The block amax from the slots of its warps (s_amax: one slot per cluster warp). Called by active warps.
template <class Blk>
__device__ __forceinline__ float qk_block_amax(const QkRow& r, const float* s_amax) {
  constexpr int kW = Blk::kWarpsPerBlock;
  float block_amax = 0.0f;
  for (int i = static_cast<int>(threadIdx.x % 32); i < kW; i += 32)
    block_amax = fmaxf(block_amax, s_amax[r.block_in_cluster * kW + i]);
  return warp_max(block_amax);
}

/// Step 4: descale, quantise, exchange, store. Called by active warps.
template <class Cfg>
__device__ __forceinline__ void qk_store(const QkTensor& t, const QkRow& r, const float (&x)[kRowChunks][kChunkElems],
                                         float block_amax) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int lane_in_row = lane % row_lanes(Cfg::kHeadDim);
  constexpr float kNorm = Cfg::kHadamard ? hadamard_norm<Cfg::kHeadDim>() : 1.0f;
  const float descale = descale_from_amax(block_amax * kNorm);
  if (r.warp_in_block == 0 && lane == 0) t.descale[r.block] = descale;
  const float scale = div_rn(kNorm, descale);
  char* dst = t.out + (r.b * t.out_batch + static_cast<long long>(r.row) * t.out_seq + r.h * t.out_head);
  const bool odd = lane_in_row & 1;
#pragma unroll
  for (int m = 0; m < kRowChunks / 2; ++m) {
    uint32_t a0, a1, b0, b1;  // chunks k = 2m (a) and 2m + 1 (b) as e4m3
    quantize_chunk(x[2 * m], scale, a0, a1);
    quantize_chunk(x[2 * m + 1], scale, b0, b1);
    // Even lanes send b and receive the odd neighbour's a (the chunk after their a); odd lanes send a and
    // receive the even neighbour's b (the chunk before their b). device/layout.cuh: store_chunk.
    const uint32_t r0 = __shfl_xor_sync(0xffffffffu, odd ? a0 : b0, 1);
    const uint32_t r1 = __shfl_xor_sync(0xffffffffu, odd ? a1 : b1, 1);
    if (r.row_ok) {
      char* at = dst + store_chunk(Cfg::kHeadDim, m, lane_in_row) * kChunkElems;
      if (odd) {
        store_16(at, r0, r1, b0, b1);
      } else {
        store_16(at, a0, a1, r0, r1);
      }
    }
  }
}

/// Shared memory of kPassQk, one array (so that the pass's shared memory is one sum: geometry.cpp), in 32-bit words:
/// the rows of units 1.. (kRowChunks x kNumThreads 16-byte chunks per unit, chunk k of thread i at k * kNumThreads + i,
/// so that a warp's reads are conflict-free), the amax slots of every unit (one per cluster warp), the Hadamard signs
/// and, with clusters, an 8-byte mbarrier per unit for the amax exchange.
template <class Cfg>
struct QkSmem {
  static constexpr int kRowWords = (Cfg::kQkUnits - 1) * kRowChunks * Cfg::kNumThreads * 4;
  static constexpr int kSlots = Cfg::kClusterSize * Cfg::kWarps;
  static constexpr int kAmaxWords = Cfg::kQkUnits * kSlots;
  static constexpr int kSignWords = Cfg::kHadamard ? 8 : 0;
  static constexpr int kBarWord = Cfg::kClusterSize > 1 ? (kRowWords + kAmaxWords + kSignWords + 1) / 2 * 2 : 0;
  static constexpr int kWords =
      Cfg::kClusterSize > 1 ? kBarWord + 2 * Cfg::kQkUnits : kRowWords + kAmaxWords + kSignWords;
};

/// kPassQk: the CTA cluster (kClusterSize CTAs, 1: none) quantises kQkUnits units (a unit = the blocks of one cluster
/// index of Q or K; units c + u * clusters for cluster c of the grid's `clusters`, u < kQkUnits, Q's units before
/// K's). Unit 0's loads go to registers; those of units 1.. are issued at the start into shared memory (cp.async), so
/// their bytes are in flight while unit 0 is rotated, reduced and stored: registers alone held too few bytes per SM
/// (bench/NOTES.md). Every unit has its own amax slots (and, with clusters, its own mbarrier), so no barrier separates
/// one unit's slot reads from the next one's writes. Called by every thread of every CTA of the cluster (the barriers
/// are cluster-wide).
template <class Cfg>
__device__ __forceinline__ void quantize_qk_units(const Params& p, uint32_t* smem) {
  using Smem = QkSmem<Cfg>;
  constexpr int kC = Cfg::kClusterSize;
  static_assert(Cfg::kQkUnits >= 1 && Cfg::kQkUnits <= 2, "the wait counts below");
  uint4* s_rows = reinterpret_cast<uint4*>(smem);
  float* s_amax = reinterpret_cast<float*>(smem + Smem::kRowWords);
  uint32_t* s_signs = smem + Smem::kRowWords + Smem::kAmaxWords;
  const uint32_t bars = smem_u32(smem + Smem::kBarWord);  // with clusters: unit u's at bars + 8 u
  constexpr int kKPerCluster = Cfg::KBlocks::kBlocksPerCluster;
  const int units = p.q_clusters + (p.k_num_blocks + kKPerCluster - 1) / kKPerCluster;  // launch.cpp: check_shape
  const int cluster = static_cast<int>(blockIdx.x) / kC, clusters = static_cast<int>(gridDim.x) / kC;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int cluster_warp = static_cast<int>(blockIdx.x % kC) * Cfg::kWarps + static_cast<int>(threadIdx.x / 32);
  // Unit `unit`'s tensor and this thread's row of it (cluster-uniform is_q).
  auto unit_row = [&](int unit, QkTensor& t, bool& is_q) {
    is_q = unit < p.q_clusters;
    t = is_q ? q_tensor(p) : k_tensor(p);
    return is_q ? qk_row<Cfg, typename Cfg::QBlocks>(t, unit)
                : qk_row<Cfg, typename Cfg::KBlocks>(t, unit - p.q_clusters);
  };

  // ---- 1. the amax exchange's barriers, units 1.. into shared memory, unit 0 into registers, the Hadamard signs,
  // cluster start-up. With clusters every warp of the cluster sends its amax to every CTA by st.async (step 3),
  // completing the transaction bytes of unit u's barrier in this CTA: initialised before the loads, published by the
  // fence and the cluster start-up barrier below, so no peer writes to it before it exists.
  constexpr uint32_t kAmaxBytes = 4u * Smem::kSlots;
  if constexpr (kC > 1) {
    if (threadIdx.x == 0) {
#pragma unroll
      for (int u = 0; u < Cfg::kQkUnits; ++u) mbarrier_init(bars + 8 * u, 1);
      mbarrier_fence_init();
    }
  }
#pragma unroll
  for (int u = 1; u < Cfg::kQkUnits; ++u) {
    const int unit = cluster + u * clusters;
    if (unit < units) {
      QkTensor t;
      bool is_q;
      const QkRow r = unit_row(unit, t, is_q);
      const char* src = r.row_ok ? qk_src<Cfg>(t, r) : t.in;  // t.in: a valid address for the zero fill
#pragma unroll
      for (int k = 0; k < kRowChunks; ++k)
        cp_async_16(smem_u32(s_rows + ((u - 1) * kRowChunks + k) * Cfg::kNumThreads + threadIdx.x),
                    r.row_ok ? src + k * row_lanes(Cfg::kHeadDim) * 16 : src, r.row_ok ? 16u : 0u);
    }
    cp_async_commit_group();  // one group per unit (empty past the last unit)
  }
  int unit = cluster;
  QkTensor t;
  bool is_q;
  QkRow r = unit_row(unit, t, is_q);
  uint32_t raw[kRowChunks][4];
  qk_load<Cfg>(t, r, raw);
  if constexpr (Cfg::kHadamard) compute_sign_words<Cfg::kHeadDim, Cfg::kNumThreads>(p.seed, s_signs);
  if constexpr (kC > 1) cluster_arrive_relaxed();
  __syncthreads();  // s_signs
  // Armed after the CTA barrier, not beside the init: the same thread, but compute-sanitizer racecheck reported the
  // init and the arrive as a hazard (warnings, 128 per kernel) with nothing between them.
  if constexpr (kC > 1) {
    if (threadIdx.x == 0) {
#pragma unroll
      for (int u = 0; u < Cfg::kQkUnits; ++u) mbarrier_arrive_expect_tx(bars + 8 * u, kAmaxBytes);
    }
  }

#pragma unroll
  for (int u = 0; u < Cfg::kQkUnits; ++u) {
    if (u > 0) {
      unit = cluster + u * clusters;
      if (unit >= units) return;  // cluster-uniform; no barrier below for a cluster without the unit
      r = unit_row(unit, t, is_q);
      cp_async_wait_group<0>();  // unit u's copies, this thread's own (the last group: kQkUnits <= 2)
#pragma unroll
      for (int k = 0; k < kRowChunks; ++k) {
        const uint4 c = s_rows[((u - 1) * kRowChunks + k) * Cfg::kNumThreads + threadIdx.x];
        raw[k][0] = c.x, raw[k][1] = c.y, raw[k][2] = c.z, raw[k][3] = c.w;
      }
    }
    // ---- 2. RoPE and H.D in registers.
    float x[kRowChunks][kChunkElems];
    qk_rotate<Cfg>(p, r, raw, s_signs, x);

    // ---- 3. block amax: warp, then the block's warps through (distributed) shared memory.
    const float amax = qk_warp_amax(x);
    float* slots = s_amax + u * Smem::kSlots;
    if constexpr (kC == 1) {
      if (lane == 0) slots[cluster_warp] = amax;
      __syncthreads();
    } else {
      if (u == 0) cluster_wait();  // every CTA of the cluster runs and its barriers are initialised
      if (lane < kC)
        st_async_cluster_f32(smem_u32(slots + cluster_warp), bars + 8 * u, static_cast<uint32_t>(lane), amax);
      // Every slot of this unit written in this CTA; the CTA leaves no sooner (its peers' writes land).
      mbarrier_wait_cluster(bars + 8 * u, 0);
    }

    // ---- 4. descale, quantise, exchange, store.
    if (r.active) {
      const float block_amax =
          is_q ? qk_block_amax<typename Cfg::QBlocks>(r, slots) : qk_block_amax<typename Cfg::KBlocks>(r, slots);
      qk_store<Cfg>(t, r, x, block_amax);
    }
  }
}

// ---- V ---------------------------------------------------------------------------------------------------

/// kPassVAmax. Lane `lane % kVLanes` of a row owns channels 8c .. 8c + 7, c = lane % kVLanes.
template <class Cfg>
__device__ __forceinline__ void v_channel_amax(const Params& p, float (*s_vmax)[Cfg::kHeadDimV]) {
  constexpr int kVLanes = Cfg::kHeadDimV / 8;
  constexpr int kRowsPerWarp = 32 / kVLanes;
  constexpr int kStep = Cfg::kWarps * kRowsPerWarp;
  static_assert(Cfg::kVRowsPerCta == Cfg::kVSteps * kStep, "v_rows_per_cta (geometry.cpp)");
  if (static_cast<int>(blockIdx.x) >= p.v_units) return;  // the grid is v_units CTAs (launch.cpp); CTA-uniform
  const int unit = static_cast<int>(blockIdx.x);
  const int chunk = unit % p.v_chunks;
  const int bh = unit / p.v_chunks;
  const int h = bh % p.num_heads_kv, b = bh / p.num_heads_kv;
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int channel_group = lane % kVLanes;
  const int row0 = chunk * Cfg::kVRowsPerCta + warp * kRowsPerWarp + lane / kVLanes;
  const char* base = static_cast<const char*>(p.v) + 2 * (b * p.v_stride_batch + h * p.v_stride_head) + 16 * channel_group;

  uint32_t raw[Cfg::kVSteps][4];
#pragma unroll
  for (int s = 0; s < Cfg::kVSteps; ++s) {
    const int row = row0 + s * kStep;
    if (row < p.seqlen_k) {
      load_chunk(base + 2 * static_cast<long long>(row) * p.v_stride_seq, raw[s]);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) raw[s][i] = 0u;
    }
  }
  float m[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) m[j] = 0.0f;
#pragma unroll
  for (int s = 0; s < Cfg::kVSteps; ++s) {
    float x[8];
    unpack_chunk<Cfg::kIsBf16>(raw[s], x);
#pragma unroll
    for (int j = 0; j < 8; ++j) m[j] = fmaxf(m[j], fabsf(x[j]));
  }
  // Lanes of one channel group are kVLanes apart in the warp.
#pragma unroll
  for (int offset = kVLanes; offset < 32; offset *= 2)
#pragma unroll
    for (int j = 0; j < 8; ++j) m[j] = fmaxf(m[j], __shfl_xor_sync(0xffffffffu, m[j], offset));
  if (lane < kVLanes) {
#pragma unroll
    for (int j = 0; j < 8; ++j) s_vmax[warp][8 * lane + j] = m[j];
  }
  __syncthreads();
  wait_for_prerequisite_grids();  // kPassQk zeroed the accumulator (launch.cpp: programmatic serialization)
  float* acc = p.v_descale + static_cast<long long>(bh) * Cfg::kHeadDimV;
  for (int c = static_cast<int>(threadIdx.x); c < Cfg::kHeadDimV; c += Cfg::kNumThreads) {
    float a = 0.0f;
#pragma unroll
    for (int w = 0; w < Cfg::kWarps; ++w) a = fmaxf(a, s_vmax[w][c]);
    if (a > 0.0f) red_max_float_bits(acc + c, descale_from_amax(a));  // 0 is the accumulator's start value
  }
}

/// kPassVQuant with v_layout d_major: writes the CTA's chunk of kVRowsPerCta keys (keys start .. start + 16 n, the
/// chunk's part of d_major_keys(seqlen_k)) of one (batch, kv head) transposed: v8 row c (channel c) holds the keys
/// contiguously, key 16 g + j at 16 g + fp8_key_position(j) (kernels/attention_fwd/device/fp8_v_layout.h), zeros past
/// seqlen_k; v8_stride_seq is the stride between channels. `chunk` holds the quantised chunk key-major (key r at
/// r * kHeadDimV, as the threads produced it); lane i of a step takes channel i % kHeadDimV (consecutive lanes read
/// consecutive bytes: no bank conflict), assembles 32 keys in eight registers and stores them as 32 contiguous bytes
/// (one sector).
template <class Cfg>
__device__ __forceinline__ void write_v_d_major(const Params& p, const uint8_t* chunk, char* out, int start) {
  static_assert(Cfg::kVRowsPerCta % 32 == 0, "whole 32-key rows per chunk (geometry.cpp: the d_major warp counts)");
  const int keys = static_cast<int>(attention_fwd::d_major_keys(p.seqlen_k)) - start;
  const int groups16 = min(Cfg::kVRowsPerCta, keys) / 16;
  const int items = Cfg::kHeadDimV * ((groups16 + 1) / 2);
  for (int i = static_cast<int>(threadIdx.x); i < items; i += Cfg::kNumThreads) {
    const int c = i % Cfg::kHeadDimV, pair = i / Cfg::kHeadDimV;
    const uint8_t* src = chunk + 32 * pair * Cfg::kHeadDimV + c;
    uint32_t w[8];
#pragma unroll
    for (int x = 0; x < 8; ++x) w[x] = 0u;
#pragma unroll
    for (int k = 0; k < 32; ++k) {
      const int pos = k / 16 * 16 + attention_fwd::fp8_key_position(k % 16);
      w[pos / 4] |= static_cast<uint32_t>(src[k * Cfg::kHeadDimV]) << (8 * (pos % 4));
    }
    char* dst = out + static_cast<long long>(c) * p.v8_stride_seq + start + 32 * pair;
    store_16(dst, w[0], w[1], w[2], w[3]);
    if (2 * pair + 1 < groups16) store_16(dst + 16, w[4], w[5], w[6], w[7]);
  }
}

/// kPassVQuant: the CTAs of kPassVAmax in reverse order. The CTA reads its (batch, kv head)'s accumulator row once
/// and keeps its reciprocals, the channels' scales, in `s_scale` (kHeadDimV floats): read by every thread from global
/// memory, the same 512 bytes drew thousands of L2 requests per CTA, and held in registers they cost a stack frame. With v_layout d_major the quantised chunk goes through shared memory (`staging`,
/// kVRowsPerCta x kHeadDimV bytes) to be written transposed (write_v_d_major).
template <class Cfg>
__device__ __forceinline__ void v_quantize(const Params& p, uint8_t* staging, float* s_scale) {
  constexpr int kVLanes = Cfg::kHeadDimV / 8;
  constexpr int kRowsPerWarp = 32 / kVLanes;
  constexpr int kStep = Cfg::kWarps * kRowsPerWarp;
  if (static_cast<int>(blockIdx.x) >= p.v_units) return;
  const int unit = p.v_units - 1 - static_cast<int>(blockIdx.x);
  const int chunk = unit % p.v_chunks;
  const int bh = unit / p.v_chunks;
  const int h = bh % p.num_heads_kv, b = bh / p.num_heads_kv;
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int channel_group = lane % kVLanes;
  const int row0 = chunk * Cfg::kVRowsPerCta + warp * kRowsPerWarp + lane / kVLanes;
  const char* base = static_cast<const char*>(p.v) + 2 * (b * p.v_stride_batch + h * p.v_stride_head) + 16 * channel_group;
  char* out = static_cast<char*>(p.v8) + (b * p.v8_stride_batch + h * p.v8_stride_head) +
              (Cfg::kVDMajor ? 0 : 8 * channel_group);

  uint32_t raw[Cfg::kVSteps][4];
#pragma unroll
  for (int s = 0; s < Cfg::kVSteps; ++s) {
    const int row = row0 + s * kStep;
    if (row < p.seqlen_k) {
      load_chunk(base + 2 * static_cast<long long>(row) * p.v_stride_seq, raw[s]);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) raw[s][i] = 0u;
    }
  }
  wait_for_prerequisite_grids();  // kPassVAmax's merges into the accumulator are complete and visible
  float* acc = p.v_descale + static_cast<long long>(bh) * Cfg::kHeadDimV;
  for (int c = static_cast<int>(threadIdx.x); c < Cfg::kHeadDimV; c += Cfg::kNumThreads) {
    const float d = load_relaxed(acc + c);
    s_scale[c] = d > 0.0f ? rcp_rn(d) : 1.0f;  // 0: an all-zero channel, quantised to 0 with any descale
    if (d == 0.0f && chunk == 0) store_relaxed(acc + c, 1.0f);  // whose descale is 1
  }
  __syncthreads();  // s_scale
  const float* scale = s_scale + 8 * channel_group;
#pragma unroll
  for (int s = 0; s < Cfg::kVSteps; ++s) {
    const int row = row0 + s * kStep;
    if (!Cfg::kVDMajor && row >= p.seqlen_k) continue;
    float x[8];
    unpack_chunk<Cfg::kIsBf16>(raw[s], x);  // zeros past seqlen_k (the loads above)
#pragma unroll
    for (int j = 0; j < 8; ++j) x[j] *= scale[j];
    const uint32_t lo = pack_e4m3x4(x[0], x[1], x[2], x[3]), hi = pack_e4m3x4(x[4], x[5], x[6], x[7]);
    if constexpr (Cfg::kVDMajor) {
      uint32_t* dst = reinterpret_cast<uint32_t*>(staging + (row - chunk * Cfg::kVRowsPerCta) * Cfg::kHeadDimV +
                                                  8 * channel_group);
      dst[0] = lo;
      dst[1] = hi;
    } else {
      store_8(out + static_cast<long long>(row) * p.v8_stride_seq, lo, hi);
    }
  }
  if constexpr (Cfg::kVDMajor) {
    __syncthreads();
    write_v_d_major<Cfg>(p, staging, out, chunk * Cfg::kVRowsPerCta);
  }
}

// ---- the entry point's body ---------------------------------------------------------------------------------

template <class Cfg, Pass kPass>
__device__ __forceinline__ void quantize_fp8_pass(const Params& p) {
  static_assert(Cfg::kNumThreads == 32 * Cfg::kWarps, "whole warps");
  static_assert(Cfg::kHeadDim % 64 == 0 && Cfg::kHeadDimV % 64 == 0, "head dims 64, 128, 256");
  // The V passes are launched with programmatic stream serialization (launch.cpp): the next pass's CTAs may take
  // the SMs this grid's last wave leaves, load their V and wait (griddepcontrol.wait) for this grid to complete.
  if constexpr (kPass != kPassVQuant) launch_dependent_grids();
  // Each pass declares only its own shared memory (geometry.cpp: smem_bytes, per pass).
  if constexpr (kPass == kPassQk) {
    // Zero the V accumulator: the next launches merge into it (grid-stride; any CTA may take any part).
    for (long long i = static_cast<long long>(blockIdx.x) * Cfg::kNumThreads + threadIdx.x; i < p.v_descale_count;
         i += static_cast<long long>(gridDim.x) * Cfg::kNumThreads)
      p.v_descale[i] = 0.0f;
    __shared__ __align__(16) uint32_t s_qk[QkSmem<Cfg>::kWords];
    quantize_qk_units<Cfg>(p, s_qk);
  } else if constexpr (kPass == kPassVAmax) {
    __shared__ float s_vmax[Cfg::kWarps][Cfg::kHeadDimV];
    v_channel_amax<Cfg>(p, s_vmax);
  } else {
    // With v_layout d_major, the chunk of quantised V written out transposed; in 32-bit words, as its stores need.
    // Without it, the accumulator row alone (one array, so that the pass's shared memory is one sum: geometry.cpp).
    constexpr int kVChunkWords = Cfg::kVDMajor ? Cfg::kVRowsPerCta * Cfg::kHeadDimV / 4 : 0;
    __shared__ uint32_t s_vquant[kVChunkWords + Cfg::kHeadDimV];
    v_quantize<Cfg>(p, reinterpret_cast<uint8_t*>(s_vquant), reinterpret_cast<float*>(s_vquant + kVChunkWords));
  }
}

}  // namespace fa3jit::quantize_fp8

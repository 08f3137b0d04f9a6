// FP8 pre-pass kernel body (FA3 paper §3.3: incoherent processing and block quantisation): 16-bit Q, K, V ->
// e4m3 q8, k8, v8 and fp32 descales (layouts: params.h). Three passes, each an entry point of its own that
// instantiates quantize_fp8_pass<Cfg, kPass>, launched in stream order kPassQk, kPassVAmax, kPassVQuant
// (launch.cpp):
//
// kPassQk (one CTA cluster = cluster_size CTAs, its warps cut into blocks of warps_per_block warps, geometry.h)
//   1. each thread issues the 16-byte loads of its row (device/layout.cuh), the CTA computes the Hadamard
//      signs (one ballot per 32 elements) and, with clusters, announces that it runs (barrier.cluster.arrive);
//   2. RoPE (device/rope.cuh), then H.D (device/hadamard.cuh), all in registers;
//   3. warp amax by shuffles; each warp's amax goes to the slot of its cluster warp index in the shared memory
//      of every CTA of the cluster (st.async after barrier.cluster.wait, completing the bytes of the receiver's
//      mbarrier, which it waits on with a cluster-scope acquire), then each warp reduces its block's slots: the
//      block amax, without a second read;
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
//   the accumulator, quantise and store 8 channels per lane; the first chunk's CTA writes 1 where a channel's
//   accumulator stayed 0 (an all-zero channel, quantised to 0 with any descale).
//
// The generator (kernels/quantize_fp8/emit.cpp) emits, before this file, struct QuantizeConfig (geometry.h),
// and after it the extern "C" entry points taking `const __grid_constant__ Params`, one per pass.
#pragma once

#include "hopper/cluster.cuh"
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

/// kPassQk for the blocks of one tensor (Blk: QuantizeConfig::QBlocks or KBlocks) in cluster `cluster_index`
/// of that tensor. Called by every thread of every CTA of the cluster (the barriers are cluster-wide).
template <class Cfg, class Blk>
__device__ __forceinline__ void quantize_qk_blocks(const Params& p, const QkTensor& t, int cluster_index,
                                                   float* s_amax, uint32_t* s_signs, uint32_t amax_bar) {
  constexpr int kLanes = row_lanes(Cfg::kHeadDim);
  constexpr int kRowsPerWarp = 32 / kLanes;
  constexpr int kW = Blk::kWarpsPerBlock;
  constexpr int kC = Cfg::kClusterSize;
  static_assert(Blk::kBlockRows == kW * kRowsPerWarp, "a block is whole warps");
  static_assert(Blk::kBlocksPerCluster * kW <= kC * Cfg::kWarps, "blocks fit the cluster");
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane_in_row = lane % kLanes;
  const int rank = static_cast<int>(blockIdx.x % kC);  // 1-D clusters tile the grid along x
  const int cluster_warp = rank * Cfg::kWarps + warp;
  const int block_in_cluster = cluster_warp / kW;
  const int warp_in_block = cluster_warp % kW;
  const int block = cluster_index * Blk::kBlocksPerCluster + block_in_cluster;  // = index into t.descale
  const bool active = block_in_cluster < Blk::kBlocksPerCluster && block < t.num_blocks;  // warp-uniform
  int b = 0, h = 0, row = 0;
  if (active) {
    const int row_block = block % t.blocks_per_seq;
    const int bh = block / t.blocks_per_seq;  // descale layout: (batch, heads, blocks_per_seq)
    h = bh % t.heads;
    b = bh / t.heads;
    row = row_block * Blk::kBlockRows + warp_in_block * kRowsPerWarp + lane / kLanes;
  }
  const bool row_ok = active && row < t.seqlen;

  // ---- 1. barrier of the block amax exchange, loads in flight, Hadamard signs, cluster start-up.
  // With clusters every warp of the cluster sends its amax to every CTA by st.async (step 3), completing the
  // transaction bytes of this CTA's amax_bar: initialised before the loads, published by the fence and the
  // cluster start-up barrier below, so no peer writes to it before it exists.
  constexpr uint32_t kAmaxBytes = 4u * kC * Cfg::kWarps;
  if constexpr (kC > 1) {
    if (threadIdx.x == 0) {
      mbarrier_init(amax_bar, 1);
      mbarrier_fence_init();
    }
  }
  uint32_t raw[kRowChunks][4];
  const char* src = t.in + 2 * (b * t.in_batch + static_cast<long long>(row) * t.in_seq + h * t.in_head);
#pragma unroll
  for (int k = 0; k < kRowChunks; ++k) {
    if (row_ok) {
      load_chunk(src + (k * kLanes + lane_in_row) * 16, raw[k]);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) raw[k][i] = 0u;
    }
  }
  if constexpr (Cfg::kHadamard) compute_sign_words<Cfg::kHeadDim, Cfg::kNumThreads>(p.seed, s_signs);
  if constexpr (kC > 1) cluster_arrive_relaxed();
  __syncthreads();  // s_signs
  // Armed after the CTA barrier, not beside the init: the same thread, but compute-sanitizer racecheck reported the
  // init and the arrive as a hazard (warnings, 128 per kernel) with nothing between them.
  if constexpr (kC > 1) {
    if (threadIdx.x == 0) mbarrier_arrive_expect_tx(amax_bar, kAmaxBytes);
  }

  // ---- 2. RoPE and H.D in registers.
  float x[kRowChunks][kChunkElems];
#pragma unroll
  for (int k = 0; k < kRowChunks; ++k) unpack_chunk<Cfg::kIsBf16>(raw[k], x[k]);
  if constexpr (Cfg::kRope != kRopeNone) {
    const long long table_row = static_cast<long long>(row) * (Cfg::kRotaryDim / 2);
    apply_rope<Cfg>(x, p.rope_cos + table_row, p.rope_sin + table_row, lane_in_row, row_ok);
  }
  if constexpr (Cfg::kHadamard) {
    hadamard_rotate<Cfg::kHeadDim>(x, thread_sign_bits<Cfg::kHeadDim>(s_signs, lane_in_row), lane);
  }

  // ---- 3. block amax: warp, then the block's warps through (distributed) shared memory.
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kRowChunks; ++k)
#pragma unroll
    for (int j = 0; j < kChunkElems; ++j) amax = fmaxf(amax, fabsf(x[k][j]));
  amax = warp_max(amax);
  if constexpr (kC == 1) {
    if (lane == 0) s_amax[cluster_warp] = amax;
    __syncthreads();
  } else {
    cluster_wait();  // every CTA of the cluster runs and its amax_bar is initialised
    if (lane < kC) st_async_cluster_f32(smem_u32(s_amax + cluster_warp), amax_bar, static_cast<uint32_t>(lane), amax);
    // Every slot of this CTA written; the CTA leaves no sooner (its peers' writes land).
    mbarrier_wait_cluster(amax_bar, 0);
  }
  if (!active) return;  // no barrier below
  float block_amax = 0.0f;
  for (int i = lane; i < kW; i += 32) block_amax = fmaxf(block_amax, s_amax[block_in_cluster * kW + i]);
  block_amax = warp_max(block_amax);

  // ---- 4. descale, quantise, exchange, store.
  constexpr float kNorm = Cfg::kHadamard ? hadamard_norm<Cfg::kHeadDim>() : 1.0f;
  const float descale = descale_from_amax(block_amax * kNorm);
  if (warp_in_block == 0 && lane == 0) t.descale[block] = descale;
  const float scale = div_rn(kNorm, descale);
  char* dst = t.out + (b * t.out_batch + static_cast<long long>(row) * t.out_seq + h * t.out_head);
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
    if (row_ok) {
      char* at = dst + store_chunk(Cfg::kHeadDim, m, lane_in_row) * kChunkElems;
      if (odd) {
        store_16(at, r0, r1, b0, b1);
      } else {
        store_16(at, a0, a1, r0, r1);
      }
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

/// kPassVQuant: the CTAs of kPassVAmax in reverse order. With v_layout d_major the quantised chunk goes through
/// shared memory (`staging`, kVRowsPerCta x kHeadDimV bytes) to be written transposed (write_v_d_major).
template <class Cfg>
__device__ __forceinline__ void v_quantize(const Params& p, uint8_t* staging) {
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
  float* acc = p.v_descale + static_cast<long long>(bh) * Cfg::kHeadDimV + 8 * channel_group;
  float scale[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float d = load_relaxed(acc + j);
    scale[j] = d > 0.0f ? rcp_rn(d) : 1.0f;  // 0: an all-zero channel, descale 1
    if (d == 0.0f && chunk == 0 && warp == 0 && lane < kVLanes) store_relaxed(acc + j, 1.0f);
  }
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
    __shared__ float s_amax[Cfg::kClusterSize * Cfg::kWarps];
    __shared__ uint32_t s_signs[8];
    __shared__ __align__(8) unsigned long long s_amax_bar;  // with clusters: the amax exchange's mbarrier
    // Zero the V accumulator: the next launches merge into it (grid-stride; any CTA may take any part).
    for (long long i = static_cast<long long>(blockIdx.x) * Cfg::kNumThreads + threadIdx.x; i < p.v_descale_count;
         i += static_cast<long long>(gridDim.x) * Cfg::kNumThreads)
      p.v_descale[i] = 0.0f;
    const int cluster = static_cast<int>(blockIdx.x / Cfg::kClusterSize);
    if (cluster < p.q_clusters) {
      quantize_qk_blocks<Cfg, typename Cfg::QBlocks>(p, q_tensor(p), cluster, s_amax, s_signs, smem_u32(&s_amax_bar));
    } else {
      quantize_qk_blocks<Cfg, typename Cfg::KBlocks>(p, k_tensor(p), cluster - p.q_clusters, s_amax, s_signs,
                                                      smem_u32(&s_amax_bar));
    }
  } else if constexpr (kPass == kPassVAmax) {
    __shared__ float s_vmax[Cfg::kWarps][Cfg::kHeadDimV];
    v_channel_amax<Cfg>(p, s_vmax);
  } else {
    // With v_layout d_major, the chunk of quantised V written out transposed; in 32-bit words, as its stores need.
    constexpr int kVChunkWords = Cfg::kVDMajor ? Cfg::kVRowsPerCta * Cfg::kHeadDimV / 4 : 1;
    __shared__ uint32_t s_vchunk[kVChunkWords];
    v_quantize<Cfg>(p, reinterpret_cast<uint8_t*>(s_vchunk));
  }
}

}  // namespace fa3jit::quantize_fp8

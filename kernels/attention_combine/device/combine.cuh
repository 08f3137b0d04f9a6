// Split-KV combine kernel body (FlashDecoding; FA3 hopper/flash_fwd_combine_kernel.h): merges num_splits
// partial attention outputs per row with weights exp(L_s - L), L = log(sum_s exp(L_s)).
//
// The generator (kernels/attention_combine/emit.cpp) emits, before this file, `struct CombineConfig` with
// the geometry of kernels/attention_combine/geometry.h, and after it the extern "C" __global__ entry point,
// whose only argument is `const __grid_constant__ Params` (params.h), which calls combine_splits<>.
//
// One CTA combines Cfg::kRowsPerCta consecutive rows, Cfg::kLanesPerRow adjacent lanes of one warp per row:
//   0. it waits for the split kernel that wrote the partials (griddepcontrol.wait: the combine is launched
//      while that kernel may still run, see hopper/grid_dependency.cuh);
//   1. the CTA copies the rows' LSEs of every split into a shared-memory table (coalesced: consecutive rows
//      are adjacent in lse_partial);
//   2. each row's lanes reduce max_s L_s and sum_s exp(L_s - max) with warp shuffles, write L and replace
//      the row's LSEs by the weights exp(L_s - L) (0 for an empty split);
//   3. each lane streams its 16-byte vectors of every split with a non-zero weight (each partial is read
//      once, Cfg::kSplitUnroll splits in flight), accumulates in fp32 and stores its 16-bit outputs.
// All math is fp32. Memory-bound: the partials are num_splits x head_dim_v x 4 bytes per row, the output
// head_dim_v x 2.
#pragma once

#include "hopper/grid_dependency.cuh"
#include "hopper/types.cuh"
#include "hopper/wgmma.cuh"  // pack_half2
#include "kernels/attention_combine/params.h"

namespace fa3jit::attention_combine {

__device__ __forceinline__ float combine_neg_inf() { return -__int_as_float(0x7f800000); }

/// 16 bytes of fp32 partial output, read once per launch and cached in L2 only (.cg). Not the non-coherent
/// path: the split kernel that writes these may still be running when this grid starts (programmatic dependent
/// launch); the coherent path after griddepcontrol.wait sees its writes (PTX ISA: ld .nc is for data read-only
/// for the whole kernel). volatile: never hoisted above the wait.
__device__ __forceinline__ void load_partial4(const float* ptr, float (&v)[4]) {
  asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
      : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
      : "l"(ptr));
}

/// Four 16-bit outputs (8 bytes, 8-byte aligned) at once.
__device__ __forceinline__ void store_out4(void* ptr, uint32_t lo, uint32_t hi) {
  asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(ptr), "r"(lo), "r"(hi) : "memory");
}

/// Max / sum over the kLanes lanes of a row: aligned groups of a power of two, so xor shuffles stay inside
/// the group. Every lane of the warp takes part (rows past the end too), hence the full mask.
template <int kLanes>
__device__ __forceinline__ float row_max(float v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
template <int kLanes>
__device__ __forceinline__ float row_sum(float v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <class Cfg>
__device__ __forceinline__ void combine_splits(const Params& p) {
  constexpr int kRows = Cfg::kRowsPerCta;
  constexpr int kLanes = Cfg::kLanesPerRow;
  constexpr int kVecs = Cfg::kVecsPerLane;
  constexpr int kUnroll = Cfg::kSplitUnroll;
  constexpr int kVecsPerRow = Cfg::kHeadDimV / 4;
  constexpr float kLog2e = 1.4426950408889634f;
  static_assert(kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "lanes per row: a power of two <= 32");
  static_assert(Cfg::kNumThreads == kRows * kLanes && Cfg::kNumThreads % 32 == 0, "whole warps of whole rows");
  static_assert(Cfg::kHeadDimV % 8 == 0, "rows of whole 16-byte vectors and 8-byte output groups");

  // [row][split]: L_s after phase 1, the weight exp(L_s - L) after phase 2.
  __shared__ float s_table[kRows * Cfg::kLseStride];
  // launch.cpp keeps num_splits in [1, max_splits]; the clamp keeps the table in bounds whatever happens.
  const int num_splits = max(0, min(p.num_splits, Cfg::kMaxSplits));
  const int row0 = static_cast<int>(blockIdx.x) * kRows;
  // Launched with programmatic stream serialization (LaunchInvariants::waits_for_prerequisites): the split
  // kernel that writes the partials may still run; nothing below reads or writes memory before this.
  wait_for_prerequisite_grids();

  // ---- 1. stage the LSEs: thread i takes (row i % kRows, split i / kRows), coalesced along rows.
  for (unsigned i = threadIdx.x; i < static_cast<unsigned>(num_splits * kRows); i += Cfg::kNumThreads) {
    const int r = static_cast<int>(i % kRows);
    const int s = static_cast<int>(i / kRows);
    const int row = row0 + r;
    s_table[r * Cfg::kLseStride + s] =
        row < p.num_rows ? p.lse_partial[static_cast<long long>(s) * p.num_rows + row] : combine_neg_inf();
  }
  __syncthreads();

  // ---- 2. per row: L and the weights. Rows past the end see only -inf and get weights 0.
  const int r = static_cast<int>(threadIdx.x / kLanes);
  const int lane = static_cast<int>(threadIdx.x % kLanes);
  const int row = row0 + r;
  float* weights = s_table + r * Cfg::kLseStride;
  float max_lse = combine_neg_inf();
  for (int s = lane; s < num_splits; s += kLanes) max_lse = fmaxf(max_lse, weights[s]);
  max_lse = row_max<kLanes>(max_lse);
  // All splits empty: no exp at all, since -inf - (-inf) is NaN; the row gives O = 0, L = -inf.
  const bool empty = max_lse == combine_neg_inf();
  float sum = 0.f;
  if (!empty) {
    for (int s = lane; s < num_splits; s += kLanes) sum += exp2f((weights[s] - max_lse) * kLog2e);
  }
  sum = row_sum<kLanes>(sum);
  // sum >= 1 (the maximum's own term), so the log is finite.
  const float lse = empty ? combine_neg_inf() : max_lse + __logf(sum);
  // Each lane rewrites the entries it read itself; the other lanes of the row read them after the __syncwarp.
  for (int s = lane; s < num_splits; s += kLanes) weights[s] = empty ? 0.f : exp2f((weights[s] - lse) * kLog2e);
  if (lane == 0 && row < p.num_rows && p.lse != nullptr) p.lse[row] = lse;
  __syncwarp();
  if (row >= p.num_rows) return;  // no barrier below

  // ---- 3. accumulate sum_s w_s * O_s over this lane's vectors: j = lane + v * kLanes, v < kVecs.
  const int q = row % p.seqlen_q;
  const int bh = row / p.seqlen_q;
  const int h = bh % p.num_heads;
  const int b = bh / p.num_heads;
  const long long partial_row = (static_cast<long long>(b) * p.seqlen_q + q) * p.num_heads + h;
  const float* partial = p.out_partial + partial_row * Cfg::kHeadDimV + lane * 4;
  float acc[kVecs][4];
#pragma unroll
  for (int v = 0; v < kVecs; ++v)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[v][e] = 0.f;

  for (int s0 = 0; s0 < num_splits; s0 += kUnroll) {
    float w[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) w[u] = s0 + u < num_splits ? weights[s0 + u] : 0.f;
    // All loads of the chunk are issued before the first is used. A split of weight 0 (empty, or negligible
    // next to L) is never read, so whatever an empty split left in its partial cannot reach the output.
    float x[kUnroll][kVecs][4];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int v = 0; v < kVecs; ++v) {
        if (w[u] != 0.f && lane + v * kLanes < kVecsPerRow) {
          load_partial4(partial + (s0 + u) * p.split_stride + v * kLanes * 4, x[u][v]);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) x[u][v][e] = 0.f;
        }
      }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int v = 0; v < kVecs; ++v)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[v][e] = fmaf(w[u], x[u][v][e], acc[v][e]);
  }

  // ---- store: 4 outputs (8 bytes) per vector, consecutive lanes on consecutive 8-byte groups.
  char* out_row = static_cast<char*>(p.out) +
                  2 * (b * p.out_stride_batch + q * p.out_stride_seq + h * p.out_stride_head);
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    const int vec = lane + v * kLanes;
    if (vec < kVecsPerRow) {
      store_out4(out_row + vec * 8, pack_half2<Cfg::kIsBf16>(acc[v][0], acc[v][1]),
                 pack_half2<Cfg::kIsBf16>(acc[v][2], acc[v][3]));
    }
  }
}

}  // namespace fa3jit::attention_combine

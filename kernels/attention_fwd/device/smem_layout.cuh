// Shared-memory plan of one CTA (params.h: smem_plan). Every tile starts on a 1024-byte boundary (128-byte
// swizzle atoms, docs/kernel-design.md §2). A tile of R rows x B bytes is stored as ceil(B/128) column blocks of
// R rows x 128 bytes, each 128B-swizzled (hopper/swizzle.cuh): exactly what one TMA box of {128 bytes, R} per
// column block writes.
//   Q        : block_m x head_dim            (with the V load stages: the O staging tile of the epilogue)
//   Vload[s] : e4m3 seq_major only: block_n x head_dim_v as TMA loads V, per stage (device/transpose_v.cuh)
//   O tail   : e4m3 d_major only: the part of the epilogue's O staging tile past Q
//   K[s]     : block_n x head_dim, per stage
//   V[s]     : block_n x head_dim_v, per stage; e4m3: head_dim_v x block_n (transposed, K-major; params.h VStage)
//              (persistent grid: the O staging tile, with an O tail after the V stages)
//   P        : p_in_smem only: per consumer warpgroup 64 x block_n probabilities, K-major like Q (P.V's A operand)
//   barriers : q_full, k_full[s], k_empty[s], v_full[s], v_empty[s] (+ v_load_full[s], v_load_empty[s], else
//              v_tail)
//              (+ q_empty, o_empty, tile_full[2], tile_empty[2], tile slots: persistent grid)
#pragma once

#include "hopper/types.cuh"
#include "kernels/attention_fwd/params.h"

namespace fa3jit::attention_fwd {

template <class Cfg>
struct SmemLayout {
  // The one plan the host also requests (params.h: smem_plan), from this kernel's own element size.
  // e4m3 wgmma reads K-major B only: the producer transposes V, unless it is given transposed (v_layout d_major).
  static constexpr bool kTransposeV = Cfg::kVStage == kVStageTransposed;
  static constexpr bool kVDMajor = Cfg::kVStage == kVStageDMajor;
  static_assert((Cfg::kElemBytes == 1) == (Cfg::kVStage != kVStageMnMajor), "a K-major V stage for e4m3 only");
  static constexpr SmemPlan kPlan = smem_plan(Cfg::kBlockM, Cfg::kBlockN, Cfg::kHeadDim, Cfg::kHeadDimV, Cfg::kStages,
                                              Cfg::kElemBytes, Cfg::kOutElemBytes, Cfg::kVStage, Cfg::kPersistent,
                                              Cfg::kPInSmem);
  static constexpr int kQBytes = kPlan.q_bytes;
  static constexpr int kKStageBytes = kPlan.k_stage_bytes;
  static constexpr int kVStageBytes = kPlan.v_stage_bytes;
  static constexpr int kVLoadStageBytes = kPlan.v_load_stage_bytes;
  static constexpr int kQOffset = kPlan.q_offset;
  static constexpr int kKOffset = kPlan.k_offset;
  static constexpr int kVOffset = kPlan.v_offset;
  static constexpr int kBarrierOffset = kPlan.barrier_offset;
  static constexpr int kNumBarriers = kPlan.num_barriers;
  static_assert(kQBytes % 1024 == 0 && kKStageBytes % 1024 == 0 && kVStageBytes % 1024 == 0 &&
                    kVLoadStageBytes % 1024 == 0 && kPlan.p_bytes % 1024 == 0,
                "tiles must keep 1024-byte alignment");
  static_assert(kPlan.o_bytes <= kPlan.o_staging_bytes, "the output must fit its staging area");
  static_assert(8 * kNumBarriers <= kBarrierAreaBytes, "the barriers must fit their area");
  static_assert(kPlan.launch_bytes == Cfg::kSmemBytes, "the launch must request the plan's bytes");

  uint32_t base;  // 1024-aligned shared address of the plan

  __device__ __forceinline__ uint32_t q() const { return base + kQOffset; }
  __device__ __forceinline__ uint32_t k(int stage) const { return base + kKOffset + stage * kKStageBytes; }
  __device__ __forceinline__ uint32_t v(int stage) const { return base + kVOffset + stage * kVStageBytes; }
  __device__ __forceinline__ uint32_t v_load(int stage) const {
    return base + kPlan.v_load_offset + stage * kVLoadStageBytes;
  }
  /// The epilogue's output tile: from the start of Q over Q, the V load stages and the O tail, or on a persistent
  /// grid from the start of the V stages over them and the O tail (params.h: smem_plan).
  __device__ __forceinline__ uint32_t o() const { return base + kPlan.o_offset; }
  /// p_in_smem: consumer warpgroup wg's 64 rows of P (column blocks of 64 rows x 128 bytes, 128-byte swizzled).
  __device__ __forceinline__ uint32_t p(int wg) const {
    return base + kPlan.p_offset + wg * (kPlan.p_bytes / Cfg::kConsumerWarpgroups);
  }
  __device__ __forceinline__ uint32_t q_full() const { return base + kBarrierOffset; }
  __device__ __forceinline__ uint32_t k_full(int stage) const { return base + kBarrierOffset + 8 * (1 + stage); }
  __device__ __forceinline__ uint32_t k_empty(int stage) const {
    return base + kBarrierOffset + 8 * (1 + Cfg::kStages + stage);
  }
  __device__ __forceinline__ uint32_t v_full(int stage) const {
    return base + kBarrierOffset + 8 * (1 + 2 * Cfg::kStages + stage);
  }
  __device__ __forceinline__ uint32_t v_empty(int stage) const {
    return base + kBarrierOffset + 8 * (1 + 3 * Cfg::kStages + stage);
  }
  __device__ __forceinline__ uint32_t v_load_full(int stage) const {
    return base + kBarrierOffset + 8 * (1 + 4 * Cfg::kStages + stage);
  }
  __device__ __forceinline__ uint32_t v_load_empty(int stage) const {
    return base + kBarrierOffset + 8 * (1 + 5 * Cfg::kStages + stage);
  }
  /// Without V load stages: the barrier of the TMA loads of a tile's first V block when rows of it past seqlen_k
  /// must be zeroed by the producer before the consumers read it (mainloop.cuh: load_v_zeroing_tail).
  __device__ __forceinline__ uint32_t v_tail() const {
    static_assert(!kTransposeV, "the V transpose masks the tail keys itself");
    return base + kBarrierOffset + 8 * (1 + 4 * Cfg::kStages);
  }
  /// Persistent grid: Q is free for the next tile (every consumer warp's last S = Q.K^T has completed), and O's
  /// staging area (the V stages) is free for the next tile's V (every consumer warpgroup's O store has read it).
  static constexpr int kPersistentFirst = kNumBarriers - kPersistentBarriers;
  __device__ __forceinline__ uint32_t q_empty() const { return base + kBarrierOffset + 8 * kPersistentFirst; }
  __device__ __forceinline__ uint32_t o_empty() const { return base + kBarrierOffset + 8 * (kPersistentFirst + 1); }
  /// Dynamic tile scheduler (kernel.cuh): slot s holds the linear index of a tile the producer took from the counter
  /// (tile_full: written; tile_empty: every consumer thread has read it).
  __device__ __forceinline__ uint32_t tile_full(int slot) const {
    return base + kBarrierOffset + 8 * (kPersistentFirst + 2 + slot);
  }
  __device__ __forceinline__ uint32_t tile_empty(int slot) const {
    return base + kBarrierOffset + 8 * (kPersistentFirst + 4 + slot);
  }
  __device__ __forceinline__ uint32_t tile_slot(int slot) const {
    return base + kBarrierOffset + 8 * (kPersistentFirst + 6) + 4 * slot;
  }
  /// pin_pv_wait: a 4-byte word per consumer warpgroup after the barriers, written and never read (mainloop.cuh:
  /// pin_pv_wait). At most 25 barriers (16-bit, 4 stages, persistent) and 3 warpgroups: 212 of the area's 256 bytes.
  static constexpr int kPinBytes = Cfg::kPinPvWait ? 4 * Cfg::kConsumerWarpgroups : 0;
  static_assert(8 * kNumBarriers + kPinBytes <= kBarrierAreaBytes, "the pin words must fit the barrier area");
  __device__ __forceinline__ uint32_t pin_word(int wg) const {
    return base + kBarrierOffset + 8 * kNumBarriers + 4 * wg;
  }
};

}  // namespace fa3jit::attention_fwd

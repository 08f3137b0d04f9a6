// Shared-memory plan of one CTA. Every tile starts on a 1024-byte boundary (128-byte swizzle atoms,
// docs/kernel-design.md §2). A tile of R rows x D columns (16-bit) is stored as D/64 column blocks of
// R rows x 128 bytes, each 128B-swizzled: exactly what one TMA box of {64, R} per column block writes.
//   Q   : block_m x head_dim            (reused as the O staging tile in the epilogue)
//   K[s]: block_n x head_dim, per stage
//   V[s]: block_n x head_dim_v, per stage
//   barriers: q_full, k_full[s], k_empty[s], v_full[s], v_empty[s]
#pragma once

#include "hopper/types.cuh"

namespace fa3jit {

template <class Cfg>
struct SmemLayout {
  static constexpr int kElem = 2;
  static constexpr int kQBytes = Cfg::kBlockM * Cfg::kHeadDim * kElem;
  static constexpr int kKStageBytes = Cfg::kBlockN * Cfg::kHeadDim * kElem;
  static constexpr int kVStageBytes = Cfg::kBlockN * Cfg::kHeadDimV * kElem;
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQBytes;
  static constexpr int kVOffset = kKOffset + Cfg::kStages * kKStageBytes;
  static constexpr int kBarrierOffset = kVOffset + Cfg::kStages * kVStageBytes;
  static constexpr int kNumBarriers = 1 + 4 * Cfg::kStages;
  static constexpr int kTotalBytes = kBarrierOffset + 8 * kNumBarriers;
  static_assert(kQBytes % 1024 == 0 && kKStageBytes % 1024 == 0 && kVStageBytes % 1024 == 0,
                "tiles must keep 1024-byte alignment");
  static_assert(kTotalBytes + 1024 <= Cfg::kSmemBytes, "generator's smem_bytes must cover the layout");

  uint32_t base;  // 1024-aligned shared address of the plan

  __device__ __forceinline__ uint32_t q() const { return base + kQOffset; }
  __device__ __forceinline__ uint32_t k(int stage) const { return base + kKOffset + stage * kKStageBytes; }
  __device__ __forceinline__ uint32_t v(int stage) const { return base + kVOffset + stage * kVStageBytes; }
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
};

}  // namespace fa3jit

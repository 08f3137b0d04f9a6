// TMA (bulk tensor copies) between global and shared memory.
// PTX ISA §9.7.9.25 (cp.async.bulk.tensor); OOB rows of a load are zero-filled and still count toward the
// mbarrier's transaction bytes; OOB rows of a store are dropped (docs/kernel-design.md §3).
#pragma once

#include "hopper/types.cuh"

namespace fa3jit {

__device__ __forceinline__ void tma_prefetch_descriptor(const TmaDesc* desc) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(desc)) : "memory");
}

/// L2 eviction priority of a load's lines (PTX ISA: createpolicy, and the .L2::cache_hint of cp.async.bulk.tensor):
/// kEvictLast for data many CTAs read again (a head's K/V, read by every row block of the head), kEvictFirst for
/// data read once (a tile's Q), kNormal leaves the hint out. FlashAttention-3 marks K/V evict_last and Q
/// evict_first.
enum class L2Hint { kNormal, kEvictFirst, kEvictLast };

/// The 64-bit cache policy of `kHint` covering the whole access (fraction 1.0); one instruction, no memory access.
/// Volatile, so it is made right before each load: hoisted out of the producer's loops (not volatile), the 64-bit
/// policy stays live across them and the causal kernels' 24-register producer spilled 12-32 bytes (ptxas, CUDA 13.0).
template <L2Hint kHint>
__device__ __forceinline__ uint64_t l2_policy() {
  uint64_t policy;
  if constexpr (kHint == L2Hint::kEvictLast)
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  else
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

/// Loads one box at coordinates {c0 (innermost), c1, c2, c3} into shared memory at `dst`, completing
/// transaction bytes on the mbarrier `bar`, with L2 priority `kHint`.
template <L2Hint kHint = L2Hint::kNormal>
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const TmaDesc* desc, uint32_t bar, int c0, int c1,
                                            int c2, int c3) {
  if constexpr (kHint == L2Hint::kNormal) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(desc)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, "
        "%3, %4, %5}], [%6], %7;" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(desc)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "l"(l2_policy<kHint>())
        : "memory");
  }
}

/// 5-D form of tma_load_4d (coordinates {c0 (innermost), ..., c4}).
template <L2Hint kHint = L2Hint::kNormal>
__device__ __forceinline__ void tma_load_5d(uint32_t dst, const TmaDesc* desc, uint32_t bar, int c0, int c1, int c2,
                                            int c3, int c4) {
  if constexpr (kHint == L2Hint::kNormal) {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, "
        "%6}], [%7];" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(desc)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, "
        "%3, %4, %5, %6}], [%7], %8;" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(desc)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar),
        "l"(l2_policy<kHint>())
        : "memory");
  }
}

/// Like tma_load_4d, but the box lands at the same shared-memory offset in every CTA of the cluster named by
/// `cta_mask`, and completes transaction bytes on the mbarrier at the same offset in each of them.
template <L2Hint kHint = L2Hint::kNormal>
__device__ __forceinline__ void tma_load_4d_multicast(uint32_t dst, const TmaDesc* desc, uint32_t bar, int c0, int c1,
                                                      int c2, int c3, uint16_t cta_mask) {
  if constexpr (kHint == L2Hint::kNormal) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
        "{%2, %3, %4, %5}], [%6], %7;" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(desc)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "h"(cta_mask)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster.L2::"
        "cache_hint [%0], [%1, {%2, %3, %4, %5}], [%6], %7, %8;" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(desc)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "h"(cta_mask),
        "l"(l2_policy<kHint>())
        : "memory");
  }
}

/// Stores one box from shared memory at `src` to coordinates {c0, c1, c2, c3}.
__device__ __forceinline__ void tma_store_4d(const TmaDesc* desc, uint32_t src, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
          reinterpret_cast<uint64_t>(desc)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

/// Waits until all committed stores have finished reading shared memory.
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

/// Orders this thread's generic-proxy shared-memory writes before later async-proxy (TMA/wgmma) reads.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

}  // namespace fa3jit

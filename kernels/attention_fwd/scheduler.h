// Host half of the tile scheduler (its device half is device/scheduler.cuh): the grid and the scheduler
// fields of Params for a call. One CTA per (m_block, head, batch) tile; the index order is the schedule.
//  - non-causal: m_block fastest, so CTAs resident at one time share one head's K/V in L2;
//  - causal: (head, batch) pairs in sections whose K+V fit in ~32 MB of L2 (FA3's section size), longest
//    row blocks first inside a section (longest-processing-time first, docs/kernel-design.md §6).
#pragma once

#include <cstdint>

#include "kernels/attention_fwd/tile_table.h"

namespace fa3jit::attention_fwd {

struct TileSchedule {
  int64_t num_tiles;      // the grid (one CTA per tile, all splits); <= 2^31 - 1 when valid
  int64_t num_m_blocks;   // row blocks per head, rounded up to a multiple of cluster_m
  int64_t section_heads;  // (head, batch) pairs per L2 section (causal order)
  int64_t pack_rows;      // queries per M tile: block_m, or block_m / group with pack_gqa
};

/// What the tile grid of a call depends on.
struct GridShape {
  int64_t batch, num_heads, num_heads_kv;
  int64_t max_seqlen_q;  // longest sequence's queries (the grid covers it; varlen tiles past a sequence exit)
  int64_t seqlen_k;      // longest sequence's keys (L2 sections)
  bool pack_gqa;
  int64_t num_splits;    // >= 1
};

/// Geometry of a call. With a 2-CTA cluster both CTAs of a pair work on one head: the row blocks per head are
/// rounded up to even (the extra block's rows lie past seqlen_q: TMA zero-fills its Q and drops its O). With
/// pack_gqa a tile's rows are block_m / group queries x the group's heads, and the grid runs over KV heads.
TileSchedule schedule_tiles(const KernelConfig& config, const GridShape& g);

/// Share of the multiprocessors a call's tiles must fill for it to run unsplit: FA3's 80 % for compute-bound calls;
/// 40 % for the memory-bound decode steps (the calls of the decode tile, launch.cpp: decode_shaped), where a CTA per
/// SM already streams K and V near the rate the machine gives and a split adds partials and the combine kernel.
/// Measured on an H100 (bench/decode_splits.py, bf16 d128 32/8 heads, bench/NOTES.md 2026-12-07 and 2026-12-08):
/// batch 8 (64 tiles) ran 2-28 % faster with one split than with two at 256-4096 keys; batch 4 (32 tiles) 14-31 %
/// faster split than not.
inline constexpr double kComputeBoundFill = 0.8;
inline constexpr double kMemoryBoundFill = 0.4;

/// Splits of the key range for a call with `tiles` tiles per split and `n_blocks` key blocks per sequence on
/// `num_sms` multiprocessors (one CTA each): 1 when the tiles fill `fill` of the machine (kComputeBoundFill or
/// kMemoryBoundFill), else the fewest splits whose wave efficiency is within 85% of the best (FA3's
/// num_splits_heuristic, hopper/heuristics.h; FlashDecoding).
int num_splits_heuristic(int64_t tiles, int64_t n_blocks, int num_sms, int max_splits,
                         double fill = kComputeBoundFill);

}  // namespace fa3jit::attention_fwd

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
  int64_t num_tiles;      // the grid (one CTA per tile); <= 2^31 - 1 when valid
  int64_t num_m_blocks;   // row blocks per head, rounded up to a multiple of cluster_m
  int64_t section_heads;  // (head, batch) pairs per L2 section (causal order)
};

/// Geometry of a call. With a 2-CTA cluster both CTAs of a pair work on one head: the row blocks per head are
/// rounded up to even (the extra block's rows lie past seqlen_q: TMA zero-fills its Q and drops its O).
TileSchedule schedule_tiles(const KernelConfig& config, int64_t batch, int64_t num_heads, int64_t num_heads_kv,
                            int64_t seqlen_q, int64_t seqlen_k);

}  // namespace fa3jit::attention_fwd

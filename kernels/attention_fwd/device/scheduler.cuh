// Tile scheduler: which (m_block, head, batch) tile a CTA computes. The grid is one-dimensional, one CTA
// per tile, and the hardware dispatches CTAs roughly in index order, so the index order is the schedule:
//  - non-causal: m_block varies fastest, so the CTAs resident at one time share the K/V of one head in L2;
//  - causal: the (head, batch) pairs are cut into sections whose K+V fit in L2 (params.section_heads, chosen
//    by the host), and inside a section the row blocks that see the most keys go first: longest-processing-
//    time-first order, which fills the tail of the grid with short tiles (FA3's LPT scheduler with L2
//    sections, docs/kernel-design.md §6).
// This is the device half. The host half, kernels/attention_fwd/scheduler.{h,cpp} (schedule_tiles), sizes the
// grid (num_splits * num_m_blocks * heads * batch CTAs; heads = num_heads_kv with pack_gqa) and picks section_heads
// for L2; tile_for must map exactly those indices onto the tiles, so a new order changes both halves together.
#pragma once

#include "hopper/types.cuh"
#include "kernels/attention_fwd/params.h"

namespace fa3jit::attention_fwd {

struct TileCoord {
  int m_block;
  int head;     // query head; with pack_gqa the tile's rows hold several: then head = kv_head * head_group
  int kv_head;
  int batch;
  int split;    // key range of a split-KV call (0 without)
};

/// The tile of row block `m_block` of (head, batch) pair `head_batch` (head fastest; with pack_gqa the head is the KV
/// head, whose M tile holds its whole group).
template <class Cfg>
__device__ __forceinline__ TileCoord tile_at(int m_block, int head_batch, int split, const Params& p) {
  const int heads = Cfg::kPackGqa ? p.num_heads_kv : p.num_heads;
  TileCoord t;
  t.m_block = m_block;
  t.split = split;
  t.batch = head_batch / heads;
  const int h = head_batch - t.batch * heads;
  if constexpr (Cfg::kPackGqa) {
    t.kv_head = h;
    t.head = h * p.head_group;
  } else {
    t.head = h;
    t.kv_head = h / p.head_group;
  }
  return t;
}

/// Tile of CTA `linear`. Tiles of one split come together (split outermost); inside a split, the order above over
/// (m_block, head, batch), where "head" is the KV head with pack_gqa (its M tile holds the whole group).
template <class Cfg>
__device__ __forceinline__ TileCoord tile_for(int linear, const Params& p) {
  const int num_m = p.num_m_blocks;
  const int heads = Cfg::kPackGqa ? p.num_heads_kv : p.num_heads;
  int split = 0;
  if constexpr (Cfg::kSplitKv) {
    const int per_split = num_m * heads * p.batch;
    split = linear / per_split;
    linear -= split * per_split;
  }
  int m_block, head_batch;
  if constexpr (Cfg::kCausal) {
    const int pairs = heads * p.batch;
    const int per_section = p.section_heads * num_m;
    const int section = linear / per_section;
    const int r = linear - section * per_section;
    const int first = section * p.section_heads;
    const int count = min(p.section_heads, pairs - first);
    const int m_rank = r / count;
    head_batch = first + (r - m_rank * count);
    m_block = num_m - 1 - m_rank;
  } else {
    head_batch = linear / num_m;
    m_block = linear - head_batch * num_m;
  }
  return tile_at<Cfg>(m_block, head_batch, split, p);
}

/// Persistent grid (spec field persistent; one CTA per SM, launch.cpp) with a static order: the linear index of CTA
/// `cta`'s tile in round `round`, each round the next gridDim.x indices of tile_for's order. Non-causal tiles are all
/// alike, so CTA b takes index b of every round (FA3's static persistent scheduler). A causal call takes its tiles
/// from a counter instead (kernel.cuh: PersistentTiles): any static order measured up to 1.4x more work on some CTAs
/// than on others or lost L2 reuse (bench/NOTES.md, 2026-12-03). Without a counter (no workspace) the rounds alternate
/// direction (a snake), pairing a round's longest tiles with the next round's shortest.
template <class Cfg>
__device__ __forceinline__ int persistent_tile(int round, int cta, int grid) {
  const bool reversed = Cfg::kCausal && (round & 1);
  return round * grid + (reversed ? grid - 1 - cta : cta);
}

}  // namespace fa3jit::attention_fwd

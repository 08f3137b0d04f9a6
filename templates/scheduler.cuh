// Tile scheduler: which (m_block, head, batch) tile a CTA computes. One CTA per tile (grid =
// num_m_blocks x num_heads x batch). With a causal mask the row blocks further down see more keys, so
// they are launched first (longest-processing-time first, as FA3's LPT scheduler does for causal).
#pragma once

#include "hopper/types.cuh"

namespace fa3jit {

struct TileCoord {
  int m_block;
  int head;
  int batch;
};

template <bool kCausal>
__device__ __forceinline__ TileCoord current_tile() {
  TileCoord t;
  t.m_block = kCausal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
  t.head = static_cast<int>(blockIdx.y);
  t.batch = static_cast<int>(blockIdx.z);
  return t;
}

}  // namespace fa3jit

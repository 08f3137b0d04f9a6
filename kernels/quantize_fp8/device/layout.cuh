// Where each element of a Q/K head vector lives in a warp, for the FP8 pre-pass: the one definition the
// kernel (device/quantize.cuh, rope.cuh, hadamard.cuh) and the host tests share. Plain constexpr arithmetic
// on top of hopper/abi.h, so g++ reads it as well as NVRTC.
//
// A row (head vector) of head_dim elements is held by row_lanes = head_dim / 32 adjacent lanes of one warp
// (an aligned group: lane = row_in_warp * row_lanes + lane_in_row). Lane r of the row loads kRowChunks = 4
// chunks of 8 consecutive elements (16 bytes of bf16/fp16 each), chunk k being element chunk k * row_lanes + r:
//   element(k, r, j) = (k * row_lanes + r) * 8 + j,   j in [0, 8)
// so for every k the row's lanes read row_lanes * 16 contiguous bytes (coalesced 16-byte loads). Read as
// bits, the index is  [k : 2 bits][r : log2(row_lanes) bits][j : 3 bits]: a butterfly over a j or k bit is
// inside one thread, one over an r bit is one shfl.xor (mask = 1 << bit) within the row's lane group. That is
// what makes the fast Walsh-Hadamard transform and the RoPE pairs cheap (docs/hopper-ptx.md §9).
//
// Stores: the e4m3 chunk of k = 2m + 1 is exchanged with the neighbouring lane's k = 2m chunk (shfl.xor 1),
// after which every lane owns 16 contiguous output bytes (store_chunk) and one 16-byte store covers them.
#pragma once

#include "hopper/abi.h"

namespace fa3jit::quantize_fp8 {

inline constexpr int kChunkElems = 8;  // elements per 16-byte input chunk
inline constexpr int kRowChunks = 4;   // chunks per lane per row

/// RoPE variants as the kernel sees them (spec.h: Rope has the same values).
inline constexpr int kRopeNone = 0;
inline constexpr int kRopeNeox = 1;
inline constexpr int kRopeInterleaved = 2;

FA3JIT_HOST_DEVICE constexpr int row_lanes(int head_dim) { return head_dim / (kChunkElems * kRowChunks); }

/// Index within the head vector of value j of chunk k of lane `lane_in_row`.
FA3JIT_HOST_DEVICE constexpr int fragment_element(int head_dim, int k, int lane_in_row, int j) {
  return (k * row_lanes(head_dim) + lane_in_row) * kChunkElems + j;
}

/// After the exchange: the first of the two 8-element chunks lane `lane_in_row` stores for chunk pair m
/// (k = 2m, 2m + 1). Even lanes keep their k = 2m chunk and receive the odd neighbour's (the next chunk);
/// odd lanes receive the even neighbour's k = 2m + 1 chunk (the chunk before their own k = 2m + 1 chunk).
FA3JIT_HOST_DEVICE constexpr int store_chunk(int head_dim, int m, int lane_in_row) {
  return (lane_in_row & 1) ? (2 * m + 1) * row_lanes(head_dim) + lane_in_row - 1
                           : 2 * m * row_lanes(head_dim) + lane_in_row;
}

/// The RoPE partner of element i < rotary_dim is i ^ rope_pair_distance: 1 for interleaved pairs (2p, 2p+1),
/// rotary_dim / 2 (a power of two) for neox pairs (p, p + rotary_dim / 2).
FA3JIT_HOST_DEVICE constexpr int rope_pair_distance(int rope, int rotary_dim) {
  return rope == kRopeInterleaved ? 1 : rotary_dim / 2;
}

/// Column p of the cos/sin tables used by element i < rotary_dim: i / 2 (interleaved), i mod rotary_dim / 2
/// (neox).
FA3JIT_HOST_DEVICE constexpr int rope_table_column(int rope, int rotary_dim, int i) {
  return rope == kRopeInterleaved ? i >> 1 : i & ~(rotary_dim / 2);
}

/// Whether element i is the first of its pair (x1' = x1 cos - x2 sin) rather than the second
/// (x2' = x1 sin + x2 cos).
FA3JIT_HOST_DEVICE constexpr bool rope_is_first(int rope, int rotary_dim, int i) {
  return (i & rope_pair_distance(rope, rotary_dim)) == 0;
}

}  // namespace fa3jit::quantize_fp8

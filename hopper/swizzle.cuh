// The 128-byte swizzle of shared-memory tiles, as TMA (CU_TENSOR_MAP_SWIZZLE_128B) writes them and wgmma
// descriptors of layout type 1 read them. PTX ISA 9.0 §9.7.15.5.1 (shared memory matrix layout, swizzling
// modes); docs/kernel-design.md §2.
//
// Rows of 128 bytes; 8 rows form one 1024-byte atom, which must start on a 1024-byte boundary. Inside an atom
// the 16-byte chunk c of row r is stored at chunk c ^ (r & 7). A tile wider than 128 bytes is stored as
// column blocks of rows x 128 bytes, one after the other (one TMA box of {128 bytes, rows} each).
#pragma once

#include "hopper/types.cuh"

namespace fa3jit {

inline constexpr int kSwizzleRowBytes = 128;  // one swizzled row; also the byte width of a column block

/// Byte offset of byte `byte` (0..127) of row `row`, from the 1024-byte aligned start of a column block.
__device__ __forceinline__ uint32_t swizzle_128b(int row, int byte) {
  return row * kSwizzleRowBytes + ((((byte >> 4) ^ (row & 7)) & 7) << 4) + (byte & 15);
}

/// Byte offset of element (row, col) of a kRows-row tile of kElemBytes-byte elements stored as column blocks
/// of kRows x 128 bytes (the layout of smem_layout.cuh).
template <int kRows, int kElemBytes>
__device__ __forceinline__ uint32_t swizzle_128b_tile(int row, int col) {
  constexpr int kBlockCols = kSwizzleRowBytes / kElemBytes;  // columns of one column block
  return (col / kBlockCols) * kRows * kSwizzleRowBytes + swizzle_128b(row, (col % kBlockCols) * kElemBytes);
}

}  // namespace fa3jit

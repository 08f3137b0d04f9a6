// Register fragment of an fp32 wgmma accumulator: which element of the 64 x N tile each register of a thread
// holds. PTX ISA 9.0 §9.7.15.5.1 (register fragments of wgmma.mma_async, accumulator D of .m64nNk16);
// docs/kernel-design.md §1. For thread (warp w of the warpgroup, lane l), register i (0 <= i < N/2) holds
//
//   row = 16*w + l/4 + 8*row_half(i),   row_half(i) = (i >> 1) & 1
//   col = 2*(l%4) + (i & 1) + 8*(i >> 2)
//
// So a thread owns two rows of the tile, its two row halves (r and r + 8), with N/4 registers in each, and a row
// is spread over the four lanes of a quad: a row reduction is a local one plus two butterfly shuffles. This is
// the (row, column) view that FA3 builds with convert_layout_acc_rowcol and ThunderKittens' row-layout register
// tiles hold. Registers (i, i+1) with i even are adjacent columns of one row, and the accumulator doubles as the
// 16-bit A operand of the next wgmma: pack(s[2i], s[2i+1]) (docs/kernel-design.md §1). An 8-bit A operand (FP8,
// k32) does not line up this way and needs a register permute first (FA3 paper §3.3).
//
// A loop over one row half runs j = 0 .. kRegsPerRowHalf-1 over reg(h, j), which increases with j: the same
// registers in the same order as a loop over all i that skips the other half. The helpers add their terms in the
// order written above, origin first; the generated code was checked against that order (a regrouped sum compiles
// to the same instructions, scheduled differently).
#pragma once

#include "hopper/types.cuh"

namespace fa3jit {

template <int kN>
struct AccFragment {
  static_assert(kN % 8 == 0, "wgmma n is a multiple of 8");
  static constexpr int kRegs = kN / 2;            // fp32 registers per thread
  static constexpr int kRowHalves = 2;            // rows per thread
  static constexpr int kRegsPerRowHalf = kN / 4;  // registers per thread in one row

  /// Which of the thread's two rows register i belongs to.
  static __host__ __device__ __forceinline__ constexpr int row_half(int i) { return (i >> 1) & 1; }
  /// The j-th register (0 <= j < kRegsPerRowHalf) of row half h.
  static __host__ __device__ __forceinline__ constexpr int reg(int h, int j) { return 4 * (j >> 1) + 2 * h + (j & 1); }

  /// Row of the thread's row half 0 in a tile whose first row is `origin` (0 for a row inside the tile);
  /// `warp`: 0..3 inside the warpgroup.
  static __device__ __forceinline__ int row_base(int origin, int lane, int warp) {
    return origin + warp * 16 + lane / 4;
  }
  /// Column of the thread's register 0 in a tile whose first column is `origin`.
  static __device__ __forceinline__ int col_base(int origin, int lane) { return origin + 2 * (lane % 4); }
  /// The same for the calling thread (threadIdx.x).
  static __device__ __forceinline__ int row_base(int origin) {
    const int lane = threadIdx.x % 32;
    const int warp = (threadIdx.x % 128) / 32;
    return origin + warp * 16 + lane / 4;
  }
  static __device__ __forceinline__ int col_base(int origin) { return col_base(origin, threadIdx.x % 32); }

  /// Row of row half h, given row0 = row_base(...).
  static __host__ __device__ __forceinline__ constexpr int row(int h, int row0) { return row0 + 8 * h; }
  /// Column of register i, given col0 = col_base(...).
  static __host__ __device__ __forceinline__ constexpr int col(int i, int col0) {
    return col0 + (i & 1) + 8 * (i >> 2);
  }
};

}  // namespace fa3jit

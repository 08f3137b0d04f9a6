// e4m3 V transpose, run by the producer warpgroup on every V stage (FA3 paper §3.3; FA3 hopper/ transposes V
// the same way, with ldmatrix.trans, byte permutes and stmatrix).
//
// Why: O += P.V takes V as its B operand with K = keys. e4m3 wgmma has no transpose, so B must be K-major: rows
// of head_dim_v, each holding keys contiguously (PTX ISA 9.7.15.5.1; docs/hopper-ptx.md §6). TMA writes V as it
// is in memory, one row per key, into a V load stage (128-byte swizzled column blocks of 128 channels); this
// file rewrites it into the V stage the consumers read: head_dim_v rows (rounded up to 32) x block_n keys, in column blocks of 128
// keys, 128-byte swizzled (hopper/swizzle.cuh).
//
// Key order inside every 16 keys: P's A fragment is packed straight from the S accumulator (mainloop.cuh:
// convert_p), which puts the probability of key 2q, 2q+1, 2q+8, 2q+9 (q = lane % 4) at k positions 4q..4q+3.
// So the V stage stores key p of each group of 16 at position fp8_key_position(p) = 4*((p&7)>>1) + (p&1) +
// 2*((p>>3)&1) (device/fp8_v_layout.h; a d_major V comes in this order, launch.h): the keys are
// summed over, so relabelling them together in P and V changes nothing and saves the register shuffles of P.
//
// One unit of work is 16 keys x 32 channels. ldmatrix.x4.trans reads its four 8x8 matrices of byte pairs
// (keys 0-7 / 8-15 x channels 0-15 / 16-31); lane t = 4c + q then holds, for channel pair (2c, 2c+1), the
// bytes of keys 2q, 2q+1 (from the first matrix) and 2q+8, 2q+9 (from the second). Two byte permutes give the
// four relabelled keys of channel 2c and of channel 2c+1, and stmatrix.x4 writes them as rows of the V stage.
// Lanes 0-15 and 16-31 swap the channel of their first and second matrix so the 8 rows of each stored matrix
// fall on 8 different 16-byte bank groups under the swizzle (no bank conflicts); ldmatrix reads 8 consecutive
// key rows, conflict-free as well.
#pragma once

#include "hopper/smem_matrix.cuh"
#include "hopper/swizzle.cuh"

namespace fa3jit::attention_fwd {

template <class Cfg>
struct TransposeV {
  // Rows of the V stage: head_dim_v rounded up to 32 channels (params.h: transposed_v_rows); the channels past
  // head_dim_v are TMA's zero fill of the load stage and are never read by P.V.
  static constexpr int kRows = transposed_v_rows(Cfg::kHeadDimV);
  static constexpr int kUnits = (Cfg::kBlockN / 16) * (kRows / 32);
  static constexpr int kWarps = 4;  // the producer warpgroup
  static constexpr int kThreads = 32 * kWarps;  // each arrives on the stage barriers (mainloop.cuh: transpose_stage)
  static_assert(kThreads == Cfg::kNumThreads - 128 * Cfg::kConsumerWarpgroups, "the producer is one warpgroup");
  static_assert((kWarps & (kWarps - 1)) == 0, "the key-group start below is a power-of-two residue");

  /// Transposes one stage: `src` the V load stage (block_n rows of head_dim_v bytes), `dst` the V stage. The fast
  /// loop needs more than 24 producer registers (tile_table.cpp: derive_config gives two consumer warpgroups 40
  /// where it can; three have 32, one 56) and none of the gather code's (its producers spilled with both).
  /// Keys from `keys` on are written as zeros (a tile's first block past seqlen_k: mainloop.cuh, first_block_keys);
  /// block_n takes the loop without the mask.
  static __device__ __forceinline__ void run(uint32_t src, uint32_t dst, int warp, int lane, int keys) {
    if (keys < Cfg::kBlockN)
      run_any<true>(src, dst, warp, lane, keys);
    else
      run_any<false>(src, dst, warp, lane, Cfg::kBlockN);
  }

  template <bool kMaskKeys>
  static __device__ __forceinline__ void run_any(uint32_t src, uint32_t dst, int warp, int lane, int keys) {
    if constexpr (Cfg::kProducerRegisters >= 32 && !Cfg::kPagedGather)
      run_fast<kMaskKeys>(src, dst, warp, lane, keys);
    else
      run_lean<kMaskKeys>(src, dst, warp, lane, keys);
  }

  /// kMaskKeys: zeroes the bytes of the keys from `keys` on in the four registers an ldmatrix.x4.trans of the unit
  /// starting at key key0 gave this lane: r0 / r2 hold keys key0 + 2q, +1 (low, high 16 bits; q = lane % 4), r1 / r3
  /// keys key0 + 2q + 8, +9.
  template <bool kMaskKeys>
  static __device__ __forceinline__ void mask_keys(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, int key0,
                                                   int keys, int lane) {
    if constexpr (kMaskKeys) {
      const int k = key0 + 2 * (lane % 4);
      const uint32_t lo = (k < keys ? 0x0000ffffu : 0u) | (k + 1 < keys ? 0xffff0000u : 0u);
      const uint32_t hi = (k + 8 < keys ? 0x0000ffffu : 0u) | (k + 9 < keys ? 0xffff0000u : 0u);
      r0 &= lo, r2 &= lo, r1 &= hi, r3 &= hi;
    }
  }

  /// Unit u = 16 keys x 32 channels: key group kg = u % kKeyGroups (keys 16 kg..16 kg + 15) of channel group
  /// g = u / kKeyGroups (channels 32 g..32 g + 31); warp `warp` takes the units u % 4 == warp. The loop runs over
  /// g and, inside, over the warp's key groups of g, with every address term that depends on the lane
  /// alone computed once and those of g once per g: an iteration is the ldmatrix, four byte permutes,
  /// the stmatrix and a few integer operations (the loop over u with its divisions and swizzles recomputed took
  /// ~47 instructions per unit, a quarter of the kernel's issued instructions at d128 128x224; ncu).
  template <bool kMaskKeys>
  static __device__ __forceinline__ void run_fast(uint32_t src, uint32_t dst, int warp, int lane, int keys) {
    static_assert(Cfg::kBlockN % 32 == 0, "e4m3 tiles: block_n % 32");
    constexpr int kKeyGroups = Cfg::kBlockN / 16;
    constexpr int kChanGroups = kRows / 32;
    const int mat = lane / 8, r = lane % 8;  // this lane's row address: row r of matrix mat
    const int c = lane / 4;                  // channel pair of this lane's registers (ldmatrix.trans)
    // ldmatrix: matrix mat covers keys 8*(mat & 1) + 0..7, channels 16*(mat >> 1) + 0..15 of the unit. The lane's
    // row is key 16 kg + ld_key (low bits r) of column block g / 4, its 16 bytes the chunk 2 (g % 4) + (mat >> 1) of
    // that row, swizzled: ((2 (g % 4)) ^ (mat >> 1) ^ r) << 4, the two terms in separate bits.
    // src and dst are 1024-byte aligned and rows are 128 bytes, so address bits 4-6 hold the swizzled chunk alone:
    // the lane's chunk is or-ed into its base once, and g's or kg's chunk bits are applied with an xor.
    const int ld_key = 8 * (mat & 1) + r;
    const uint32_t ld_lane = src + static_cast<uint32_t>(ld_key * kSwizzleRowBytes + (((mat >> 1) ^ r) << 4));
    // stmatrix: matrix mat, row r is channel 16*(mat >> 1) + 2r + ((mat & 1) ^ (r >= 4)) of the unit: row
    // 32 g + st_chan (low bits st_chan % 8) of the V stage, its 16 bytes the keys of chunk kg % 8 of column block
    // kg / 8.
    const int st_chan = 16 * (mat >> 1) + 2 * r + ((mat & 1) ^ (r >= 4 ? 1 : 0));
    const uint32_t st_lane = dst + static_cast<uint32_t>(st_chan * kSwizzleRowBytes + ((st_chan % 8) << 4));
    // Lanes with c >= 4 store their odd channel's keys first (the bank-conflict swap at the top of this file): the
    // lane's choice, made once in the byte-permute selectors.
    const uint32_t first_sel = c >= 4 ? 0x7531u : 0x6420u;
#pragma unroll 1
    for (int g = 0; g < kChanGroups; ++g) {  // not unrolled: unrolled, every g's bases stay live and spill
      const uint32_t ld_g =
          (ld_lane ^ static_cast<uint32_t>((g % 4) << 5)) + (g / 4) * (Cfg::kBlockN * kSwizzleRowBytes);
      const uint32_t st_g = st_lane + g * 32 * kSwizzleRowBytes;
#pragma unroll 1
      for (int kg = (warp - g * kKeyGroups) & (kWarps - 1); kg < kKeyGroups; kg += kWarps) {
        uint32_t r0, r1, r2, r3;
        ldmatrix_x4_trans(ld_g + static_cast<uint32_t>(kg) * (16 * kSwizzleRowBytes), r0, r1, r2, r3);
        mask_keys<kMaskKeys>(r0, r1, r2, r3, 16 * kg, keys, lane);
        const uint32_t second_sel = first_sel ^ (0x6420u ^ 0x7531u);
        const uint32_t first_lo = byte_perm(r0, r1, first_sel), second_lo = byte_perm(r0, r1, second_sel);
        const uint32_t first_hi = byte_perm(r2, r3, first_sel), second_hi = byte_perm(r2, r3, second_sel);
        const uint32_t chunk = static_cast<uint32_t>(kg);
        stmatrix_x4((st_g + (chunk >> 3) * (kRows * kSwizzleRowBytes)) ^ ((chunk & 7u) << 4), first_lo, second_lo,
                    first_hi, second_hi);
      }
    }
  }

  /// The loop of the producers without registers to spare (24 registers, or the gather kernels): unit by unit,
  /// the lane's terms recomputed in every iteration (what ptxas does anyway there), ~47 instructions per unit.
  template <bool kMaskKeys>
  static __device__ __forceinline__ void run_lean(uint32_t src, uint32_t dst, int warp, int lane, int keys) {
    static_assert(Cfg::kBlockN % 32 == 0, "e4m3 tiles: block_n % 32");
    const int mat = lane / 8, r = lane % 8;  // this lane's row address: row r of matrix mat
    const int c = lane / 4;                  // channel pair of this lane's registers (ldmatrix.trans)
    // ldmatrix: matrix mat covers keys 8*(mat & 1) + 0..7, channels 16*(mat >> 1) + 0..15 of the unit.
    const int ld_key = 8 * (mat & 1) + r;
    const int ld_chan = 16 * (mat >> 1);
    // stmatrix: matrix mat, row r is channel 16*(mat >> 1) + 2r + ((mat & 1) ^ (r >= 4)) of the unit.
    const int st_chan = 16 * (mat >> 1) + 2 * r + ((mat & 1) ^ (r >= 4 ? 1 : 0));
    const bool swap = c >= 4;
#pragma unroll 1
    for (int unit = warp; unit < kUnits; unit += kWarps) {
      const int key0 = (unit % (Cfg::kBlockN / 16)) * 16;  // first key of the unit
      const int chan0 = (unit / (Cfg::kBlockN / 16)) * 32;  // first channel of the unit
      // Source: row key, byte chan of the column block chan / 128 (block_n rows of 128 bytes each).
      const int key = key0 + ld_key;
      const int chan = chan0 + ld_chan;
      const uint32_t ld_addr = src + (chan / 128) * (Cfg::kBlockN * kSwizzleRowBytes) + swizzle_128b(key, chan % 128);
      uint32_t r0, r1, r2, r3;
      ldmatrix_x4_trans(ld_addr, r0, r1, r2, r3);
      mask_keys<kMaskKeys>(r0, r1, r2, r3, key0, keys, lane);
      const uint32_t even_lo = byte_perm(r0, r1, 0x6420), odd_lo = byte_perm(r0, r1, 0x7531);
      const uint32_t even_hi = byte_perm(r2, r3, 0x6420), odd_hi = byte_perm(r2, r3, 0x7531);
      // Destination: row channel, bytes key0..key0+15 of the column block key0 / 128 (head_dim_v rows each).
      const int row = chan0 + st_chan;
      const uint32_t st_addr =
          dst + (key0 / 128) * (kRows * kSwizzleRowBytes) + swizzle_128b(row, key0 % 128);
      stmatrix_x4(st_addr, swap ? odd_lo : even_lo, swap ? even_lo : odd_lo, swap ? odd_hi : even_hi,
                  swap ? even_hi : odd_hi);
    }
  }
};

}  // namespace fa3jit::attention_fwd

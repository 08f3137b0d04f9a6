// Warp-wide 8x8 matrix loads and stores between shared memory and registers (ldmatrix / stmatrix, PTX ISA
// §9.7.9.25 and §9.7.9.26, .m8n8 .b16 shapes; stmatrix needs sm_90). Lanes 8i..8i+7 give the 16-byte-aligned
// addresses of the 8 rows of matrix i; register i of lane t holds the two 16-bit elements (row t/4, columns
// 2(t%4), 2(t%4)+1) of matrix i, or with .trans (rows 2(t%4), 2(t%4)+1 of column t/4), the first in the low
// half. The e4m3 V transpose treats a pair of bytes as one 16-bit element (kernels/attention_fwd/device/
// transpose_v.cuh).
#pragma once

#include "hopper/types.cuh"

namespace fa3jit {

/// Four 8x8 16-bit matrices, transposed on the way into registers.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                                  uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr)
               : "memory");
}

/// Four 8x8 16-bit matrices from registers to shared memory, not transposed.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

/// Bytes of the pair {lo, hi} (lo bytes 0-3, hi bytes 4-7) picked by the four selector nibbles (PTX prmt).
__device__ __forceinline__ uint32_t byte_perm(uint32_t lo, uint32_t hi, uint32_t selector) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(lo), "r"(hi), "r"(selector));
  return r;
}

/// Four floats to e4m3 bytes, x0 in the lowest byte; round to nearest even, saturating to +-448
/// (cvt.rn.satfinite.e4m3x2.f32 puts its first source in the upper byte; docs/hopper-ptx.md §6).
__device__ __forceinline__ uint32_t pack_e4m3x4(float x0, float x1, float x2, float x3) {
  uint32_t r;
  asm("{\n"
      ".reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n"
      "}\n"
      : "=r"(r)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return r;
}

}  // namespace fa3jit

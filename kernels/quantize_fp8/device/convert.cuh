// Memory accesses and element conversions of the FP8 pre-pass, each one PTX instruction or a short fixed
// sequence (PTX ISA 9.0: §9.7.9.8 ld, §9.7.9.10 st, §9.7.13.6 red, §9.7.9.21 cvt; docs/hopper-ptx.md §6).
#pragma once

#include "hopper/types.cuh"

namespace fa3jit::quantize_fp8 {

/// 16 bytes of input (8 bf16/fp16 elements), read once per launch: the non-coherent path without L1
/// allocation (launch.cpp rejects outputs that overlap inputs).
__device__ __forceinline__ void load_chunk(const void* ptr, uint32_t (&r)[4]) {
  asm volatile("ld.global.nc.L1::no_allocate.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "l"(ptr));
}

/// 16 bytes of a RoPE table (4 floats). Rows are shared by every head: default caching.
__device__ __forceinline__ void load_float4(const float* ptr, float (&v)[4]) {
  asm("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3]) : "l"(ptr));
}

/// 32 bytes of a RoPE table (8 floats; 32-byte aligned).
__device__ __forceinline__ void load_float8(const float* ptr, float (&v)[8]) {
  asm("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%8];\n"
      "ld.global.nc.v4.f32 {%4, %5, %6, %7}, [%8+16];"
      : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3]), "=f"(v[4]), "=f"(v[5]), "=f"(v[6]), "=f"(v[7])
      : "l"(ptr));
}

__device__ __forceinline__ void store_16(void* ptr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

__device__ __forceinline__ void store_8(void* ptr, uint32_t a, uint32_t b) {
  asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(ptr), "r"(a), "r"(b) : "memory");
}

/// Two 16-bit elements of a 32-bit word (the lower half is the element at the lower address) as floats.
template <bool kIsBf16>
__device__ __forceinline__ void unpack2(uint32_t w, float& lo, float& hi) {
  if constexpr (kIsBf16) {
    // bf16 is the upper half of an fp32: no conversion instruction at all.
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xffff0000u);
  } else {
    asm("{\n.reg .f16 l, h;\nmov.b32 {l, h}, %2;\ncvt.f32.f16 %0, l;\ncvt.f32.f16 %1, h;\n}"
        : "=f"(lo), "=f"(hi)
        : "r"(w));
  }
}

/// The 8 elements of one 16-byte chunk as floats, in memory order.
template <bool kIsBf16>
__device__ __forceinline__ void unpack_chunk(const uint32_t (&r)[4], float (&x)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) unpack2<kIsBf16>(r[i], x[2 * i], x[2 * i + 1]);
}

/// Four floats as e4m3 bytes x0 (lowest address) .. x3, round to nearest even, finite values beyond +-448
/// saturated (satfinite; NaN stays NaN). cvt.rn.satfinite.e4m3x2.f32 d, a, b puts a in the upper byte and b
/// in the lower (docs/hopper-ptx.md §6), so each half is cvt(x_odd, x_even).
__device__ __forceinline__ uint32_t pack_e4m3x4(float x0, float x1, float x2, float x3) {
  uint32_t r;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}"
      : "=r"(r)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return r;
}

/// x * scale for 8 values, as 8 e4m3 bytes in two words (memory order).
__device__ __forceinline__ void quantize_chunk(const float (&x)[8], float scale, uint32_t& w0, uint32_t& w1) {
  w0 = pack_e4m3x4(x[0] * scale, x[1] * scale, x[2] * scale, x[3] * scale);
  w1 = pack_e4m3x4(x[4] * scale, x[5] * scale, x[6] * scale, x[7] * scale);
}

/// Correctly rounded a / b and 1 / a (the unit is compiled with --use_fast_math, which makes '/' approximate).
__device__ __forceinline__ float div_rn(float a, float b) {
  float r;
  asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ float rcp_rn(float a) {
  float r;
  asm("rcp.rn.f32 %0, %1;" : "=f"(r) : "f"(a));
  return r;
}

/// Maximum of a non-negative float into *ptr, as unsigned integers (same order for non-negative floats);
/// no return value, so a reduction (red), not an atomic.
__device__ __forceinline__ void red_max_float_bits(float* ptr, float value) {
  asm volatile("red.relaxed.gpu.global.max.u32 [%0], %1;" ::"l"(ptr), "r"(__float_as_uint(value)) : "memory");
}

/// Morally strong accesses to the V accumulator, which several CTAs of the last pass read while one of them
/// may replace a 0 by 1 (PTX ISA §8: relaxed accesses of the same size do not race).
__device__ __forceinline__ float load_relaxed(const float* ptr) {
  float v;
  asm volatile("ld.relaxed.gpu.global.f32 %0, [%1];" : "=f"(v) : "l"(ptr) : "memory");
  return v;
}
__device__ __forceinline__ void store_relaxed(float* ptr, float v) {
  asm volatile("st.relaxed.gpu.global.f32 [%0], %1;" ::"l"(ptr), "f"(v) : "memory");
}

}  // namespace fa3jit::quantize_fp8

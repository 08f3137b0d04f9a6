// fa3jit host-side 16-bit and 8-bit float conversions (bit patterns in uint16_t / uint8_t storage).
//
// Used by the CPU reference, the CLI and the tests to build inputs and read kernel outputs; never by
// kernels. Every float -> narrow conversion rounds to nearest, ties to even (IEEE 754 roundTiesToEven,
// the rounding of PTX cvt.rn), keeps NaN a (quiet) NaN, keeps infinities, and handles subnormals.
// Formats: bf16 = 1 sign, 8 exponent, 7 mantissa bits (the top half of an fp32);
//          fp16 = IEEE binary16, 1/5/10, bias 15, max 65504;
//          e4m3 = OCP FP8 E4M3 ("e4m3fn"): 1/4/3, bias 7, max 448, no infinity, NaN = S.1111.111.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "core/dtype.h"

namespace fa3jit {

// ---- bf16 -------------------------------------------------------------------------------------------

inline float bf16_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

inline uint16_t float_to_bf16(float value) {
  uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) {
    // NaN: truncate the payload and force the quiet bit so truncation can never produce an infinity.
    return static_cast<uint16_t>((x >> 16) | 0x0040u);
  }
  // RNE on the low 16 bits: add 0x7FFF plus the lowest kept bit; a carry into the exponent is the
  // correct result (including max finite -> inf). Subnormals need nothing special: same exponent range.
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// ---- fp16 -------------------------------------------------------------------------------------------

inline float fp16_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1Fu) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));  // inf/NaN
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in fp32.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t float_to_fp16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00u | static_cast<uint16_t>((abs >> 13) & 0x1FFu);  // quiet NaN
  // 65520 = 65504 + half an ulp: the tie rounds to the odd->even neighbour, which is infinity.
  if (abs >= 0x477FF000u) return sign | 0x7C00u;
  const uint32_t exponent = abs >> 23;  // biased fp32 exponent
  if (exponent < 113u) {
    // Result is an fp16 subnormal (or zero, or rounds up to the smallest normal 0x0400).
    // Value = m * 2^(exponent - 150) with the implicit bit; in units of 2^-24 that is m >> (126 - exponent).
    if (exponent < 102u) return sign;  // below 2^-25: rounds to zero (2^-25 itself is a tie to even 0)
    const uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - exponent;  // 14 .. 24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return sign | static_cast<uint16_t>(q);
  }
  // Normal: rebias (127 -> 15) and round the 13 dropped bits to nearest even; a carry is correct.
  const uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u) - (112u << 23);
  return sign | static_cast<uint16_t>(rounded >> 13);
}

// ---- e4m3 (OCP FP8 E4M3, saturating like PTX cvt.rn.satfinite.e4m3x2.f32) -------------------------

inline float e4m3_to_float(uint8_t bits) {
  const bool negative = bits & 0x80u;
  const uint32_t exponent = (bits >> 3) & 0xFu;
  const uint32_t mantissa = bits & 0x7u;
  float magnitude;
  if (exponent == 0xFu && mantissa == 0x7u) {
    magnitude = NAN;
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m * 2^-6 / 8
  } else {
    magnitude = std::ldexp(static_cast<float>(8u + mantissa), static_cast<int>(exponent) - 10);
  }
  return negative ? -magnitude : magnitude;
}

/// Finite values beyond 448 (and infinities) saturate to +-448, as the kernels' satfinite conversion does.
inline uint8_t float_to_e4m3(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7Fu;
  if (abs >= 0x43E00000u) return sign | 0x7Eu;  // >= 448 (incl. inf): saturate
  const uint32_t exponent = abs >> 23;
  // Smallest e4m3 normal is 2^-6 (fp32 biased exponent 121); below it the step is 2^-9.
  uint32_t m = (abs & 0x7FFFFFu) | (exponent ? 0x800000u : 0u);
  uint32_t shift;   // bits of m dropped to get units of the result's ulp
  uint32_t base;    // encoding of the binade start, added to the quotient
  if (exponent < 121u) {
    if (exponent < 117u) return sign;  // below 2^-10, half the smallest subnormal step: rounds to zero
    shift = 141u - exponent;            // subnormal result in units of 2^-9: m * 2^(e-150) / 2^-9
    base = 0;
  } else {
    shift = 20u;                        // keep the top 3 of 23 mantissa bits
    base = (exponent - 120u) << 3;      // biased e4m3 exponent in bits 3..6
    m &= 0x7FFFFFu;
  }
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  // A carry out of the mantissa bumps the exponent, which is the correct encoding. Inputs below 448
  // round to at most 448 (0x7E), so the NaN pattern 0x7F is never produced here.
  return sign | static_cast<uint8_t>(base + q);
}

// ---- by dtype -----------------------------------------------------------------------------------------

/// Bits of `value` in `dtype` (e4m3 in the low byte). Throws Error(kInternal) for an unknown dtype.
inline uint16_t float_to_bits(DType dtype, float value) {
  switch (dtype) {
    case DType::kBf16: return float_to_bf16(value);
    case DType::kFp16: return float_to_fp16(value);
    case DType::kE4m3: return float_to_e4m3(value);
  }
  throw Error(ErrorCode::kInternal, "float_to_bits: unknown dtype");
}

inline float bits_to_float(DType dtype, uint16_t bits) {
  switch (dtype) {
    case DType::kBf16: return bf16_to_float(bits);
    case DType::kFp16: return fp16_to_float(bits);
    case DType::kE4m3: return e4m3_to_float(static_cast<uint8_t>(bits));
  }
  throw Error(ErrorCode::kInternal, "bits_to_float: unknown dtype");
}

/// `value` rounded to the nearest `dtype` value (RNE), returned as float.
inline float round_to(DType dtype, float value) { return bits_to_float(dtype, float_to_bits(dtype, value)); }

}  // namespace fa3jit

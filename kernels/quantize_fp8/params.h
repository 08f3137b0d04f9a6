// The launch contract of the FP8 quantisation pre-pass (Hadamard incoherent processing + block quantisation),
// read by both compilers: the host (launch, tests, the CPU reference) and the generated unit.
// Includes nothing beyond hopper/abi.h: NVRTC has no headers, and the host must not see device code.
#pragma once

#include "hopper/abi.h"

namespace fa3jit::quantize_fp8 {

/// Entry `index` of the random +-1 diagonal D of `seed` (FA3 paper §3.3: Q and K are both multiplied by
/// H.D / sqrt(head_dim) with the same D, so Q.K^T is unchanged). splitmix64 of (seed, index); its lowest bit
/// picks the sign. The one definition: the kernel and every host reference call it.
FA3JIT_HOST_DEVICE constexpr float hadamard_sign(unsigned long long seed, int index) {
  unsigned long long z = seed + 0x9E3779B97F4A7C15ull * static_cast<unsigned long long>(index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (z & 1ull) ? -1.0f : 1.0f;
}

}  // namespace fa3jit::quantize_fp8

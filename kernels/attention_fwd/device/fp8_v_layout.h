// The d_major V layout of the e4m3 attention kernel (spec field v_layout, ../launch.h: ForwardArgs::v), read by both
// compilers: the attention kernel's parameters (params.h), the FP8 pre-pass that writes it (kernels/quantize_fp8)
// and the host helpers and tests. Includes nothing beyond hopper/abi.h: NVRTC has no headers.
#pragma once

#include "hopper/abi.h"

namespace fa3jit::attention_fwd {

/// e4m3: the position of key j (0..15) of an aligned group of 16 in the K-major V operand of P.V. P's FP8 A fragment
/// is packed from the S accumulator without moving data between lanes (device/mainloop.cuh: convert_p), which puts
/// the probability of keys 2q, 2q+1, 2q+8, 2q+9 (q = lane % 4) at k positions 4q..4q+3; V's keys must sit at the same
/// positions. The one statement of the order: the producer's V transpose (device/transpose_v.cuh) writes it, a
/// d_major V is stored in it, and the pre-pass and the host helpers write it from here.
FA3JIT_HOST_DEVICE constexpr int fp8_key_position(int j) { return 4 * ((j & 7) >> 1) + (j & 1) + 2 * ((j >> 3) & 1); }

/// Keys of a d_major V row: seqlen_k rounded up to a whole group of 16.
FA3JIT_HOST_DEVICE constexpr long long d_major_keys(long long seqlen_k) { return (seqlen_k + 15) / 16 * 16; }

}  // namespace fa3jit::attention_fwd

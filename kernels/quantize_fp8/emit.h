// FP8 pre-pass: Spec -> one self-contained CUDA translation unit, and the family's entry in the kernel-family
// registry (jit/family.h).
#pragma once

#include <vector>

#include "jit/family.h"
#include "kernels/quantize_fp8/spec.h"

namespace fa3jit::quantize_fp8 {

/// The kernel's entry-point name, derived from the canonical spec (jit/family.h: kernel_name), e.g.
/// "fa3jit_quantize_fp8_bf16_d128_dv128_h_q128_k128_1a2b3c4d".
std::string kernel_name(const Spec& spec);

/// Emits the unit: hopper/types.cuh, params.h with layout asserts of Params as this host lays it out, the
/// generated QuantizeConfig (geometry.h), device/quantize.cuh (and what it includes) and the extern "C" entry
/// taking `const __grid_constant__ Params`. Validates the spec first (Error(kInvalidSpec)).
KernelSource emit_kernel(const Spec& spec);

/// The generic request for a spec (what the runtime compiles, caches and loads): no dynamic shared memory,
/// the geometry's block and cluster size. Validates the spec.
KernelRequest make_request(const Spec& spec);

/// Host layout of Params, field by field (for the emitted static_asserts and their tests).
std::vector<FieldLayout> params_layout();

}  // namespace fa3jit::quantize_fp8

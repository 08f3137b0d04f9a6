// FP8 pre-pass: Spec -> one self-contained CUDA translation unit, and the family's entry in the kernel-family
// registry (jit/family.h).
#pragma once

#include <vector>

#include "jit/family.h"
#include "kernels/quantize_fp8/params.h"
#include "kernels/quantize_fp8/spec.h"

namespace fa3jit::quantize_fp8 {

/// The unit's name, derived from the canonical spec (jit/family.h: kernel_name), e.g.
/// "fa3jit_quantize_fp8_bf16_d128_dv128_h_q128_k128_1a2b3c4d".
std::string kernel_name(const Spec& spec);

/// The entry point of `pass`: the unit's name and the pass's suffix ("_qk", "_v_amax", "_v_quant"). The unit's
/// KernelSource::entries list them in Pass order, so Pass is the entry index (LoadedKernel::function_for).
std::string entry_name(const Spec& spec, Pass pass);

/// Emits the unit: hopper/types.cuh, params.h with layout asserts of Params as this host lays it out, the
/// generated QuantizeConfig (geometry.h), device/quantize.cuh (and what it includes) and one extern "C" entry
/// per Pass taking `const __grid_constant__ Params`: separate functions, so each holds only its pass's code,
/// registers and shared memory, and ptxas compiles them in parallel. Validates the spec first
/// (Error(kInvalidSpec)).
KernelSource emit_kernel(const Spec& spec);

/// The generic request for a spec (what the runtime compiles, caches and loads): no dynamic shared memory,
/// the geometry's block and cluster size. Validates the spec.
KernelRequest make_request(const Spec& spec);

/// Host layout of Params, field by field (for the emitted static_asserts and their tests).
std::vector<FieldLayout> params_layout();

}  // namespace fa3jit::quantize_fp8

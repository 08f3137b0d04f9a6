// Attention forward: KernelConfig -> one self-contained CUDA translation unit, and the family's entry in the
// kernel-family registry (jit/family.h).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "jit/family.h"
#include "kernels/attention_fwd/tile_table.h"

namespace fa3jit::attention_fwd {

/// The kernel's entry-point name, derived from the canonical spec (jit/family.h: kernel_name).
std::string kernel_name(const Spec& spec);

/// Emits the unit: the hopper primitives, params.h with layout asserts of Params as this host lays it out,
/// the generated KernelConfig constants and wgmma wrappers for the exact shapes, the templates of device/,
/// and the extern "C" entry taking `const __grid_constant__ Params`.
KernelSource emit_kernel(const KernelConfig& config);

/// The generic request for a spec (what the runtime compiles, caches and loads).
KernelRequest make_request(const KernelConfig& config);

/// Host layout of Params, field by field (for the emitted static_asserts and their tests).
std::vector<FieldLayout> params_layout();

}  // namespace fa3jit::attention_fwd

// fa3jit generator: KernelConfig -> one self-contained CUDA translation unit.
#pragma once

#include <string>

#include "generator/tile_table.h"

namespace fa3jit {

/// Bumped whenever generated code changes meaning; part of every cache key.
inline constexpr const char* kGeneratorVersion = "fa3jit-gen-1";

/// The generated kernel: `code` compiles with NVRTC (or `nvcc -arch=sm_90a -cubin`) with no include
/// path at all; `kernel_name` is its extern "C" entry point, unique per canonical spec.
struct KernelSource {
  std::string kernel_name;
  std::string code;
};

/// Name of the kernel for a spec: "fa3jit_fwd_<dtype>_d<hd>_<c|nc>_m<bm>n<bn>_w<wg>s<st>_<hash8>".
std::string kernel_name(const Spec& spec);

/// Emits the translation unit: generated KernelConfig constants + wgmma wrappers for the exact shapes,
/// then the templates (templates/*.cuh, embedded at build time) in dependency order.
KernelSource emit_kernel(const KernelConfig& config);

}  // namespace fa3jit

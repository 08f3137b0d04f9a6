// Building blocks every family's emitter uses to write one self-contained CUDA translation unit: template
// inlining, the parameter-struct layout checks, the unit's header and generic wgmma wrappers.
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <vector>

namespace fa3jit {

/// Bumped whenever generated code changes meaning; part of every cache key.
inline constexpr const char* kGeneratorVersion = "fa3jit-gen-3";  // 3: two copies and L2 hints in the table

/// A generated kernel: `code` compiles with NVRTC (or `nvcc -arch=sm_90a -cubin`) with no include path at
/// all. `kernel_name` names the unit (jit/family.h: kernel_name) and, when `entries` is empty, is its one
/// extern "C" entry point. A family whose launches run different code (the FP8 pre-pass's three passes) emits
/// one entry per launch instead, listed in `entries` in the order its launch code indexes them
/// (LoadedKernel::function_for); ptxas then compiles them as separate functions, in parallel.
struct KernelSource {
  std::string kernel_name;
  std::string code;
  std::vector<std::string> entries;
};

/// The entry points of `source`: `entries`, or `kernel_name` alone when it is empty.
std::vector<std::string> entry_names(const KernelSource& source);

/// Appends `path` (relative to the repository root, e.g. "hopper/tma.cuh") and, recursively, every
/// `#include "..."` it names, each file once (`done` remembers them). Templates must not include anything
/// else: NVRTC 13 ships no headers. Throws Error(kInternal) for an unknown path or an angle include.
void inline_template(const std::string& path, std::set<std::string>& done, std::string& out);

/// One field of a parameter struct as the host compiler lays it out. A family builds the list from its
/// params.h field list, in the namespace where its struct is named Params:
///   std::vector<FieldLayout> fields = {FA3JIT_MY_PARAMS(FA3JIT_FIELD_LAYOUT)};
struct FieldLayout {
  const char* name;
  size_t offset;
};

/// `static_assert`s that the device compiler lays out `type` (a qualified name) as the host did: its size,
/// alignment and every field's offset. A unit whose struct drifted from the host's then fails to compile.
/// NVRTC 13.0 has no offsetof / __builtin_offsetof; __INTADDR__ makes the classic null-pointer form a
/// constant expression there (and under nvcc).
#define FA3JIT_FIELD_LAYOUT(type, name) ::fa3jit::FieldLayout{#name, offsetof(Params, name)},

std::string layout_asserts(const std::string& type, size_t size, size_t align, const std::vector<FieldLayout>& fields);

/// The unit's first lines: generator version, family and canonical spec.
std::string unit_header(const std::string& canonical_spec);

/// Operand forms of one wgmma.mma_async (PTX ISA 9.7.15): D (fp32, m64nNk16/k32) += A * B, with A from shared
/// memory (descriptor) or registers, B from shared memory (descriptor), B K-major or MN-major (trans-b).
struct WgmmaShape {
  const char* function;   // name of the generated __device__ function
  int n;                  // N of m64nNkK
  int k;                  // 16 for 16-bit inputs, 32 for e4m3
  const char* ab_type;    // "bf16", "f16", "e4m3"
  bool a_from_registers;  // A as 4 x .b32 registers (RS) instead of a descriptor (SS)
  bool b_transposed;      // trans-b = 1: B MN-major (16-bit types only)
};
std::string emit_wgmma(const WgmmaShape& shape);

}  // namespace fa3jit

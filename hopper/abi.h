// The kernel ABI shared by host code (g++) and generated device code (NVRTC): the tensor-map struct and the
// macros each family's params.h uses to declare its one parameter struct. Includes nothing, so both
// compilers read it as it is (NVRTC 13 ships no headers).
//
// A family declares its parameters once, as a field list:
//   #define FA3JIT_MY_PARAMS(FIELD) FIELD(TmaDesc, tm_x) FIELD(int, n) ...
//   struct Params { FA3JIT_MY_PARAMS(FA3JIT_PARAMS_DECLARE) };
// The host compiles that struct and the kernel receives it as its only argument,
// `const __grid_constant__ Params p` (PTX ISA "Kernel parameters"; 4 KB of parameters). The generator reads
// the same list to write one static_assert per field offset and one for the size into the emitted unit
// (jit/emit_util.h: layout_asserts), so NVRTC refuses a unit whose layout differs from the host's.
#pragma once

namespace fa3jit {

/// Opaque CUtensorMap (128 bytes, 64-byte aligned); built on the host by cuTensorMapEncodeTiled.
struct alignas(64) TmaDesc {
  unsigned long long opaque[16];
};

}  // namespace fa3jit

#define FA3JIT_PARAMS_DECLARE(type, name) type name;

// Functions both sides evaluate (e.g. a family's shared-memory plan): device functions for the CUDA
// compilers, plain functions for g++.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FA3JIT_HOST_DEVICE __host__ __device__
#else
#define FA3JIT_HOST_DEVICE
#endif

// Basic types for NVRTC-compiled kernels. NVRTC 13 ships no headers (docs/kernel-design.md §5), so the
// integer typedefs and the 128-byte tensor-map struct are our own.
#pragma once

namespace fa3jit {

// Inside our namespace, so the unit also compiles under nvcc, whose host headers define ::int64_t etc.
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef int int32_t;
typedef long long int64_t;

/// Opaque CUtensorMap (128 bytes, 64-byte aligned), passed as a __grid_constant__ kernel parameter.
struct alignas(64) TmaDesc {
  uint64_t opaque[16];
};

/// Kernel arguments besides the tensor maps; mirrored byte for byte by runtime/attention.cpp.
struct FwdParams {
  int seqlen_q;
  int seqlen_k;
  int num_heads;
  int head_group;        // num_heads / num_heads_kv (GQA); kv head = head / head_group
  int batch;
  int num_m_blocks;      // ceil(seqlen_q / block_m)
  int section_heads;     // causal tile order: (head, batch) pairs per L2 section (scheduler.cuh)
  int reserved;
  float softmax_scale;   // natural-log scale applied to Q.K^T
  float scale_log2;      // softmax_scale * log2(e), folded into one FFMA before ex2
  float* lse;            // (batch, num_heads, seqlen_q) fp32, natural log; may be null
};

/// 32-bit shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

}  // namespace fa3jit

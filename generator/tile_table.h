// fa3jit tile table: the single source of truth for kernel tile sizes and resource budgets.
//
// Both the generator (which bakes the numbers into the kernel) and the runtime (which picks a spec for a
// call) use these functions, as FA3's tile_size_fwd_sm90() is shared by its host heuristics and kernels
// (docs: FA3 hopper/tile_size.h; FA3 paper section 3).
#pragma once

#include "generator/spec.h"

namespace fa3jit {

/// Hopper limits used by validation (H100/H200, sm_90a).
inline constexpr int kMaxSharedMemoryPerBlock = 232448;  // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
inline constexpr int kRegistersPerSm = 65536;

/// Defaults for the kernel fields that a spec may leave out.
struct TileDefaults {
  int block_m;
  int block_n;
  int consumer_warpgroups;
  int stages;
  bool pingpong;
  bool intra_wg_overlap;
  int cluster_m = 1;
};

/// Default tile for (dtype, head_dim, causal). head_dim must be one of 64, 128, 256.
TileDefaults default_tile(DType dtype, int head_dim, bool causal);

/// Numbers derived from a validated Spec that the kernel and the launcher both need.
struct KernelConfig {
  Spec spec;
  int num_threads;             // 128 * (consumer_warpgroups + 1): one producer warpgroup
  int producer_registers;      // setmaxnreg.dec target of the producer warpgroup
  int consumer_registers;      // setmaxnreg.inc target of each consumer warpgroup
  int smem_q_bytes;            // block_m * head_dim * elem (also the O staging area, aliased)
  int smem_k_stage_bytes;      // block_n * head_dim * elem
  int smem_v_stage_bytes;      // block_n * head_dim_v * elem
  int smem_bytes;              // total dynamic shared memory requested at launch (incl. alignment slack)
  int estimated_consumer_registers;  // accumulators + P + overhead, checked against consumer_registers
};

/// Derives the KernelConfig; throws Error(kInvalidSpec) when the spec cannot fit (shared memory over
/// kMaxSharedMemoryPerBlock, register estimate over the setmaxnreg budget), naming the fields involved.
KernelConfig make_kernel_config(const Spec& spec);

}  // namespace fa3jit

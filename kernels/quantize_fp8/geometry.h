// FP8 pre-pass: how a spec maps onto warps, CTAs and clusters. The one source of the numbers the validator
// relies on, the emitter bakes into the kernel (struct QuantizeConfig) and the launcher uses (block size,
// cluster size, grids), as attention_fwd's tile table is for the forward kernel.
//
// Q and K (device/quantize.cuh, device/layout.cuh): a head vector (one row) of head_dim elements is held by
// row_lanes = head_dim / 32 adjacent lanes, 32 fp32 values each, so a warp holds rows_per_warp = 32 / row_lanes
// rows and a block of R rows needs warps_per_block = R * head_dim / 1024 warps, each value in a register from
// load to store (the data is read once and written once). The warps of a cluster (cluster_size CTAs of
// warps_per_cta warps) are numbered across its CTAs and cut into blocks_per_cluster blocks of
// warps_per_block consecutive warps, so a block larger than a CTA spans CTAs of one cluster; the block amax is
// exchanged through distributed shared memory (PTX ISA §9.7.9.20 mapa, §9.7.13.4 barrier.cluster). Q and K
// may have different block sizes but share one kernel, so (warps_per_cta, cluster_size) is chosen to waste
// the fewest warps over both.
//
// V (no rotation): head_dim_v / 8 lanes per row, 8 channels (one 16-byte load) per lane; a CTA covers
// v_rows_per_cta tokens of one (batch, kv head) in kVSteps steps of num_threads * 8 / head_dim_v rows (with v_layout
// d_major a multiple of 32: the warp count is then a multiple of head_dim_v / 64).
#pragma once

#include "kernels/quantize_fp8/params.h"
#include "kernels/quantize_fp8/spec.h"

namespace fa3jit::quantize_fp8 {

inline constexpr int kMinWarps = 4;    // per CTA
inline constexpr int kMaxWarps = 16;   // per CTA: 512 threads, two CTAs per SM at 64 registers
inline constexpr int kMaxCluster = 8;  // CTAs per cluster: the portable limit (a 256 x 256 block needs 4 to 8)
/// Fp32 values of one row a lane holds (4 chunks of 8 elements, device/layout.cuh).
inline constexpr int kValuesPerLane = 32;
/// Loads of 16 bytes per thread a V pass issues before using the first (tokens per thread per CTA).
inline constexpr int kVSteps = 8;

/// Registers per thread the kernel is compiled for (through __launch_bounds__' minimum CTAs per SM): 32 for
/// the row's values, the rest for loads in flight and indices. RoPE adds up to 16 cos/sin values in flight
/// (the CUDA 13 register allocator takes about 80 then, 71 without), so RoPE kernels get 80 and CTAs of at
/// most 12 warps, which keeps two CTAs per SM: one loads while the other quantises and stores.
inline constexpr int kRegisterBudget = 64;
inline constexpr int kRopeRegisterBudget = 80;
inline constexpr int kRegistersPerSm = 65536;
inline constexpr int kMinCtasPerSm = 2;

/// The blocks of one of Q, K.
struct BlockGeometry {
  int block_rows;          // tokens per descale block (the spec's q_block_rows / k_block_rows)
  int warps_per_block;     // block_rows * head_dim / 1024
  int blocks_per_cluster;  // (cluster_size * warps_per_cta) / warps_per_block, >= 1
};

/// Numbers derived from a spec.
struct Geometry {
  int row_lanes;        // head_dim / 32: lanes holding one Q/K row
  int rows_per_warp;    // 32 / row_lanes
  int warps_per_cta;    // kMinWarps..kMaxWarps (at most 12 with RoPE)
  int cluster_size;     // 1..kMaxCluster CTAs per cluster (grid x)
  int num_threads;      // 32 * warps_per_cta
  int register_budget;  // kRegisterBudget, or kRopeRegisterBudget with RoPE
  int min_ctas_per_sm;  // __launch_bounds__ minimum: caps registers at register_budget per thread
  BlockGeometry q, k;
  int v_row_lanes;      // head_dim_v / 8
  int v_rows_per_cta;   // kVSteps * num_threads * 8 / head_dim_v
  // Static shared memory of each pass's entry point, indexed by Pass (device/quantize.cuh: quantize_fp8_pass).
  int smem_bytes[kNumPasses];
};

/// R * head_dim / 1024 (R a multiple of 16, head_dim >= 64: an integer).
int warps_per_block(int block_rows, int head_dim);

/// The geometry of a spec validate() accepts (pure arithmetic; never throws for such a spec).
Geometry derive_geometry(const Spec& spec);

}  // namespace fa3jit::quantize_fp8

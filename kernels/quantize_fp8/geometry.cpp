// FP8 pre-pass geometry (geometry.h).
#include "kernels/quantize_fp8/geometry.h"

#include <algorithm>

namespace fa3jit::quantize_fp8 {

namespace {

// Idle warps of a cluster of `slots` warps packed with blocks of w warps.
int idle_warps(int slots, int w) { return slots - (slots / w) * w; }

}  // namespace

int warps_per_block(int block_rows, int head_dim) { return block_rows * head_dim / 1024; }

Geometry derive_geometry(const Spec& spec) {
  Geometry g{};
  g.row_lanes = spec.head_dim / kValuesPerLane;
  g.rows_per_warp = 32 / g.row_lanes;
  const int wq = std::max(1, warps_per_block(spec.q_block_rows, spec.head_dim));
  const int wk = std::max(1, warps_per_block(spec.k_block_rows, spec.head_dim));

  // The (cluster, warps) pair of the smallest cost: the fraction of idle warps in Q and K clusters plus
  // 1/32 per CTA beyond the first in a cluster (a cluster's CTAs must be co-scheduled on one GPC, so a larger
  // cluster must save more than 3 % idle warps per CTA). Ties go to the smaller cluster, then to more warps
  // per CTA (more blocks per CTA, fewer CTAs). Costs are compared as cross products of integers:
  // cost = (32 * idle + (c - 1) * slots) / (32 * slots).
  g.register_budget = spec.rope == Rope::kNone ? kRegisterBudget : kRopeRegisterBudget;
  const int max_warps = std::min(kMaxWarps, kRegistersPerSm / (kMinCtasPerSm * 32 * g.register_budget));
  int best_c = 0, best_w = 0;
  long long best_num = 0, best_den = 1;
  for (int c = 1; c <= kMaxCluster; ++c) {
    for (int w = kMinWarps; w <= max_warps; ++w) {
      // v_layout d_major writes each V chunk as 32-key rows per channel (device/quantize.cuh: write_v_d_major): its
      // v_rows_per_cta = 2048 w / head_dim_v keys must be a multiple of 32, i.e. w a multiple of head_dim_v / 64.
      if (spec.v_d_major && w % std::max(1, spec.head_dim_v / 64) != 0) continue;
      const int slots = c * w;
      if (slots < std::max(wq, wk)) continue;
      const long long num = 32LL * (idle_warps(slots, wq) + idle_warps(slots, wk)) + static_cast<long long>(c - 1) * slots;
      const long long den = 32LL * slots;
      const long long lhs = num * best_den, rhs = best_num * den;
      if (best_c == 0 || lhs < rhs || (lhs == rhs && c == best_c && w > best_w)) {
        best_c = c, best_w = w, best_num = num, best_den = den;
      }
    }
  }
  if (best_c == 0) best_c = kMaxCluster, best_w = max_warps;  // only for out-of-range inputs
  g.cluster_size = best_c;
  g.warps_per_cta = best_w;
  g.num_threads = 32 * best_w;
  g.min_ctas_per_sm = std::max(1, kRegistersPerSm / (g.num_threads * g.register_budget));
  const int slots = g.cluster_size * g.warps_per_cta;
  g.q = {spec.q_block_rows, wq, std::max(1, slots / wq)};
  g.k = {spec.k_block_rows, wk, std::max(1, slots / wk)};
  g.v_row_lanes = spec.head_dim_v / 8;
  g.v_rows_per_cta = kVSteps * g.num_threads * 8 / spec.head_dim_v;
  // device/quantize.cuh, each pass its own: kPassQk float s_amax[slots], uint32 s_signs[8] (Hadamard only) and,
  // with clusters, the 8-byte mbarrier of the amax exchange, which ptxas places after the 4-byte arrays at the
  // next multiple of 8; kPassVAmax the channel amax table float[warps][head_dim_v]; kPassVQuant, with v_layout
  // d_major, the chunk of quantised V (v_rows_per_cta keys x head_dim_v bytes) it writes out transposed.
  int qk = 4 * slots + (spec.hadamard ? 4 * 8 : 0);
  if (g.cluster_size > 1) qk = (qk + 7) / 8 * 8 + 8;
  g.smem_bytes[kPassQk] = qk;
  g.smem_bytes[kPassVAmax] = 4 * g.warps_per_cta * spec.head_dim_v;
  g.smem_bytes[kPassVQuant] = spec.v_d_major ? g.v_rows_per_cta * spec.head_dim_v : 0;
  return g;
}

}  // namespace fa3jit::quantize_fp8

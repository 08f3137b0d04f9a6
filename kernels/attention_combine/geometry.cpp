// Split-KV combine geometry (geometry.h).
#include "kernels/attention_combine/geometry.h"

#include <algorithm>

namespace fa3jit::attention_combine {

namespace {

int round_up(int value, int multiple) { return (value + multiple - 1) / multiple * multiple; }

// Floats between two rows of the LSE table (R rows). The phase that fills it has thread i write (row i % R,
// split i / R) and the accumulation phase has the rows of one warp read the same split: both touch 32
// distinct banks when the stride is 32/R modulo 32 (R < 32), or 1 modulo 32 (R >= 32).
int lse_stride(int rows_per_cta, int max_splits) {
  return round_up(max_splits, 32) + (rows_per_cta >= 32 ? 1 : 32 / rows_per_cta);
}

int table_bytes(int rows_per_cta, int max_splits) {
  return rows_per_cta * lse_stride(rows_per_cta, max_splits) * 4;
}

}  // namespace

int lanes_per_row(int head_dim_v) {
  const int vecs = head_dim_v / 4;
  int lanes = 1;
  while (lanes < vecs && lanes < 32) lanes *= 2;
  return lanes;
}

Geometry derive_geometry(const Spec& spec) {
  Geometry g{};
  g.vecs_per_row = spec.head_dim_v / 4;
  g.lanes_per_row = lanes_per_row(spec.head_dim_v);
  g.vecs_per_lane = (g.vecs_per_row + g.lanes_per_row - 1) / g.lanes_per_row;
  // About eight 16-byte loads in flight per lane (128 bytes): enough for the HBM latency with a few CTAs per
  // SM, few enough registers (32 for the loads) for full occupancy of small CTAs.
  g.split_unroll = std::max(1, 8 / g.vecs_per_lane);
  g.num_threads = spec.rows_per_cta * g.lanes_per_row;
  g.min_ctas_per_sm = std::max(1, kRegistersPerSm / (g.num_threads * kRegisterBudget));
  g.lse_stride = lse_stride(spec.rows_per_cta, spec.max_splits);
  g.smem_bytes = table_bytes(spec.rows_per_cta, spec.max_splits);
  return g;
}

bool rows_per_cta_fits(int head_dim_v, int max_splits, int rows_per_cta) {
  const int lanes = lanes_per_row(head_dim_v);
  const bool power_of_two = rows_per_cta > 0 && (rows_per_cta & (rows_per_cta - 1)) == 0;
  return power_of_two && rows_per_cta <= kMaxThreads / lanes && rows_per_cta * lanes >= kMinThreads &&
         table_bytes(rows_per_cta, max_splits) <= kMaxStaticSmemBytes;
}

std::vector<int> allowed_rows_per_cta(int head_dim_v, int max_splits) {
  std::vector<int> rows;
  for (int r = 1; r <= kMaxThreads; r *= 2)
    if (rows_per_cta_fits(head_dim_v, max_splits, r)) rows.push_back(r);
  return rows;
}

int default_rows_per_cta(int head_dim_v, int max_splits) {
  // No allocation: a launch with no explicit spec calls this.
  const int lanes = lanes_per_row(head_dim_v);
  int smallest = 0, best = 0;
  for (int r = 1; r <= kMaxThreads; r *= 2) {
    if (!rows_per_cta_fits(head_dim_v, max_splits, r)) continue;
    if (smallest == 0) smallest = r;
    if (r * lanes <= kDefaultThreads && table_bytes(r, max_splits) <= kDefaultSmemBudgetBytes) best = r;
  }
  if (best != 0) return best;
  return smallest != 0 ? smallest : 1;  // 1 only for out-of-range inputs: validate() names the field at fault
}

}  // namespace fa3jit::attention_combine

// Host half of the tile scheduler (scheduler.h).
#include "kernels/attention_fwd/scheduler.h"

#include <algorithm>
#include <cmath>
#include <array>
#include <cstdint>

namespace fa3jit::attention_fwd {

namespace {
constexpr int64_t kL2SectionBytes = int64_t{32} << 20;  // FA3's L2 section for the causal tile order
}

TileSchedule schedule_tiles(const KernelConfig& config, const GridShape& g) {
  const Spec& spec = config.spec;
  TileSchedule s{};
  // The launcher calls this with extents below 2^31 (launch.cpp: check_shape), where nothing here comes near
  // 2^63; for any other int64 input the products saturate instead of overflowing (undefined behaviour), and a
  // saturated num_tiles is refused by the launcher.
  const int64_t group = std::max<int64_t>(1, g.num_heads / std::max<int64_t>(1, g.num_heads_kv));
  s.pack_rows = g.pack_gqa ? spec.block_m / group : spec.block_m;
  const int64_t rows = std::max<int64_t>(1, s.pack_rows);
  const int64_t m_blocks = g.max_seqlen_q / rows + (g.max_seqlen_q % rows > 0 ? 1 : 0);
  s.num_m_blocks = (m_blocks + spec.cluster_m - 1) / spec.cluster_m * spec.cluster_m;
  const int64_t heads = g.pack_gqa ? g.num_heads_kv : g.num_heads;
  int64_t pairs = 0, per_split = 0;
  if (__builtin_mul_overflow(heads, g.batch, &pairs)) pairs = INT64_MAX;
  if (__builtin_mul_overflow(s.num_m_blocks, pairs, &per_split)) per_split = INT64_MAX;
  if (__builtin_mul_overflow(per_split, std::max<int64_t>(1, g.num_splits), &s.num_tiles)) s.num_tiles = INT64_MAX;
  // Query heads of one KV head share its K and V: count the bytes per query head (at most 2^42 for accepted
  // calls: seqlen_k < 2^31, head dims <= 256, 2-byte elements).
  int64_t kv_row_bytes = 0, kv_bytes = 0;
  if (__builtin_mul_overflow(int64_t{spec.head_dim} + spec.head_dim_v, int64_t{config.elem_bytes}, &kv_row_bytes) ||
      __builtin_mul_overflow(std::max<int64_t>(0, g.seqlen_k), kv_row_bytes, &kv_bytes))
    kv_bytes = INT64_MAX;
  const int64_t kv_bytes_per_head = std::max<int64_t>(1, kv_bytes / (g.pack_gqa ? 1 : group));
  s.section_heads = std::clamp<int64_t>(kL2SectionBytes / kv_bytes_per_head, 1, std::max<int64_t>(1, pairs));
  return s;
}

int num_splits_heuristic(int64_t tiles, int64_t n_blocks, int num_sms, int max_splits, double fill) {
  if (tiles <= 0 || n_blocks <= 1 || static_cast<double>(tiles) >= fill * num_sms) return 1;
  // A fixed array, not a vector: the launch path calls this on every call and allocates nothing.
  std::array<double, 257> efficiency{};
  const int64_t limit = std::min<int64_t>({max_splits, num_sms, n_blocks, int64_t{efficiency.size()} - 1});
  double best = 0.0;
  // A split count is useful only if it changes the blocks per split (ceil(n_blocks / s)); otherwise a smaller one
  // gives the same work per CTA.
  auto useful = [&](int64_t s) { return s == 1 || (n_blocks + s - 1) / s != (n_blocks + s - 2) / (s - 1); };
  for (int64_t s = 1; s <= limit; ++s) {
    if (!useful(s)) continue;
    const double waves = static_cast<double>(tiles * s) / num_sms;
    efficiency[static_cast<size_t>(s)] = waves / std::ceil(waves);
    best = std::max(best, efficiency[static_cast<size_t>(s)]);
  }
  for (int64_t s = 1; s <= limit; ++s)
    if (useful(s) && efficiency[static_cast<size_t>(s)] >= 0.85 * best) return static_cast<int>(s);
  return 1;
}

}  // namespace fa3jit::attention_fwd

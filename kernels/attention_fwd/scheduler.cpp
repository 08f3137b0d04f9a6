// Host half of the tile scheduler (scheduler.h).
#include "kernels/attention_fwd/scheduler.h"

#include <algorithm>

namespace fa3jit::attention_fwd {

namespace {
constexpr int64_t kL2SectionBytes = int64_t{32} << 20;  // FA3's L2 section for the causal tile order
}

TileSchedule schedule_tiles(const KernelConfig& config, int64_t batch, int64_t num_heads, int64_t num_heads_kv,
                            int64_t seqlen_q, int64_t seqlen_k) {
  const Spec& spec = config.spec;
  TileSchedule s{};
  const int64_t m_blocks = (seqlen_q + spec.block_m - 1) / spec.block_m;
  s.num_m_blocks = (m_blocks + spec.cluster_m - 1) / spec.cluster_m * spec.cluster_m;
  const int64_t pairs = num_heads * batch;
  if (__builtin_mul_overflow(s.num_m_blocks, pairs, &s.num_tiles)) s.num_tiles = INT64_MAX;
  // Query heads of one KV head share its K and V: count the bytes per query head. seqlen_k * 1 KB stays far
  // below 2^63; dividing by the group size keeps it there.
  const int64_t group = std::max<int64_t>(1, num_heads / std::max<int64_t>(1, num_heads_kv));
  const int64_t kv_bytes_per_head =
      std::max<int64_t>(1, seqlen_k * (spec.head_dim + spec.head_dim_v) * config.elem_bytes / group);
  s.section_heads = std::clamp<int64_t>(kL2SectionBytes / kv_bytes_per_head, 1, std::max<int64_t>(1, pairs));
  return s;
}

}  // namespace fa3jit::attention_fwd

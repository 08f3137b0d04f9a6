// Host half of the tile scheduler (scheduler.h).
#include "kernels/attention_fwd/scheduler.h"

#include <algorithm>
#include <cstdint>

namespace fa3jit::attention_fwd {

namespace {
constexpr int64_t kL2SectionBytes = int64_t{32} << 20;  // FA3's L2 section for the causal tile order
}

TileSchedule schedule_tiles(const KernelConfig& config, int64_t batch, int64_t num_heads, int64_t num_heads_kv,
                            int64_t seqlen_q, int64_t seqlen_k) {
  const Spec& spec = config.spec;
  TileSchedule s{};
  // The launcher calls this with extents below 2^31 (launch.cpp: check_shape), where nothing here comes near
  // 2^63; for any other int64 input the products saturate instead of overflowing (undefined behaviour), and a
  // saturated num_tiles is refused by the launcher.
  const int64_t m_blocks = seqlen_q / spec.block_m + (seqlen_q % spec.block_m > 0 ? 1 : 0);
  s.num_m_blocks = (m_blocks + spec.cluster_m - 1) / spec.cluster_m * spec.cluster_m;
  int64_t pairs = 0;
  if (__builtin_mul_overflow(num_heads, batch, &pairs)) pairs = INT64_MAX;
  if (__builtin_mul_overflow(s.num_m_blocks, pairs, &s.num_tiles)) s.num_tiles = INT64_MAX;
  // Query heads of one KV head share its K and V: count the bytes per query head (at most 2^42 for accepted
  // calls: seqlen_k < 2^31, head dims <= 256, 2-byte elements).
  const int64_t group = std::max<int64_t>(1, num_heads / std::max<int64_t>(1, num_heads_kv));
  int64_t kv_row_bytes = 0, kv_bytes = 0;
  if (__builtin_mul_overflow(int64_t{spec.head_dim} + spec.head_dim_v, int64_t{config.elem_bytes}, &kv_row_bytes) ||
      __builtin_mul_overflow(std::max<int64_t>(0, seqlen_k), kv_row_bytes, &kv_bytes))
    kv_bytes = INT64_MAX;
  const int64_t kv_bytes_per_head = std::max<int64_t>(1, kv_bytes / group);
  s.section_heads = std::clamp<int64_t>(kL2SectionBytes / kv_bytes_per_head, 1, std::max<int64_t>(1, pairs));
  return s;
}

}  // namespace fa3jit::attention_fwd

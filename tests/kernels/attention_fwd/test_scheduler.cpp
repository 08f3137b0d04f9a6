// The host half of the tile scheduler (kernels/attention_fwd/scheduler.cpp) at the extremes: the largest shapes
// the launcher accepts, and any int64 a direct caller may pass, give a defined, saturated schedule instead of a
// signed overflow (undefined behaviour, which -fsanitize=undefined reports).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>

#include "kernels/attention_fwd/launch.h"
#include "kernels/attention_fwd/scheduler.h"
#include "kernels/attention_fwd/tile_table.h"

using namespace fa3jit;
using namespace fa3jit::attention_fwd;

TEST_CASE("schedule_tiles at the largest accepted shapes", "[scheduler][hostile]") {
  constexpr int64_t kMax32 = 0x7fffffff;
  for (const int head_dim : {64, 128, 256}) {
    for (const bool causal : {false, true}) {
      const KernelConfig config = make_kernel_config(default_spec(DType::kBf16, head_dim, head_dim, causal));
      INFO("head_dim " << head_dim << (causal ? " causal" : ""));
      // Every extent at its limit: batch x heads x m_blocks far beyond 2^63 saturates (the launcher then refuses
      // more than 2^31 tiles); K/V bytes per head (up to 2^31 x 1 KB, no grouping) are still exact.
      const TileSchedule big = schedule_tiles(config, kMax32, kMax32, kMax32, kMaxSeqlen, kMaxSeqlen);
      CHECK(big.num_tiles == INT64_MAX);
      CHECK(big.num_m_blocks == (kMaxSeqlen + config.spec.block_m - 1) / config.spec.block_m);
      CHECK(big.section_heads == 1);
      // MQA with every query head in one group: the group divides the bytes per head.
      const TileSchedule mqa = schedule_tiles(config, 1, kMax32, 1, 1, kMaxSeqlen);
      CHECK(mqa.num_tiles == kMax32);
      CHECK(mqa.section_heads >= 1);
      CHECK(mqa.section_heads <= kMax32);
      // An ordinary call is unchanged: 32 MB of K/V per section.
      const TileSchedule llama = schedule_tiles(config, 2, 32, 8, 4096, 4096);
      CHECK(llama.num_tiles == 2 * 32 * ((4096 + config.spec.block_m - 1) / config.spec.block_m));
      CHECK(llama.section_heads ==
            std::min<int64_t>(64, (int64_t{32} << 20) / (4096 * int64_t{2 * head_dim} * 2 / 4)));
    }
  }
}

TEST_CASE("schedule_tiles saturates for any int64 input", "[scheduler][hostile]") {
  const KernelConfig config = make_kernel_config(default_spec(DType::kFp16, 256, 256, true));
  const TileSchedule s = schedule_tiles(config, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX);
  CHECK(s.num_tiles == INT64_MAX);
  CHECK(s.section_heads == 1);
  CHECK(s.num_m_blocks > 0);
  // One KV head for all query heads: the saturated K/V bytes are divided by the group size.
  const TileSchedule mqa = schedule_tiles(config, INT64_MAX, INT64_MAX, 1, INT64_MAX, INT64_MAX);
  CHECK(mqa.num_tiles == INT64_MAX);
  CHECK(mqa.section_heads == int64_t{32} << 20);
}

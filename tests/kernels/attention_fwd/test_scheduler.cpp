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
      const TileSchedule big = schedule_tiles(config, GridShape{kMax32, kMax32, kMax32, kMaxSeqlen, kMaxSeqlen, false, 1});
      CHECK(big.num_tiles == INT64_MAX);
      CHECK(big.num_m_blocks == (kMaxSeqlen + config.spec.block_m - 1) / config.spec.block_m);
      CHECK(big.section_heads == 1);
      // MQA with every query head in one group: the group divides the bytes per head.
      const TileSchedule mqa = schedule_tiles(config, GridShape{1, kMax32, 1, 1, kMaxSeqlen, false, 1});
      CHECK(mqa.num_tiles == kMax32);
      CHECK(mqa.section_heads >= 1);
      CHECK(mqa.section_heads <= kMax32);
      // An ordinary call is unchanged: 32 MB of K/V per section.
      const TileSchedule llama = schedule_tiles(config, GridShape{2, 32, 8, 4096, 4096, false, 1});
      CHECK(llama.num_tiles == 2 * 32 * ((4096 + config.spec.block_m - 1) / config.spec.block_m));
      CHECK(llama.section_heads ==
            std::min<int64_t>(64, (int64_t{32} << 20) / (4096 * int64_t{2 * head_dim} * 2 / 4)));
    }
  }
}

TEST_CASE("schedule_tiles saturates for any int64 input", "[scheduler][hostile]") {
  const KernelConfig config = make_kernel_config(default_spec(DType::kFp16, 256, 256, true));
  const TileSchedule s = schedule_tiles(config, GridShape{INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, false, 1});
  CHECK(s.num_tiles == INT64_MAX);
  CHECK(s.section_heads == 1);
  CHECK(s.num_m_blocks > 0);
  // One KV head for all query heads: the saturated K/V bytes are divided by the group size.
  const TileSchedule mqa = schedule_tiles(config, GridShape{INT64_MAX, INT64_MAX, 1, INT64_MAX, INT64_MAX, false, 1});
  CHECK(mqa.num_tiles == INT64_MAX);
  CHECK(mqa.section_heads == int64_t{32} << 20);
}

TEST_CASE("schedule_tiles with pack_gqa and splits", "[scheduler]") {
  const KernelConfig config = make_kernel_config(default_spec(DType::kBf16, 128, 128, false));
  const int block_m = config.spec.block_m;
  // Decode, GQA 32:8: one tile of block_m / 4 queries per (KV head, batch), times the splits.
  const TileSchedule packed = schedule_tiles(config, GridShape{3, 32, 8, 1, 4096, true, 5});
  CHECK(packed.pack_rows == block_m / 4);
  CHECK(packed.num_m_blocks == 1);
  CHECK(packed.num_tiles == 5 * 8 * 3);
  // Without packing every query head is a tile.
  const TileSchedule plain = schedule_tiles(config, GridShape{3, 32, 8, 1, 4096, false, 1});
  CHECK(plain.pack_rows == block_m);
  CHECK(plain.num_tiles == 32 * 3);
  // A group of 7 leaves rows of the tile unused: floor(block_m / 7) queries per tile.
  const TileSchedule seven = schedule_tiles(config, GridShape{1, 28, 4, 100, 100, true, 1});
  CHECK(seven.pack_rows == block_m / 7);
  CHECK(seven.num_m_blocks == (100 + block_m / 7 - 1) / (block_m / 7));
}

TEST_CASE("num_splits_heuristic", "[scheduler]") {
  // Enough tiles for the machine: no split.
  CHECK(num_splits_heuristic(512, 64, 132, 256) == 1);
  CHECK(num_splits_heuristic(106, 64, 132, 256) == 1);
  // One key block: nothing to split.
  CHECK(num_splits_heuristic(1, 1, 132, 256) == 1);
  // Batch 1 decode with 8 KV heads over 1024 key blocks: the fewest splits within 85% of the best wave efficiency.
  const int s = num_splits_heuristic(8, 1024, 132, 256);
  // Splits that leave ceil(1024 / s) unchanged from s - 1 (33, 66, 99, 132: the exact multiples of 132 / 8) are not
  // useful; the best useful one is 16 (128 CTAs on 132 SMs, 0.970), and 14 (112, 0.848) is the fewest within 85%.
  CHECK(s == 14);
  // Memory-bound calls (decode steps) run unsplit from 40 % of the SMs: batch 8 x 8 KV heads = 64 tiles on 132 SMs
  // splits in two as a compute-bound call, not as a decode step; batch 4 (32 tiles) splits either way.
  CHECK(num_splits_heuristic(64, 8, 132, 256) == 2);
  CHECK(num_splits_heuristic(64, 8, 132, 256, kMemoryBoundFill) == 1);
  CHECK(num_splits_heuristic(53, 8, 132, 256, kMemoryBoundFill) == 1);
  CHECK(num_splits_heuristic(52, 8, 132, 256, kMemoryBoundFill) > 1);
  CHECK(num_splits_heuristic(32, 32, 132, 256, kMemoryBoundFill) == num_splits_heuristic(32, 32, 132, 256));
  CHECK(num_splits_heuristic(32, 32, 132, 256) > 1);
  // Never more splits than key blocks, SMs or the limit.
  CHECK(num_splits_heuristic(1, 3, 132, 256) <= 3);
  CHECK(num_splits_heuristic(1, 1000, 132, 16) <= 16);
  CHECK(num_splits_heuristic(1, 1000, 8, 256) <= 8);
}

// GPU correctness of the serving layouts (ForwardArgs, kernels/attention_fwd/launch.h): varlen q and K/V,
// paged K/V behind shuffled page tables, decode with seqused_k, split-KV with the caller's workspace, GQA
// packing. Every batch is judged sequence by sequence against the float64 reference with FA3's rule
// (testing/serving_batch.h), unused K/V slots and page-table entries hold garbage, and out/lse/workspace start
// as NaN. Run on an H200 (about three minutes, most of it the CPU reference); skipped with a message elsewhere.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "gpu_test.h"
#include "kernels/attention_fwd/index_check.h"
#include "testing/device_memory.h"
#include "testing/serving_problem.h"

using namespace fa3jit;
using namespace fa3jit::test;
using namespace fa3jit::attention_fwd;
using testing::KvLayout;
using testing::RowSampling;
using testing::ServingProblem;
using testing::ServingShape;

namespace {

/// A length from FA3's awkward set {0, 1, 113, 239, 799, 1023} or uniform in [2, random_max], one in seven each.
int64_t pick_length(std::mt19937_64& gen, int64_t random_max = 2000) {
  constexpr int64_t kFixed[] = {0, 1, 113, 239, 799, 1023};
  const auto i = static_cast<size_t>(gen() % 7);
  return i < 6 ? kFixed[i] : std::uniform_int_distribution<int64_t>(2, random_max)(gen);
}

int64_t uniform(std::mt19937_64& gen, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
}

/// Runs one serving batch, prints one line and checks every sequence; returns whether it passed.
bool run_case(const ServingShape& shape, uint64_t seed, RowSampling sampling = {}) {
  ServingProblem p(shape, seed);
  p.run(runtime());
  sampling.block_m = p.plan.spec.block_m;
  const testing::ServingCheck c = p.check(sampling);
  std::printf("%-100s | ran splits %d pack_gqa %d | %s\n", shape.describe().c_str(), p.plan.num_splits,
              p.plan.pack_gqa ? 1 : 0, format_check(c).c_str());
  INFO(shape.describe() << " | " << format_check(c));
  CHECK(c.passed);
  return c.passed;
}

void report(const char* what, int passed, int total) { std::printf("%s: %d of %d batches passed\n", what, passed, total); }

}  // namespace

TEST_CASE("varlen prefill: packed q and K/V, batches of 1-16 sequences of awkward lengths", "[gpu][serving]") {
  if (!have_gpu()) return;
  std::mt19937_64 gen(2024);
  int passed = 0, total = 0;
  for (DType dtype : {DType::kFp16, DType::kBf16})
    for (int64_t d : {64, 96, 128, 192, 256})
      for (bool causal : {false, true})
        for (int64_t hkv : {8, 2, 1}) {  // GQA 1:1, 4:1, 8:1 over 8 query heads
          ServingShape s;
          s.dtype = dtype, s.head_dim = d, s.causal = causal, s.num_heads = 8, s.num_heads_kv = hkv;
          const int64_t batch = uniform(gen, 1, 16);
          for (int64_t b = 0; b < batch; ++b) {
            s.seqlens_q.push_back(pick_length(gen));
            s.seqlens_k.push_back(pick_length(gen));
          }
          s.seqlens_q.back() = std::max<int64_t>(s.seqlens_q.back(), 1);  // at least one query row
          s.seqlens_k.back() = std::max<int64_t>(s.seqlens_k.back(), 1);  // and one key row in all
          // Every third batch: the keys come with seqused_k and garbage rows past them; every fourth: dense K/V.
          s.use_seqused_k = total % 3 == 2;
          s.kv_slack = s.use_seqused_k ? 5 : 0;
          if (total % 4 == 3) {
            s.kv = KvLayout::kDense;
            s.use_seqused_k = true;
            s.kv_slack = 3;
          }
          s.num_splits = total % 2 ? 0 : 1;
          passed += run_case(s, 100 + total, RowSampling{128, int64_t{1} << 20, 128});
          ++total;
        }
  report("varlen prefill", passed, total);
}

TEST_CASE("paged KV decode: page sizes 1-128, shuffled pages, num_splits 1/2/7/heuristic, pack_gqa 0/1/auto",
          "[gpu][serving]") {
  if (!have_gpu()) return;
  std::mt19937_64 gen(77);
  const std::pair<int64_t, int64_t> heads[] = {{32, 8}, {16, 2}, {8, 1}, {8, 8}};
  const int64_t dims[] = {128, 64, 256, 96, 192};
  int passed = 0, total = 0;
  for (int64_t page_size : {1, 3, 8, 16, 64, 128})  // 1 and 3: the gather kernels (cp.async rows)
    for (int num_splits : {1, 2, 7, 0})
      for (int pack_gqa : {0, 1, -1}) {
        ServingShape s;
        s.dtype = total % 4 == 3 ? DType::kFp16 : DType::kBf16;
        s.head_dim = dims[total % 5];
        std::tie(s.num_heads, s.num_heads_kv) = heads[total % 4];
        s.causal = true;
        s.packed_q = false;  // (batch, 1, heads, d), as flash_attn_with_kvcache takes a decode step
        s.kv = KvLayout::kPaged;
        s.page_size = page_size;
        s.page_padding = total % 5 == 4 ? 1 : 0;
        s.num_splits = num_splits;
        s.pack_gqa = pack_gqa;
        const int64_t batch = uniform(gen, 1, 8);
        for (int64_t b = 0; b < batch; ++b) {
          s.seqlens_q.push_back(1);
          s.seqlens_k.push_back(b == 0 ? uniform(gen, 2000, 4000) : pick_length(gen, 3000));
        }
        passed += run_case(s, 300 + total);
        ++total;
      }
  report("paged decode", passed, total);
}

TEST_CASE("paged KV chunked prefill: 1-300 new queries against a longer cached prefix", "[gpu][serving]") {
  if (!have_gpu()) return;
  std::mt19937_64 gen(78);
  int passed = 0, total = 0;
  for (int64_t page_size : {1, 5, 8, 16, 64, 128})
    for (int num_splits : {1, 2, 7, 0}) {
      ServingShape s;
      s.dtype = total % 4 == 1 ? DType::kFp16 : DType::kBf16;
      s.head_dim = total % 5 == 2 ? 64 : 128;
      s.num_heads = 16, s.num_heads_kv = total % 2 ? 2 : 4;
      s.causal = total % 6 != 5;
      s.kv = KvLayout::kPaged;
      s.page_size = page_size;
      s.num_splits = num_splits;
      s.pack_gqa = total % 3 == 2 ? -1 : total % 3;
      const int64_t batch = uniform(gen, 1, 6);
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t new_tokens = b == 0 ? 300 : uniform(gen, 1, 300);
        s.seqlens_q.push_back(new_tokens);
        s.seqlens_k.push_back(new_tokens + (b == 1 ? 0 : uniform(gen, 1, 2000)));  // the cached prefix, then the chunk
      }
      passed += run_case(s, 500 + total);
      ++total;
    }
  report("paged chunked prefill", passed, total);
}

TEST_CASE("sliding window, softcap and sinks: varlen prefill, paged decode and chunked prefill, dense K/V, splits",
          "[gpu][serving][variant]") {
  if (!have_gpu()) return;
  std::mt19937_64 gen(79);
  // Windows around the interesting edges: none, a one-key window, narrower and wider than a key block, wider than
  // every sequence, one-sided either way.
  const std::pair<int64_t, int64_t> windows[] = {{-1, -1}, {0, 0},   {17, 0},  {128, 5},  {300, -1},
                                                 {-1, 64}, {1000, 0}, {5000, 0}, {40, 200}, {255, 3}};
  const float softcaps[] = {0.0f, 30.0f, 5.0f};
  const std::pair<int64_t, int64_t> heads[] = {{8, 2}, {16, 16}, {32, 4}};
  int passed = 0, total = 0;
  for (int layout = 0; layout < 4; ++layout)  // varlen prefill, paged decode, paged chunked prefill, dense K/V
    for (int i = 0; i < 10; ++i) {
      ServingShape s;
      s.dtype = total % 3 == 1 ? DType::kFp16 : DType::kBf16;
      s.head_dim = std::array<int64_t, 3>{128, 64, 256}[static_cast<size_t>((total + layout) % 3)];
      std::tie(s.num_heads, s.num_heads_kv) = heads[total % 3];
      std::tie(s.window_left, s.window_right) = windows[static_cast<size_t>((i + 3 * layout) % 10)];
      s.causal = s.window_right <= 0 && total % 2 == 0;
      if (s.causal) s.window_right = -1;  // causal is window_right 0
      s.softcap = softcaps[total % 3];
      s.sinks = total % 4 != 0;
      s.num_splits = std::array<int, 3>{1, 0, 3}[static_cast<size_t>(total % 3)];
      const int64_t batch = uniform(gen, 1, layout == 1 ? 12 : 5);
      for (int64_t b = 0; b < batch; ++b) {
        if (layout == 0 || layout == 3) {
          s.seqlens_q.push_back(pick_length(gen, 1500));
          s.seqlens_k.push_back(layout == 3 ? s.seqlens_q.back() + uniform(gen, 0, 600) : pick_length(gen, 1500));
        } else if (layout == 1) {
          s.seqlens_q.push_back(1);
          s.seqlens_k.push_back(b == 0 ? uniform(gen, 1500, 3000) : pick_length(gen, 3000));
        } else {
          s.seqlens_q.push_back(uniform(gen, 1, 200));
          s.seqlens_k.push_back(s.seqlens_q.back() + uniform(gen, 0, 1500));
        }
      }
      s.seqlens_q.back() = std::max<int64_t>(s.seqlens_q.back(), 1);
      s.seqlens_k.back() = std::max<int64_t>(s.seqlens_k.back(), 1);
      if (layout == 1 || layout == 2) {
        s.kv = KvLayout::kPaged;
        s.page_size = layout == 1 ? 16 : 64;
        s.packed_q = layout == 2;
      } else if (layout == 3) {
        s.kv = KvLayout::kDense;
        s.use_seqused_k = true;
        s.kv_slack = 7;
      }
      passed += run_case(s, 700 + total, RowSampling{128, int64_t{1} << 20, 128});
      ++total;
    }
  report("sliding window / softcap / sinks", passed, total);
}

TEST_CASE("sliding window, softcap and sinks with dense q and K/V (the tile table's persistent grid)",
          "[gpu][serving][variant][persistent]") {
  if (!have_gpu()) return;
  std::mt19937_64 gen(83);
  const std::pair<int64_t, int64_t> windows[] = {{-1, -1}, {0, 0}, {17, 0}, {300, 77}, {-1, 64}, {1000, 0}, {40, 200}};
  int passed = 0, total = 0;
  for (int i = 0; i < 14; ++i) {
    ServingShape s;
    s.dtype = i % 2 ? DType::kFp16 : DType::kBf16;
    s.head_dim = std::array<int64_t, 3>{128, 64, 256}[static_cast<size_t>(i % 3)];
    std::tie(s.num_heads, s.num_heads_kv) = i % 2 ? std::pair<int64_t, int64_t>{16, 4} : std::pair<int64_t, int64_t>{8, 8};
    std::tie(s.window_left, s.window_right) = windows[static_cast<size_t>(i % 7)];
    s.causal = i >= 7 && s.window_left < 0 && s.window_right < 0;
    s.softcap = i % 3 == 0 ? 30.0f : 0.0f;
    s.sinks = i % 2 == 0;
    s.packed_q = false;
    s.kv = KvLayout::kDense;
    s.pack_gqa = 0;
    s.use_seqused_k = i % 2 == 1;  // lengths per sequence (dense capacity past them)
    s.kv_slack = s.use_seqused_k ? 5 : 0;
    const int64_t batch = uniform(gen, 1, 4);
    const int64_t seqlen_q = std::array<int64_t, 4>{1023, 2049, 799, 4224}[static_cast<size_t>(i % 4)];
    for (int64_t b = 0; b < batch; ++b) {
      s.seqlens_q.push_back(seqlen_q);
      // Causal with fewer keys than queries: row blocks that see no key.
      s.seqlens_k.push_back(s.use_seqused_k ? uniform(gen, 1, 3000) : (i % 4 == 3 ? 1111 : seqlen_q + 17));
    }
    passed += run_case(s, 900 + total, RowSampling{128, int64_t{1} << 20, 128});
    ++total;
  }
  report("dense window / softcap / sinks", passed, total);
}

TEST_CASE("sanitizer set: sliding window + softcap + sinks, varlen prefill and split paged decode, odd lengths",
          "[gpu][serving][variant][sanitize][sanitize_features]") {
  if (!have_gpu()) return;
  ServingShape prefill;
  prefill.dtype = DType::kBf16;
  prefill.head_dim = 128;
  prefill.num_heads = 8;
  prefill.num_heads_kv = 2;
  prefill.seqlens_q = {113, 1, 239};
  prefill.seqlens_k = {799, 1, 300};
  std::tie(prefill.window_left, prefill.window_right) = std::make_pair(int64_t{100}, int64_t{3});
  prefill.softcap = 30.0f;
  prefill.sinks = true;
  CHECK(run_case(prefill, 901));
  ServingShape decode = prefill;
  decode.dtype = DType::kFp16;
  decode.head_dim = 64;
  decode.seqlens_q = {1, 1, 1};
  decode.seqlens_k = {1023, 17, 2000};
  std::tie(decode.window_left, decode.window_right) = std::make_pair(int64_t{255}, int64_t{-1});
  decode.kv = KvLayout::kPaged;
  decode.page_size = 16;
  decode.num_splits = 3;
  CHECK(run_case(decode, 902));
  // The gather producer (cp.async rows, lag-one signalling): pages of 3 keys under the decode kernel, of 5 under a
  // two-warpgroup chunked-prefill kernel.
  ServingShape gathered = decode;
  gathered.page_size = 3;
  CHECK(run_case(gathered, 903));
  ServingShape chunk = prefill;
  chunk.kv = KvLayout::kPaged;
  chunk.page_size = 5;
  chunk.num_splits = 2;
  CHECK(run_case(chunk, 904));
}

TEST_CASE("decode with dense K/V and seqused_k: batch 1-64, seqlen_k up to 16k, GQA up to 16:1", "[gpu][serving]") {
  if (!have_gpu()) return;
  struct Case {
    DType dtype;
    int64_t batch, max_k, heads, heads_kv, head_dim;
    int num_splits, pack_gqa;
  };
  const Case cases[] = {
      {DType::kBf16, 1, 16384, 32, 2, 128, 0, -1},  {DType::kBf16, 1, 16384, 32, 2, 128, 1, 1},
      {DType::kBf16, 64, 4096, 32, 8, 128, 0, -1},  {DType::kFp16, 7, 16384, 16, 1, 128, 3, 1},
      {DType::kBf16, 33, 1000, 8, 8, 64, 0, 0},     {DType::kBf16, 16, 16384, 64, 4, 128, 0, -1},
      {DType::kBf16, 5, 8192, 16, 2, 256, 0, -1},   {DType::kBf16, 64, 2048, 16, 1, 128, 7, 1},
  };
  std::mt19937_64 gen(91);
  int passed = 0, total = 0;
  for (const Case& c : cases) {
    ServingShape s;
    s.dtype = c.dtype, s.head_dim = c.head_dim, s.num_heads = c.heads, s.num_heads_kv = c.heads_kv;
    s.causal = true;
    s.packed_q = false;
    s.kv = KvLayout::kDense;
    s.use_seqused_k = true;
    s.kv_slack = 7;  // garbage rows past the longest sequence too
    s.num_splits = c.num_splits, s.pack_gqa = c.pack_gqa;
    for (int64_t b = 0; b < c.batch; ++b) {
      s.seqlens_q.push_back(1);
      s.seqlens_k.push_back(b == 0 ? c.max_k : b % 9 == 8 ? 0 : uniform(gen, 1, c.max_k));
    }
    passed += run_case(s, 700 + total);
    ++total;
  }
  report("dense decode with seqused_k", passed, total);
}

TEST_CASE("empty sequences: no queries, no keys, causal rows that see no key", "[gpu][serving]") {
  if (!have_gpu()) return;
  int passed = 0, total = 0;
  for (KvLayout kv : {KvLayout::kPacked, KvLayout::kPaged})
    for (bool causal : {false, true})
      for (int num_splits : {1, 3}) {
        ServingShape s;
        s.num_heads = 8, s.num_heads_kv = 2, s.causal = causal, s.kv = kv, s.page_size = 16, s.num_splits = num_splits;
        s.seqlens_q = {3, 0, 5, 1, 200, 64};
        s.seqlens_k = {0, 7, 0, 9, 150, 300};  // 200 queries over 150 keys: causal rows 0..49 see none
        passed += run_case(s, 900 + total);
        ++total;
      }
  report("empty sequences", passed, total);
}

// A cache from torch.empty may hold NaN where no sequence's keys are. The kernels load whole blocks (TMA boxes,
// pages), so a sequence's last block brings rows past seqused_k: their scores are masked, P = 0, and 0 x NaN in
// P.V would be NaN; the producer zeroes those V rows first (device/mainloop.cuh: first_block_keys). Page sizes
// 16 and 64 take TMA boxes, 3 the gather copies; key counts end inside a block, on a page's end and on a block's.
TEST_CASE("NaN in unused cache slots (past seqused_k, spare pages, page padding) does not reach the output",
          "[gpu][serving]") {
  if (!have_gpu()) return;
  int passed = 0, total = 0;
  for (KvLayout kv : {KvLayout::kPaged, KvLayout::kDense, KvLayout::kPacked})
    for (int64_t page_size : {16, 64, 3}) {
      if (kv != KvLayout::kPaged && page_size != 16) continue;
      for (int num_splits : {1, 3, 0})
        for (int64_t head_dim : {64, 128, 256}) {
          ServingShape s;
          s.num_heads = 16, s.num_heads_kv = 4, s.causal = true, s.kv = kv, s.nan_garbage = true;
          s.head_dim = head_dim, s.page_size = page_size, s.page_padding = 1, s.use_seqused_k = true;
          s.kv_slack = 40, s.num_splits = num_splits;
          s.seqlens_q = {1, 37, 1, 130, 2};
          s.seqlens_k = {333, 37, 1, 1100, 128};
          passed += run_case(s, 950 + total);
          ++total;
        }
    }
  report("NaN garbage", passed, total);
}

TEST_CASE("with num_splits = 1 a sequence's output is bit-identical alone and inside a batch", "[gpu][serving]") {
  if (!have_gpu()) return;
  struct Layout {
    bool packed_q;
    KvLayout kv;
    bool causal;
    int pack_gqa;
  };
  const Layout layouts[] = {{true, KvLayout::kPacked, true, 0},
                            {true, KvLayout::kPacked, false, 1},
                            {false, KvLayout::kPaged, true, 1},
                            {false, KvLayout::kPaged, true, 0},
                            {true, KvLayout::kPaged, true, 1}};
  int compared = 0;
  for (const Layout& layout : layouts) {
    ServingShape s;
    s.num_heads = 16, s.num_heads_kv = 2, s.causal = layout.causal, s.packed_q = layout.packed_q, s.kv = layout.kv;
    s.page_size = 16, s.num_splits = 1, s.pack_gqa = layout.pack_gqa;
    s.seqlens_k = {1500, 129, 1, 777, 2048, 64};
    s.seqlens_q = layout.packed_q ? std::vector<int64_t>{300, 129, 1, 77, 1, 64} : std::vector<int64_t>(6, 1);
    s.sequence_seeds = {11, 12, 13, 14, 15, 16};
    ServingProblem whole(s, 1);
    whole.run(runtime());
    INFO(s.describe());
    REQUIRE(whole.check(RowSampling{whole.plan.spec.block_m}).passed);
    for (int64_t b = 0; b < s.batch(); ++b) {
      ServingShape one = s;
      one.seqlens_q = {s.seqlens_q[b]};
      one.seqlens_k = {s.seqlens_k[b]};
      one.sequence_seeds = {s.sequence_seeds[b]};
      ServingProblem alone(one, 2);  // another seed: other garbage and another page shuffle, same sequence data
      REQUIRE(alone.batch.q_seq[0].data == whole.batch.q_seq[b].data);
      alone.run(runtime());
      INFO("sequence " << b);
      CHECK(alone.batch.sequence_out(alone.out, 0) == whole.batch.sequence_out(whole.out, b));
      const std::vector<float> lse_alone = alone.batch.sequence_lse(alone.lse, 0);
      const std::vector<float> lse_whole = whole.batch.sequence_lse(whole.lse, b);
      REQUIRE(lse_alone.size() == lse_whole.size());
      CHECK(std::memcmp(lse_alone.data(), lse_whole.data(), lse_alone.size() * sizeof(float)) == 0);
      ++compared;
    }
  }
  std::printf("batch-composition invariance: %d sequences compared bit for bit\n", compared);
}

TEST_CASE("serving arguments the host refuses are errors naming the argument", "[gpu][serving][arguments]") {
  if (!have_gpu()) return;
  ServingShape paged;
  paged.num_heads = 8, paged.num_heads_kv = 2, paged.causal = true, paged.packed_q = false, paged.kv = KvLayout::kPaged;
  paged.seqlens_q = {1, 1, 1};
  paged.seqlens_k = {4096, 100, 3000};

  paged.page_size = 16;
  ServingProblem p(paged, 2);
  ForwardArgs a = p.args();
  for (int64_t page_size : {0, -3}) {  // out of range (any positive page size is supported)
    a.page_size = page_size;
    expect_forward_error(a, ErrorCode::kInvalidArgument, "page_size");
    try {
      (void)workspace_size(a);  // plan_info / workspace_size refuse what forward refuses
      FAIL("workspace_size accepted page_size " << page_size);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidArgument);
      CHECK(std::string(e.what()).find("page_size") != std::string::npos);
    }
  }

  a = p.args();
  a.seqused_k = nullptr;  // a page table needs the cache lengths
  expect_forward_error(a, ErrorCode::kInvalidArgument, "seqused_k");

  a = p.args();
  a.num_splits = 2;
  const size_t needed = workspace_size(a);
  REQUIRE(needed > 0);
  testing::DeviceBuffer workspace(needed);
  a.workspace = workspace.get();
  a.workspace_bytes = needed - 16;
  expect_forward_error(a, ErrorCode::kInvalidArgument, "workspace");
  a.workspace = nullptr;
  a.workspace_bytes = needed;
  expect_forward_error(a, ErrorCode::kInvalidArgument, "workspace");

  ServingShape varlen;
  varlen.seqlens_q = {5, 9};
  varlen.seqlens_k = {5, 9};
  ServingProblem v(varlen, 3);
  a = v.args();
  a.max_seqlen_q = 0;  // cu_seqlens_q given, the grid cannot be sized
  expect_forward_error(a, ErrorCode::kInvalidArgument, "max_seqlen_q");

  // After the rejected calls the runtime still runs both problems correctly, the split one with a workspace.
  paged.num_splits = 2;
  CHECK(run_case(paged, 4));
  CHECK(run_case(varlen, 5));
}

namespace {

// `values` in a device buffer of int32, as an index tensor.
testing::DeviceBuffer int32_tensor(const std::vector<int32_t>& values) {
  testing::DeviceBuffer buffer(values.size() * sizeof(int32_t));
  buffer.upload(values.data(), values.size() * sizeof(int32_t));
  return buffer;
}

// check_index_values(a) must throw Error(kInvalidArgument) whose message contains `fragment`.
void expect_index_error(const ForwardArgs& a, const std::string& fragment) {
  try {
    check_index_values(a, nullptr);
    FAIL("the index check accepted the call; expected an error containing: " << fragment);
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK(std::string(e.what()).find(fragment) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("the index check (FA3JIT_CHECK_INDICES) names the first bad page index, length or offset",
          "[gpu][serving][arguments]") {
  if (!have_gpu()) return;
  ServingShape paged;
  paged.num_heads = 8, paged.num_heads_kv = 2, paged.causal = true, paged.packed_q = false, paged.kv = KvLayout::kPaged;
  paged.page_size = 16;
  paged.seqlens_q = {1, 1, 1};
  paged.seqlens_k = {300, 100, 250};
  ServingProblem p(paged, 6);
  ForwardArgs a = p.args();
  check_index_values(a, nullptr);  // the problem's own tensors hold

  // Sequence 1's third page (keys 32..47 of its 100) points past the pool.
  const size_t table_count = static_cast<size_t>((a.batch - 1) * a.page_table_stride + a.max_pages);
  std::vector<int32_t> table(table_count);
  check_cu(driver().cuMemcpyDtoH(table.data(), reinterpret_cast<CUdeviceptr>(a.page_table), table_count * 4),
           "cuMemcpyDtoH");
  table[static_cast<size_t>(a.page_table_stride) + 2] = static_cast<int32_t>(a.num_pages + 5);
  const testing::DeviceBuffer bad_table = int32_tensor(table);
  ForwardArgs bad = a;
  bad.page_table = reinterpret_cast<const int32_t*>(bad_table.get());
  expect_index_error(bad, fmt::format("page_table[1, 2] = {} is outside [0, num_pages = {})", a.num_pages + 5,
                                      a.num_pages));

  // A length above the sequence's capacity.
  const int32_t too_long = static_cast<int32_t>(a.max_pages * a.page_size + 1);
  const testing::DeviceBuffer bad_used = int32_tensor({300, too_long, 250});
  bad = a;
  bad.seqused_k = reinterpret_cast<const int32_t*>(bad_used.get());
  expect_index_error(bad, "seqused_k[1] = " + std::to_string(too_long));

  // Packed q whose offsets go down.
  ServingShape varlen;
  varlen.seqlens_q = {5, 9, 4};
  varlen.seqlens_k = {5, 9, 4};
  ServingProblem v(varlen, 7);
  a = v.args();
  check_index_values(a, nullptr);
  const testing::DeviceBuffer bad_offsets = int32_tensor({0, 5, 3, 18});
  bad = a;
  bad.cu_seqlens_q = reinterpret_cast<const int32_t*>(bad_offsets.get());
  expect_index_error(bad, "cu_seqlens_q[2] = 3 is below cu_seqlens_q[1] = 5");
}

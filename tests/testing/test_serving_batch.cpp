// The serving batch builder and its checker (testing/serving_batch.h), on the host: every layout maps each
// sequence's rows to the right place, unused page-table entries point outside the pool, and the checker passes
// an output equal to the baseline and fails a wrong value in one sequence, naming it.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "core/error.h"
#include "testing/half.h"
#include "testing/serving_batch.h"

using namespace fa3jit;
using namespace fa3jit::testing;
using Catch::Matchers::Contains;

namespace {

ServingShape small_shape(KvLayout kv, bool packed_q) {
  ServingShape s;
  s.num_heads = 4, s.num_heads_kv = 2, s.head_dim = 64, s.causal = true, s.kv = kv, s.packed_q = packed_q;
  s.page_size = 8, s.page_padding = 1;
  s.seqlens_q = packed_q ? std::vector<int64_t>{5, 0, 17, 1} : std::vector<int64_t>(4, 3);
  s.seqlens_k = {20, 3, 0, 9};  // 5 queries over 20 keys, none over 0, 17 over 0 (causal: all empty)
  s.use_seqused_k = kv != KvLayout::kPacked || packed_q;
  s.kv_slack = 2;
  return s;
}

// The kernel output a correct kernel could give: each checked sequence's baseline, rounded in the dtype.
void write_baseline(const ServingBatch& batch, std::vector<uint16_t>& out, std::vector<float>& lse) {
  const ServingShape& s = batch.shape;
  ReferenceOptions options;
  options.softmax_scale = batch.softmax_scale;
  options.causal = s.causal;
  out.assign(batch.out_elements(), 0xFFFF);
  lse.assign(batch.lse_elements(), std::numeric_limits<float>::quiet_NaN());
  for (int64_t b = 0; b < s.batch(); ++b) {
    const auto rows = all_rows(1, s.num_heads, s.seqlens_q[b]);
    for (const ReferenceRow& r : reference_rows(batch.q_seq[b], batch.k_seq[b], batch.v_seq[b], options, rows)) {
      for (int64_t c = 0; c < s.head_dim; ++c)
        out[batch.q_offset(b, r.index.row, r.index.head) + c] = float_to_bits(s.dtype, r.baseline[c]);
      lse[batch.lse_index(b, r.index.head, r.index.row)] = static_cast<float>(r.lse);
    }
  }
}

}  // namespace

TEST_CASE("serving batches place every sequence's rows where the layout says", "[serving_batch]") {
  for (KvLayout kv : {KvLayout::kDense, KvLayout::kPacked, KvLayout::kPaged})
    for (bool packed_q : {true, false}) {
      const ServingBatch batch = make_serving_batch(small_shape(kv, packed_q), 5);
      const ServingShape& s = batch.shape;
      INFO(s.describe());
      std::set<int64_t> kv_offsets;
      for (int64_t b = 0; b < s.batch(); ++b) {
        for (int64_t i = 0; i < s.seqlens_q[b]; ++i)
          for (int64_t h = 0; h < s.num_heads; ++h)
            for (int64_t c = 0; c < s.head_dim; ++c)
              REQUIRE(batch.q_image.at(batch.q_offset(b, i, h) + c) == batch.q_seq[b].data[batch.q_seq[b].offset(0, i, h, c)]);
        for (int64_t j = 0; j < s.seqlens_k[b]; ++j)
          for (int64_t h = 0; h < s.num_heads_kv; ++h) {
            REQUIRE(kv_offsets.insert(batch.kv_offset(b, j, h)).second);  // no two keys share a slot
            for (int64_t c = 0; c < s.head_dim; ++c) {
              REQUIRE(batch.k_image.at(batch.kv_offset(b, j, h) + c) == batch.k_seq[b].data[batch.k_seq[b].offset(0, j, h, c)]);
              REQUIRE(batch.v_image.at(batch.kv_offset(b, j, h) + c) == batch.v_seq[b].data[batch.v_seq[b].offset(0, j, h, c)]);
            }
          }
      }
      // Every other K slot holds garbage of magnitude >= 64.
      const size_t used = kv_offsets.size() * static_cast<size_t>(s.head_dim);
      size_t garbage = 0;
      for (uint16_t x : batch.k_image) garbage += std::fabs(bits_to_float(s.dtype, x)) >= 64.0f;
      CHECK(garbage >= batch.k_image.size() - used);
      CHECK(batch.q_rows * s.num_heads * s.head_dim == static_cast<int64_t>(batch.q_image.size()));
      CHECK(batch.seqused_k.empty() == (kv != KvLayout::kPaged && !s.use_seqused_k));
    }
}

TEST_CASE("paged batches use a shuffled page table whose unused entries lie outside the pool", "[serving_batch]") {
  ServingShape s = small_shape(KvLayout::kPaged, true);
  s.seqlens_k = {70, 3, 0, 9};
  const ServingBatch batch = make_serving_batch(s, 9);
  std::set<int32_t> mapped;
  int64_t unused = 0;
  for (int64_t b = 0; b < s.batch(); ++b) {
    const int64_t pages = (s.seqlens_k[b] + s.page_size - 1) / s.page_size;
    for (int64_t p = 0; p < batch.page_table_stride; ++p) {
      const int32_t page = batch.page_table[b * batch.page_table_stride + p];
      if (p < pages) {
        CHECK((page >= 0 && page < batch.num_pages));
        CHECK(mapped.insert(page).second);
      } else {
        CHECK((page < 0 || page >= batch.num_pages));
        ++unused;
      }
    }
  }
  CHECK(unused > 0);
  CHECK(static_cast<int64_t>(mapped.size()) == batch.num_pages - s.spare_pages);
  // Sequence 0's nine pages are not laid out in order (the shuffle is seeded: a fixed answer).
  bool in_order = true;
  for (int64_t p = 1; p < 9; ++p) in_order &= batch.page_table[p] == batch.page_table[p - 1] + 1;
  CHECK_FALSE(in_order);
  CHECK(batch.k_image.size() == static_cast<size_t>(batch.num_pages * (s.page_size + s.page_padding) * 2 * 64));
}

TEST_CASE("the same sequence seed gives the same data in any batch", "[serving_batch]") {
  ServingShape whole = small_shape(KvLayout::kPaged, true);
  whole.sequence_seeds = {1, 2, 3, 4};
  ServingShape one = whole;
  one.seqlens_q = {whole.seqlens_q[2]};
  one.seqlens_k = {whole.seqlens_k[2]};
  one.sequence_seeds = {3};
  const ServingBatch a = make_serving_batch(whole, 1), b = make_serving_batch(one, 2);
  CHECK(a.q_seq[2].data == b.q_seq[0].data);
  CHECK(a.k_seq[2].data == b.k_seq[0].data);
}

TEST_CASE("the serving check passes the baseline and names the sequence of a wrong value", "[serving_batch]") {
  for (KvLayout kv : {KvLayout::kPacked, KvLayout::kPaged}) {
    const ServingBatch batch = make_serving_batch(small_shape(kv, true), 3);
    std::vector<uint16_t> out;
    std::vector<float> lse;
    write_baseline(batch, out, lse);
    const RowSampling all{64, int64_t{1} << 30, 0};
    const ServingCheck good = check_serving(batch, out, lse, all);
    INFO(format_check(good));
    CHECK(good.passed);
    REQUIRE(good.sequences.size() == 3);  // sequence 1 has no queries
    CHECK(good.sequences[1].sequence == 2);
    CHECK(good.sequences[1].empty_rows == 17 * 4);  // 17 queries x 4 heads over no keys

    std::vector<uint16_t> bad = out;
    bad[batch.q_offset(3, 0, 1) + 7] = float_to_bits(batch.shape.dtype, 3.0f);
    const ServingCheck wrong = check_serving(batch, bad, lse, all);
    CHECK_FALSE(wrong.passed);
    CHECK(wrong.failure.find("sequence 3") != std::string::npos);

    bad = out;  // a row without keys must be exactly 0, even within the rounding tolerance
    bad[batch.q_offset(2, 4, 0)] = float_to_bits(batch.shape.dtype, 1e-4f);
    const ServingCheck not_zero = check_serving(batch, bad, lse, all);
    CHECK_FALSE(not_zero.passed);
    CHECK(not_zero.failure.find("sequence 2") != std::string::npos);

    std::vector<float> bad_lse = lse;
    bad_lse[batch.lse_index(0, 3, 4)] += 0.5f;
    CHECK_FALSE(check_serving(batch, out, bad_lse, all).passed);
    CHECK_THROWS_AS(check_serving(batch, out, std::vector<float>(3), all), Error);
  }
}

TEST_CASE("serving shapes the builder cannot lay out are refused naming the field", "[serving_batch]") {
  ServingShape s;
  s.seqlens_q = {2, 3};
  s.seqlens_k = {4};
  CHECK_THROWS_WITH(make_serving_batch(s, 1), Contains("seqlens_k"));
  s.seqlens_k = {4, 4};
  s.packed_q = false;
  CHECK_THROWS_WITH(make_serving_batch(s, 1), Contains("dense q"));
  s.packed_q = true;
  s.seqlens_q = {0, 0};
  CHECK_THROWS_WITH(make_serving_batch(s, 1), Contains("query row"));
  s.seqlens_q = {1, 1};
  s.kv = KvLayout::kDense;
  s.seqlens_k = {4, 5};
  CHECK_THROWS_WITH(make_serving_batch(s, 1), Contains("seqused_k"));
}

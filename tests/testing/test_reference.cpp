// Tests of the host conversions (runtime/half.h) and the CPU reference + checker (runtime/reference.h).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/error.h"
#include "testing/half.h"
#include "testing/reference.h"

using namespace fa3jit;

namespace {

float from_bits32(uint32_t bits) { return std::bit_cast<float>(bits); }

// Sets one (b, s, h, :) vector of a host tensor.
void set_vec(HostTensor& t, int64_t b, int64_t s, int64_t h, std::initializer_list<float> values) {
  int64_t d = 0;
  for (float x : values) t.data.at(t.offset(b, s, h, d++)) = float_to_bits(t.dtype, x);
}

}  // namespace

TEST_CASE("bf16 and fp16 encode exact values", "[reference][half]") {
  CHECK(float_to_bf16(1.0f) == 0x3F80);
  CHECK(float_to_bf16(-2.0f) == 0xC000);
  CHECK(float_to_fp16(1.0f) == 0x3C00);
  CHECK(float_to_fp16(-2.0f) == 0xC000);
  CHECK(float_to_fp16(65504.0f) == 0x7BFF);
  CHECK(float_to_fp16(0.0f) == 0x0000);
  CHECK(float_to_fp16(-0.0f) == 0x8000);
  CHECK(float_to_bf16(-0.0f) == 0x8000);
  CHECK(fp16_to_float(0x3555) == Approx(0.333251953125).epsilon(0));
  CHECK(bf16_to_float(0x3F80) == 1.0f);
}

TEST_CASE("conversions round to nearest, ties to even", "[reference][half]") {
  // bf16 ulp at 1 is 2^-7: 1 + 2^-8 is a tie -> even (1.0); 1 + 3*2^-8 is a tie -> even (1 + 2^-6).
  CHECK(float_to_bf16(1.0f + 0x1p-8f) == 0x3F80);
  CHECK(float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3F82);
  CHECK(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3F81);  // just above the tie rounds up
  // fp16 ulp at 1 is 2^-10.
  CHECK(float_to_fp16(1.0f + 0x1p-11f) == 0x3C00);
  CHECK(float_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3C02);
  CHECK(float_to_fp16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3C01);
  // fp16 overflow: 65520 is the tie between 65504 and 2^16, which rounds (to even) to infinity.
  CHECK(float_to_fp16(65519.0f) == 0x7BFF);
  CHECK(float_to_fp16(65520.0f) == 0x7C00);
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);
  // fp16 subnormals: 2^-24 is the smallest; 2^-25 ties to 0; 3*2^-25 ties to 2 (even).
  CHECK(float_to_fp16(0x1p-24f) == 0x0001);
  CHECK(float_to_fp16(0x1p-25f) == 0x0000);
  CHECK(float_to_fp16(1.5f * 0x1p-25f) == 0x0001);
  CHECK(float_to_fp16(3 * 0x1p-25f) == 0x0002);
  CHECK(float_to_fp16(0x1p-14f) == 0x0400);
  CHECK(float_to_fp16(0x1p-14f - 0x1p-26f) == 0x0400);  // rounds up from the top subnormal to the smallest normal
  CHECK(fp16_to_float(0x0001) == 0x1p-24f);
  CHECK(fp16_to_float(0x03FF) == 1023 * 0x1p-24f);
  // bf16 keeps fp32 subnormals.
  CHECK(float_to_bf16(from_bits32(0x00010000)) == 0x0001);
  CHECK(bf16_to_float(0x0001) == from_bits32(0x00010000));
  CHECK(round_to(DType::kBf16, 1.0f + 0x1p-8f) == 1.0f);
  CHECK(round_to(DType::kFp16, 0.1f) == fp16_to_float(0x2E66));
}

TEST_CASE("NaN stays NaN and infinity stays infinity", "[reference][half]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(std::isnan(bf16_to_float(float_to_bf16(nan))));
  CHECK(std::isnan(fp16_to_float(float_to_fp16(nan))));
  CHECK(std::isnan(round_to(DType::kE4m3, nan)));
  // A signalling NaN whose payload sits only in the low bits must not truncate to infinity.
  CHECK(std::isnan(bf16_to_float(float_to_bf16(from_bits32(0x7F800001)))));
  CHECK(std::isnan(fp16_to_float(float_to_fp16(from_bits32(0x7F800001)))));
  CHECK(float_to_bf16(inf) == 0x7F80);
  CHECK(float_to_bf16(-inf) == 0xFF80);
  CHECK(float_to_fp16(inf) == 0x7C00);
  CHECK(float_to_fp16(-inf) == 0xFC00);
  CHECK(std::isinf(fp16_to_float(0x7C00)));
  CHECK(std::isnan(fp16_to_float(0x7C01)));
  CHECK(std::isnan(bf16_to_float(0xFFC1)));
}

TEST_CASE("every 16-bit pattern round-trips", "[reference][half]") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float h = fp16_to_float(bits);
    if (std::isnan(h)) {
      REQUIRE(std::isnan(fp16_to_float(float_to_fp16(h))));
    } else {
      REQUIRE(float_to_fp16(h) == bits);
    }
    const float g = bf16_to_float(bits);
    if (std::isnan(g)) {
      REQUIRE(std::isnan(bf16_to_float(float_to_bf16(g))));
    } else {
      REQUIRE(float_to_bf16(g) == bits);
    }
  }
}

TEST_CASE("float -> 16-bit picks the nearest neighbour for random floats", "[reference][half]") {
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> any_bits(0, 0x477FEFFFu);  // finite, below fp16 overflow
  for (int i = 0; i < 200000; ++i) {
    const float x = from_bits32(any_bits(gen)) * ((i & 1) ? -1.0f : 1.0f);
    for (DType dt : {DType::kFp16, DType::kBf16}) {
      const uint16_t b = float_to_bits(dt, x);
      const double y = bits_to_float(dt, b);
      const double err = std::fabs(static_cast<double>(x) - y);
      // Neighbours one encoding away on each side (same sign) are never closer.
      for (int delta : {-1, 1}) {
        const uint16_t n = static_cast<uint16_t>(b + delta);
        if ((n & 0x7FFF) == 0x7FFF || ((b ^ n) & 0x8000)) continue;  // wrapped or crossed the sign
        const double yn = bits_to_float(dt, n);
        if (std::isnan(yn) || std::isinf(yn)) continue;
        const double err_n = std::fabs(static_cast<double>(x) - yn);
        REQUIRE(err <= err_n);
        if (err == err_n) REQUIRE((b & 1) == 0);  // tie -> even
      }
    }
#if defined(__FLT16_MAX__)
    // Cross-check with the compiler's own _Float16 conversion (IEEE RNE).
    const _Float16 h = static_cast<_Float16>(x);
    uint16_t hb;
    std::memcpy(&hb, &h, 2);
    REQUIRE(float_to_fp16(x) == hb);
#endif
  }
}

TEST_CASE("e4m3 conversions", "[reference][half]") {
  CHECK(float_to_e4m3(1.0f) == 0x38);
  CHECK(float_to_e4m3(448.0f) == 0x7E);
  CHECK(float_to_e4m3(1000.0f) == 0x7E);  // satfinite
  CHECK(float_to_e4m3(-std::numeric_limits<float>::infinity()) == 0xFE);
  CHECK(float_to_e4m3(0x1p-9f) == 0x01);
  CHECK(float_to_e4m3(0x1p-10f) == 0x00);   // tie -> even zero
  CHECK(float_to_e4m3(3 * 0x1p-10f) == 0x02);  // tie between 1 and 2 steps -> 2
  CHECK(float_to_e4m3(1.0625f) == 0x38);    // tie between 1 and 1.125 -> even (1)
  CHECK(float_to_e4m3(1.1875f) == 0x3A);    // tie between 1.125 and 1.25 -> even (1.25)
  CHECK(e4m3_to_float(0x7E) == 448.0f);
  CHECK(std::isnan(e4m3_to_float(0x7F)));
  for (uint32_t b = 0; b < 256; ++b) {
    const float x = e4m3_to_float(static_cast<uint8_t>(b));
    if (!std::isnan(x)) REQUIRE(float_to_e4m3(x) == b);
  }
}

TEST_CASE("fill_fa3_distribution is deterministic and has FA3's outliers", "[reference]") {
  std::vector<uint16_t> a, b, c;
  const size_t n = 3'000'000;  // spans several chunks
  fill_fa3_distribution(a, DType::kBf16, n, 42);
  fill_fa3_distribution(b, DType::kBf16, n, 42);
  fill_fa3_distribution(c, DType::kBf16, n, 43);
  REQUIRE(a.size() == n);
  CHECK(a == b);
  CHECK(a != c);
  double sum = 0, sum_sq = 0;
  size_t big = 0;
  for (uint16_t bits : a) {
    const double x = bf16_to_float(bits);
    REQUIRE(std::isfinite(x));
    sum += x;
    sum_sq += x * x;
    if (std::fabs(x) > 6.0) ++big;  // N(0,1) essentially never exceeds 6; an N(0,100) outlier does 55% of the time
  }
  const double mean = sum / n, var = sum_sq / n - mean * mean;
  CHECK(std::fabs(mean) < 0.01);
  CHECK(var == Approx(1.1).epsilon(0.03));  // 1 + 0.001 * 100
  CHECK(big > 1300);                       // expected 0.001 * 0.55 * n = 1650
  CHECK(big < 2000);
  std::vector<uint16_t> h;
  fill_fa3_distribution(h, DType::kFp16, 1000, 1);
  for (uint16_t bits : h) REQUIRE(float_to_fp16(fp16_to_float(bits)) == bits);
  CHECK_THROWS_AS(fill_fa3_distribution(h, DType::kE4m3, 10, 1), Error);
}

TEST_CASE("reference with one key returns that key's V row", "[reference]") {
  auto q = HostTensor::contiguous(DType::kBf16, 1, 2, 1, 4);
  auto k = HostTensor::contiguous(DType::kBf16, 1, 1, 1, 4);
  auto v = HostTensor::contiguous(DType::kBf16, 1, 1, 1, 3);
  set_vec(q, 0, 0, 0, {1, 2, 3, 4});
  set_vec(q, 0, 1, 0, {-1, 0.5f, 0, 0});
  set_vec(k, 0, 0, 0, {0.5f, 0.25f, 1, -1});
  set_vec(v, 0, 0, 0, {3.5f, -1.25f, 0.125f});
  const auto rows = reference_rows(q, k, v, {}, all_rows(1, 1, 2));
  REQUIRE(rows.size() == 2);
  for (const auto& r : rows) {
    CHECK(r.visible_keys == 1);
    CHECK(r.out == std::vector<double>{3.5, -1.25, 0.125});
    CHECK(r.baseline == std::vector<float>{3.5f, -1.25f, 0.125f});
  }
  // lse of a single key is its scaled score; default scale 1/sqrt(4) = 0.5.
  CHECK(rows[0].lse == Approx(0.5 * (0.5 + 0.5 + 3 - 4)).margin(1e-12));
  CHECK(rows[1].lse == Approx(0.5 * (-0.5 + 0.125)).margin(1e-12));
}

TEST_CASE("reference with two keys of known scores", "[reference]") {
  auto q = HostTensor::contiguous(DType::kFp16, 1, 1, 1, 2);
  auto k = HostTensor::contiguous(DType::kFp16, 1, 2, 1, 2);
  auto v = HostTensor::contiguous(DType::kFp16, 1, 2, 1, 2);
  set_vec(q, 0, 0, 0, {1, 0});
  set_vec(k, 0, 0, 0, {0, 5});  // score 0
  set_vec(k, 0, 1, 0, {4, 0});  // score 4 * scale 0.5 = 2
  set_vec(v, 0, 0, 0, {1, 0});
  set_vec(v, 0, 1, 0, {0, 1});
  ReferenceOptions opt;
  opt.softmax_scale = 0.5f;
  const auto rows = reference_rows(q, k, v, opt, all_rows(1, 1, 1));
  const double e2 = std::exp(2.0);
  CHECK(rows[0].out[0] == Approx(1 / (1 + e2)).epsilon(1e-14));
  CHECK(rows[0].out[1] == Approx(e2 / (1 + e2)).epsilon(1e-14));
  CHECK(rows[0].lse == Approx(std::log(1 + e2)).epsilon(1e-14));
  // Baseline: P = (exp(-2), 1) rounded to fp16, sum in fp32, output rounded to fp16.
  const float p0 = round_to(DType::kFp16, std::exp(-2.0f));
  const float sum = std::exp(-2.0f) + 1.0f;
  CHECK(rows[0].baseline[0] == round_to(DType::kFp16, p0 / sum));
  CHECK(rows[0].baseline[1] == round_to(DType::kFp16, 1.0f / sum));
}

TEST_CASE("causal mask is bottom-right aligned; a row without keys gives 0 and -inf", "[reference]") {
  // seqlen_q 3, seqlen_k 1: query i sees key j iff j <= i - 2, so rows 0 and 1 see nothing.
  auto q = HostTensor::contiguous(DType::kBf16, 1, 3, 1, 2);
  auto k = HostTensor::contiguous(DType::kBf16, 1, 1, 1, 2);
  auto v = HostTensor::contiguous(DType::kBf16, 1, 1, 1, 2);
  for (int i = 0; i < 3; ++i) set_vec(q, 0, i, 0, {1, 1});
  set_vec(k, 0, 0, 0, {1, 1});
  set_vec(v, 0, 0, 0, {2, -3});
  ReferenceOptions opt;
  opt.causal = true;
  const auto rows = reference_rows(q, k, v, opt, all_rows(1, 1, 3));
  for (int i = 0; i < 2; ++i) {
    CHECK(rows[i].visible_keys == 0);
    CHECK(rows[i].out == std::vector<double>{0, 0});
    CHECK(rows[i].baseline == std::vector<float>{0, 0});
    CHECK(std::isinf(rows[i].lse));
    CHECK(rows[i].lse < 0);
  }
  CHECK(rows[2].visible_keys == 1);
  CHECK(rows[2].out == std::vector<double>{2, -3});

  // seqlen_q 2, seqlen_k 4: row 0 sees keys 0..2, row 1 sees all four. V = key index, equal scores.
  auto q2 = HostTensor::contiguous(DType::kBf16, 1, 2, 1, 1);
  auto k2 = HostTensor::contiguous(DType::kBf16, 1, 4, 1, 1);
  auto v2 = HostTensor::contiguous(DType::kBf16, 1, 4, 1, 1);
  for (int j = 0; j < 4; ++j) set_vec(v2, 0, j, 0, {static_cast<float>(j)});
  const auto rows2 = reference_rows(q2, k2, v2, opt, all_rows(1, 1, 2));
  CHECK(rows2[0].visible_keys == 3);
  CHECK(rows2[0].out[0] == Approx(1.0).epsilon(1e-14));  // mean of 0, 1, 2
  CHECK(rows2[0].lse == Approx(std::log(3.0)).epsilon(1e-14));
  CHECK(rows2[1].visible_keys == 4);
  CHECK(rows2[1].out[0] == Approx(1.5).epsilon(1e-14));
}

TEST_CASE("sliding window, softcap and sinks in the reference", "[reference][variant]") {
  // seqlen_q 3, seqlen_k 6 (d = 3), q = 0 so every score is 0 and O is the mean of the visible V rows (V = j).
  auto q = HostTensor::contiguous(DType::kBf16, 1, 3, 1, 1);
  auto k = HostTensor::contiguous(DType::kBf16, 1, 6, 1, 1);
  auto v = HostTensor::contiguous(DType::kBf16, 1, 6, 1, 1);
  for (int j = 0; j < 6; ++j) {
    set_vec(k, 0, j, 0, {1});
    set_vec(v, 0, j, 0, {static_cast<float>(j)});
  }
  ReferenceOptions opt;
  opt.window_left = 1;
  opt.window_right = 1;  // query i sees keys i + 2 .. i + 4, clipped to [0, 6)
  auto rows = reference_rows(q, k, v, opt, all_rows(1, 1, 3));
  CHECK((rows[0].first_key == 2 && rows[0].visible_keys == 3));
  CHECK(rows[0].out[0] == Approx(3.0).epsilon(1e-14));
  CHECK((rows[2].first_key == 4 && rows[2].visible_keys == 2));
  CHECK(rows[2].out[0] == Approx(4.5).epsilon(1e-14));
  // causal is window_right 0: row 0 sees keys 2 and 3.
  opt.causal = true;
  rows = reference_rows(q, k, v, opt, all_rows(1, 1, 3));
  CHECK((rows[0].first_key == 2 && rows[0].visible_keys == 2));
  CHECK(rows[0].lse == Approx(std::log(2.0)).epsilon(1e-14));
  // A one-key window returns that key's row exactly.
  opt.causal = false;
  opt.window_left = opt.window_right = 0;
  rows = reference_rows(q, k, v, opt, all_rows(1, 1, 3));
  for (int i = 0; i < 3; ++i) CHECK(rows[i].out == std::vector<double>{static_cast<double>(i + 3)});

  // A sink of logit s among n keys of score 0: O = mean * n / (n + e^s), lse = log(n + e^s).
  ReferenceOptions sink_opt;
  sink_opt.sinks = {1.5f};
  rows = reference_rows(q, k, v, sink_opt, all_rows(1, 1, 1));
  CHECK(rows[0].out[0] == Approx(2.5 * 6 / (6 + std::exp(1.5))).epsilon(1e-12));
  CHECK(rows[0].lse == Approx(std::log(6 + std::exp(1.5))).epsilon(1e-12));
  CHECK(rows[0].baseline[0] == round_to(DType::kBf16, static_cast<float>(2.5 * 6 / (6 + std::exp(1.5)))));
  // A row that sees no key keeps O = 0 and gets lse = its sink.
  sink_opt.causal = true;
  sink_opt.window_left = 0;
  auto q1 = HostTensor::contiguous(DType::kBf16, 1, 8, 1, 1);
  rows = reference_rows(q1, k, v, sink_opt, all_rows(1, 1, 1));
  CHECK(rows[0].visible_keys == 0);
  CHECK(rows[0].out == std::vector<double>{0});
  CHECK(rows[0].lse == Approx(1.5));

  // softcap: S' = c * tanh(S / c); one query of score 4 * 0.5 = 2 against a key of score 0.
  auto q2 = HostTensor::contiguous(DType::kFp16, 1, 1, 1, 2);
  auto k2 = HostTensor::contiguous(DType::kFp16, 1, 2, 1, 2);
  auto v2 = HostTensor::contiguous(DType::kFp16, 1, 2, 1, 2);
  set_vec(q2, 0, 0, 0, {1, 0});
  set_vec(k2, 0, 0, 0, {0, 5});
  set_vec(k2, 0, 1, 0, {4, 0});
  set_vec(v2, 0, 0, 0, {1, 0});
  set_vec(v2, 0, 1, 0, {0, 1});
  ReferenceOptions cap;
  cap.softmax_scale = 0.5f;
  cap.softcap = 1.5f;
  rows = reference_rows(q2, k2, v2, cap, all_rows(1, 1, 1));
  const double s1 = 1.5 * std::tanh(2.0 / 1.5);
  CHECK(rows[0].out[1] == Approx(std::exp(s1) / (1 + std::exp(s1))).epsilon(1e-14));
  CHECK(rows[0].lse == Approx(std::log(1 + std::exp(s1))).epsilon(1e-14));
}

TEST_CASE("GQA maps query head h to kv head h / (num_heads / num_heads_kv)", "[reference]") {
  auto q = HostTensor::contiguous(DType::kBf16, 2, 1, 6, 2);
  auto k = HostTensor::contiguous(DType::kBf16, 2, 1, 3, 2);
  auto v = HostTensor::contiguous(DType::kBf16, 2, 1, 3, 2);
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 3; ++h) set_vec(v, b, 0, h, {static_cast<float>(10 * b + h), static_cast<float>(-h)});
  const auto rows = reference_rows(q, k, v, {}, all_rows(2, 6, 1));
  REQUIRE(rows.size() == 12);
  for (const auto& r : rows) {
    const int64_t kv = r.index.head / 2;
    CHECK(r.out[0] == 10.0 * r.index.batch + kv);
    CHECK(r.out[1] == -static_cast<double>(kv));
  }
  auto k_bad = HostTensor::contiguous(DType::kBf16, 2, 1, 4, 2);
  auto v_bad = HostTensor::contiguous(DType::kBf16, 2, 1, 4, 2);
  CHECK_THROWS_AS(reference_rows(q, k_bad, v_bad, {}, all_rows(2, 6, 1)), Error);
  CHECK_THROWS_AS(reference_rows(q, k, v, {}, {{0, 6, 0}}), Error);
  auto q_fp16 = HostTensor::contiguous(DType::kFp16, 2, 1, 6, 2);
  CHECK_THROWS_AS(reference_rows(q_fp16, k, v, {}, all_rows(2, 6, 1)), Error);
}

TEST_CASE("strided tensors give the same reference as contiguous ones", "[reference]") {
  auto q = HostTensor::contiguous(DType::kBf16, 1, 5, 2, 8);
  auto k = HostTensor::contiguous(DType::kBf16, 1, 7, 2, 8);
  auto v = HostTensor::contiguous(DType::kBf16, 1, 7, 2, 8);
  fill_fa3_distribution(q.data, DType::kBf16, q.data.size(), 1);
  fill_fa3_distribution(k.data, DType::kBf16, k.data.size(), 2);
  fill_fa3_distribution(v.data, DType::kBf16, v.data.size(), 3);
  // Same k with a padded head stride (16 instead of 8) and garbage in the padding.
  HostTensor kp = k;
  kp.stride_head = 16;
  kp.stride_seq = 32;
  kp.stride_batch = 7 * 32;
  kp.data.assign(7 * 32, float_to_bf16(1000.0f));
  for (int s = 0; s < 7; ++s)
    for (int h = 0; h < 2; ++h)
      for (int d = 0; d < 8; ++d) kp.data[kp.offset(0, s, h, d)] = k.data[k.offset(0, s, h, d)];
  const auto a = reference_rows(q, k, v, {}, all_rows(1, 2, 5));
  const auto b = reference_rows(q, kp, v, {}, all_rows(1, 2, 5));
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].out == b[i].out);
    CHECK(a[i].lse == b[i].lse);
  }
  kp.data.resize(100);  // strides now reach past the data
  CHECK_THROWS_AS(reference_rows(q, kp, v, {}, all_rows(1, 2, 5)), Error);
}

TEST_CASE("checker: baseline error is real, reference passes, perturbations fail", "[reference]") {
  for (DType dt : {DType::kBf16, DType::kFp16}) {
    const int64_t B = 2, SQ = 37, SK = 53, H = 4, HKV = 2, D = 64;
    auto q = HostTensor::contiguous(dt, B, SQ, H, D);
    auto k = HostTensor::contiguous(dt, B, SK, HKV, D);
    auto v = HostTensor::contiguous(dt, B, SK, HKV, D);
    fill_fa3_distribution(q.data, dt, q.data.size(), 11);
    fill_fa3_distribution(k.data, dt, k.data.size(), 12);
    fill_fa3_distribution(v.data, dt, v.data.size(), 13);
    ReferenceOptions opt;
    opt.causal = true;
    opt.threads = 2;
    const auto rows = all_rows(B, H, SQ);
    const auto ref = reference_rows(q, k, v, opt, rows);

    // The kernel stand-in: the reference rounded to dtype, lse rounded to fp32.
    auto out = HostTensor::contiguous(dt, B, SQ, H, D);
    std::vector<float> lse(static_cast<size_t>(B * H * SQ));
    for (const auto& r : ref) {
      for (int64_t d = 0; d < D; ++d) {
        out.data[out.offset(r.index.batch, r.index.row, r.index.head, d)] =
            float_to_bits(dt, static_cast<float>(r.out[d]));
      }
      lse[(r.index.batch * H + r.index.head) * SQ + r.index.row] = static_cast<float>(r.lse);
    }
    const KernelRows good = gather_kernel_rows(out, lse, rows);
    const CheckResult pass = check_rows(dt, ref, good);
    INFO(dtype_name(dt) << ": " << format_check(pass) << " " << pass.failure);
    CHECK(pass.passed);
    CHECK(pass.values_checked == B * H * SQ * D);
    CHECK(pass.baseline_max_err > 0.0);
    CHECK(pass.baseline_mean_err > 0.0);
    CHECK(pass.rounding_noise > 0.0);
    CHECK(pass.tolerance == 2 * pass.baseline_max_err + 2 * pass.rounding_noise);
    CHECK(pass.max_abs_err > 0.0);  // rounding the output to dtype is not free
    CHECK(pass.max_abs_err <= pass.tolerance);
    CHECK(pass.lse_checked);
    CHECK(pass.lse_bad_rows == 0);

    // One value off by more than the tolerance fails, and the checker points at it.
    KernelRows bad = good;
    const size_t victim = 5 * D + 7;
    const float shifted = bits_to_float(dt, bad.out[victim]) + static_cast<float>(2 * pass.tolerance + 0.05);
    bad.out[victim] = float_to_bits(dt, shifted);
    const CheckResult fail = check_rows(dt, ref, bad);
    CHECK_FALSE(fail.passed);
    CHECK(fail.max_abs_err > fail.tolerance);
    CHECK(fail.worst_row == ref[5].index);
    CHECK(fail.worst_col == 7);

    // NaN (the poison pattern 0xFFFF) fails even when everything else is right.
    KernelRows poisoned = good;
    poisoned.out[3] = 0xFFFF;
    const CheckResult nan = check_rows(dt, ref, poisoned);
    CHECK_FALSE(nan.passed);
    CHECK(nan.nan_count == 1);

    // A wrong lse (log2 instead of ln) fails.
    KernelRows wrong_lse = good;
    for (size_t i = 0; i < ref.size(); ++i)
      if (std::isfinite(ref[i].lse)) wrong_lse.lse[i] = static_cast<float>(ref[i].lse / std::log(2.0));
    CHECK_FALSE(check_rows(dt, ref, wrong_lse).passed);
    // lse not given: output-only check still passes.
    KernelRows no_lse = good;
    no_lse.lse.clear();
    const CheckResult out_only = check_rows(dt, ref, no_lse);
    CHECK(out_only.passed);
    CHECK_FALSE(out_only.lse_checked);
  }
}

TEST_CASE("checker: rows with -inf lse must be exactly -inf in the kernel", "[reference]") {
  auto q = HostTensor::contiguous(DType::kBf16, 1, 4, 1, 2);
  auto k = HostTensor::contiguous(DType::kBf16, 1, 2, 1, 2);
  auto v = HostTensor::contiguous(DType::kBf16, 1, 2, 1, 2);
  set_vec(v, 0, 0, 0, {1, 2});
  set_vec(v, 0, 1, 0, {3, 4});
  ReferenceOptions opt;
  opt.causal = true;  // rows 0 and 1 see no key
  const auto ref = reference_rows(q, k, v, opt, all_rows(1, 1, 4));
  KernelRows kr;
  kr.out.assign(8, 0);
  kr.out[4] = float_to_bf16(1.0f), kr.out[5] = float_to_bf16(2.0f);
  kr.out[6] = float_to_bf16(2.0f), kr.out[7] = float_to_bf16(3.0f);
  const float ninf = -std::numeric_limits<float>::infinity();
  kr.lse = {ninf, ninf, 0.0f, static_cast<float>(std::log(2.0))};
  const CheckResult ok = check_rows(DType::kBf16, ref, kr);
  INFO(format_check(ok) << " " << ok.failure);
  CHECK(ok.passed);
  kr.lse[1] = 0.0f;
  const CheckResult bad = check_rows(DType::kBf16, ref, kr);
  CHECK_FALSE(bad.passed);
  CHECK(bad.lse_bad_rows == 1);
  kr.lse[1] = std::numeric_limits<float>::infinity();  // +inf is not -inf
  CHECK_FALSE(check_rows(DType::kBf16, ref, kr).passed);
  kr.lse[1] = ninf;
  kr.lse[2] = ninf;  // -inf where the reference is finite
  CHECK_FALSE(check_rows(DType::kBf16, ref, kr).passed);
  // Size mismatches are argument errors, not silent passes.
  kr.out.pop_back();
  CHECK_THROWS_AS(check_rows(DType::kBf16, ref, kr), Error);
  CHECK_FALSE(check_rows(DType::kBf16, {}, KernelRows{}).passed);
}

TEST_CASE("sample_rows covers the first and last m-block of the last head", "[reference]") {
  const auto rows = sample_rows(3, 4, 1000, 128, 200, 5);
  CHECK(std::is_sorted(rows.begin(), rows.end()));
  CHECK(std::adjacent_find(rows.begin(), rows.end()) == rows.end());
  size_t first = 0, last = 0;
  for (const auto& r : rows) {
    REQUIRE(r.batch < 3);
    REQUIRE(r.head < 4);
    REQUIRE(r.row < 1000);
    if (r.batch == 2 && r.head == 3 && r.row < 128) ++first;
    if (r.batch == 2 && r.head == 3 && r.row >= 896) ++last;
  }
  CHECK(first == 128);
  CHECK(last == 104);  // rows 896..999
  CHECK(rows.size() > 232 + 150);  // ~200 random rows, few duplicates
  CHECK(rows == sample_rows(3, 4, 1000, 128, 200, 5));
  CHECK(rows != sample_rows(3, 4, 1000, 128, 200, 6));
  CHECK(sample_rows(1, 1, 5, 128, 0, 1).size() == 5);  // seqlen_q < block_m: both blocks are all rows
}

TEST_CASE("sample_rows does at most the problem's row count of work", "[reference]") {
  // As many random rows as the problem has: every row, not draws with replacement (about 63% of them).
  CHECK(sample_rows(1, 2, 1000, 128, 2000, 3) == all_rows(1, 2, 1000));
  CHECK(sample_rows(2, 3, 50, 16, 1000, 3) == all_rows(2, 3, 50));
  // One fewer is still a sample.
  CHECK(sample_rows(1, 2, 1000, 128, 1999, 3).size() < 2000);
  // --rows' maximum (10^8) on a tiny problem: its 5 rows, without drawing 10^8 rows (2.4 GB) first.
  CHECK(sample_rows(1, 1, 5, 128, 100000000, 1) == all_rows(1, 1, 5));
}

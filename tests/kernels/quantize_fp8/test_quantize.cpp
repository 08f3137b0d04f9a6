// FP8 pre-pass family without a GPU: spec parsing, the one validator and canonical form (spec.h), geometry
// (geometry.h), the sign diagonal and descale rule (params.h), the warp layout of device/layout.cuh replayed
// on the host against the float64 model (testing/fp8_prepass.h), emission and NVRTC compilation (emit.h), the
// generic registry, runtime and C ABI reaching the family, and the launch checks that run before any driver
// call (launch.h).
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fa3jit/fa3jit.h"
#include "jit/compiler.h"
#include "jit/family.h"
#include "kernels/quantize_fp8/device/layout.cuh"
#include "kernels/quantize_fp8/emit.h"
#include "kernels/quantize_fp8/geometry.h"
#include "kernels/quantize_fp8/launch.h"
#include "kernels/quantize_fp8/params.h"
#include "kernels/quantize_fp8/spec.h"
#include "runtime/runtime.h"
#include "testing/fp8_prepass.h"
#include "testing/half.h"
#include "testing/reference.h"
#include "../../jit/temp_dir.h"

using fa3jit::DType;
using fa3jit::Error;
using fa3jit::ErrorCode;
using fa3jit::quantize_fp8::Rope;
using fa3jit::quantize_fp8::Spec;
namespace qf = fa3jit::quantize_fp8;
using Catch::Matchers::Contains;

namespace {

// parse_spec is overloaded on json and std::string; a string literal would be ambiguous.
Spec parse(const std::string& text) { return qf::parse_spec(text); }

// A cache directory of its own, removed afterwards.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    char tmpl[] = "/tmp/fa3jit-quantize-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

struct BadCase {
  const char* name;
  const char* json;
  std::vector<std::string> fragments;  // each must appear in the message: field, value, what is allowed
};

const std::vector<BadCase> kBadSpecs = {
    {"syntax error", R"({"dtype": "bf16", "head_dim": 128,)", {"not valid JSON"}},
    {"non-object", R"([1, 2])", {"must be a JSON object", "[1,2]"}},
    {"duplicate key", R"({"dtype": "bf16", "head_dim": 128, "head_dim": 64})", {"\"head_dim\"", "twice"}},
    {"unknown key", R"({"dtype": "bf16", "head_dim": 128, "causal": true})",
     {"\"causal\"", "unknown", "kind, dtype, head_dim, head_dim_v, hadamard, rope, rotary_dim, q_block_rows, k_block_rows"}},
    {"kind of another family", R"({"kind": "attention_fwd", "dtype": "bf16", "head_dim": 128})",
     {"\"kind\"", "\"attention_fwd\"", "\"quantize_fp8\""}},
    {"missing dtype", R"({"head_dim": 128})", {"\"dtype\"", "missing", "\"fp16\", \"bf16\""}},
    {"dtype e4m3", R"({"dtype": "e4m3", "head_dim": 128})", {"\"dtype\"", "\"e4m3\"", "\"fp16\", \"bf16\""}},
    {"dtype wrong type", R"({"dtype": 16, "head_dim": 128})", {"\"dtype\"", "16", "wrong type"}},
    {"missing head_dim", R"({"dtype": "bf16"})", {"\"head_dim\"", "missing", "one of 64, 128, 256"}},
    {"head_dim 96", R"({"dtype": "bf16", "head_dim": 96})", {"\"head_dim\"", "96", "one of 64, 128, 256"}},
    {"head_dim float", R"({"dtype": "bf16", "head_dim": 128.0})", {"\"head_dim\"", "128.0", "wrong type"}},
    {"head_dim_v 512", R"({"dtype": "bf16", "head_dim": 128, "head_dim_v": 512})",
     {"\"head_dim_v\"", "512", "one of 64, 128, 256"}},
    {"hadamard string", R"({"dtype": "bf16", "head_dim": 128, "hadamard": "yes"})",
     {"\"hadamard\"", "\"yes\"", "true or false"}},
    {"rope unknown", R"({"dtype": "bf16", "head_dim": 128, "rope": "gptj"})",
     {"\"rope\"", "\"gptj\"", "\"none\", \"neox\", \"interleaved\""}},
    {"rope wrong type", R"({"dtype": "bf16", "head_dim": 128, "rope": 1})", {"\"rope\"", "1", "wrong type"}},
    {"rotary_dim without rope", R"({"dtype": "bf16", "head_dim": 128, "rotary_dim": 64})",
     {"\"rotary_dim\"", "64", "rope \"none\"", "128 (head_dim"}},
    {"rotary_dim over head_dim", R"({"dtype": "bf16", "head_dim": 64, "rope": "neox", "rotary_dim": 128})",
     {"\"rotary_dim\"", "128", "a power of two in [16, 64]"}},
    {"neox rotary_dim not a power of two", R"({"dtype": "bf16", "head_dim": 128, "rope": "neox", "rotary_dim": 96})",
     {"\"rotary_dim\"", "96", "neox", "a power of two in [16, 128]"}},
    {"neox rotary_dim 8", R"({"dtype": "bf16", "head_dim": 128, "rope": "neox", "rotary_dim": 8})",
     {"\"rotary_dim\"", ": 8", "a power of two in [16, 128]"}},
    {"interleaved rotary_dim 12", R"({"dtype": "fp16", "head_dim": 64, "rope": "interleaved", "rotary_dim": 12})",
     {"\"rotary_dim\"", "12", "a multiple of 8 in [8, 64]"}},
    {"interleaved rotary_dim 0", R"({"dtype": "fp16", "head_dim": 64, "rope": "interleaved", "rotary_dim": 0})",
     {"\"rotary_dim\"", ": 0", "a multiple of 8 in [8, 64]"}},
    {"q_block_rows 100", R"({"dtype": "bf16", "head_dim": 128, "q_block_rows": 100})",
     {"\"q_block_rows\"", "100", "a multiple of 16 in [16, 256]"}},
    {"q_block_rows 0", R"({"dtype": "bf16", "head_dim": 128, "q_block_rows": 0})",
     {"\"q_block_rows\"", ": 0", "a multiple of 16 in [16, 256]"}},
    {"k_block_rows 272", R"({"dtype": "bf16", "head_dim": 128, "k_block_rows": 272})",
     {"\"k_block_rows\"", "272", "a multiple of 16 in [16, 256]"}},
    {"k_block_rows negative", R"({"dtype": "bf16", "head_dim": 128, "k_block_rows": -128})",
     {"\"k_block_rows\"", "-128", "a multiple of 16 in [16, 256]"}},
    {"k_block_rows huge", R"({"dtype": "bf16", "head_dim": 128, "k_block_rows": 18446744073709551615})",
     {"\"k_block_rows\"", "18446744073709551615"}},
    {"problem is no kernel field", R"({"dtype": "bf16", "head_dim": 128, "problem": {"batch": 1}})",
     {"\"problem\"", "unknown"}},
};

}  // namespace

// ---- spec ------------------------------------------------------------------------------------------------

TEST_CASE("quantize spec: a minimal spec resolves every field", "[quantize][spec]") {
  const Spec s = parse(R"({"dtype": "bf16", "head_dim": 128})");
  CHECK(s.dtype == DType::kBf16);
  CHECK(s.head_dim == 128);
  CHECK(s.head_dim_v == 128);
  CHECK(s.hadamard);
  CHECK(s.rope == Rope::kNone);
  CHECK(s.rotary_dim == 128);
  CHECK(s.q_block_rows == 128);
  CHECK(s.k_block_rows == 128);
  CHECK(s == qf::default_spec(DType::kBf16, 128, 128));

  const Spec t = parse(R"({"kind": "quantize_fp8", "dtype": "fp16", "head_dim": 256, "head_dim_v": 64,
                           "hadamard": false, "rope": "interleaved", "rotary_dim": 24, "q_block_rows": 176,
                           "k_block_rows": 16})");
  CHECK(t.dtype == DType::kFp16);
  CHECK(t.head_dim == 256);
  CHECK(t.head_dim_v == 64);
  CHECK_FALSE(t.hadamard);
  CHECK(t.rope == Rope::kInterleaved);
  CHECK(t.rotary_dim == 24);
  CHECK(t.q_block_rows == 176);
  CHECK(t.k_block_rows == 16);
  CHECK(parse(R"({"dtype": "bf16", "head_dim": 64, "rope": "neox"})").rotary_dim == 64);
  CHECK(parse(R"({"dtype": "bf16", "head_dim": 128, "rope": "neox", "rotary_dim": 16})").rotary_dim == 16);
}

TEST_CASE("quantize spec: bad specs name the field, the value and what is allowed", "[quantize][spec]") {
  for (const BadCase& c : kBadSpecs) {
    INFO(c.name << ": " << c.json);
    try {
      parse(c.json);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidSpec);
      for (const std::string& f : c.fragments) CHECK_THAT(e.what(), Contains(f));
    }
  }
}

TEST_CASE("quantize spec: the validator guards specs built in code", "[quantize][spec]") {
  Spec s;
  s.head_dim = 80;
  CHECK_THROWS_WITH(qf::validate(s), Contains("\"head_dim\": 80"));
  s = Spec{};
  s.dtype = DType::kE4m3;
  CHECK_THROWS_WITH(qf::validate(s), Contains("\"dtype\": \"e4m3\""));
  s = Spec{};
  s.q_block_rows = 24;
  CHECK_THROWS_WITH(qf::validate(s), Contains("\"q_block_rows\": 24"));
  s = Spec{};
  s.rope = static_cast<Rope>(7);
  CHECK_THROWS_WITH(qf::validate(s), Contains("\"rope\": 7"));
  s = Spec{};
  s.rope = Rope::kNeox;
  s.rotary_dim = 48;
  CHECK_THROWS_WITH(qf::validate(s), Contains("\"rotary_dim\": 48"));
  CHECK_THROWS_AS(qf::emit_kernel(s), Error);
  CHECK_THROWS_WITH(qf::default_spec(DType::kBf16, 128, 96), Contains("\"head_dim_v\": 96"));
}

TEST_CASE("quantize spec: canonical JSON round-trips and names the kind", "[quantize][spec]") {
  for (const char* json : {R"({"dtype": "bf16", "head_dim": 128})",
                           R"({"dtype": "fp16", "head_dim": 64, "head_dim_v": 256, "hadamard": false})",
                           R"({"dtype": "bf16", "head_dim": 256, "rope": "neox", "rotary_dim": 32,
                               "q_block_rows": 16, "k_block_rows": 256})"}) {
    INFO(json);
    const Spec s = parse(json);
    const std::string canonical = qf::canonical_string(s);
    CHECK(parse(canonical) == s);
    CHECK(qf::canonical_string(parse(canonical)) == canonical);
    const nlohmann::json doc = nlohmann::json::parse(canonical);
    CHECK(doc.at("kind") == "quantize_fp8");
    CHECK(doc.size() == 10);  // every field spelled out, v_layout included
    CHECK(doc.at("v_layout") == "seq_major");
  }
}

TEST_CASE("quantize spec: one spec written two ways is one kernel; different specs are different kernels",
          "[quantize][spec]") {
  const Spec a = parse(R"({"dtype": "bf16", "head_dim": 128})");
  const Spec b = parse(R"({"k_block_rows": 128, "q_block_rows": 128, "rotary_dim": 128, "rope": "none",
                           "hadamard": true, "head_dim_v": 128, "head_dim": 128, "kind": "quantize_fp8",
                           "dtype": "bf16"})");
  CHECK(a == b);
  CHECK(qf::kernel_name(a) == qf::kernel_name(b));
  CHECK(qf::emit_kernel(a).code == qf::emit_kernel(b).code);
  CHECK(qf::kernel_name(a).rfind("fa3jit_quantize_fp8_bf16_d128_dv128_h_q128_k128_", 0) == 0);

  std::set<std::string> names;
  const char* specs[] = {
      R"({"dtype": "bf16", "head_dim": 128})",
      R"({"dtype": "fp16", "head_dim": 128})",
      R"({"dtype": "bf16", "head_dim": 64})",
      R"({"dtype": "bf16", "head_dim": 128, "head_dim_v": 64})",
      R"({"dtype": "bf16", "head_dim": 128, "hadamard": false})",
      R"({"dtype": "bf16", "head_dim": 128, "rope": "neox"})",
      R"({"dtype": "bf16", "head_dim": 128, "rope": "interleaved"})",
      R"({"dtype": "bf16", "head_dim": 128, "rope": "neox", "rotary_dim": 64})",
      R"({"dtype": "bf16", "head_dim": 128, "q_block_rows": 64})",
      R"({"dtype": "bf16", "head_dim": 128, "k_block_rows": 176})",
  };
  for (const char* s : specs) names.insert(qf::kernel_name(parse(s)));
  CHECK(names.size() == std::size(specs));
}

// ---- geometry ----------------------------------------------------------------------------------------------

TEST_CASE("quantize geometry: every block size and head dim packs into a legal CTA and cluster",
          "[quantize][geometry]") {
  for (int d : {64, 128, 256})
    for (Rope rope : {Rope::kNone, Rope::kNeox})
      for (int rq = 16; rq <= 256; rq += 16)
        for (int rk : {16, 48, 64, 112, 128, 176, 192, 256}) {
          Spec s = qf::default_spec(DType::kBf16, d, 128);
          s.rope = rope;
          s.q_block_rows = rq;
          s.k_block_rows = rk;
          qf::validate(s);
          INFO(qf::spec_summary(s));
          const qf::Geometry g = qf::derive_geometry(s);
          CHECK(g.row_lanes * 32 == d);
          CHECK(g.rows_per_warp * g.row_lanes == 32);
          CHECK(g.warps_per_cta >= qf::kMinWarps);
          CHECK(g.warps_per_cta <= (rope == Rope::kNone ? 16 : 12));
          CHECK(g.cluster_size >= 1);
          CHECK(g.cluster_size <= qf::kMaxCluster);
          CHECK(g.num_threads == 32 * g.warps_per_cta);
          // Two CTAs per SM at the register budget.
          CHECK(g.min_ctas_per_sm >= 2);
          CHECK(g.min_ctas_per_sm * g.num_threads * g.register_budget <= qf::kRegistersPerSm);
          for (const qf::BlockGeometry* b : {&g.q, &g.k}) {
            CHECK(b->warps_per_block * g.rows_per_warp == b->block_rows);
            CHECK(b->blocks_per_cluster >= 1);
            CHECK(b->blocks_per_cluster * b->warps_per_block <= g.cluster_size * g.warps_per_cta);
          }
          CHECK(g.v_rows_per_cta == qf::kVSteps * g.num_threads * 8 / s.head_dim_v);
          for (int pass = 0; pass < qf::kNumPasses; ++pass) CHECK(g.smem_bytes[pass] <= 48 * 1024);
        }
  // The common cases need no cluster and waste no warp.
  const qf::Geometry d128 = qf::derive_geometry(qf::default_spec(DType::kBf16, 128, 128));
  CHECK(d128.warps_per_cta == 16);
  CHECK(d128.cluster_size == 1);
  CHECK(d128.q.blocks_per_cluster == 1);
  const qf::Geometry d64 = qf::derive_geometry(qf::default_spec(DType::kBf16, 64, 64));
  CHECK(d64.cluster_size == 1);
  CHECK(d64.q.blocks_per_cluster * d64.q.warps_per_block == d64.warps_per_cta);
  // 128 x 256 is 32 warps: two CTAs of one cluster.
  const qf::Geometry d256 = qf::derive_geometry(qf::default_spec(DType::kBf16, 256, 256));
  CHECK(d256.cluster_size == 2);
  CHECK(d256.warps_per_cta == 16);
}

// ---- the sign diagonal and the descale rule --------------------------------------------------------------

TEST_CASE("quantize: hadamard_sign is +-1, reproducible, balanced and seed-dependent", "[quantize][hadamard]") {
  static_assert(qf::hadamard_sign(0, 0) == 1.0f || qf::hadamard_sign(0, 0) == -1.0f, "constexpr");
  for (uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{42}, ~uint64_t{0}, uint64_t{0x9E3779B97F4A7C15ull}}) {
    int negative = 0;
    for (int i = 0; i < 4096; ++i) {
      const float s = qf::hadamard_sign(seed, i);
      REQUIRE((s == 1.0f || s == -1.0f));
      CHECK(s == qf::hadamard_sign(seed, i));
      negative += s < 0;
    }
    CHECK(negative > 1800);
    CHECK(negative < 2300);
  }
  // Another seed gives another diagonal (for 256 entries, equal by chance with probability 2^-256).
  int differ = 0;
  for (int i = 0; i < 256; ++i) differ += qf::hadamard_sign(1, i) != qf::hadamard_sign(2, i);
  CHECK(differ > 64);
}

TEST_CASE("quantize: descale_from_amax is amax / 448, 1 for 0, and always finite and positive",
          "[quantize][descale]") {
  CHECK(qf::descale_from_amax(0.0f) == 1.0f);
  CHECK(qf::descale_from_amax(-0.0f) == 1.0f);
  CHECK(qf::descale_from_amax(std::numeric_limits<float>::quiet_NaN()) == 1.0f);
  CHECK(qf::descale_from_amax(448.0f) == 1.0f);
  CHECK(qf::descale_from_amax(1.0f) == 1.0f / 448.0f);
  CHECK(qf::descale_from_amax(1e-40f) == qf::kMinAmax / 448.0f);
  CHECK(qf::descale_from_amax(std::numeric_limits<float>::infinity()) == qf::kMaxAmax / 448.0f);
  CHECK(std::isnormal(qf::descale_from_amax(1e-40f)));
  CHECK(std::isfinite(qf::descale_from_amax(std::numeric_limits<float>::infinity())));
  // Monotone: the V channel reduction takes the maximum of descales.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-120.0f, 120.0f);
  for (int i = 0; i < 10000; ++i) {
    const float a = std::exp2(exponent(rng)), b = std::exp2(exponent(rng));
    if (a <= b) CHECK(qf::descale_from_amax(a) <= qf::descale_from_amax(b));
    CHECK(qf::descale_from_amax(std::max(a, b)) == std::max(qf::descale_from_amax(a), qf::descale_from_amax(b)));
  }
}

// ---- the warp layout, replayed on the host -------------------------------------------------------------------

namespace {

constexpr int kC = qf::kRowChunks, kE = qf::kChunkElems;

// One row as its row_lanes lanes hold it (device/layout.cuh), with the kernel's steps transcribed lane by lane;
// a shfl.xor reads the partner lane's value from before the step.
struct SimRow {
  int d, lanes;
  std::vector<std::array<std::array<float, kE>, kC>> x;  // [lane][k][j]
  SimRow(int head_dim, const float* in) : d(head_dim), lanes(qf::row_lanes(head_dim)), x(static_cast<size_t>(lanes)) {
    for (int r = 0; r < lanes; ++r)
      for (int k = 0; k < kC; ++k)
        for (int j = 0; j < kE; ++j) x[r][k][j] = in[qf::fragment_element(d, k, r, j)];
  }
  std::vector<float> row() const {
    std::vector<float> out(static_cast<size_t>(d));
    for (int r = 0; r < lanes; ++r)
      for (int k = 0; k < kC; ++k)
        for (int j = 0; j < kE; ++j) out[static_cast<size_t>(qf::fragment_element(d, k, r, j))] = x[r][k][j];
    return out;
  }
};

// device/rope.cuh: apply_rope.
void sim_rope(const Spec& s, SimRow& row, const float* cos_row, const float* sin_row) {
  const int L = row.lanes, rot_chunks = s.rotary_dim / kE;
  if (s.rope == Rope::kInterleaved) {
    for (int r = 0; r < L; ++r)
      for (int k = 0; k < kC; ++k) {
        const int c = k * L + r;
        if (c >= rot_chunks) continue;
        for (int q = 0; q < 4; ++q) {
          const float cs = cos_row[4 * c + q], sn = sin_row[4 * c + q];
          const float x1 = row.x[r][k][2 * q], x2 = row.x[r][k][2 * q + 1];
          row.x[r][k][2 * q] = x1 * cs - x2 * sn;
          row.x[r][k][2 * q + 1] = x1 * sn + x2 * cs;
        }
      }
  } else if (s.rope == Rope::kNeox) {
    const int half = rot_chunks / 2;
    if (half < L) {
      const SimRow before = row;
      for (int r = 0; r < 2 * half; ++r) {
        const int col = (r & ~half) * kE;
        const float sign = (r & half) ? 1.0f : -1.0f;
        for (int j = 0; j < kE; ++j)
          row.x[r][0][j] = before.x[r][0][j] * cos_row[col + j] + sign * (before.x[r ^ half][0][j] * sin_row[col + j]);
      }
    } else {
      const int kbit = half / L;
      for (int r = 0; r < L; ++r)
        for (int k = 0; k < 2 * kbit; ++k) {
          if (k & kbit) continue;
          const int col = (k * L + r) * kE;
          for (int j = 0; j < kE; ++j) {
            const float x1 = row.x[r][k][j], x2 = row.x[r][k + kbit][j];
            row.x[r][k][j] = x1 * cos_row[col + j] - x2 * sin_row[col + j];
            row.x[r][k + kbit][j] = x1 * sin_row[col + j] + x2 * cos_row[col + j];
          }
        }
    }
  }
}

// device/hadamard.cuh: compute_sign_words, thread_sign_bits, hadamard_rotate.
void sim_hadamard(SimRow& row, uint64_t seed) {
  const int L = row.lanes;
  uint32_t words[8] = {};
  for (int i = 0; i < row.d; ++i)
    if (qf::hadamard_sign(seed, i) < 0) words[i / 32] |= 1u << (i % 32);
  for (int r = 0; r < L; ++r) {
    uint32_t bits = 0;
    for (int k = 0; k < kC; ++k) {
      const int c = k * L + r;
      bits |= ((words[c >> 2] >> ((c & 3) * 8)) & 0xffu) << (8 * k);
    }
    for (int k = 0; k < kC; ++k)
      for (int j = 0; j < kE; ++j) {
        const int bit = 8 * k + j;
        row.x[r][k][j] = std::bit_cast<float>(std::bit_cast<uint32_t>(row.x[r][k][j]) ^ ((bits << (31 - bit)) & 0x80000000u));
      }
    for (int h = 1; h < kE; h <<= 1)
      for (int k = 0; k < kC; ++k)
        for (int j = 0; j < kE; ++j) {
          if (j & h) continue;
          const float a = row.x[r][k][j], b = row.x[r][k][j + h];
          row.x[r][k][j] = a + b;
          row.x[r][k][j + h] = a - b;
        }
    for (int h = 1; h < kC; h <<= 1)
      for (int k = 0; k < kC; ++k) {
        if (k & h) continue;
        for (int j = 0; j < kE; ++j) {
          const float a = row.x[r][k][j], b = row.x[r][k + h][j];
          row.x[r][k][j] = a + b;
          row.x[r][k + h][j] = a - b;
        }
      }
  }
  for (int m = 1; m < L; m <<= 1) {
    const SimRow before = row;
    for (int r = 0; r < L; ++r) {
      const float sign = (r & m) ? -1.0f : 1.0f;  // lane & m == lane_in_row & m: row groups are aligned
      for (int k = 0; k < kC; ++k)
        for (int j = 0; j < kE; ++j) row.x[r][k][j] = std::fma(sign, before.x[r][k][j], before.x[r ^ m][k][j]);
    }
  }
}

// device/quantize.cuh step 4: quantise with `scale`, exchange with lane ^ 1, store 16 bytes at store_chunk.
std::vector<uint8_t> sim_store(const SimRow& row, float scale) {
  const int L = row.lanes;
  std::vector<uint8_t> out(static_cast<size_t>(row.d), 0xFF);
  std::vector<int> written(static_cast<size_t>(row.d), 0);
  auto chunk_bytes = [&](int r, int k) {
    std::array<uint8_t, kE> b{};
    for (int j = 0; j < kE; ++j) b[static_cast<size_t>(j)] = fa3jit::float_to_e4m3(row.x[r][k][j] * scale);
    return b;
  };
  for (int r = 0; r < L; ++r)
    for (int m = 0; m < kC / 2; ++m) {
      const bool odd = r & 1;
      const auto a = chunk_bytes(r, 2 * m), b = chunk_bytes(r, 2 * m + 1);
      const auto received = odd ? chunk_bytes(r ^ 1, 2 * m + 1) : chunk_bytes(r ^ 1, 2 * m);  // what r ^ 1 sends
      const int at = qf::store_chunk(row.d, m, r) * kE;
      for (int j = 0; j < kE; ++j) {
        out[static_cast<size_t>(at + j)] = odd ? received[static_cast<size_t>(j)] : a[static_cast<size_t>(j)];
        out[static_cast<size_t>(at + kE + j)] = odd ? b[static_cast<size_t>(j)] : received[static_cast<size_t>(j)];
        ++written[static_cast<size_t>(at + j)];
        ++written[static_cast<size_t>(at + kE + j)];
      }
    }
  for (int w : written) REQUIRE(w == 1);  // every output byte stored exactly once
  return out;
}

}  // namespace

TEST_CASE("quantize layout: fragments cover each element once and loads are contiguous per lane group",
          "[quantize][layout]") {
  for (int d : {64, 128, 256}) {
    const int L = qf::row_lanes(d);
    std::vector<int> seen(static_cast<size_t>(d), 0);
    for (int r = 0; r < L; ++r)
      for (int k = 0; k < kC; ++k)
        for (int j = 0; j < kE; ++j) ++seen[static_cast<size_t>(qf::fragment_element(d, k, r, j))];
    for (int n : seen) CHECK(n == 1);
    // For each k the row's lanes read L consecutive 16-byte chunks.
    for (int k = 0; k < kC; ++k)
      for (int r = 0; r < L; ++r) CHECK(qf::fragment_element(d, k, r, 0) == (k * L + r) * kE);
    // After the exchange, each 16-byte store of a pair m covers chunks 2mL .. 2mL + 2L - 1 exactly once.
    for (int m = 0; m < kC / 2; ++m) {
      std::set<int> chunks;
      for (int r = 0; r < L; ++r) {
        const int c = qf::store_chunk(d, m, r);
        CHECK(c % 2 == 0);  // 16-byte aligned
        chunks.insert(c);
        chunks.insert(c + 1);
      }
      CHECK(chunks.size() == static_cast<size_t>(2 * L));
      CHECK(*chunks.begin() == 2 * m * L);
      CHECK(*chunks.rbegin() == 2 * m * L + 2 * L - 1);
    }
  }
}

TEST_CASE("quantize layout: the kernel's RoPE, Hadamard and store steps, replayed lane by lane, match the "
          "float64 model",
          "[quantize][layout]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> angle(-3.14159f, 3.14159f);
  struct RopeCase {
    Rope rope;
    int rotary_dim;  // 0: head_dim
  };
  const RopeCase ropes[] = {{Rope::kNone, 0},  {Rope::kNeox, 0},  {Rope::kNeox, 16},       {Rope::kNeox, 32},
                            {Rope::kNeox, 64}, {Rope::kInterleaved, 0}, {Rope::kInterleaved, 8}, {Rope::kInterleaved, 24}};
  int checked = 0;
  for (int d : {64, 128, 256})
    for (bool hadamard : {true, false})
      for (const RopeCase& rc : ropes) {
        const int rot = rc.rotary_dim == 0 ? d : rc.rotary_dim;
        if (rot > d) continue;
        Spec s = qf::default_spec(DType::kBf16, d, d);
        s.hadamard = hadamard;
        s.rope = rc.rope;
        s.rotary_dim = rc.rope == Rope::kNone ? d : rot;
        qf::validate(s);
        INFO(qf::spec_summary(s));
        const int64_t position = 3;
        std::vector<float> cos_table(static_cast<size_t>(4 * (rot / 2))), sin_table(cos_table.size());
        for (size_t i = 0; i < cos_table.size(); ++i) {
          const float a = angle(rng);
          cos_table[i] = std::cos(a);
          sin_table[i] = std::sin(a);
        }
        std::vector<float> x(static_cast<size_t>(d));
        for (float& v : x) v = fa3jit::round_to(DType::kBf16, normal(rng));
        x[5] = 40.0f;  // an outlier
        const uint64_t seed = 0x1234 + static_cast<uint64_t>(d);
        std::vector<double> z(static_cast<size_t>(d)), err(static_cast<size_t>(d));
        fa3jit::testing::fp8_transform_row(s, x.data(), position, cos_table.data(), sin_table.data(), seed, z.data(),
                                           err.data());

        SimRow row(d, x.data());
        const float* cos_row = cos_table.data() + position * (rot / 2);
        const float* sin_row = sin_table.data() + position * (rot / 2);
        if (s.rope != Rope::kNone) sim_rope(s, row, cos_row, sin_row);
        if (hadamard) sim_hadamard(row, seed);
        const double norm = hadamard ? 1.0 / std::sqrt(static_cast<double>(d)) : 1.0;
        const std::vector<float> y = row.row();
        double amax = 0.0;
        for (int i = 0; i < d; ++i) {
          INFO("element " << i);
          CHECK(std::fabs(y[static_cast<size_t>(i)] * norm - z[static_cast<size_t>(i)]) <= err[static_cast<size_t>(i)]);
          amax = std::max(amax, std::fabs(z[static_cast<size_t>(i)]));
        }
        // Step 4 on the replayed row: every byte in its place, each within the e4m3 tolerance of the model.
        const float descale = qf::descale_from_amax(static_cast<float>(amax));
        const float scale = static_cast<float>(norm) / descale;
        const std::vector<uint8_t> bytes = sim_store(row, scale);
        for (int i = 0; i < d; ++i) {
          INFO("element " << i);
          CHECK(bytes[static_cast<size_t>(i)] == fa3jit::float_to_e4m3(y[static_cast<size_t>(i)] * scale));
          const double deq = fa3jit::e4m3_to_float(bytes[static_cast<size_t>(i)]) * static_cast<double>(descale);
          CHECK(std::fabs(deq - z[static_cast<size_t>(i)]) <=
                fa3jit::testing::fp8_element_tolerance(z[static_cast<size_t>(i)], err[static_cast<size_t>(i)], descale));
        }
        ++checked;
      }
  CHECK(checked >= 40);
}

namespace {

// The kernel's Q/K pass replayed on the host for a whole tensor (device/quantize.cuh steps 1-4 with SimRow):
// block amax of the fp32 rows, descale_from_amax(amax * norm), scale = norm / descale, sim_store per row.
void emulate_qk(const Spec& s, const fa3jit::HostTensor& t, int block_rows, const float* cos_table,
                const float* sin_table, uint64_t seed, const fa3jit::testing::Fp8OutputLayout& out, int64_t elements,
                std::vector<uint8_t>& bytes, std::vector<float>& descale) {
  const int d = s.head_dim;
  const int64_t blocks = (t.seqlen + block_rows - 1) / block_rows;
  const float norm = s.hadamard ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))) : 1.0f;
  bytes.assign(static_cast<size_t>(elements), 0xFF);
  descale.assign(static_cast<size_t>(t.batch * t.heads * blocks), 0.0f);
  std::vector<float> x(static_cast<size_t>(d));
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t h = 0; h < t.heads; ++h)
      for (int64_t blk = 0; blk < blocks; ++blk) {
        std::vector<SimRow> rows;
        float amax = 0.0f;
        for (int64_t s_ = blk * block_rows; s_ < std::min(t.seqlen, (blk + 1) * block_rows); ++s_) {
          for (int i = 0; i < d; ++i) x[static_cast<size_t>(i)] = t.value(b, s_, h, i);
          SimRow row(d, x.data());
          if (s.rope != Rope::kNone) {
            sim_rope(s, row, cos_table + s_ * (s.rotary_dim / 2), sin_table + s_ * (s.rotary_dim / 2));
          }
          if (s.hadamard) sim_hadamard(row, seed);
          for (float v : row.row()) amax = std::max(amax, std::fabs(v));
          rows.push_back(row);
        }
        const float ds = qf::descale_from_amax(amax * norm);
        descale[static_cast<size_t>((b * t.heads + h) * blocks + blk)] = ds;
        const float scale = norm / ds;
        for (size_t r = 0; r < rows.size(); ++r) {
          const std::vector<uint8_t> row_bytes = sim_store(rows[r], scale);
          const int64_t s_ = blk * block_rows + static_cast<int64_t>(r);
          std::copy(row_bytes.begin(), row_bytes.end(),
                    bytes.begin() + (b * out.stride_batch + s_ * out.stride_seq + h * out.stride_head));
        }
      }
}

// V pass: channel amax, descale, x * (1 / descale).
void emulate_v(const fa3jit::HostTensor& t, const fa3jit::testing::Fp8OutputLayout& out, int64_t elements,
               std::vector<uint8_t>& bytes, std::vector<float>& descale) {
  bytes.assign(static_cast<size_t>(elements), 0xFF);
  descale.assign(static_cast<size_t>(t.batch * t.heads * t.dim), 0.0f);
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t h = 0; h < t.heads; ++h)
      for (int64_t c = 0; c < t.dim; ++c) {
        float amax = 0.0f;
        for (int64_t s_ = 0; s_ < t.seqlen; ++s_) amax = std::max(amax, std::fabs(t.value(b, s_, h, c)));
        const float ds = qf::descale_from_amax(amax);
        descale[static_cast<size_t>((b * t.heads + h) * t.dim + c)] = ds;
        const float scale = 1.0f / ds;
        for (int64_t s_ = 0; s_ < t.seqlen; ++s_)
          bytes[static_cast<size_t>(b * out.stride_batch + s_ * out.stride_seq + h * out.stride_head + c)] =
              fa3jit::float_to_e4m3(t.value(b, s_, h, c) * scale);
      }
}

fa3jit::HostTensor random_tensor(DType dtype, int64_t b, int64_t s, int64_t h, int64_t d, uint64_t seed) {
  fa3jit::HostTensor t = fa3jit::HostTensor::contiguous(dtype, b, s, h, d);
  fa3jit::fill_fa3_distribution(t.data, dtype, t.data.size(), seed);
  return t;
}

}  // namespace

TEST_CASE("quantize emulation: the kernel's steps on whole tensors pass the GPU test's checker, and the checker "
          "catches wrong outputs",
          "[quantize][layout]") {
  namespace ft = fa3jit::testing;
  struct EmuCase {
    DType dtype;
    int d;
    bool hadamard;
    Rope rope;
    int rotary_dim;
    int q_rows, k_rows;
  };
  const EmuCase cases[] = {{DType::kBf16, 64, true, Rope::kNone, 64, 16, 48},
                           {DType::kFp16, 128, true, Rope::kNeox, 128, 128, 176},
                           {DType::kBf16, 128, false, Rope::kInterleaved, 24, 64, 64},
                           {DType::kBf16, 256, true, Rope::kNeox, 32, 128, 128},
                           {DType::kFp16, 256, false, Rope::kNone, 256, 256, 16}};
  uint64_t seed = 77;
  for (const EmuCase& c : cases) {
    Spec s = qf::default_spec(c.dtype, c.d, 64);
    s.hadamard = c.hadamard;
    s.rope = c.rope;
    s.rotary_dim = c.rotary_dim;
    s.q_block_rows = c.q_rows;
    s.k_block_rows = c.k_rows;
    qf::validate(s);
    INFO(qf::spec_summary(s));
    const int64_t batch = 2, sq = 113, sk = 239, h = 3, hk = 1;
    fa3jit::HostTensor q = random_tensor(c.dtype, batch, sq, h, c.d, seed++);
    const fa3jit::HostTensor k = random_tensor(c.dtype, batch, sk, hk, c.d, seed++);
    fa3jit::HostTensor v = random_tensor(c.dtype, batch, sk, hk, 64, seed++);
    for (int64_t i = 0; i < c.d; ++i) q.data[static_cast<size_t>(q.offset(1, 0, 2, i))] = 0;  // a zero row
    for (int64_t t = 0; t < sk; ++t) v.data[static_cast<size_t>(v.offset(0, t, 0, 5))] = 0;   // a zero channel
    std::vector<float> cos_table, sin_table;
    for (int64_t t = 0; t < sk; ++t)
      for (int i = 0; i < c.rotary_dim / 2; ++i) {
        cos_table.push_back(static_cast<float>(std::cos(0.37 * t * (i + 1))));
        sin_table.push_back(static_cast<float>(std::sin(0.37 * t * (i + 1))));
      }
    ft::Fp8PrepassInputs in;
    in.q = &q, in.k = &k, in.v = &v, in.seed = seed;
    in.rope_cos = cos_table.data(), in.rope_sin = sin_table.data();
    const ft::Fp8PrepassReference ref = ft::fp8_prepass_reference(s, in);
    // Padded outputs: 16 bytes after every head vector.
    const ft::Fp8OutputLayout q8l{sq * h * (c.d + 16), h * (c.d + 16), c.d + 16};
    const ft::Fp8OutputLayout k8l{sk * hk * c.d, hk * c.d, c.d};
    const ft::Fp8OutputLayout v8l{sk * hk * 64, hk * 64, 64};
    std::vector<uint8_t> q8, k8, v8;
    std::vector<float> qs, ks, vs;
    emulate_qk(s, q, c.q_rows, cos_table.data(), sin_table.data(), seed, q8l, batch * q8l.stride_batch, q8, qs);
    emulate_qk(s, k, c.k_rows, cos_table.data(), sin_table.data(), seed, k8l, batch * k8l.stride_batch, k8, ks);
    emulate_v(v, v8l, batch * v8l.stride_batch, v8, vs);
    const bool exact = !c.hadamard && c.rope == Rope::kNone;
    ft::Fp8CheckResult res;
    ft::check_fp8_tensor("q", ref.q, q8, q8l, qs, c.q_rows, exact, res);
    ft::check_fp8_tensor("k", ref.k, k8, k8l, ks, c.k_rows, exact, res);
    ft::check_fp8_tensor("v", ref.v, v8, v8l, vs, 0, true, res);
    INFO(res.failure);
    CHECK(res.passed);
    CHECK(res.checked == batch * (sq * h + sk * hk) * c.d + batch * sk * hk * 64);
    CHECK(res.worst_ratio <= 1.0);
    CHECK(qs[static_cast<size_t>((1 * h + 2) * ((sq + c.q_rows - 1) / c.q_rows))] != 0.0f);
    CHECK(vs[5] == 1.0f);  // the zero channel

    // The exact quantisation of the model passes too.
    std::vector<uint8_t> exact_bytes;
    std::vector<float> exact_descale;
    ft::fp8_quantize_reference(ref.k, k8l, batch * k8l.stride_batch, c.k_rows, exact_bytes, exact_descale);
    ft::Fp8CheckResult exact_res;
    ft::check_fp8_tensor("k", ref.k, exact_bytes, k8l, exact_descale, c.k_rows, exact, exact_res);
    INFO(exact_res.failure);
    CHECK(exact_res.passed);

    // Wrong outputs are caught: a byte two steps off, a descale 1 % off, a written padding byte, a NaN descale,
    // heads swapped.
    auto expect_fail = [&](const std::vector<uint8_t>& bytes, const std::vector<float>& ds, const ft::Fp8OutputLayout& l,
                           const char* what) {
      ft::Fp8CheckResult r;
      ft::check_fp8_tensor("q", ref.q, bytes, l, ds, c.q_rows, exact, r);
      INFO(what);
      CHECK_FALSE(r.passed);
    };
    std::vector<uint8_t> bad = q8;
    const size_t at = static_cast<size_t>(q8l.stride_batch + 5 * q8l.stride_seq + q8l.stride_head + 3);
    bad[at] = static_cast<uint8_t>((bad[at] & 0x7F) >= 0x7C ? bad[at] - 2 : bad[at] + 2);
    expect_fail(bad, qs, q8l, "byte");
    std::vector<float> bad_ds = qs;
    bad_ds[1] *= 1.01f;
    expect_fail(q8, bad_ds, q8l, "descale");
    bad = q8;
    bad[static_cast<size_t>(c.d)] = 0;  // the padding after the first head vector
    expect_fail(bad, qs, q8l, "padding");
    bad_ds = qs;
    bad_ds[0] = std::numeric_limits<float>::quiet_NaN();
    expect_fail(q8, bad_ds, q8l, "NaN descale");
    bad.assign(q8.size(), 0xFF);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < sq; ++t)
        for (int64_t hh = 0; hh < h; ++hh)
          for (int64_t i = 0; i < c.d; ++i)
            bad[static_cast<size_t>(b * q8l.stride_batch + t * q8l.stride_seq + hh * q8l.stride_head + i)] =
                q8[static_cast<size_t>(b * q8l.stride_batch + t * q8l.stride_seq + (h - 1 - hh) * q8l.stride_head + i)];
    expect_fail(bad, qs, q8l, "heads swapped");
  }
}

TEST_CASE("quantize model: the Hadamard rotation keeps dot products and spreads outliers", "[quantize][model]") {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int d : {64, 128, 256}) {
    Spec s = qf::default_spec(DType::kFp16, d, d);
    std::vector<float> q(static_cast<size_t>(d)), k(static_cast<size_t>(d));
    for (float& v : q) v = normal(rng);
    for (float& v : k) v = normal(rng);
    q[1] = 50.0f;  // one 50-sigma outlier
    std::vector<double> zq(static_cast<size_t>(d)), zk(static_cast<size_t>(d));
    fa3jit::testing::fp8_transform_row(s, q.data(), 0, nullptr, nullptr, 99, zq.data(), nullptr);
    fa3jit::testing::fp8_transform_row(s, k.data(), 0, nullptr, nullptr, 99, zk.data(), nullptr);
    double dot = 0.0, zdot = 0.0, sq = 0.0, zsq = 0.0, qmax = 0.0, zmax = 0.0;
    for (int i = 0; i < d; ++i) {
      dot += double(q[static_cast<size_t>(i)]) * k[static_cast<size_t>(i)];
      zdot += zq[static_cast<size_t>(i)] * zk[static_cast<size_t>(i)];
      sq += double(q[static_cast<size_t>(i)]) * q[static_cast<size_t>(i)];
      zsq += zq[static_cast<size_t>(i)] * zq[static_cast<size_t>(i)];
      qmax = std::max(qmax, std::fabs(double(q[static_cast<size_t>(i)])));
      zmax = std::max(zmax, std::fabs(zq[static_cast<size_t>(i)]));
    }
    CHECK(std::fabs(zdot - dot) <= 1e-9 * std::sqrt(sq) * d);
    CHECK(std::fabs(zsq - sq) <= 1e-9 * sq);
    // max / rms drops from about sqrt(d) (one outlier dominating) to a few.
    CHECK(qmax / std::sqrt(sq / d) > 0.9 * std::sqrt(static_cast<double>(d)) * 0.9);
    CHECK(zmax / std::sqrt(zsq / d) < 4.0);
  }
  CHECK(fa3jit::testing::e4m3_half_ulp(0.0) == 0x1p-10);
  CHECK(fa3jit::testing::e4m3_half_ulp(1.0) == 1.0 / 16);
  CHECK(fa3jit::testing::e4m3_half_ulp(448.0) == 16.0);
  CHECK(fa3jit::testing::e4m3_half_ulp(0x1p-7) == 0x1p-10);
}

// ---- emission and NVRTC --------------------------------------------------------------------------------

TEST_CASE("quantize emission: the unit is self-contained and checks the Params layout", "[quantize][emit]") {
  const Spec spec = parse(R"({"dtype": "fp16", "head_dim": 256, "head_dim_v": 64, "rope": "neox",
                              "rotary_dim": 64, "k_block_rows": 176})");
  const fa3jit::KernelSource src = qf::emit_kernel(spec);
  CHECK(src.kernel_name == qf::kernel_name(spec));
  CHECK(src.code.find("#include") == std::string::npos);
  CHECK(src.code.find("#pragma once") == std::string::npos);
  CHECK(src.code.find(qf::canonical_string(spec)) != std::string::npos);
  CHECK(src.code.find("static constexpr bool kIsBf16 = false;") != std::string::npos);
  CHECK(src.code.find("static constexpr int kHeadDim = 256;") != std::string::npos);
  CHECK(src.code.find("static constexpr int kHeadDimV = 64;") != std::string::npos);
  CHECK(src.code.find("static constexpr int kRope = 1;") != std::string::npos);
  CHECK(src.code.find("static constexpr int kRotaryDim = 64;") != std::string::npos);
  CHECK(src.code.find("static constexpr int kBlockRows = 176;") != std::string::npos);
  CHECK(src.code.find("static_assert(sizeof(fa3jit::quantize_fp8::Params) == " + std::to_string(sizeof(qf::Params))) !=
        std::string::npos);
  const std::vector<fa3jit::FieldLayout> layout = qf::params_layout();
  CHECK(layout.size() == 43);
  for (const fa3jit::FieldLayout& f : layout) {
    INFO(f.name);
    CHECK(src.code.find("fa3jit::quantize_fp8::Params::" + std::string(f.name) + ": offset differs") !=
          std::string::npos);
  }
  const qf::Geometry g = qf::derive_geometry(spec);
  // One entry per pass, in Pass order, each instantiating its pass.
  REQUIRE(src.entries.size() == qf::kNumPasses);
  const char* enumerators[] = {"kPassQk", "kPassVAmax", "kPassVQuant"};
  for (int pass = 0; pass < qf::kNumPasses; ++pass) {
    CHECK(src.entries[pass] == qf::entry_name(spec, static_cast<qf::Pass>(pass)));
    CHECK(src.code.find("extern \"C\" __global__ void __launch_bounds__(" + std::to_string(g.num_threads) + ", " +
                        std::to_string(g.min_ctas_per_sm) + ")\n" + src.entries[pass] +
                        "(const __grid_constant__ fa3jit::quantize_fp8::Params params) {\n"
                        "  fa3jit::quantize_fp8::quantize_fp8_pass<fa3jit::quantize_fp8::QuantizeConfig, "
                        "fa3jit::quantize_fp8::" + enumerators[pass] + ">(params);") != std::string::npos);
  }
  CHECK(qf::entry_name(spec, qf::kPassQk) == src.kernel_name + "_qk");
  for (const char* file : {"// ---- kernels/quantize_fp8/device/quantize.cuh", "// ---- kernels/quantize_fp8/device/layout.cuh",
                           "// ---- kernels/quantize_fp8/params.h"}) {
    const auto first = src.code.find(file);
    INFO(file);
    REQUIRE(first != std::string::npos);
    CHECK(src.code.find(file, first + 1) == std::string::npos);
  }
}

TEST_CASE("quantize emission: compiles with NVRTC without spills", "[quantize][emit][nvrtc]") {
  std::vector<Spec> specs;
  for (DType dtype : {DType::kBf16, DType::kFp16})
    for (int d : {64, 128, 256}) specs.push_back(qf::default_spec(dtype, d, d));
  auto with = [](Spec s, bool hadamard, Rope rope, int rot, int rq, int rk) {
    s.hadamard = hadamard;
    s.rope = rope;
    s.rotary_dim = rot == 0 ? s.head_dim : rot;
    s.q_block_rows = rq;
    s.k_block_rows = rk;
    qf::validate(s);
    return s;
  };
  const Spec bf64 = qf::default_spec(DType::kBf16, 64, 64), bf128 = qf::default_spec(DType::kBf16, 128, 128),
             fp256 = qf::default_spec(DType::kFp16, 256, 256), mixed = qf::default_spec(DType::kBf16, 128, 64);
  specs.push_back(with(bf128, false, Rope::kNone, 0, 128, 128));
  specs.push_back(with(bf128, true, Rope::kNeox, 0, 128, 176));        // rope on the whole vector, a cluster
  specs.push_back(with(bf128, true, Rope::kNeox, 32, 64, 128));        // neox pair a lane bit apart
  specs.push_back(with(bf64, true, Rope::kInterleaved, 0, 16, 16));    // many blocks per CTA
  specs.push_back(with(bf64, false, Rope::kInterleaved, 24, 256, 48));
  specs.push_back(with(fp256, true, Rope::kNeox, 0, 256, 256));        // the largest block: a cluster of several CTAs
  specs.push_back(with(fp256, true, Rope::kNone, 0, 256, 256));
  specs.push_back(with(mixed, true, Rope::kInterleaved, 128, 144, 208));
  Spec d_major = with(bf128, true, Rope::kNone, 0, 128, 160);  // V written transposed: the V pass's chunk in smem
  d_major.v_d_major = true;
  specs.push_back(d_major);
  for (const Spec& spec : specs) {
    INFO(qf::spec_summary(spec));
    const qf::Geometry g = qf::derive_geometry(spec);
    const fa3jit::KernelSource src = qf::emit_kernel(spec);
    const fa3jit::CompiledKernel compiled = fa3jit::compile_kernel(src);
    CHECK(compiled.kernel_name == src.kernel_name);
    CHECK_FALSE(compiled.cubin.empty());
    // One entry per pass, in Pass order, each with only its own shared memory.
    REQUIRE(compiled.entries.size() == qf::kNumPasses);
    for (int pass = 0; pass < qf::kNumPasses; ++pass) {
      const fa3jit::CompiledEntry& e = compiled.entries[pass];
      INFO(e.name);
      CHECK(e.name == qf::entry_name(spec, static_cast<qf::Pass>(pass)));
      CHECK(e.report.registers > 0);
      CHECK(e.report.registers * g.num_threads * g.min_ctas_per_sm <= qf::kRegistersPerSm);
      CHECK(e.report.spill_store_bytes == 0);
      CHECK(e.report.spill_load_bytes == 0);
      CHECK(e.report.stack_frame_bytes == 0);
      CHECK(e.report.static_smem_bytes == g.smem_bytes[pass]);
    }
    CHECK(compiled.ptx.find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos);
    CHECK(compiled.ptx.find("red.relaxed.gpu.global.max.u32") != std::string::npos);
    CHECK(compiled.ptx.find("ld.global.nc.L1::no_allocate.v4") != std::string::npos);
    CHECK(compiled.ptx.find("st.global.v4.b32") != std::string::npos);
    CHECK((compiled.ptx.find("shfl.sync.bfly") != std::string::npos) == true);
    CHECK((compiled.ptx.find("barrier.cluster") != std::string::npos) == (g.cluster_size > 1));
    CHECK((compiled.ptx.find("mapa.shared::cluster") != std::string::npos) == (g.cluster_size > 1));
  }
}

TEST_CASE("quantize emission: a unit whose Params drifted from the host's does not compile", "[quantize][emit][nvrtc]") {
  fa3jit::KernelSource src = qf::emit_kernel(parse(R"({"dtype": "bf16", "head_dim": 64})"));
  const std::string field = "FIELD(int, v_chunks)";
  const auto at = src.code.find(field);
  REQUIRE(at != std::string::npos);
  src.code.replace(at, field.size(), "FIELD(long long, v_chunks)");
  try {
    fa3jit::compile_kernel(src);
    FAIL("compiled");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kCompileFailed);
    CHECK_THAT(e.what(), Contains("differs from the host's"));
  }
}

// ---- the generic layers reach the family -----------------------------------------------------------------

TEST_CASE("quantize family: the registry, spec documents, configs and capabilities find it", "[quantize][family]") {
  const fa3jit::KernelFamily& family = fa3jit::find_family("quantize_fp8");
  CHECK(family.kind == "quantize_fp8");
  CHECK_FALSE(family.description.empty());
  const nlohmann::json caps = family.capabilities();
  CHECK(caps.at("dtypes") == nlohmann::json{"fp16", "bf16"});
  CHECK(caps.at("head_dims") == nlohmann::json{64, 128, 256});
  CHECK(caps.at("block_rows").at("multiple_of") == 16);
  CHECK(caps.at("ropes") == nlohmann::json{"none", "neox", "interleaved"});
  CHECK(caps.at("out_dtype") == "e4m3");
  const nlohmann::json all = nlohmann::json::parse(fa3jit_capabilities_json());
  CHECK(all.at("families").contains("quantize_fp8"));

  const fa3jit::SpecDocument doc =
      fa3jit::load_spec_document(std::string(FA3JIT_SOURCE_DIR) + "/configs/quantize_fp8_bf16_d128.json");
  CHECK(doc.kind == "quantize_fp8");
  const fa3jit::KernelRequest request = fa3jit::request_for(doc);
  // The config quantises for the e4m3 attention kernel's default d128 tile (128 x 160).
  Spec spec = qf::default_spec(DType::kBf16, 128, 128);
  spec.k_block_rows = 160;
  CHECK(request.kind == "quantize_fp8");
  CHECK(request.canonical == qf::canonical_string(spec));
  CHECK(request.source.kernel_name == qf::kernel_name(spec));
  const qf::Geometry g = qf::derive_geometry(spec);
  CHECK(request.launch.num_threads == g.num_threads);
  CHECK(request.launch.smem_bytes == 0);
  CHECK(request.launch.cluster_x == g.cluster_size);
  CHECK_THAT(request.summary, Contains("quantize_fp8 bf16 d128"));
  // A family's errors come through the generic path unchanged.
  CHECK_THROWS_WITH(
      fa3jit::request_for(fa3jit::parse_spec_document(R"({"kind": "quantize_fp8", "dtype": "bf16", "head_dim": 100})")),
      Contains("\"head_dim\": 100"));
  // Clustered kernels tell the generic launch their cluster size.
  const fa3jit::KernelRequest big = qf::make_request(qf::default_spec(DType::kBf16, 256, 256));
  CHECK(big.launch.cluster_x == 2);
}

TEST_CASE("quantize family: Runtime::prepare and the C ABI compile and cache it", "[quantize][family][nvrtc]") {
  ScratchDir dir;
  const std::string json = R"({"kind": "quantize_fp8", "dtype": "fp16", "head_dim": 64, "rope": "interleaved"})";
  {
    fa3jit::Runtime rt(fa3jit::RuntimeOptions{dir.path});
    const fa3jit::PreparedKernel first = rt.prepare(json);
    CHECK_FALSE(first.cache_hit);
    CHECK(first.request.kind == "quantize_fp8");
    CHECK(first.compiled->report.spill_store_bytes == 0);
    const fa3jit::PreparedKernel again = rt.prepare(json);
    CHECK(again.cache_hit);
    CHECK(again.key == first.key);
  }
  fa3jit_runtime_options options{};
  options.struct_size = sizeof(options);
  options.cache_dir = dir.path.c_str();
  fa3jit_runtime* rt = nullptr;
  REQUIRE(fa3jit_runtime_create(&options, &rt) == FA3JIT_OK);
  fa3jit_kernel_info info{};
  info.struct_size = sizeof(info);
  CHECK(fa3jit_compile_spec(rt, json.c_str(), &info) == FA3JIT_OK);
  CHECK(std::string(info.kind) == "quantize_fp8");
  CHECK(info.cache_hit == 1);
  CHECK(std::string(info.kernel_name) == qf::kernel_name(parse(json)));
  CHECK(info.spill_store_bytes == 0);
  CHECK(info.num_threads == qf::derive_geometry(parse(json)).num_threads);
  CHECK(fa3jit_compile_spec(rt, R"({"kind": "quantize_fp8", "dtype": "bf16", "head_dim": 128, "q_block_rows": 8})",
                            &info) == FA3JIT_ERROR_INVALID_SPEC);
  fa3jit_runtime_destroy(rt);
}

// ---- launch checks that need no driver -------------------------------------------------------------------

namespace {

// Plausible but never dereferenced pointers: every check below fails before the first driver call.
qf::QuantizeArgs valid_looking_args() {
  qf::QuantizeArgs a;
  a.dtype = DType::kBf16;
  a.batch = 2;
  a.seqlen_q = 113;
  a.seqlen_k = 239;
  a.num_heads = 8;
  a.num_heads_kv = 2;
  a.head_dim = 128;
  a.head_dim_v = 128;
  auto view = [](uintptr_t addr, int64_t seqlen, int64_t heads, int64_t dim) {
    return fa3jit::TensorView{reinterpret_cast<void*>(addr), seqlen * heads * dim, heads * dim, dim};
  };
  a.q = view(0x100000, 113, 8, 128);
  a.k = view(0x200000, 239, 2, 128);
  a.v = view(0x300000, 239, 2, 128);
  a.q8 = view(0x400000, 113, 8, 128);
  a.k8 = view(0x500000, 239, 2, 128);
  a.v8 = view(0x600000, 239, 2, 128);
  a.q_descale = reinterpret_cast<float*>(uintptr_t{0x700000});
  a.k_descale = reinterpret_cast<float*>(uintptr_t{0x710000});
  a.v_descale = reinterpret_cast<float*>(uintptr_t{0x720000});
  return a;
}

void expect_rejected(fa3jit::Runtime& rt, const qf::QuantizeOptions& o, const qf::QuantizeArgs& a, ErrorCode code,
                     const std::vector<std::string>& fragments) {
  try {
    qf::quantize_fp8(rt, o, a, nullptr);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == code);
    for (const std::string& f : fragments) CHECK_THAT(e.what(), Contains(f));
  }
}

}  // namespace

TEST_CASE("quantize launch: arguments are checked before any driver call", "[quantize][launch]") {
  ScratchDir dir;
  fa3jit::Runtime rt(fa3jit::RuntimeOptions{dir.path});
  const qf::QuantizeOptions o;
  qf::QuantizeArgs a = valid_looking_args();

  a.dtype = DType::kE4m3;
  expect_rejected(rt, o, a, ErrorCode::kUnsupported, {"dtype", "e4m3", "\"fp16\", \"bf16\""});
  a = valid_looking_args();
  a.head_dim = 96;
  expect_rejected(rt, o, a, ErrorCode::kUnsupported, {"head_dim", "96", "one of 64, 128, 256"});
  a = valid_looking_args();
  a.head_dim_v = 32;
  expect_rejected(rt, o, a, ErrorCode::kUnsupported, {"head_dim_v", "32"});
  a = valid_looking_args();
  qf::QuantizeOptions bad_rows;
  bad_rows.k_block_rows = 100;
  expect_rejected(rt, bad_rows, a, ErrorCode::kInvalidSpec, {"\"k_block_rows\"", "100", "a multiple of 16"});
  qf::QuantizeOptions bad_rot;
  bad_rot.rope = Rope::kNeox;
  bad_rot.rotary_dim = 40;
  expect_rejected(rt, bad_rot, a, ErrorCode::kInvalidSpec, {"\"rotary_dim\"", "40"});

  a = valid_looking_args();
  a.batch = 0;
  expect_rejected(rt, o, a, ErrorCode::kInvalidArgument, {"batch", "0", ">= 1"});
  a = valid_looking_args();
  a.seqlen_k = -5;
  expect_rejected(rt, o, a, ErrorCode::kInvalidArgument, {"seqlen_k", "-5", ">= 1"});
  a = valid_looking_args();
  a.num_heads_kv = 0;
  expect_rejected(rt, o, a, ErrorCode::kInvalidArgument, {"num_heads_kv", "0"});
  a = valid_looking_args();
  a.batch = 65536;
  a.num_heads = 65536;
  expect_rejected(rt, o, a, ErrorCode::kInvalidArgument, {"batch x num_heads x Q blocks", "32-bit"});
  a = valid_looking_args();
  a.q.data = nullptr;
  expect_rejected(rt, o, a, ErrorCode::kInvalidArgument, {"q.data", "null"});
  a = valid_looking_args();
  a.v8.data = nullptr;
  expect_rejected(rt, o, a, ErrorCode::kInvalidArgument, {"v8.data", "null"});
  a = valid_looking_args();
  a.k.data = reinterpret_cast<void*>(uintptr_t{0x200008});
  expect_rejected(rt, o, a, ErrorCode::kInvalidArgument, {"k", "0x200008", "16-byte aligned"});
  a = valid_looking_args();
  a.k_descale = nullptr;
  expect_rejected(rt, o, a, ErrorCode::kInvalidArgument, {"k_descale", "null"});
  a = valid_looking_args();
  a.v_descale = reinterpret_cast<float*>(uintptr_t{0x720002});
  expect_rejected(rt, o, a, ErrorCode::kInvalidArgument, {"v_descale", "0x720002", "4-byte aligned"});
  a = valid_looking_args();
  a.q8.stride_head = 64;  // heads 64 elements apart, 128 wide: they overlap
  expect_rejected(rt, o, a, ErrorCode::kInvalidArgument, {"q8", "overlap itself"});

  // RoPE tables: required with RoPE, at least max(seqlen_q, seqlen_k) rows, 16-byte aligned; refused without.
  qf::QuantizeOptions neox;
  neox.rope = Rope::kNeox;
  a = valid_looking_args();
  expect_rejected(rt, neox, a, ErrorCode::kInvalidArgument, {"rope_cos", "null", "neox"});
  a.rope_cos = reinterpret_cast<const float*>(uintptr_t{0x800000});
  a.rope_sin = reinterpret_cast<const float*>(uintptr_t{0x810000});
  a.rope_max_seqlen = 200;
  expect_rejected(rt, neox, a, ErrorCode::kInvalidArgument, {"rope_max_seqlen = 200", "shorter", "239"});
  a.rope_max_seqlen = 239;
  a.rope_sin = reinterpret_cast<const float*>(uintptr_t{0x810004});
  expect_rejected(rt, neox, a, ErrorCode::kInvalidArgument, {"rope_sin", "16-byte aligned"});
  expect_rejected(rt, o, a, ErrorCode::kInvalidArgument, {"rope_cos", "rope \"none\""});

  // An explicit spec must agree with the arguments.
  a = valid_looking_args();
  const Spec spec = qf::default_spec(DType::kBf16, 128, 64);
  CHECK_THROWS_WITH(qf::quantize_fp8(rt, spec, a, nullptr), Contains("head_dim_v = 128") && Contains("64"));
  a.dtype = DType::kFp16;
  CHECK_THROWS_WITH(qf::quantize_fp8(rt, spec, a, nullptr), Contains("dtype = fp16") && Contains("bf16"));

  // What the descales must hold.
  a = valid_looking_args();
  qf::QuantizeOptions rows;
  rows.q_block_rows = 64;
  rows.k_block_rows = 176;
  const qf::DescaleCounts n = qf::descale_counts(qf::spec_for(a, rows), a);
  CHECK(n.q == 2 * 8 * 2);  // ceil(113 / 64) = 2
  CHECK(n.k == 2 * 2 * 2);  // ceil(239 / 176) = 2
  CHECK(n.v == 2 * 2 * 128);
}

TEST_CASE("quantize spec field v_layout: d_major names its own kernel and sizes the V pass's chunk", "[quantize][spec]") {
  const qf::Spec d_major = qf::parse_spec(std::string(R"({"dtype":"bf16","head_dim":128,"v_layout":"d_major"})"));
  const qf::Spec seq = qf::parse_spec(std::string(R"({"dtype":"bf16","head_dim":128})"));
  CHECK(d_major.v_d_major);
  CHECK_FALSE(seq.v_d_major);
  CHECK(qf::canonical_string(d_major) != qf::canonical_string(seq));
  CHECK(qf::name_token(d_major) == qf::name_token(seq) + "_vt");
  // kPassVQuant's chunk (v_rows_per_cta keys x head_dim_v bytes) is its entry's shared memory.
  const qf::Geometry g = qf::derive_geometry(d_major);
  CHECK(g.smem_bytes[qf::kPassVQuant] == g.v_rows_per_cta * d_major.head_dim_v);
  CHECK(g.smem_bytes[qf::kPassVQuant] <= 48 * 1024);
  CHECK(qf::derive_geometry(seq).smem_bytes[qf::kPassVQuant] == 0);
  // Every d_major geometry writes whole 32-key rows per V chunk (write_v_d_major's static_assert), whatever the
  // Q/K block sizes make of the warp count.
  for (int d : {64, 128, 256})
    for (int dv : {64, 128, 256})
      for (qf::Rope rope : {qf::Rope::kNone, qf::Rope::kNeox})
        for (int qr = 16; qr <= 256; qr += 16)
          for (int kr : {16, 96, 128, 160, 192, 224, 256}) {
            qf::Spec spec = qf::default_spec(DType::kBf16, d, dv);
            spec.rope = rope;
            spec.q_block_rows = qr;
            spec.k_block_rows = kr;
            spec.v_d_major = true;
            const qf::Geometry gd = qf::derive_geometry(spec);
            INFO(qf::spec_summary(spec));
            CHECK(gd.v_rows_per_cta % 32 == 0);
            CHECK(gd.smem_bytes[qf::kPassVQuant] <= 48 * 1024);
          }
  try {
    qf::parse_spec(std::string(R"({"dtype":"bf16","head_dim":128,"v_layout":"transposed"})"));
    FAIL("accepted v_layout \"transposed\"");
  } catch (const fa3jit::Error& e) {
    CHECK(std::string(e.what()).find("\"v_layout\": \"transposed\"") != std::string::npos);
    CHECK(std::string(e.what()).find("\"seq_major\" or \"d_major\"") != std::string::npos);
  }
}

TEST_CASE("a cached kernel whose entry points are not the source's is refused, naming both lists", "[quantize][cache]") {
  fa3jit::test::TempDir tmp;
  fa3jit::Runtime runtime(fa3jit::RuntimeOptions{tmp.path});
  const fa3jit::KernelRequest request = qf::make_request(qf::default_spec(DType::kBf16, 128, 128));
  REQUIRE(request.source.entries.size() == qf::kNumPasses);
  // What an older build (one entry named as the kernel) would have stored under the same key.
  fa3jit::CompiledKernel one_entry;
  one_entry.kernel_name = request.source.kernel_name;
  one_entry.entries = {{request.source.kernel_name, {}}};
  one_entry.cubin = "\x7f" "ELF";
  runtime.cache().get_or_compile(fa3jit::Runtime::kernel_key(request), [&] { return one_entry; });
  try {
    runtime.prepare(request);
    FAIL("a cached kernel with other entry points was served");
  } catch (const Error& e) {
    CHECK(e.code() == fa3jit::ErrorCode::kCacheError);
    const std::string what = e.what();
    CHECK(what.find("entry points [" + request.source.kernel_name + "]") != std::string::npos);
    CHECK(what.find(qf::entry_name(qf::default_spec(DType::kBf16, 128, 128), qf::kPassVAmax)) != std::string::npos);
    CHECK(what.find("fa3jit cache clear") != std::string::npos);
  }
}

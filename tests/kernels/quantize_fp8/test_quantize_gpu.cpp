// FP8 pre-pass on the GPU (run on an H200; skipped with a printed reason elsewhere): seeded FA3-distribution
// inputs (with an all-zero Q block and an all-zero V channel), odd sizes and GQA, both dtypes, every head dim,
// Hadamard on and off, RoPE none / neox / interleaved, against the float64 model of testing/fp8_prepass.h:
//   - descales: Q/K within the model's amax error bound (bit-exact when nothing is rotated), V bit-exact, 1 for
//     an all-zero block or channel;
//   - every dequantised element (e4m3 value x its descale) within fp8_element_tolerance of the model;
//   - (dequantised q).(dequantised k) against the original RoPE(q).RoPE(k): the rotation keeps dot products;
//   - outputs are poisoned with 0xFF (e4m3 and fp32 NaN) first, so an element the kernel does not write fails,
//     and the padding of strided outputs must still hold the poison afterwards.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "jit/driver.h"
#include "kernels/quantize_fp8/launch.h"
#include "kernels/quantize_fp8/params.h"
#include "kernels/attention_fwd/device/fp8_v_layout.h"
#include "testing/attention_problem.h"
#include "testing/device_memory.h"
#include "testing/fp8_prepass.h"
#include "testing/half.h"
#include "testing/reference.h"

using fa3jit::DType;
using fa3jit::quantize_fp8::Rope;
namespace qf = fa3jit::quantize_fp8;
namespace ft = fa3jit::testing;

namespace {

/// True when a GPU is present; otherwise prints why the quantize GPU tests are skipped (once).
bool gpu_here() {
  static const bool available = [] {
    const bool ok = fa3jit::gpu_available();
    if (!ok) std::printf("quantize GPU tests skipped: no CUDA driver or device on this machine\n");
    if (ok) fa3jit::ensure_context(0);
    return ok;
  }();
  return available;
}

// A cache directory of its own for the test's runtime, removed at exit.
struct ScratchRuntime {
  std::string dir;
  std::optional<fa3jit::Runtime> runtime;
  ScratchRuntime() {
    char tmpl[] = "/tmp/fa3jit-quantize-gpu-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    runtime.emplace(fa3jit::RuntimeOptions{dir});
  }
  ~ScratchRuntime() {
    runtime.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

struct Case {
  DType dtype;
  int64_t head_dim, head_dim_v;
  int64_t batch, seqlen_q, seqlen_k, num_heads, num_heads_kv;
  bool hadamard = true;
  Rope rope = Rope::kNone;
  int rotary_dim = 0;  // 0: head_dim
  int q_block_rows = 128, k_block_rows = 128;
  bool padded = false;  // strided inputs and outputs with gaps
};

std::string describe(const Case& c) {
  char s[256];
  std::snprintf(s, sizeof(s), "%s d%ld dv%ld b%ld sq%ld sk%ld h%ld/%ld %s rope %s%s q%d k%d %s", fa3jit::dtype_name(c.dtype),
                long(c.head_dim), long(c.head_dim_v), long(c.batch), long(c.seqlen_q), long(c.seqlen_k),
                long(c.num_heads), long(c.num_heads_kv), c.hadamard ? "hadamard" : "plain", qf::rope_name(c.rope),
                c.rope == Rope::kNone ? "" : ("/" + std::to_string(c.rotary_dim ? c.rotary_dim : c.head_dim)).c_str(),
                c.q_block_rows, c.k_block_rows, c.padded ? "padded" : "contiguous");
  return s;
}

// Strides (elements) of a (batch, seqlen, heads, dim) tensor; padded: gaps of `pad` elements after every head,
// row and batch (pad keeps 16-byte multiples: 8 for 16-bit inputs, 16 for e4m3 outputs).
struct Layout {
  int64_t batch, seq, head, elements;
};
Layout layout(int64_t b, int64_t s, int64_t h, int64_t d, bool padded, int64_t pad) {
  Layout l{};
  l.head = d + (padded ? pad : 0);
  l.seq = h * l.head + (padded ? pad : 0);
  l.batch = s * l.seq + (padded ? 2 * pad : 0);
  l.elements = (b - 1) * l.batch + (s - 1) * l.seq + (h - 1) * l.head + d;
  return l;
}

fa3jit::HostTensor host_tensor(DType dtype, int64_t b, int64_t s, int64_t h, int64_t d, bool padded, uint64_t seed) {
  fa3jit::HostTensor t;
  t.dtype = dtype;
  t.batch = b, t.seqlen = s, t.heads = h, t.dim = d;
  const Layout l = layout(b, s, h, d, padded, 8);
  t.stride_batch = l.batch, t.stride_seq = l.seq, t.stride_head = l.head;
  fa3jit::fill_fa3_distribution(t.data, dtype, static_cast<size_t>(l.elements), seed);
  return t;
}

struct CaseResult : ft::Fp8CheckResult {
  double max_dot_err = 0.0;
};

CaseResult run_case(fa3jit::Runtime& rt, const Case& c, uint64_t seed) {
  using fa3jit::testing::DeviceBuffer;
  qf::QuantizeOptions options;
  options.hadamard = c.hadamard;
  options.rope = c.rope;
  options.rotary_dim = c.rotary_dim;
  options.q_block_rows = c.q_block_rows;
  options.k_block_rows = c.k_block_rows;

  fa3jit::HostTensor q = host_tensor(c.dtype, c.batch, c.seqlen_q, c.num_heads, c.head_dim, c.padded, seed);
  fa3jit::HostTensor k = host_tensor(c.dtype, c.batch, c.seqlen_k, c.num_heads_kv, c.head_dim, c.padded, seed + 1);
  fa3jit::HostTensor v = host_tensor(c.dtype, c.batch, c.seqlen_k, c.num_heads_kv, c.head_dim_v, c.padded, seed + 2);
  // An all-zero Q block (batch 0, head 0, first block) and an all-zero V channel (batch 0, kv head 0, channel 3):
  // descale 1, stored zeros.
  for (int64_t s = 0; s < std::min<int64_t>(c.seqlen_q, c.q_block_rows); ++s)
    for (int64_t d = 0; d < c.head_dim; ++d) q.data[static_cast<size_t>(q.offset(0, s, 0, d))] = 0;
  for (int64_t s = 0; s < c.seqlen_k; ++s) v.data[static_cast<size_t>(v.offset(0, s, 0, 3))] = 0;

  const int rot = c.rotary_dim ? c.rotary_dim : static_cast<int>(c.head_dim);
  const int64_t rope_rows = std::max(c.seqlen_q, c.seqlen_k) + 3;
  std::vector<float> cos_table, sin_table;
  if (c.rope != Rope::kNone) {
    for (int64_t s = 0; s < rope_rows; ++s)
      for (int i = 0; i < rot / 2; ++i) {
        const double angle = static_cast<double>(s) * std::pow(10000.0, -2.0 * i / rot);
        cos_table.push_back(static_cast<float>(std::cos(angle)));
        sin_table.push_back(static_cast<float>(std::sin(angle)));
      }
  }

  const Layout q8l = layout(c.batch, c.seqlen_q, c.num_heads, c.head_dim, c.padded, 16);
  const Layout k8l = layout(c.batch, c.seqlen_k, c.num_heads_kv, c.head_dim, c.padded, 16);
  const Layout v8l = layout(c.batch, c.seqlen_k, c.num_heads_kv, c.head_dim_v, c.padded, 16);
  DeviceBuffer dq(q.size_bytes()), dk(k.size_bytes()), dv(v.size_bytes());
  dq.upload(q.data.data(), q.size_bytes());
  dk.upload(k.data.data(), k.size_bytes());
  dv.upload(v.data.data(), v.size_bytes());
  DeviceBuffer dq8(static_cast<size_t>(q8l.elements)), dk8(static_cast<size_t>(k8l.elements)),
      dv8(static_cast<size_t>(v8l.elements));
  qf::QuantizeArgs a;
  a.dtype = c.dtype;
  a.batch = c.batch, a.seqlen_q = c.seqlen_q, a.seqlen_k = c.seqlen_k;
  a.num_heads = c.num_heads, a.num_heads_kv = c.num_heads_kv;
  a.head_dim = c.head_dim, a.head_dim_v = c.head_dim_v;
  const qf::Spec spec = qf::spec_for(a, options);
  const qf::DescaleCounts counts = qf::descale_counts(spec, a);
  DeviceBuffer dqs(static_cast<size_t>(counts.q) * 4), dks(static_cast<size_t>(counts.k) * 4),
      dvs(static_cast<size_t>(counts.v) * 4);
  DeviceBuffer dcos(cos_table.size() * 4), dsin(sin_table.size() * 4);
  if (c.rope != Rope::kNone) {
    dcos.upload(cos_table.data(), cos_table.size() * 4);
    dsin.upload(sin_table.data(), sin_table.size() * 4);
  }
  for (DeviceBuffer* b : {&dq8, &dk8, &dv8, &dqs, &dks, &dvs}) b->fill_bytes(0xFF);  // e4m3 and fp32 NaN

  a.q = {dq.get(), q.stride_batch, q.stride_seq, q.stride_head};
  a.k = {dk.get(), k.stride_batch, k.stride_seq, k.stride_head};
  a.v = {dv.get(), v.stride_batch, v.stride_seq, v.stride_head};
  a.q8 = {dq8.get(), q8l.batch, q8l.seq, q8l.head};
  a.k8 = {dk8.get(), k8l.batch, k8l.seq, k8l.head};
  a.v8 = {dv8.get(), v8l.batch, v8l.seq, v8l.head};
  a.q_descale = static_cast<float*>(dqs.get());
  a.k_descale = static_cast<float*>(dks.get());
  a.v_descale = static_cast<float*>(dvs.get());
  if (c.rope != Rope::kNone) {
    a.rope_cos = static_cast<const float*>(dcos.get());
    a.rope_sin = static_cast<const float*>(dsin.get());
    a.rope_max_seqlen = rope_rows;
  }
  a.seed = 0x5EED0000ull + seed;
  qf::quantize_fp8(rt, options, a, nullptr);
  fa3jit::check_cu(fa3jit::driver().cuCtxSynchronize(nullptr), "cuCtxSynchronize after the FP8 pre-pass");

  std::vector<uint8_t> q8(dq8.bytes()), k8(dk8.bytes()), v8(dv8.bytes());
  dq8.download(q8.data(), q8.size());
  dk8.download(k8.data(), k8.size());
  dv8.download(v8.data(), v8.size());
  std::vector<float> qs(static_cast<size_t>(counts.q)), ks(static_cast<size_t>(counts.k)), vs(static_cast<size_t>(counts.v));
  dqs.download(qs.data(), qs.size() * 4);
  dks.download(ks.data(), ks.size() * 4);
  dvs.download(vs.data(), vs.size() * 4);

  ft::Fp8PrepassInputs in;
  in.q = &q, in.k = &k, in.v = &v;
  in.rope_cos = cos_table.empty() ? nullptr : cos_table.data();
  in.rope_sin = sin_table.empty() ? nullptr : sin_table.data();
  in.seed = a.seed;
  const ft::Fp8PrepassReference ref = ft::fp8_prepass_reference(spec, in);

  CaseResult res;
  const bool exact = !c.hadamard && c.rope == Rope::kNone;  // amax of the inputs themselves: no rounding at all
  ft::check_fp8_tensor("q", ref.q, q8, {q8l.batch, q8l.seq, q8l.head}, qs, c.q_block_rows, exact, res);
  ft::check_fp8_tensor("k", ref.k, k8, {k8l.batch, k8l.seq, k8l.head}, ks, c.k_block_rows, exact, res);
  ft::check_fp8_tensor("v", ref.v, v8, {v8l.batch, v8l.seq, v8l.head}, vs, 0, true, res);

  // Rotation invariance: dequantised q . dequantised k against RoPE(q) . RoPE(k) of the inputs (no Hadamard).
  qf::Spec plain = spec;
  plain.hadamard = false;
  const int64_t group = c.num_heads / c.num_heads_kv;
  const int64_t qb = (c.seqlen_q + c.q_block_rows - 1) / c.q_block_rows;
  const int64_t kb = (c.seqlen_k + c.k_block_rows - 1) / c.k_block_rows;
  std::mt19937_64 rng(seed);
  const int64_t d = c.head_dim;
  std::vector<float> xq(static_cast<size_t>(d)), xk(static_cast<size_t>(d));
  std::vector<double> rq(static_cast<size_t>(d)), rk(static_cast<size_t>(d));
  for (int pair = 0; pair < 64; ++pair) {
    const int64_t b = static_cast<int64_t>(rng() % c.batch), h = static_cast<int64_t>(rng() % c.num_heads);
    const int64_t hk = h / group, i = static_cast<int64_t>(rng() % c.seqlen_q), j = static_cast<int64_t>(rng() % c.seqlen_k);
    for (int64_t x = 0; x < d; ++x) {
      xq[static_cast<size_t>(x)] = q.value(b, i, h, x);
      xk[static_cast<size_t>(x)] = k.value(b, j, hk, x);
    }
    ft::fp8_transform_row(plain, xq.data(), i, in.rope_cos, in.rope_sin, 0, rq.data(), nullptr);
    ft::fp8_transform_row(plain, xk.data(), j, in.rope_cos, in.rope_sin, 0, rk.data(), nullptr);
    const float dsq = qs[static_cast<size_t>((b * c.num_heads + h) * qb + i / c.q_block_rows)];
    const float dsk = ks[static_cast<size_t>((b * c.num_heads_kv + hk) * kb + j / c.k_block_rows)];
    double dot = 0.0, want = 0.0, tol = 0.0, mass = 0.0;
    for (int64_t x = 0; x < d; ++x) {
      const double a8 = fa3jit::e4m3_to_float(q8[static_cast<size_t>(b * q8l.batch + i * q8l.seq + h * q8l.head + x)]) * dsq;
      const double b8 = fa3jit::e4m3_to_float(k8[static_cast<size_t>(b * k8l.batch + j * k8l.seq + hk * k8l.head + x)]) * dsk;
      dot += a8 * b8;
      want += rq[static_cast<size_t>(x)] * rk[static_cast<size_t>(x)];
      const size_t iq = static_cast<size_t>(ref.q.index(b, i, h, x)), ik = static_cast<size_t>(ref.k.index(b, j, hk, x));
      const double zq = ref.q.value[iq], zk = ref.k.value[ik];
      const double tq = ft::fp8_element_tolerance(zq, ref.q.err[iq], dsq);
      const double tk = ft::fp8_element_tolerance(zk, ref.k.err[ik], dsk);
      tol += tq * std::fabs(zk) + std::fabs(zq) * tk + tq * tk;
      mass += std::fabs(zq * zk);
    }
    tol += 1e-12 * mass;  // float64 rounding of the two sums
    const double err = std::fabs(dot - want);
    res.max_dot_err = std::max(res.max_dot_err, err);
    if (!(err <= tol)) {
      char what[200];
      std::snprintf(what, sizeof(what), "q8.k8 (b=%ld h=%ld i=%ld j=%ld) = %.8g, RoPE(q).RoPE(k) = %.8g (tol %.3g)",
                    long(b), long(h), long(i), long(j), dot, want, tol);
      res.fail(what);
    }
  }
  return res;
}

void run_cases(const std::vector<Case>& cases, uint64_t seed0) {
  ScratchRuntime scratch;
  int failures = 0;
  uint64_t seed = seed0;
  for (const Case& c : cases) {
    const CaseResult r = run_case(*scratch.runtime, c, seed);
    seed += 3;
    std::printf("quantize %-80s %9ld values (%.2f of tol) dot_err %.3e  %s %s\n", describe(c).c_str(),
                long(r.checked), r.worst_ratio, r.max_dot_err, r.passed ? "PASS" : "FAIL", r.failure.c_str());
    INFO(describe(c) << ": " << r.failure);
    CHECK(r.passed);
    if (!r.passed) ++failures;
  }
  std::printf("quantize: %d of %zu cases passed\n", static_cast<int>(cases.size()) - failures, cases.size());
}

}  // namespace

TEST_CASE("quantize matches the float64 model (dtypes x head dims x hadamard x rope x odd shapes)",
          "[gpu][quantize]") {
  if (!gpu_here()) return;
  struct Shape {
    int64_t batch, seqlen_q, seqlen_k, num_heads, num_heads_kv;
  };
  const Shape shapes[] = {{1, 1, 1, 1, 1}, {2, 113, 239, 4, 2}, {1, 239, 113, 3, 3}, {1, 1023, 1023, 8, 1},
                          {3, 1, 239, 6, 2}, {1, 113, 1, 5, 5}};
  std::vector<Case> cases;
  int i = 0;
  for (DType dtype : {DType::kBf16, DType::kFp16})
    for (int64_t d : {64, 128, 256})
      for (bool hadamard : {true, false})
        for (Rope rope : {Rope::kNone, Rope::kNeox, Rope::kInterleaved}) {
          const Shape& s = shapes[i % std::size(shapes)];
          const int64_t dv = (i % 5 == 4) ? (d == 64 ? 256 : 64) : d;
          Case c{dtype, d, dv, s.batch, s.seqlen_q, s.seqlen_k, s.num_heads, s.num_heads_kv};
          c.hadamard = hadamard;
          c.rope = rope;
          c.padded = i % 3 == 1;
          cases.push_back(c);
          ++i;
        }
  run_cases(cases, 1000);
}

TEST_CASE("quantize handles every block size class, partial rotary dims and clusters", "[gpu][quantize]") {
  if (!gpu_here()) return;
  auto make = [](DType dtype, int64_t d, int64_t dv, int64_t b, int64_t sq, int64_t sk, int64_t h, int64_t hk,
                 bool hadamard, Rope rope, int rot, int rq, int rk, bool padded) {
    Case c{dtype, d, dv, b, sq, sk, h, hk};
    c.hadamard = hadamard, c.rope = rope, c.rotary_dim = rot, c.q_block_rows = rq, c.k_block_rows = rk;
    c.padded = padded;
    return c;
  };
  const std::vector<Case> cases = {
      // Many blocks per CTA (16-row blocks) and the largest blocks (256 x 256: clusters of several CTAs).
      make(DType::kBf16, 64, 64, 2, 239, 113, 4, 2, true, Rope::kNone, 0, 16, 16, false),
      make(DType::kFp16, 256, 256, 1, 1023, 1023, 2, 1, true, Rope::kNone, 0, 256, 256, true),
      make(DType::kBf16, 256, 128, 1, 1023, 239, 3, 1, true, Rope::kNeox, 0, 256, 256, false),
      // Q and K of different block sizes (the FP8 attention kernel's block_m / block_n).
      make(DType::kBf16, 128, 128, 2, 1023, 1023, 8, 2, true, Rope::kNeox, 0, 128, 176, false),
      make(DType::kFp16, 128, 128, 1, 239, 1023, 4, 4, true, Rope::kNone, 0, 64, 112, true),
      make(DType::kBf16, 64, 128, 1, 113, 239, 2, 1, false, Rope::kInterleaved, 0, 208, 48, false),
      make(DType::kBf16, 256, 64, 2, 113, 113, 2, 2, true, Rope::kInterleaved, 0, 144, 256, false),
      // Partial rotary dims: neox pairs a lane bit and a k bit apart, interleaved over part of the vector.
      make(DType::kBf16, 128, 128, 1, 239, 239, 4, 2, true, Rope::kNeox, 32, 128, 128, false),
      make(DType::kFp16, 128, 128, 1, 239, 239, 4, 2, true, Rope::kNeox, 64, 128, 128, true),
      make(DType::kBf16, 256, 256, 1, 113, 113, 2, 1, false, Rope::kNeox, 16, 128, 128, false),
      make(DType::kFp16, 64, 64, 2, 113, 239, 2, 1, true, Rope::kInterleaved, 24, 128, 128, false),
      make(DType::kBf16, 256, 256, 1, 239, 113, 1, 1, true, Rope::kInterleaved, 8, 128, 128, false),
  };
  run_cases(cases, 2000);
}

TEST_CASE("quantize is deterministic and keeps descales finite for infinite inputs", "[gpu][quantize]") {
  if (!gpu_here()) return;
  using fa3jit::testing::DeviceBuffer;
  ScratchRuntime scratch;
  const int64_t b = 1, s = 300, h = 2, d = 64;
  fa3jit::HostTensor q = host_tensor(DType::kBf16, b, s, h, d, false, 7);
  fa3jit::HostTensor k = host_tensor(DType::kBf16, b, s, h, d, false, 8);
  fa3jit::HostTensor v = host_tensor(DType::kBf16, b, s, h, d, false, 9);
  const uint16_t inf = fa3jit::float_to_bf16(std::numeric_limits<float>::infinity());
  q.data[static_cast<size_t>(q.offset(0, 5, 1, 7))] = inf;   // Q block 0 of head 1
  v.data[static_cast<size_t>(v.offset(0, 200, 0, 9))] = inf;  // V channel 9 of head 0
  DeviceBuffer dq(q.size_bytes()), dk(k.size_bytes()), dv(v.size_bytes());
  dq.upload(q.data.data(), q.size_bytes());
  dk.upload(k.data.data(), k.size_bytes());
  dv.upload(v.data.data(), v.size_bytes());
  const size_t n = static_cast<size_t>(b * s * h * d);
  DeviceBuffer dq8(n), dk8(n), dv8(n), dqs(64 * 4), dks(64 * 4), dvs(static_cast<size_t>(h * d) * 4);
  qf::QuantizeArgs a;
  a.dtype = DType::kBf16;
  a.batch = b, a.seqlen_q = s, a.seqlen_k = s, a.num_heads = h, a.num_heads_kv = h, a.head_dim = d, a.head_dim_v = d;
  a.q = {dq.get(), s * h * d, h * d, d};
  a.k = {dk.get(), s * h * d, h * d, d};
  a.v = {dv.get(), s * h * d, h * d, d};
  a.q8 = {dq8.get(), s * h * d, h * d, d};
  a.k8 = {dk8.get(), s * h * d, h * d, d};
  a.v8 = {dv8.get(), s * h * d, h * d, d};
  a.q_descale = static_cast<float*>(dqs.get());
  a.k_descale = static_cast<float*>(dks.get());
  a.v_descale = static_cast<float*>(dvs.get());
  qf::QuantizeOptions options;
  options.hadamard = false;  // keeps the infinity in its element
  std::vector<uint8_t> first[3], again[3];
  std::vector<float> descales[2];
  for (int run = 0; run < 2; ++run) {
    for (DeviceBuffer* buf : {&dq8, &dk8, &dv8, &dqs, &dks, &dvs}) buf->fill_bytes(run == 0 ? 0xFF : 0x00);
    qf::quantize_fp8(*scratch.runtime, options, a, nullptr);
    fa3jit::check_cu(fa3jit::driver().cuCtxSynchronize(nullptr), "cuCtxSynchronize");
    std::vector<uint8_t>* out = run == 0 ? first : again;
    int i = 0;
    for (DeviceBuffer* buf : {&dq8, &dk8, &dv8}) {
      out[i].resize(n);
      buf->download(out[i].data(), n);
      ++i;
    }
    descales[run].resize(static_cast<size_t>(3 * 2 + h * d));
    dqs.download(descales[run].data(), 3 * 2 * 4);  // ceil(300 / 128) = 3 blocks x 2 heads
    dvs.download(descales[run].data() + 6, static_cast<size_t>(h * d) * 4);
  }
  for (int i = 0; i < 3; ++i) CHECK(first[i] == again[i]);
  CHECK(descales[0] == descales[1]);
  // The Q block with the infinity: descale FLT_MAX / 448 (finite), the infinity saturated to 448.
  CHECK(descales[0][3] == qf::kMaxAmax / 448.0f);  // (batch 0, head 1, block 0)
  CHECK(first[0][static_cast<size_t>(q.offset(0, 5, 1, 7))] == 0x7E);
  CHECK(descales[0][6 + 9] == qf::kMaxAmax / 448.0f);  // V channel 9 of head 0
  CHECK(first[2][static_cast<size_t>(v.offset(0, 200, 0, 9))] == 0x7E);
  for (float x : descales[0]) CHECK((std::isfinite(x) && x > 0.0f));
}

TEST_CASE("quantize with v_layout d_major writes the transposed image of its seq_major V, bit for bit",
          "[gpu][quantize]") {
  if (!gpu_here()) return;
  using fa3jit::testing::DeviceBuffer;
  ScratchRuntime scratch;
  // Odd lengths (a last chunk that ends inside a 16-key group, one shorter than a chunk), GQA, every head dim, both
  // dtypes. The d_major v8 is poisoned first (0xFF), so every key position up to seqlen_k rounded to 16 must be
  // written: keys as fa3jit::testing::v_to_d_major places them, zeros past seqlen_k; q8, k8 and the descales equal
  // the seq_major call's.
  struct DCase {
    DType dtype;
    int64_t d, b, s, h, hkv;
  };
  for (const DCase& c : {DCase{DType::kBf16, 128, 2, 1023, 4, 2}, DCase{DType::kFp16, 64, 1, 113, 2, 1},
                         DCase{DType::kBf16, 256, 1, 799, 2, 2}, DCase{DType::kBf16, 128, 1, 1, 2, 2},
                         DCase{DType::kFp16, 256, 2, 4224, 4, 1}}) {
    INFO(fa3jit::dtype_name(c.dtype) << " d" << c.d << " b" << c.b << " s" << c.s << " h" << c.h << "/" << c.hkv);
    fa3jit::HostTensor q = host_tensor(c.dtype, c.b, c.s, c.h, c.d, false, 31);
    fa3jit::HostTensor k = host_tensor(c.dtype, c.b, c.s, c.hkv, c.d, false, 32);
    fa3jit::HostTensor v = host_tensor(c.dtype, c.b, c.s, c.hkv, c.d, false, 33);
    DeviceBuffer dq(q.size_bytes()), dk(k.size_bytes()), dv(v.size_bytes());
    dq.upload(q.data.data(), q.size_bytes());
    dk.upload(k.data.data(), k.size_bytes());
    dv.upload(v.data.data(), v.size_bytes());
    const int64_t keys = fa3jit::attention_fwd::d_major_keys(c.s);
    const size_t nq = static_cast<size_t>(c.b * c.s * c.h * c.d), nk = static_cast<size_t>(c.b * c.s * c.hkv * c.d);
    const size_t nvt = static_cast<size_t>(c.b * c.hkv * c.d * keys);
    const int64_t qb = (c.s + 127) / 128;
    std::vector<uint8_t> bytes[2][3];
    std::vector<float> scales[2][3];
    for (int run = 0; run < 2; ++run) {
      const bool d_major = run == 1;
      DeviceBuffer dq8(nq), dk8(nk), dv8(d_major ? nvt : nk);
      DeviceBuffer dqs(static_cast<size_t>(c.b * c.h * qb) * 4), dks(static_cast<size_t>(c.b * c.hkv * qb) * 4),
          dvs(static_cast<size_t>(c.b * c.hkv * c.d) * 4);
      for (DeviceBuffer* buf : {&dq8, &dk8, &dv8, &dqs, &dks, &dvs}) buf->fill_bytes(0xFF);
      qf::QuantizeArgs a;
      a.dtype = c.dtype;
      a.batch = c.b, a.seqlen_q = c.s, a.seqlen_k = c.s, a.num_heads = c.h, a.num_heads_kv = c.hkv;
      a.head_dim = c.d, a.head_dim_v = c.d;
      a.q = {dq.get(), c.s * c.h * c.d, c.h * c.d, c.d};
      a.k = {dk.get(), c.s * c.hkv * c.d, c.hkv * c.d, c.d};
      a.v = {dv.get(), c.s * c.hkv * c.d, c.hkv * c.d, c.d};
      a.q8 = {dq8.get(), c.s * c.h * c.d, c.h * c.d, c.d};
      a.k8 = {dk8.get(), c.s * c.hkv * c.d, c.hkv * c.d, c.d};
      // d_major: (batch, heads_kv, channels, keys): stride_seq is the channel stride
      a.v8 = d_major ? fa3jit::TensorView{dv8.get(), c.hkv * c.d * keys, keys, c.d * keys}
                     : fa3jit::TensorView{dv8.get(), c.s * c.hkv * c.d, c.hkv * c.d, c.d};
      a.q_descale = static_cast<float*>(dqs.get());
      a.k_descale = static_cast<float*>(dks.get());
      a.v_descale = static_cast<float*>(dvs.get());
      qf::QuantizeOptions options;
      options.v_d_major = d_major;
      qf::quantize_fp8(*scratch.runtime, options, a, nullptr);
      fa3jit::check_cu(fa3jit::driver().cuCtxSynchronize(nullptr), "cuCtxSynchronize");
      int i = 0;
      for (DeviceBuffer* buf : {&dq8, &dk8, &dv8}) {
        bytes[run][i].resize(buf == &dv8 ? (d_major ? nvt : nk) : (buf == &dq8 ? nq : nk));
        buf->download(bytes[run][i].data(), bytes[run][i].size());
        ++i;
      }
      i = 0;
      for (DeviceBuffer* buf : {&dqs, &dks, &dvs}) {
        scales[run][i].resize(buf->bytes() / 4);
        buf->download(scales[run][i].data(), buf->bytes());
        ++i;
      }
    }
    CHECK(bytes[0][0] == bytes[1][0]);
    CHECK(bytes[0][1] == bytes[1][1]);
    for (int i = 0; i < 3; ++i) CHECK(scales[0][i] == scales[1][i]);
    const std::vector<uint8_t> expected = ft::v_to_d_major(bytes[0][2], c.b, c.s, c.hkv, c.d, 0);
    size_t differ = 0;
    for (size_t j = 0; j < expected.size(); ++j) differ += expected[j] != bytes[1][2][j];
    CHECK(differ == 0);
    std::printf("quantize d_major %s d%ld s%ld: %zu of %zu v8 bytes differ from the transposed seq_major v8\n",
                fa3jit::dtype_name(c.dtype), long(c.d), long(c.s), differ, expected.size());
  }
}

TEST_CASE("quantize refuses tensors past their allocation, short RoPE tables and overlapping outputs",
          "[gpu][quantize]") {
  if (!gpu_here()) return;
  using fa3jit::testing::DeviceBuffer;
  ScratchRuntime scratch;
  const int64_t s = 64, h = 2, d = 128;
  const size_t n = static_cast<size_t>(s * h * d);
  DeviceBuffer dq(n * 2), dk(n * 2), dv(n * 2), dq8(n), dk8(n), dv8(n), dqs(64), dks(64), dvs(static_cast<size_t>(h * d) * 4);
  DeviceBuffer dcos(static_cast<size_t>(s * d / 2) * 4), dsin(static_cast<size_t>(s * d / 2) * 4);
  for (DeviceBuffer* buf : {&dq, &dk, &dv, &dcos, &dsin}) buf->fill_bytes(0);
  qf::QuantizeArgs a;
  a.dtype = DType::kFp16;
  a.batch = 1, a.seqlen_q = s, a.seqlen_k = s, a.num_heads = h, a.num_heads_kv = h, a.head_dim = d, a.head_dim_v = d;
  a.q = {dq.get(), s * h * d, h * d, d};
  a.k = {dk.get(), s * h * d, h * d, d};
  a.v = {dv.get(), s * h * d, h * d, d};
  a.q8 = {dq8.get(), s * h * d, h * d, d};
  a.k8 = {dk8.get(), s * h * d, h * d, d};
  a.v8 = {dv8.get(), s * h * d, h * d, d};
  a.q_descale = static_cast<float*>(dqs.get());
  a.k_descale = static_cast<float*>(dks.get());
  a.v_descale = static_cast<float*>(dvs.get());
  qf::QuantizeOptions options;
  qf::quantize_fp8(*scratch.runtime, options, a, nullptr);  // fits exactly
  fa3jit::check_cu(fa3jit::driver().cuCtxSynchronize(nullptr), "cuCtxSynchronize");
  using Catch::Matchers::Contains;

  qf::QuantizeArgs longer = a;
  longer.seqlen_q = s + 1;  // one token more than q holds
  CHECK_THROWS_WITH(qf::quantize_fp8(*scratch.runtime, options, longer, nullptr),
                    Contains("q.data") && Contains("past its allocation"));
  qf::QuantizeArgs shared_out = a;
  shared_out.k8.data = dq8.get();
  CHECK_THROWS_WITH(qf::quantize_fp8(*scratch.runtime, options, shared_out, nullptr),
                    Contains("k8 overlaps q8"));
  qf::QuantizeArgs in_place = a;
  in_place.v_descale = static_cast<float*>(dv.get());
  CHECK_THROWS_WITH(qf::quantize_fp8(*scratch.runtime, options, in_place, nullptr),
                    Contains("v_descale overlaps v"));
  qf::QuantizeArgs few_descales = a;
  few_descales.seqlen_k = s;
  few_descales.k_descale = static_cast<float*>(dks.get()) + 15;  // 1 block x 2 heads needs 8 bytes; 4 are left
  CHECK_THROWS_WITH(qf::quantize_fp8(*scratch.runtime, options, few_descales, nullptr),
                    Contains("k_descale") && Contains("past its allocation"));

  qf::QuantizeOptions neox;
  neox.rope = Rope::kNeox;
  qf::QuantizeArgs rope = a;
  rope.rope_cos = static_cast<const float*>(dcos.get());
  rope.rope_sin = static_cast<const float*>(dsin.get());
  rope.rope_max_seqlen = s;
  qf::quantize_fp8(*scratch.runtime, neox, rope, nullptr);  // fits exactly
  fa3jit::check_cu(fa3jit::driver().cuCtxSynchronize(nullptr), "cuCtxSynchronize");
  rope.rope_max_seqlen = s + 1;  // the tables claim a row their allocation does not hold
  CHECK_THROWS_WITH(qf::quantize_fp8(*scratch.runtime, neox, rope, nullptr),
                    Contains("rope_cos") && Contains("past its allocation"));
}

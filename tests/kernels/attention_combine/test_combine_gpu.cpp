// Split-KV combine on the GPU (run on an H200; skipped with a printed reason elsewhere): random partials,
// with empty splits (L_s = -inf, their partials NaN: never read) and rows whose splits are all empty, against
// a float64 reference of L = log(sum_s exp(L_s)), O = sum_s exp(L_s - L) O_s (kernels/attention_combine/
// spec.h). Outputs are poisoned with 0xFF first, so an element the kernel does not write reads as NaN; the
// padding of strided outputs must still hold the poison afterwards.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "jit/driver.h"
#include "kernels/attention_combine/launch.h"
#include "testing/device_memory.h"
#include "testing/half.h"

using fa3jit::DType;
namespace ac = fa3jit::attention_combine;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// True when a GPU is present; otherwise prints why the combine GPU tests are skipped (once).
bool gpu_here() {
  static const bool available = [] {
    const bool ok = fa3jit::gpu_available();
    if (!ok) std::printf("combine GPU tests skipped: no CUDA driver or device on this machine\n");
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
    char tmpl[] = "/tmp/fa3jit-combine-gpu-XXXXXX";
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

enum class OutLayout { kContiguous, kPadded, kHeadMajor };

struct Case {
  DType dtype;
  int64_t head_dim_v, num_splits, batch, seqlen_q, num_heads;
  OutLayout layout = OutLayout::kContiguous;
  bool with_lse = true;
  std::optional<ac::Spec> spec;  // explicit spec; else the launch path's default
};

const char* layout_name(OutLayout l) {
  switch (l) {
    case OutLayout::kContiguous: return "contiguous";
    case OutLayout::kPadded: return "padded";
    case OutLayout::kHeadMajor: return "head-major";
  }
  return "?";
}

struct OutStrides {
  int64_t batch, seq, head, elements;  // strides in elements; elements: extent from the base
};

// Strides are multiples of 4 elements (the kernel's contract); padded and head-major leave gaps whose poison
// must survive.
OutStrides out_strides(const Case& c) {
  const int64_t d = c.head_dim_v, s = c.seqlen_q, h = c.num_heads;
  OutStrides o{};
  switch (c.layout) {
    case OutLayout::kContiguous:
      o.head = d, o.seq = h * d, o.batch = s * h * d;
      break;
    case OutLayout::kPadded:
      o.head = d + 8, o.seq = h * (d + 8) + 4, o.batch = s * o.seq + 12;
      break;
    case OutLayout::kHeadMajor:
      o.seq = d + 4, o.head = s * (d + 4), o.batch = h * o.head + 8;
      break;
  }
  o.elements = (c.batch - 1) * o.batch + (s - 1) * o.seq + (h - 1) * o.head + d;
  return o;
}

struct Inputs {
  std::vector<float> out_partial;  // (splits, batch, seqlen_q, heads, d)
  std::vector<float> lse_partial;  // (splits, batch, heads, seqlen_q)
};

// Row r in lse order: (b * heads + h) * seqlen_q + q. Split values: L_s = a per-row base in [-60, 90] (large
// enough that exp(L_s) overflows fp32 without the max subtracted) + U(-4, 4); O_s ~ U(-2, 2). Row 0: every
// split empty; r % 7 == 3: split r % splits empty; r % 11 == 5: only split r % splits non-empty. An empty
// split's partial is NaN: the kernel must not read it.
Inputs make_inputs(const Case& c, uint32_t seed) {
  const int64_t rows = c.batch * c.num_heads * c.seqlen_q, d = c.head_dim_v, splits = c.num_splits;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f), base(-60.0f, 90.0f), jitter(-4.0f, 4.0f);
  Inputs in;
  in.out_partial.resize(static_cast<size_t>(splits * rows * d));
  in.lse_partial.resize(static_cast<size_t>(splits * rows));
  for (float& v : in.out_partial) v = value(rng);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.num_heads; ++h)
      for (int64_t q = 0; q < c.seqlen_q; ++q) {
        const int64_t row = (b * c.num_heads + h) * c.seqlen_q + q;
        const int64_t partial_row = (b * c.seqlen_q + q) * c.num_heads + h;
        const float row_base = base(rng);
        for (int64_t s = 0; s < splits; ++s) {
          bool empty = row == 0;
          if (splits > 1 && row % 7 == 3) empty = empty || s == row % splits;
          if (splits > 1 && row % 11 == 5) empty = empty || s != row % splits;
          in.lse_partial[static_cast<size_t>(s * rows + row)] =
              empty ? -std::numeric_limits<float>::infinity() : row_base + jitter(rng);
          if (empty)
            for (int64_t e = 0; e < d; ++e) in.out_partial[static_cast<size_t>((s * rows + partial_row) * d + e)] = nan;
        }
      }
  return in;
}

struct RowReference {
  double lse;
  std::vector<double> out;        // d values
  std::vector<double> magnitude;  // sum_s w_s |O_s|: the scale of the fp32 error
};

RowReference reference_row(const Case& c, const Inputs& in, int64_t row, int64_t partial_row) {
  const int64_t rows = c.batch * c.num_heads * c.seqlen_q, d = c.head_dim_v;
  RowReference r{kNegInf, std::vector<double>(static_cast<size_t>(d), 0.0),
                 std::vector<double>(static_cast<size_t>(d), 0.0)};
  double m = kNegInf;
  for (int64_t s = 0; s < c.num_splits; ++s) m = std::max(m, double(in.lse_partial[static_cast<size_t>(s * rows + row)]));
  if (m == kNegInf) return r;  // every split empty: O = 0, L = -inf
  double sum = 0.0;
  for (int64_t s = 0; s < c.num_splits; ++s) sum += std::exp(double(in.lse_partial[static_cast<size_t>(s * rows + row)]) - m);
  r.lse = m + std::log(sum);
  for (int64_t s = 0; s < c.num_splits; ++s) {
    const double ls = in.lse_partial[static_cast<size_t>(s * rows + row)];
    if (ls == kNegInf) continue;
    const double w = std::exp(ls - r.lse);
    for (int64_t e = 0; e < d; ++e) {
      const double o = in.out_partial[static_cast<size_t>((s * rows + partial_row) * d + e)];
      r.out[static_cast<size_t>(e)] += w * o;
      r.magnitude[static_cast<size_t>(e)] += w * std::fabs(o);
    }
  }
  return r;
}

struct CaseResult {
  bool passed = true;
  double max_err = 0.0, worst_ratio = 0.0, lse_max_err = 0.0;
  std::string failure;
  void fail(const std::string& what) {
    if (passed) failure = what;
    passed = false;
  }
};

CaseResult run_case(fa3jit::Runtime& rt, const Case& c, uint32_t seed) {
  using fa3jit::testing::DeviceBuffer;
  const int64_t rows = c.batch * c.num_heads * c.seqlen_q, d = c.head_dim_v;
  const Inputs in = make_inputs(c, seed);
  const OutStrides os = out_strides(c);

  DeviceBuffer out_partial(in.out_partial.size() * sizeof(float));
  DeviceBuffer lse_partial(in.lse_partial.size() * sizeof(float));
  DeviceBuffer out(static_cast<size_t>(os.elements) * 2);
  DeviceBuffer lse(c.with_lse ? static_cast<size_t>(rows) * sizeof(float) : 0);
  out_partial.upload(in.out_partial.data(), out_partial.bytes());
  lse_partial.upload(in.lse_partial.data(), lse_partial.bytes());
  out.fill_bytes(0xFF);  // NaN in bf16, fp16 and fp32
  lse.fill_bytes(0xFF);

  ac::CombineArgs a;
  a.out_dtype = c.dtype;
  a.num_splits = c.num_splits;
  a.batch = c.batch;
  a.seqlen_q = c.seqlen_q;
  a.num_heads = c.num_heads;
  a.head_dim_v = d;
  a.out_partial = static_cast<const float*>(out_partial.get());
  a.lse_partial = static_cast<const float*>(lse_partial.get());
  a.out = fa3jit::TensorView{out.get(), os.batch, os.seq, os.head};
  a.lse = c.with_lse ? static_cast<float*>(lse.get()) : nullptr;
  if (c.spec) {
    ac::combine(rt, *c.spec, a, nullptr);
  } else {
    ac::combine(rt, a, nullptr);
  }
  fa3jit::check_cu(fa3jit::driver().cuCtxSynchronize(nullptr), "cuCtxSynchronize after the combine kernel");

  std::vector<uint16_t> got(static_cast<size_t>(os.elements));
  out.download(got.data(), got.size() * 2);
  std::vector<float> got_lse(static_cast<size_t>(c.with_lse ? rows : 0));
  if (c.with_lse) lse.download(got_lse.data(), got_lse.size() * sizeof(float));

  // RNE to p significant bits is within 2^-p of the value: 2^-8 for bf16, 2^-11 for fp16 (plus fp16's
  // subnormal step). The fp32 term covers the weights' error, which grows with |L| (ulp of L), and the sum.
  const double unit = c.dtype == DType::kBf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  const double floor = c.dtype == DType::kBf16 ? 0.0 : std::ldexp(1.0, -24);
  CaseResult res;
  std::vector<bool> written(got.size(), false);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.num_heads; ++h)
      for (int64_t q = 0; q < c.seqlen_q; ++q) {
        const int64_t row = (b * c.num_heads + h) * c.seqlen_q + q;
        const int64_t partial_row = (b * c.seqlen_q + q) * c.num_heads + h;
        const RowReference ref = reference_row(c, in, row, partial_row);
        const double abs_lse = ref.lse == kNegInf ? 0.0 : std::fabs(ref.lse);
        for (int64_t e = 0; e < d; ++e) {
          const int64_t at = b * os.batch + q * os.seq + h * os.head + e;
          written[static_cast<size_t>(at)] = true;
          const double value = fa3jit::bits_to_float(c.dtype, got[static_cast<size_t>(at)]);
          const double expected = ref.out[static_cast<size_t>(e)];
          const double tol = 2.0 * unit * std::fabs(expected) + floor +
                             1e-6 * (4.0 + abs_lse) * ref.magnitude[static_cast<size_t>(e)];
          const double err = std::fabs(value - expected);
          if (!(err <= tol)) {  // NaN fails too
            char what[200];
            std::snprintf(what, sizeof(what), "out[b=%ld q=%ld h=%ld e=%ld] = %.8g, expected %.8g (tol %.3g)",
                          static_cast<long>(b), static_cast<long>(q), static_cast<long>(h), static_cast<long>(e),
                          value, expected, tol);
            res.fail(what);
          }
          if (std::isfinite(err)) res.max_err = std::max(res.max_err, err);
          if (tol > 0) res.worst_ratio = std::max(res.worst_ratio, err / tol);
        }
        if (c.with_lse) {
          const double value = got_lse[static_cast<size_t>(row)];
          if (ref.lse == kNegInf) {
            if (value != kNegInf) res.fail("lse[" + std::to_string(row) + "] = " + std::to_string(value) + ", expected -inf");
          } else {
            const double err = std::fabs(value - ref.lse);
            if (!(err <= 2e-6 * (1.0 + abs_lse)))
              res.fail("lse[" + std::to_string(row) + "] = " + std::to_string(value) + ", expected " +
                       std::to_string(ref.lse));
            if (std::isfinite(err)) res.lse_max_err = std::max(res.lse_max_err, err);
          }
        }
      }
  for (size_t i = 0; i < got.size(); ++i)
    if (!written[i] && got[i] != 0xFFFF) {
      res.fail("padding element " + std::to_string(i) + " of out was written");
      break;
    }
  return res;
}

void run_cases(const std::vector<Case>& cases, uint32_t seed0) {
  ScratchRuntime scratch;
  int failures = 0;
  uint32_t seed = seed0;
  for (const Case& c : cases) {
    const CaseResult r = run_case(*scratch.runtime, c, seed++);
    std::printf("combine %-4s d%-3ld splits %-3ld b%ld s%ld h%ld %-10s lse %-3s %s  max_err %.3e (%.2f of tol) "
                "lse_err %.3e  %s %s\n",
                fa3jit::dtype_name(c.dtype), static_cast<long>(c.head_dim_v), static_cast<long>(c.num_splits),
                static_cast<long>(c.batch), static_cast<long>(c.seqlen_q), static_cast<long>(c.num_heads),
                layout_name(c.layout), c.with_lse ? "yes" : "no",
                c.spec ? ac::spec_summary(*c.spec).c_str() : "default", r.max_err, r.worst_ratio, r.lse_max_err,
                r.passed ? "PASS" : "FAIL", r.failure.c_str());
    INFO(fa3jit::dtype_name(c.dtype) << " d" << c.head_dim_v << " splits " << c.num_splits << ": " << r.failure);
    CHECK(r.passed);
    if (!r.passed) ++failures;
  }
  std::printf("combine: %d of %zu cases passed\n", static_cast<int>(cases.size()) - failures, cases.size());
}

}  // namespace

TEST_CASE("combine matches the float64 reference (dtypes x head dims x splits x shapes)", "[combine][gpu]") {
  if (!gpu_here()) return;
  struct Shape {
    int64_t batch, seqlen_q, num_heads;
  };
  const Shape shapes[] = {{1, 1, 1}, {3, 1, 113}, {1, 113, 3}};
  const OutLayout layouts[] = {OutLayout::kContiguous, OutLayout::kPadded, OutLayout::kHeadMajor};
  std::vector<Case> cases;
  int i = 0;
  for (DType dtype : {DType::kBf16, DType::kFp16})
    for (int64_t d : {64, 128, 256})
      for (int64_t splits : {1, 3, 17})
        for (const Shape& s : shapes) {
          cases.push_back(Case{dtype, d, splits, s.batch, s.seqlen_q, s.num_heads, layouts[i % 3], i % 4 != 3, {}});
          ++i;
        }
  run_cases(cases, 1000);
}

TEST_CASE("combine handles odd head dims, many splits and explicit specs", "[combine][gpu]") {
  if (!gpu_here()) return;
  auto spec = [](DType dtype, int d, int max_splits, int rows) {
    ac::Spec s = ac::default_spec(dtype, d, max_splits);
    s.rows_per_cta = rows;
    ac::validate(s);
    return s;
  };
  const std::vector<Case> cases = {
      {DType::kBf16, 8, 3, 3, 3, 3, OutLayout::kContiguous, true, {}},
      {DType::kFp16, 72, 17, 1, 5, 7, OutLayout::kPadded, true, {}},
      {DType::kBf16, 392, 5, 1, 1, 3, OutLayout::kHeadMajor, true, {}},
      {DType::kFp16, 512, 200, 2, 1, 9, OutLayout::kContiguous, true, {}},  // the max_splits 256 kernel
      {DType::kBf16, 128, 129, 1, 2, 5, OutLayout::kPadded, false, {}},
      {DType::kBf16, 128, 17, 1, 3, 113, OutLayout::kContiguous, true, spec(DType::kBf16, 128, 17, 1)},
      {DType::kFp16, 128, 17, 3, 1, 113, OutLayout::kPadded, true, spec(DType::kFp16, 128, 17, 32)},
      {DType::kBf16, 64, 3, 1, 113, 3, OutLayout::kHeadMajor, true, spec(DType::kBf16, 64, 3, 2)},
      {DType::kFp16, 8, 256, 2, 7, 5, OutLayout::kContiguous, true, spec(DType::kFp16, 8, 256, 32)},
      {DType::kBf16, 256, 1, 1, 1, 1, OutLayout::kContiguous, true, spec(DType::kBf16, 256, 1, 4)},
  };
  run_cases(cases, 2000);
}

TEST_CASE("combine refuses tensors past their allocation and overlapping outputs", "[combine][gpu]") {
  if (!gpu_here()) return;
  using fa3jit::testing::DeviceBuffer;
  ScratchRuntime scratch;
  const int64_t splits = 3, rows = 2 * 4, d = 64;
  DeviceBuffer out_partial(static_cast<size_t>(splits * rows * d) * 4);
  DeviceBuffer lse_partial(static_cast<size_t>(splits * rows) * 4);
  DeviceBuffer out(static_cast<size_t>(rows * d) * 2);
  out_partial.fill_bytes(0);  // L_s = 0, O_s = 0: defined inputs for the one launch that runs
  lse_partial.fill_bytes(0);
  ac::CombineArgs a;
  a.out_dtype = DType::kBf16;
  a.num_splits = splits;
  a.batch = 2;
  a.seqlen_q = 1;
  a.num_heads = 4;
  a.head_dim_v = d;
  a.out_partial = static_cast<const float*>(out_partial.get());
  a.lse_partial = static_cast<const float*>(lse_partial.get());
  a.out = fa3jit::TensorView{out.get(), 4 * d, 4 * d, d};
  ac::combine(*scratch.runtime, a, nullptr);  // fits exactly
  fa3jit::check_cu(fa3jit::driver().cuCtxSynchronize(nullptr), "cuCtxSynchronize");

  ac::CombineArgs more = a;
  more.num_splits = 4;  // one split more than the partials hold
  CHECK_THROWS_WITH(ac::combine(*scratch.runtime, more, nullptr),
                    Catch::Matchers::Contains("out_partial") && Catch::Matchers::Contains("past its allocation"));
  ac::CombineArgs wide = a;
  wide.out.stride_batch = 4 * d + 4;  // the last row ends past out's allocation
  CHECK_THROWS_WITH(ac::combine(*scratch.runtime, wide, nullptr),
                    Catch::Matchers::Contains("out.data") && Catch::Matchers::Contains("past its allocation"));
  ac::CombineArgs in_place = a;
  in_place.out.data = out_partial.get();
  CHECK_THROWS_WITH(ac::combine(*scratch.runtime, in_place, nullptr), Catch::Matchers::Contains("overlaps"));
}

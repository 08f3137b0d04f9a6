// Float64 host model of the FP8 pre-pass (fp8_prepass.h).
#include "testing/fp8_prepass.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/quantize_fp8/device/layout.cuh"
#include "kernels/quantize_fp8/params.h"
#include "testing/half.h"

namespace fa3jit::testing {

namespace {

using quantize_fp8::Rope;
using quantize_fp8::Spec;

[[noreturn]] void bad(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }

void check_tensor(const HostTensor* t, const char* name, const Spec& spec, int64_t dim) {
  if (t == nullptr) bad(fmt::format("fp8_prepass_reference: tensor {} is missing", name));
  if (t->dtype != spec.dtype)
    bad(fmt::format("fp8_prepass_reference: {} is {}, the spec says {}", name, dtype_name(t->dtype),
                    dtype_name(spec.dtype)));
  if (t->dim != dim) bad(fmt::format("fp8_prepass_reference: {} has dim {}, expected {}", name, t->dim, dim));
  const int64_t last = t->offset(t->batch - 1, t->seqlen - 1, t->heads - 1, t->dim - 1);
  if (t->batch < 1 || t->seqlen < 1 || t->heads < 1 || last >= static_cast<int64_t>(t->data.size()))
    bad(fmt::format("fp8_prepass_reference: {} has extents or strides outside its data", name));
}

double descale_of(double amax) { return amax > 0.0 ? amax / static_cast<double>(quantize_fp8::kE4m3Max) : 1.0; }

// Q or K: z, its error bound and the block amax per (batch, head, block).
Fp8TensorReference transform_tensor(const Spec& spec, const HostTensor& t, int block_rows, const Fp8PrepassInputs& in) {
  Fp8TensorReference r;
  r.batch = t.batch, r.seqlen = t.seqlen, r.heads = t.heads, r.dim = t.dim;
  const size_t n = static_cast<size_t>(t.batch * t.seqlen * t.heads * t.dim);
  r.value.resize(n);
  r.err.resize(n);
  const int64_t blocks = (t.seqlen + block_rows - 1) / block_rows;
  const size_t entries = static_cast<size_t>(t.batch * t.heads * blocks);
  r.amax.assign(entries, 0.0);
  r.amax_err.assign(entries, 0.0);
  std::vector<float> x(static_cast<size_t>(t.dim));
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t s = 0; s < t.seqlen; ++s)
      for (int64_t h = 0; h < t.heads; ++h) {
        for (int64_t d = 0; d < t.dim; ++d) x[static_cast<size_t>(d)] = t.value(b, s, h, d);
        const int64_t at = r.index(b, s, h, 0);
        fp8_transform_row(spec, x.data(), s, in.rope_cos, in.rope_sin, in.seed, &r.value[static_cast<size_t>(at)],
                          &r.err[static_cast<size_t>(at)]);
        const size_t e = static_cast<size_t>((b * t.heads + h) * blocks + s / block_rows);
        for (int64_t d = 0; d < t.dim; ++d) {
          r.amax[e] = std::max(r.amax[e], std::fabs(r.value[static_cast<size_t>(at + d)]));
          r.amax_err[e] = std::max(r.amax_err[e], r.err[static_cast<size_t>(at + d)]);
        }
      }
  r.descale.resize(entries);
  for (size_t e = 0; e < entries; ++e) r.descale[e] = descale_of(r.amax[e]);
  return r;
}

// V: the inputs as they are and the channel amax per (batch, head, channel).
Fp8TensorReference plain_tensor(const HostTensor& t) {
  Fp8TensorReference r;
  r.batch = t.batch, r.seqlen = t.seqlen, r.heads = t.heads, r.dim = t.dim;
  r.value.resize(static_cast<size_t>(t.batch * t.seqlen * t.heads * t.dim));
  r.err.assign(r.value.size(), 0.0);
  const size_t entries = static_cast<size_t>(t.batch * t.heads * t.dim);
  r.amax.assign(entries, 0.0);
  r.amax_err.assign(entries, 0.0);
  for (int64_t b = 0; b < t.batch; ++b)
    for (int64_t s = 0; s < t.seqlen; ++s)
      for (int64_t h = 0; h < t.heads; ++h)
        for (int64_t d = 0; d < t.dim; ++d) {
          const double v = t.value(b, s, h, d);
          r.value[static_cast<size_t>(r.index(b, s, h, d))] = v;
          double& a = r.amax[static_cast<size_t>((b * t.heads + h) * t.dim + d)];
          if (std::fabs(v) > a) a = std::fabs(v);  // NaN is ignored, as the kernel's fmaxf does
        }
  r.descale.resize(entries);
  for (size_t e = 0; e < entries; ++e) r.descale[e] = descale_of(r.amax[e]);
  return r;
}

}  // namespace

void fp8_transform_row(const Spec& spec, const float* x, int64_t position, const float* rope_cos,
                       const float* rope_sin, uint64_t seed, double* z, double* err) {
  const int d = spec.head_dim;
  std::vector<double> y(static_cast<size_t>(d)), mass(static_cast<size_t>(d));
  std::vector<bool> rotated(static_cast<size_t>(d), false);
  for (int i = 0; i < d; ++i) {
    y[static_cast<size_t>(i)] = x[i];
    mass[static_cast<size_t>(i)] = std::fabs(static_cast<double>(x[i]));
  }
  if (spec.rope != Rope::kNone) {
    const int rope = static_cast<int>(spec.rope), rot = spec.rotary_dim;
    const float* cos_row = rope_cos + position * (rot / 2);
    const float* sin_row = rope_sin + position * (rot / 2);
    for (int i = 0; i < rot; ++i) {
      if (!quantize_fp8::rope_is_first(rope, rot, i)) continue;
      const int partner = i ^ quantize_fp8::rope_pair_distance(rope, rot);
      const int col = quantize_fp8::rope_table_column(rope, rot, i);
      const double c = cos_row[col], s = sin_row[col];
      const double x1 = x[i], x2 = x[partner];
      y[static_cast<size_t>(i)] = x1 * c - x2 * s;
      y[static_cast<size_t>(partner)] = x1 * s + x2 * c;
      mass[static_cast<size_t>(i)] = mass[static_cast<size_t>(partner)] = std::fabs(x1) + std::fabs(x2);
      rotated[static_cast<size_t>(i)] = rotated[static_cast<size_t>(partner)] = true;
    }
  }
  if (!spec.hadamard) {
    for (int i = 0; i < d; ++i) {
      z[i] = y[static_cast<size_t>(i)];
      if (err) err[i] = (rotated[static_cast<size_t>(i)] ? 4.0 : 2.0) * kFp32Unit * mass[static_cast<size_t>(i)];
    }
    return;
  }
  const double norm = 1.0 / std::sqrt(static_cast<double>(d));
  double total_mass = 0.0;
  for (int j = 0; j < d; ++j) {
    y[static_cast<size_t>(j)] *= quantize_fp8::hadamard_sign(seed, j);
    total_mass += mass[static_cast<size_t>(j)];
  }
  const double bound = (std::log2(static_cast<double>(d)) + 4.0) * kFp32Unit * total_mass * norm;
  for (int i = 0; i < d; ++i) {
    double sum = 0.0;
    for (int j = 0; j < d; ++j) {
      const double v = y[static_cast<size_t>(j)];
      sum += (std::popcount(static_cast<unsigned>(i & j)) & 1) ? -v : v;
    }
    z[i] = sum * norm;
    if (err) err[i] = bound;
  }
}

Fp8PrepassReference fp8_prepass_reference(const Spec& spec, const Fp8PrepassInputs& in) {
  check_tensor(in.q, "q", spec, spec.head_dim);
  check_tensor(in.k, "k", spec, spec.head_dim);
  check_tensor(in.v, "v", spec, spec.head_dim_v);
  if (in.k->batch != in.q->batch || in.v->batch != in.q->batch || in.v->seqlen != in.k->seqlen ||
      in.v->heads != in.k->heads)
    bad("fp8_prepass_reference: q, k, v shapes disagree (batch, seqlen_k or num_heads_kv)");
  if (spec.rope != Rope::kNone && (in.rope_cos == nullptr || in.rope_sin == nullptr))
    bad(fmt::format("fp8_prepass_reference: rope \"{}\" needs cos and sin tables", rope_name(spec.rope)));
  Fp8PrepassReference r;
  r.q = transform_tensor(spec, *in.q, spec.q_block_rows, in);
  r.k = transform_tensor(spec, *in.k, spec.k_block_rows, in);
  r.v = plain_tensor(*in.v);
  return r;
}

double e4m3_half_ulp(double magnitude) {
  if (magnitude < 0x1p-6) return 0x1p-10;
  const int e = static_cast<int>(std::floor(std::log2(magnitude)));
  return std::ldexp(1.0, e - 4);
}

double fp8_element_tolerance(double z, double err, double descale) {
  const double w = std::min(448.0, (std::fabs(z) + err) / descale * (1.0 + 0x1p-20));
  return descale * e4m3_half_ulp(w) + err + 4.0 * kFp32Unit * std::fabs(z);
}

void Fp8CheckResult::fail(const std::string& what) {
  if (passed) failure = what;
  passed = false;
}

namespace {

size_t descale_entry(const Fp8TensorReference& ref, int block_rows, int64_t b, int64_t s, int64_t h, int64_t d) {
  if (block_rows <= 0) return static_cast<size_t>((b * ref.heads + h) * ref.dim + d);
  const int64_t blocks = (ref.seqlen + block_rows - 1) / block_rows;
  return static_cast<size_t>((b * ref.heads + h) * blocks + s / block_rows);
}

}  // namespace

void check_fp8_tensor(const char* name, const Fp8TensorReference& ref, const std::vector<uint8_t>& bytes,
                      const Fp8OutputLayout& out, const std::vector<float>& descale, int block_rows,
                      bool exact_descale, Fp8CheckResult& res) {
  if (descale.size() != ref.descale.size()) {
    res.fail(fmt::format("{}_descale has {} entries, expected {}", name, descale.size(), ref.descale.size()));
    return;
  }
  for (size_t e = 0; e < descale.size(); ++e) {
    const double want = ref.descale[e];
    const double got = descale[e];
    bool ok;
    if (ref.amax[e] == 0.0) {
      ok = got == 1.0;
    } else if (exact_descale) {
      ok = got == static_cast<double>(quantize_fp8::descale_from_amax(static_cast<float>(ref.amax[e])));
    } else {
      ok = std::fabs(got - want) <= ref.amax_err[e] / 448.0 + 0x1p-21 * want;
    }
    if (!(ok && std::isfinite(got) && got > 0.0))
      res.fail(fmt::format("{}_descale[{}] = {:.9g}, expected {:.9g} (amax {:.9g})", name, e, got, want, ref.amax[e]));
  }
  std::vector<bool> written(bytes.size(), false);
  for (int64_t b = 0; b < ref.batch; ++b)
    for (int64_t s = 0; s < ref.seqlen; ++s)
      for (int64_t h = 0; h < ref.heads; ++h)
        for (int64_t d = 0; d < ref.dim; ++d) {
          const int64_t at = b * out.stride_batch + s * out.stride_seq + h * out.stride_head + d;
          if (at < 0 || at >= static_cast<int64_t>(bytes.size())) {
            res.fail(fmt::format("{}: element (b={} s={} h={} d={}) is outside the {} bytes given", name, b, s, h, d,
                                 bytes.size()));
            return;
          }
          written[static_cast<size_t>(at)] = true;
          const size_t e = descale_entry(ref, block_rows, b, s, h, d);
          const size_t i = static_cast<size_t>(ref.index(b, s, h, d));
          const double z = ref.value[i];
          const uint8_t byte = bytes[static_cast<size_t>(at)];
          const double deq = e4m3_to_float(byte) * static_cast<double>(descale[e]);
          const double tol = fp8_element_tolerance(z, ref.err[i], descale[e]);
          const double err = std::fabs(deq - z);
          ++res.checked;
          if (!(err <= tol))  // NaN fails too
            res.fail(fmt::format("{}[b={} s={} h={} d={}] = {:.8g} (byte {:#04x} x {:.6g}), expected {:.8g} (tol {:.3g})",
                                 name, b, s, h, d, deq, byte, descale[e], z, tol));
          if (tol > 0 && std::isfinite(err)) res.worst_ratio = std::max(res.worst_ratio, err / tol);
        }
  for (size_t i = 0; i < bytes.size(); ++i)
    if (!written[i] && bytes[i] != 0xFF) {
      res.fail(fmt::format("padding byte {} of {} was written", i, name));
      break;
    }
}

void fp8_quantize_reference(const Fp8TensorReference& ref, const Fp8OutputLayout& out, int64_t elements,
                            int block_rows, std::vector<uint8_t>& bytes, std::vector<float>& descale) {
  descale.resize(ref.amax.size());
  for (size_t e = 0; e < descale.size(); ++e) descale[e] = quantize_fp8::descale_from_amax(static_cast<float>(ref.amax[e]));
  bytes.assign(static_cast<size_t>(elements), 0xFF);
  for (int64_t b = 0; b < ref.batch; ++b)
    for (int64_t s = 0; s < ref.seqlen; ++s)
      for (int64_t h = 0; h < ref.heads; ++h)
        for (int64_t d = 0; d < ref.dim; ++d) {
          const double z = ref.value[static_cast<size_t>(ref.index(b, s, h, d))];
          const float scaled = static_cast<float>(z / descale[descale_entry(ref, block_rows, b, s, h, d)]);
          bytes[static_cast<size_t>(b * out.stride_batch + s * out.stride_seq + h * out.stride_head + d)] =
              float_to_e4m3(scaled);
        }
}

}  // namespace fa3jit::testing

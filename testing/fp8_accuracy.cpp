// FP8 accuracy against the unquantised inputs (fp8_accuracy.h).
#include "testing/fp8_accuracy.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "core/error.h"
#include "jit/driver.h"
#include "kernels/quantize_fp8/params.h"
#include "testing/device_memory.h"
#include "testing/half.h"

namespace fa3jit::testing {

namespace af = fa3jit::attention_fwd;

namespace {



float bf16_round(float x) { return bf16_to_float(float_to_bf16(x)); }

}  // namespace

const char* scale_name(Scale s) {
  return s == Scale::kTensor ? "per_tensor" : s == Scale::kHead ? "per_head" : "per_block";
}

void fill_table3(std::vector<float>& x, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::bernoulli_distribution outlier(0.001);
  x.resize(n);
  for (float& e : x) e = bf16_round(normal(rng) + (outlier(rng) ? 10.f * normal(rng) : 0.f));
}

namespace {

// x -> H.D.x / sqrt(d) on one head vector (fast Walsh-Hadamard transform, FA3 paper §3.3).
void rotate(float* x, int d, uint64_t seed) {
  std::vector<double> t(d);
  for (int i = 0; i < d; ++i) t[i] = x[i] * quantize_fp8::hadamard_sign(seed, i);
  for (int h = 1; h < d; h *= 2)
    for (int i = 0; i < d; ++i)
      if (!(i & h)) {
        const double a = t[i], b = t[i + h];
        t[i] = a + b;
        t[i + h] = a - b;
      }
  for (int i = 0; i < d; ++i) x[i] = static_cast<float>(t[i] / std::sqrt(static_cast<double>(d)));
}

// One quantised tensor: e4m3 bytes and the descales in the layout af::ScaleView names.
struct Quantised {
  std::vector<uint8_t> bytes;
  std::vector<float> descale;
  std::vector<float> dequantised;  // e4m3 value * descale, per element
  int64_t stride_batch = 0, stride_head = 0;
};

// group(b, s, h, c) -> scale index; the scale layout is given by the strides.
template <class Group>
Quantised quantise(const std::vector<float>& x, const AccuracyProblem& p, int64_t seqlen, int64_t heads, size_t groups,
                   Group group, int64_t stride_batch, int64_t stride_head) {
  Quantised out;
  out.stride_batch = stride_batch;
  out.stride_head = stride_head;
  std::vector<float> amax(groups, 0.f);
  auto each = [&](auto fn) {
    size_t i = 0;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t s = 0; s < seqlen; ++s)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t c = 0; c < p.d; ++c, ++i) fn(i, group(b, s, h, c));
  };
  each([&](size_t i, size_t g) { amax[g] = std::max(amax[g], std::fabs(x[i])); });
  out.descale.resize(groups);
  for (size_t g = 0; g < groups; ++g) out.descale[g] = amax[g] > 0.f ? amax[g] / 448.f : 1.f;
  out.bytes.resize(x.size());
  out.dequantised.resize(x.size());
  each([&](size_t i, size_t g) {
    out.bytes[i] = float_to_e4m3(x[i] / out.descale[g]);
    out.dequantised[i] = e4m3_to_float(out.bytes[i]) * out.descale[g];
  });
  return out;
}

// Q (which 'q') has p.heads heads, K and V p.kv_heads(); Q's per-head scale is its kv head's (FA3's contract).
Quantised quantise_tensor(const std::vector<float>& x, const AccuracyProblem& p, int64_t seqlen, Scale scale, char which,
                          int block_rows) {
  const int64_t heads = which == 'q' ? p.heads : p.kv_heads();
  const int64_t group = which == 'q' ? p.heads / p.kv_heads() : 1;
  const int64_t hk = p.kv_heads();
  switch (scale) {
    case Scale::kTensor:
      return quantise(x, p, seqlen, heads, 1, [](int64_t, int64_t, int64_t, int64_t) { return size_t{0}; }, 0, 0);
    case Scale::kHead:
      return quantise(x, p, seqlen, heads, p.batch * hk,
                      [&](int64_t b, int64_t, int64_t h, int64_t) { return static_cast<size_t>(b * hk + h / group); },
                      hk, 1);
    case Scale::kBlock:
      if (which == 'v')
        return quantise(x, p, seqlen, heads, p.batch * heads * p.d,
                        [&](int64_t b, int64_t, int64_t h, int64_t c) {
                          return static_cast<size_t>((b * heads + h) * p.d + c);
                        },
                        heads * p.d, p.d);
      {
        const int64_t blocks = (seqlen + block_rows - 1) / block_rows;
        return quantise(x, p, seqlen, heads, p.batch * heads * blocks,
                        [&](int64_t b, int64_t s, int64_t h, int64_t) {
                          return static_cast<size_t>((b * heads + h) * blocks + s / block_rows);
                        },
                        heads * blocks, blocks);
      }
  }
  return {};
}

}  // namespace

std::vector<double> reference_rows(const AccuracyProblem& p, const SampledRows& rows) {
  std::vector<double> out(rows.s.size() * p.d, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(p.d));
  const int64_t group = p.heads / p.kv_heads();
  const int threads = static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 32));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::vector<double> sc(p.seqlen_k);
      for (size_t r = t; r < rows.s.size(); r += threads) {
        const float* qr = &p.q[((rows.b[r] * p.seqlen_q + rows.s[r]) * p.heads + rows.h[r]) * p.d];
        const int64_t visible =
            p.causal ? std::clamp<int64_t>(rows.s[r] + p.seqlen_k - p.seqlen_q + 1, 0, p.seqlen_k) : p.seqlen_k;
        if (visible == 0) continue;
        double mx = -1e300;
        for (int64_t j = 0; j < visible; ++j) {
          const float* kr = &p.k[((rows.b[r] * p.seqlen_k + j) * p.kv_heads() + rows.h[r] / group) * p.d];
          double dot = 0;
          for (int64_t c = 0; c < p.d; ++c) dot += static_cast<double>(qr[c]) * kr[c];
          sc[j] = dot * scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        double* o = &out[r * p.d];
        for (int64_t j = 0; j < visible; ++j) {
          const double e = std::exp(sc[j] - mx);
          sum += e;
          const float* vr = &p.v[((rows.b[r] * p.seqlen_k + j) * p.kv_heads() + rows.h[r] / group) * p.d];
          for (int64_t c = 0; c < p.d; ++c) o[c] += e * vr[c];
        }
        for (int64_t c = 0; c < p.d; ++c) o[c] /= sum;
      }
    });
  for (auto& th : pool) th.join();
  return out;
}

SampledRows sample_rows(const AccuracyProblem& p, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  SampledRows r;
  for (int i = 0; i < n; ++i) {
    r.b.push_back(static_cast<int64_t>(rng() % p.batch));
    r.h.push_back(static_cast<int64_t>(rng() % p.heads));
    r.s.push_back(static_cast<int64_t>(rng() % p.seqlen_q));
  }
  return r;
}

Rmse measure(Runtime& rt, const af::Spec& spec, const AccuracyProblem& p, const SampledRows& rows,
             const std::vector<double>& ref, Scale scale, bool hadamard) {
  const bool fp8 = spec.dtype == DType::kE4m3;
  std::vector<float> q = p.q, k = p.k;
  AccuracyProblem dequantised = p;
  if (hadamard) {
    for (size_t i = 0; i < q.size(); i += p.d) rotate(&q[i], static_cast<int>(p.d), 1234);
    for (size_t i = 0; i < k.size(); i += p.d) rotate(&k[i], static_cast<int>(p.d), 1234);
  }
  af::ForwardArgs a;
  a.dtype = spec.dtype;
  a.out_dtype = spec.out_dtype;
  a.batch = p.batch;
  a.seqlen_q = p.seqlen_q;
  a.seqlen_k = p.seqlen_k;
  a.num_heads = p.heads;
  a.num_heads_kv = p.kv_heads();
  a.head_dim = a.head_dim_v = p.d;
  a.causal = p.causal;
  a.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.d)));
  DeviceBuffer dq, dk, dv, dout, dqs, dks, dvs;
  auto upload = [](DeviceBuffer& buf, const void* data, size_t bytes) {
    buf = DeviceBuffer(bytes);
    buf.upload(data, bytes);
  };
  if (fp8) {
    a.quant = scale == Scale::kBlock ? af::Quant::kPerBlock : af::Quant::kPerHead;
    const Quantised qq = quantise_tensor(q, p, p.seqlen_q, scale, 'q', spec.block_m);
    const Quantised kq = quantise_tensor(k, p, p.seqlen_k, scale, 'k', spec.block_n);
    const Quantised vq = quantise_tensor(p.v, p, p.seqlen_k, scale, 'v', 0);
    dequantised.q = qq.dequantised;
    dequantised.k = kq.dequantised;
    dequantised.v = vq.dequantised;
    upload(dq, qq.bytes.data(), qq.bytes.size());
    upload(dk, kq.bytes.data(), kq.bytes.size());
    upload(dv, vq.bytes.data(), vq.bytes.size());
    upload(dqs, qq.descale.data(), qq.descale.size() * 4);
    upload(dks, kq.descale.data(), kq.descale.size() * 4);
    upload(dvs, vq.descale.data(), vq.descale.size() * 4);
    a.q_descale = {static_cast<const float*>(dqs.get()), qq.stride_batch, qq.stride_head};
    a.k_descale = {static_cast<const float*>(dks.get()), kq.stride_batch, kq.stride_head};
    a.v_descale = {static_cast<const float*>(dvs.get()), vq.stride_batch, vq.stride_head};
  } else {
    std::vector<uint16_t> qb(q.size()), kb(k.size()), vb(p.v.size());
    for (size_t i = 0; i < q.size(); ++i) qb[i] = float_to_bits(spec.dtype, q[i]);
    for (size_t i = 0; i < k.size(); ++i) kb[i] = float_to_bits(spec.dtype, k[i]);
    for (size_t i = 0; i < p.v.size(); ++i) vb[i] = float_to_bits(spec.dtype, p.v[i]);
    upload(dq, qb.data(), qb.size() * 2);
    upload(dk, kb.data(), kb.size() * 2);
    upload(dv, vb.data(), vb.size() * 2);
  }
  const int64_t hd = p.heads * p.d, hkd = p.kv_heads() * p.d;
  dout = DeviceBuffer(static_cast<size_t>(p.batch * p.seqlen_q * hd * 2));
  dout.fill_bytes(0xFF);
  a.q = {dq.get(), p.seqlen_q * hd, hd, p.d};
  a.k = {dk.get(), p.seqlen_k * hkd, hkd, p.d};
  a.v = {dv.get(), p.seqlen_k * hkd, hkd, p.d};
  a.out = {dout.get(), p.seqlen_q * hd, hd, p.d};
  if (spec.causal != p.causal)
    throw Error(ErrorCode::kInvalidArgument, "fp8 accuracy: the spec's causal differs from the problem's");
  af::forward(*af::load_kernel(rt, spec), a, nullptr);
  check_cu(driver().cuCtxSynchronize(nullptr), "cuCtxSynchronize");
  std::vector<uint16_t> out(static_cast<size_t>(p.batch * p.seqlen_q * hd));
  dout.download(out.data(), out.size() * 2);
  const std::vector<double> deq_ref = fp8 ? reference_rows(dequantised, rows) : ref;
  double se = 0, se_deq = 0, max_err = 0;
  for (size_t r = 0; r < rows.s.size(); ++r)
    for (int64_t c = 0; c < p.d; ++c) {
      const double o =
          bits_to_float(spec.out_dtype, out[((rows.b[r] * p.seqlen_q + rows.s[r]) * p.heads + rows.h[r]) * p.d + c]);
      se += (o - ref[r * p.d + c]) * (o - ref[r * p.d + c]);
      max_err = std::max(max_err, std::fabs(o - ref[r * p.d + c]));
      se_deq += (o - deq_ref[r * p.d + c]) * (o - deq_ref[r * p.d + c]);
    }
  const double n = static_cast<double>(rows.s.size() * p.d);
  return {std::sqrt(se / n), max_err, std::sqrt(se_deq / n)};
}


}  // namespace fa3jit::testing

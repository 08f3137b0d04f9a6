// The attention problem harness (attention_problem.h).
#include "testing/attention_problem.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "jit/driver.h"
#include "testing/half.h"

namespace fa3jit::testing {

ProblemShape shape_of(const AttentionCase& c) {
  const Problem& p = require_problem(c);
  ProblemShape s{c.spec.dtype, p.batch,           p.seqlen_q,    p.seqlen_k, p.num_heads,
                 p.num_heads_kv, c.spec.head_dim, c.spec.causal, c.spec.head_dim_v};
  s.out_dtype = c.spec.out_dtype;
  s.quant = c.spec.quant;
  s.quant_block_m = c.spec.block_m;  // the spec's own tile: its kernel reads the per-block scales
  s.quant_block_n = c.spec.block_n;
  s.v_d_major = c.spec.v_layout == attention_fwd::VLayout::kDMajor;
  return s;
}

AttentionProblem::AttentionProblem(const ProblemShape& s, uint64_t seed) : shape(s) {
  if (shape.head_dim_v == 0) shape.head_dim_v = shape.head_dim;
  const bool fp8 = shape.dtype == DType::kE4m3;
  if (!fp8) {
    shape.out_dtype = shape.dtype;
    shape.quant = attention_fwd::Quant::kNone;
  } else if (shape.quant_block_m == 0 || shape.quant_block_n == 0) {
    const attention_fwd::Spec spec =
        attention_fwd::default_spec(shape.dtype, shape.out_dtype, shape.quant, static_cast<int>(shape.head_dim),
                                    static_cast<int>(shape.head_dim_v), shape.causal);
    shape.quant_block_m = spec.block_m;
    shape.quant_block_n = spec.block_n;
  }
  const ProblemShape& p = shape;
  const DType host_dtype = fp8 ? DType::kBf16 : p.dtype;  // e4m3: the dequantised values, exact in bf16
  softmax_scale = default_softmax_scale(p.head_dim);
  q = HostTensor::contiguous(host_dtype, p.batch, p.seqlen_q, p.num_heads, p.head_dim);
  k = HostTensor::contiguous(host_dtype, p.batch, p.seqlen_k, p.num_heads_kv, p.head_dim);
  v = HostTensor::contiguous(host_dtype, p.batch, p.seqlen_k, p.num_heads_kv, p.head_dim_v);
  out = HostTensor::contiguous(p.out_dtype, p.batch, p.seqlen_q, p.num_heads, p.head_dim_v);
  lse.resize(static_cast<size_t>(p.batch * p.num_heads * p.seqlen_q));
  fill_fa3_distribution(q.data, host_dtype, q.data.size(), seed);
  fill_fa3_distribution(k.data, host_dtype, k.data.size(), seed + 1);
  fill_fa3_distribution(v.data, host_dtype, v.data.size(), seed + 2);
  d_out = DeviceBuffer(out.size_bytes());
  d_lse = DeviceBuffer(lse.size() * sizeof(float));
  d_workspace = DeviceBuffer(kWorkspaceBytes);
  if (fp8) {
    quantize_e4m3(seed + 3);
    return;
  }
  d_q = DeviceBuffer(q.size_bytes());
  d_k = DeviceBuffer(k.size_bytes());
  d_v = DeviceBuffer(v.size_bytes());
  d_q.upload(q.data.data(), q.size_bytes());
  d_k.upload(k.data.data(), k.size_bytes());
  d_v.upload(v.data.data(), v.size_bytes());
}

namespace {

// The scale group of the elements of one (b, s, h) row of a tensor: element d is in group base + d * d_step.
struct RowGroups {
  size_t base;
  size_t d_step;  // 0: one group per row (per-head and per-block Q/K); 1: one per channel (per-block V)
};

// Quantises the elements of one tensor group by group: row_groups(b, s, h) names the groups of a row; each group is
// scaled by a random power of two in [1/4, 4], then gets the power-of-two descale that brings its amax to at most
// 448. bytes receives the e4m3 values; t's data the dequantised values (exact in bf16). Both scalings are by powers
// of two, exact in float, so |x| * factor, x * (factor / descale) and the amax of |x| times factor are the values
// the element-by-element formulas give; the rows are walked once each way, in memory order.
template <class RowGroupsOf>
void quantize_tensor(HostTensor& t, std::vector<uint8_t>& bytes, std::vector<float>& descale, size_t groups,
                     RowGroupsOf row_groups, std::mt19937_64& rng) {
  std::vector<float> factor(groups), amax(groups, 0.0f);
  for (float& f : factor) f = std::ldexp(1.0f, static_cast<int>(rng() % 5) - 2);
  auto each_row = [&](auto fn) {
    for (int64_t b = 0; b < t.batch; ++b)
      for (int64_t s = 0; s < t.seqlen; ++s)
        for (int64_t h = 0; h < t.heads; ++h) fn(t.offset(b, s, h, 0), row_groups(b, s, h));
  };
  each_row([&](int64_t row, RowGroups g) {
    for (int64_t d = 0; d < t.dim; ++d) {
      float& a = amax[g.base + static_cast<size_t>(d) * g.d_step];
      a = std::max(a, std::fabs(bf16_to_float(t.data[static_cast<size_t>(row + d)])));
    }
  });
  for (size_t g = 0; g < groups; ++g) amax[g] *= factor[g];
  descale.assign(groups, 1.0f);
  std::vector<float> scale(groups);  // factor / descale: a power of two
  for (size_t g = 0; g < groups; ++g) {
    if (amax[g] > 0.0f) descale[g] = std::ldexp(1.0f, static_cast<int>(std::ceil(std::log2(amax[g] / 448.0f))));
    scale[g] = factor[g] / descale[g];
  }
  std::array<float, 256> decoded;
  for (int e = 0; e < 256; ++e) decoded[static_cast<size_t>(e)] = e4m3_to_float(static_cast<uint8_t>(e));
  bytes.assign(t.data.size(), 0);
  each_row([&](int64_t row, RowGroups g) {
    for (int64_t d = 0; d < t.dim; ++d) {
      const size_t i = static_cast<size_t>(row + d), k = g.base + static_cast<size_t>(d) * g.d_step;
      const uint8_t e = float_to_e4m3(bf16_to_float(t.data[i]) * scale[k]);
      bytes[i] = e;
      t.data[i] = float_to_bf16(decoded[e] * descale[k]);
    }
  });
}

}  // namespace

std::vector<uint8_t> v_to_d_major(const std::vector<uint8_t>& v8, int64_t batch, int64_t seqlen_k, int64_t heads_kv,
                                  int64_t head_dim_v, uint8_t pad) {
  const int64_t keys = attention_fwd::d_major_keys(seqlen_k);
  std::vector<uint8_t> out(static_cast<size_t>(batch * heads_kv * head_dim_v * keys), pad);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads_kv; ++h)
      for (int64_t d = 0; d < head_dim_v; ++d) {
        uint8_t* row = out.data() + ((b * heads_kv + h) * head_dim_v + d) * keys;
        for (int64_t s = 0; s < seqlen_k; ++s)
          row[s / 16 * 16 + attention_fwd::fp8_key_position(static_cast<int>(s % 16))] =
              v8[static_cast<size_t>(((b * seqlen_k + s) * heads_kv + h) * head_dim_v + d)];
      }
  return out;
}

void AttentionProblem::quantize_e4m3(uint64_t seed) {
  const ProblemShape& p = shape;
  std::mt19937_64 rng(seed);
  const int64_t group = p.num_heads / p.num_heads_kv;
  std::vector<uint8_t> q8, k8, v8;
  const auto B = static_cast<size_t>(p.batch);
  if (p.quant == attention_fwd::Quant::kPerBlock) {
    const int64_t m_blocks = (p.seqlen_q + p.quant_block_m - 1) / p.quant_block_m;
    const int64_t n_blocks = (p.seqlen_k + p.quant_block_n - 1) / p.quant_block_n;
    quantize_tensor(q, q8, q_descale, B * p.num_heads * m_blocks,
                    [&](int64_t b, int64_t s, int64_t h) {
                      return RowGroups{static_cast<size_t>((b * p.num_heads + h) * m_blocks + s / p.quant_block_m), 0};
                    }, rng);
    quantize_tensor(k, k8, k_descale, B * p.num_heads_kv * n_blocks,
                    [&](int64_t b, int64_t s, int64_t h) {
                      return RowGroups{static_cast<size_t>((b * p.num_heads_kv + h) * n_blocks + s / p.quant_block_n),
                                       0};
                    }, rng);
    quantize_tensor(v, v8, v_descale, B * p.num_heads_kv * p.head_dim_v,
                    [&](int64_t b, int64_t, int64_t h) {
                      return RowGroups{static_cast<size_t>((b * p.num_heads_kv + h) * p.head_dim_v), 1};
                    }, rng);
  } else {
    auto per_head = [&](int64_t heads_per_scale) {
      return [&, heads_per_scale](int64_t b, int64_t, int64_t h) {
        return RowGroups{static_cast<size_t>(b * p.num_heads_kv + h / heads_per_scale), 0};
      };
    };
    quantize_tensor(q, q8, q_descale, B * p.num_heads_kv, per_head(group), rng);
    quantize_tensor(k, k8, k_descale, B * p.num_heads_kv, per_head(1), rng);
    quantize_tensor(v, v8, v_descale, B * p.num_heads_kv, per_head(1), rng);
  }
  d_q = DeviceBuffer(q8.size());
  d_k = DeviceBuffer(k8.size());
  // A d_major V gets a non-zero pad (0x38 = 1.0) past seqlen_k: the kernel must not let it reach out.
  if (p.v_d_major) v8 = v_to_d_major(v8, p.batch, p.seqlen_k, p.num_heads_kv, p.head_dim_v, 0x38);
  d_v = DeviceBuffer(v8.size());
  d_q.upload(q8.data(), q8.size());
  d_k.upload(k8.data(), k8.size());
  d_v.upload(v8.data(), v8.size());
  for (auto [host, dev] : {std::pair{&q_descale, &d_q_descale}, std::pair{&k_descale, &d_k_descale},
                           std::pair{&v_descale, &d_v_descale}}) {
    *dev = DeviceBuffer(host->size() * sizeof(float));
    dev->upload(host->data(), host->size() * sizeof(float));
  }
}

attention_fwd::ForwardArgs AttentionProblem::args() const {
  auto view = [](const HostTensor& t, const DeviceBuffer& b) {
    return TensorView{b.get(), t.stride_batch, t.stride_seq, t.stride_head};
  };
  attention_fwd::ForwardArgs a;
  a.dtype = shape.dtype;
  a.batch = shape.batch;
  a.seqlen_q = shape.seqlen_q;
  a.seqlen_k = shape.seqlen_k;
  a.num_heads = shape.num_heads;
  a.num_heads_kv = shape.num_heads_kv;
  a.head_dim = shape.head_dim;
  a.head_dim_v = shape.head_dim_v;
  a.q = view(q, d_q);
  a.k = view(k, d_k);
  a.v = view(v, d_v);
  if (shape.v_d_major) {  // (batch, heads_kv, head_dim_v, keys), contiguous; stride_seq is the channel stride
    const int64_t keys = attention_fwd::d_major_keys(shape.seqlen_k);
    a.v_layout = attention_fwd::VLayout::kDMajor;
    a.v = TensorView{d_v.get(), shape.num_heads_kv * shape.head_dim_v * keys, keys, shape.head_dim_v * keys};
  }
  a.out = view(out, d_out);
  a.lse = static_cast<float*>(d_lse.get());
  if (use_workspace) {
    a.workspace = d_workspace.get();
    a.workspace_bytes = d_workspace.bytes();
  }
  a.softmax_scale = softmax_scale;
  a.causal = shape.causal;
  if (shape.dtype == DType::kE4m3) {
    a.out_dtype = shape.out_dtype;
    a.quant = shape.quant;
    const bool per_block = shape.quant == attention_fwd::Quant::kPerBlock;
    const int64_t m_blocks = (shape.seqlen_q + shape.quant_block_m - 1) / std::max<int64_t>(1, shape.quant_block_m);
    const int64_t n_blocks = (shape.seqlen_k + shape.quant_block_n - 1) / std::max<int64_t>(1, shape.quant_block_n);
    auto scale = [](const DeviceBuffer& b, int64_t heads, int64_t inner) {
      return attention_fwd::ScaleView{static_cast<const float*>(b.get()), heads * inner, inner};
    };
    a.q_descale = per_block ? scale(d_q_descale, shape.num_heads, m_blocks) : scale(d_q_descale, shape.num_heads_kv, 1);
    a.k_descale = per_block ? scale(d_k_descale, shape.num_heads_kv, n_blocks) : scale(d_k_descale, shape.num_heads_kv, 1);
    a.v_descale = per_block ? scale(d_v_descale, shape.num_heads_kv, shape.head_dim_v)
                            : scale(d_v_descale, shape.num_heads_kv, 1);
  }
  return a;
}

namespace {
void launch_once(Runtime& runtime, const attention_fwd::Kernel* kernel, const attention_fwd::ForwardArgs& a) {
  if (kernel != nullptr) {
    attention_fwd::forward(*kernel, a, nullptr);
  } else {
    attention_fwd::forward(runtime, a, nullptr);
  }
}
}  // namespace

void AttentionProblem::run(Runtime& runtime, const attention_fwd::Kernel* kernel) {
  // Poison first: a kernel that skips a tile leaves NaN behind instead of a stale, plausible result.
  d_out.fill_bytes(0xFF);
  d_lse.fill_bytes(0xFF);
  d_workspace.fill_bytes(0xFF);  // the launch must zero what it counts with
  const attention_fwd::ForwardArgs a = args();
  const size_t needed = kernel != nullptr ? attention_fwd::workspace_size(*kernel, a) : attention_fwd::workspace_size(a);
  if (needed > kWorkspaceBytes)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("AttentionProblem holds a {}-byte workspace; this call needs {}", kWorkspaceBytes, needed));
  launch_once(runtime, kernel, a);
  check_cu(driver().cuCtxSynchronize(nullptr), "cuCtxSynchronize after the attention kernel");
  d_out.download(out.data.data(), out.size_bytes());
  d_lse.download(lse.data(), lse.size() * sizeof(float));
}

CheckResult AttentionProblem::check(std::vector<RowIndex> rows) const {
  if (rows.empty()) rows = all_rows(shape.batch, shape.num_heads, shape.seqlen_q);
  ReferenceOptions options;
  options.softmax_scale = softmax_scale;
  options.causal = shape.causal;
  options.baseline_p_e4m3 = shape.dtype == DType::kE4m3;
  options.baseline_block_n = shape.quant_block_n;  // the e4m3 kernel's block_n (the spec's, or the tile table's)
  const std::vector<ReferenceRow> reference = reference_rows(q, k, v, options, rows);
  return check_rows(shape.out_dtype, reference, gather_kernel_rows(out, lse, rows));
}

CheckResult AttentionProblem::check_sampled(int64_t block_m, int64_t random_rows, uint64_t seed) const {
  return check(sample_rows(shape.batch, shape.num_heads, shape.seqlen_q, block_m, random_rows, seed));
}

Timing time_calls(const std::function<void()>& launch, int warmup, int iters) {
  if (iters < 1) throw Error(ErrorCode::kInvalidArgument, fmt::format("iters = {} must be >= 1", iters));
  for (int i = 0; i < warmup; ++i) launch();
  std::vector<DeviceEvent> start(static_cast<size_t>(iters)), stop(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    start[i].record(nullptr);
    launch();
    stop[i].record(nullptr);
  }
  stop.back().synchronize();
  check_cu(driver().cuCtxSynchronize(nullptr), "cuCtxSynchronize after timing");
  std::vector<double> ms(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) ms[i] = stop[i].ms_since(start[i]);
  std::sort(ms.begin(), ms.end());
  Timing t;
  t.iters = iters;
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  t.median_ms = iters % 2 ? ms[iters / 2] : 0.5 * (ms[iters / 2 - 1] + ms[iters / 2]);
  return t;
}

Timing AttentionProblem::time(Runtime& runtime, const attention_fwd::Kernel* kernel, int warmup, int iters) const {
  const attention_fwd::ForwardArgs a = args();
  Timing t = time_calls([&] { launch_once(runtime, kernel, a); }, warmup, iters);
  t.tflops = t.median_ms > 0 ? flops() / (t.median_ms * 1e-3) / 1e12 : 0.0;
  return t;
}

double AttentionProblem::flops() const {
  // Two GEMMs per (query, key) pair: 2 * head_dim (QK^T) + 2 * head_dim_v (PV) FLOPs, FA3 benchmark_attn.py.
  double f = 2.0 * static_cast<double>(shape.batch) * static_cast<double>(shape.num_heads) *
             static_cast<double>(shape.seqlen_q) * static_cast<double>(shape.seqlen_k) *
             static_cast<double>(shape.head_dim + shape.head_dim_v);
  if (shape.causal) f *= 0.5;
  return f;
}

bool open_gpu(int device) {
  if (!gpu_available()) return false;
  int count = 0;
  check_cu(driver().cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (device < 0 || device >= count)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--device {} does not exist; this machine has devices 0..{}", device, count - 1));
  ensure_context(device);
  return true;
}

}  // namespace fa3jit::testing

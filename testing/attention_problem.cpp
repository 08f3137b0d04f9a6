// The attention problem harness (attention_problem.h).
#include "testing/attention_problem.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "jit/driver.h"

namespace fa3jit::testing {

ProblemShape shape_of(const AttentionCase& c) {
  const Problem& p = require_problem(c);
  return ProblemShape{c.spec.dtype, p.batch,           p.seqlen_q,    p.seqlen_k, p.num_heads,
                      p.num_heads_kv, c.spec.head_dim, c.spec.causal, c.spec.head_dim_v};
}

AttentionProblem::AttentionProblem(const ProblemShape& s, uint64_t seed) : shape(s) {
  if (shape.head_dim_v == 0) shape.head_dim_v = shape.head_dim;
  const ProblemShape& p = shape;
  softmax_scale = default_softmax_scale(p.head_dim);
  q = HostTensor::contiguous(p.dtype, p.batch, p.seqlen_q, p.num_heads, p.head_dim);
  k = HostTensor::contiguous(p.dtype, p.batch, p.seqlen_k, p.num_heads_kv, p.head_dim);
  v = HostTensor::contiguous(p.dtype, p.batch, p.seqlen_k, p.num_heads_kv, p.head_dim_v);
  out = HostTensor::contiguous(p.dtype, p.batch, p.seqlen_q, p.num_heads, p.head_dim_v);
  lse.resize(static_cast<size_t>(p.batch * p.num_heads * p.seqlen_q));
  fill_fa3_distribution(q.data, p.dtype, q.data.size(), seed);
  fill_fa3_distribution(k.data, p.dtype, k.data.size(), seed + 1);
  fill_fa3_distribution(v.data, p.dtype, v.data.size(), seed + 2);
  d_q = DeviceBuffer(q.size_bytes());
  d_k = DeviceBuffer(k.size_bytes());
  d_v = DeviceBuffer(v.size_bytes());
  d_out = DeviceBuffer(out.size_bytes());
  d_lse = DeviceBuffer(lse.size() * sizeof(float));
  d_q.upload(q.data.data(), q.size_bytes());
  d_k.upload(k.data.data(), k.size_bytes());
  d_v.upload(v.data.data(), v.size_bytes());
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
  a.out = view(out, d_out);
  a.lse = static_cast<float*>(d_lse.get());
  a.softmax_scale = softmax_scale;
  a.causal = shape.causal;
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
  launch_once(runtime, kernel, args());
  check_cu(driver().cuCtxSynchronize(nullptr), "cuCtxSynchronize after the attention kernel");
  d_out.download(out.data.data(), out.size_bytes());
  d_lse.download(lse.data(), lse.size() * sizeof(float));
}

CheckResult AttentionProblem::check(std::vector<RowIndex> rows) const {
  if (rows.empty()) rows = all_rows(shape.batch, shape.num_heads, shape.seqlen_q);
  ReferenceOptions options;
  options.softmax_scale = softmax_scale;
  options.causal = shape.causal;
  const std::vector<ReferenceRow> reference = reference_rows(q, k, v, options, rows);
  return check_rows(shape.dtype, reference, gather_kernel_rows(out, lse, rows));
}

CheckResult AttentionProblem::check_sampled(int64_t block_m, int64_t random_rows, uint64_t seed) const {
  return check(sample_rows(shape.batch, shape.num_heads, shape.seqlen_q, block_m, random_rows, seed));
}

Timing AttentionProblem::time(Runtime& runtime, const attention_fwd::Kernel* kernel, int warmup, int iters) const {
  if (iters < 1) throw Error(ErrorCode::kInvalidArgument, fmt::format("iters = {} must be >= 1", iters));
  const attention_fwd::ForwardArgs a = args();
  for (int i = 0; i < warmup; ++i) launch_once(runtime, kernel, a);
  std::vector<DeviceEvent> start(static_cast<size_t>(iters)), stop(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    start[i].record(nullptr);
    launch_once(runtime, kernel, a);
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

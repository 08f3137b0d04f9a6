// GPU harness of the CLI (see forward_harness.h).
#include "tools/cli/forward_harness.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "generator/error.h"
#include "runtime/driver.h"

namespace fa3jit::cli {

const Problem& require_problem(const Spec& spec) {
  if (!spec.problem) {
    throw Error(ErrorCode::kInvalidSpec,
                "spec has no \"problem\" section; add e.g. \"problem\": {\"batch\": 2, \"seqlen_q\": 8192, "
                "\"seqlen_k\": 8192, \"num_heads\": 16, \"num_heads_kv\": 16}");
  }
  return *spec.problem;
}

double forward_flops(const Spec& spec) {
  const Problem& p = require_problem(spec);
  // Two GEMMs per (query, key) pair: 2 * head_dim (QK^T) + 2 * head_dim_v (PV) FLOPs, FA3 benchmark_attn.py.
  double flops = 2.0 * static_cast<double>(p.batch) * static_cast<double>(p.num_heads) *
                 static_cast<double>(p.seqlen_q) * static_cast<double>(p.seqlen_k) *
                 static_cast<double>(spec.head_dim + spec.head_dim_v);
  // Causal: halved, as FA3's benchmark does, even when seqlen_q != seqlen_k (where the true visible
  // fraction differs); numbers stay comparable with published FA3 TFLOPS.
  if (spec.causal) flops *= 0.5;
  return flops;
}

std::string problem_summary(const Spec& spec) {
  std::string s = spec_summary(spec);
  if (spec.problem) {
    const Problem& p = *spec.problem;
    s += fmt::format(" | batch {}, seqlen_q {}, seqlen_k {}, heads {}/{}", p.batch, p.seqlen_q, p.seqlen_k,
                     p.num_heads, p.num_heads_kv);
  }
  return s;
}

bool open_gpu(int device) {
  if (!gpu_available()) return false;
  int count = 0;
  check_cu(driver().cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (device < 0 || device >= count) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--device {} does not exist; this machine has devices 0..{}", device, count - 1));
  }
  ensure_context(device);
  return true;
}

ForwardBuffers ForwardBuffers::create(const Spec& spec, uint64_t seed) {
  const Problem& p = require_problem(spec);
  ForwardBuffers b;
  b.dtype = spec.dtype;
  b.problem = p;
  b.head_dim = spec.head_dim;
  b.head_dim_v = spec.head_dim_v;
  b.softmax_scale = default_softmax_scale(spec.head_dim);
  b.q = HostTensor::contiguous(spec.dtype, p.batch, p.seqlen_q, p.num_heads, spec.head_dim);
  b.k = HostTensor::contiguous(spec.dtype, p.batch, p.seqlen_k, p.num_heads_kv, spec.head_dim);
  b.v = HostTensor::contiguous(spec.dtype, p.batch, p.seqlen_k, p.num_heads_kv, spec.head_dim_v);
  fill_fa3_distribution(b.q.data, spec.dtype, b.q.data.size(), seed);
  fill_fa3_distribution(b.k.data, spec.dtype, b.k.data.size(), seed + 1);
  fill_fa3_distribution(b.v.data, spec.dtype, b.v.data.size(), seed + 2);
  b.d_q = DeviceBuffer(b.q.size_bytes());
  b.d_k = DeviceBuffer(b.k.size_bytes());
  b.d_v = DeviceBuffer(b.v.size_bytes());
  b.d_q.upload(b.q.data.data(), b.q.size_bytes());
  b.d_k.upload(b.k.data.data(), b.k.size_bytes());
  b.d_v.upload(b.v.data.data(), b.v.size_bytes());
  const size_t out_elems = static_cast<size_t>(p.batch * p.seqlen_q * p.num_heads * spec.head_dim_v);
  b.d_out = DeviceBuffer(out_elems * sizeof(uint16_t));
  b.d_lse = DeviceBuffer(static_cast<size_t>(p.batch * p.num_heads * p.seqlen_q) * sizeof(float));
  return b;
}

bool ForwardBuffers::fits(const Spec& spec) const {
  return spec.problem && *spec.problem == problem && spec.dtype == dtype && spec.head_dim == head_dim &&
         spec.head_dim_v == head_dim_v;
}

ForwardArgs ForwardBuffers::args(bool causal) {
  auto view = [](const HostTensor& t, const DeviceBuffer& d) {
    return TensorView{d.get(), t.stride_batch, t.stride_seq, t.stride_head};
  };
  ForwardArgs a;
  a.dtype = dtype;
  a.batch = problem.batch;
  a.seqlen_q = problem.seqlen_q;
  a.seqlen_k = problem.seqlen_k;
  a.num_heads = problem.num_heads;
  a.num_heads_kv = problem.num_heads_kv;
  a.head_dim = head_dim;
  a.head_dim_v = head_dim_v;
  a.q = view(q, d_q);
  a.k = view(k, d_k);
  a.v = view(v, d_v);
  // out has q's layout with head_dim_v columns.
  a.out = TensorView{d_out.get(), problem.seqlen_q * problem.num_heads * head_dim_v, problem.num_heads * head_dim_v,
                     head_dim_v};
  a.lse = static_cast<float*>(d_lse.get());
  a.softmax_scale = softmax_scale;
  a.causal = causal;
  return a;
}

CheckResult run_and_check(Runtime& runtime, const Spec& spec, ForwardBuffers& buffers, int64_t random_rows,
                          uint64_t seed) {
  // Poison first: a kernel that skips a tile leaves NaN behind instead of a stale, plausible result.
  buffers.d_out.fill_bytes(0xFF);
  buffers.d_lse.fill_bytes(0xFF);
  runtime.forward(spec, buffers.args(spec.causal), nullptr);
  check_cu(driver().cuCtxSynchronize(nullptr), "cuCtxSynchronize after the forward kernel");

  const Problem& p = buffers.problem;
  HostTensor out = HostTensor::contiguous(spec.dtype, p.batch, p.seqlen_q, p.num_heads, spec.head_dim_v);
  std::vector<float> lse(static_cast<size_t>(p.batch * p.num_heads * p.seqlen_q));
  buffers.d_out.download(out.data.data(), out.size_bytes());
  buffers.d_lse.download(lse.data(), lse.size() * sizeof(float));

  const std::vector<RowIndex> rows =
      sample_rows(p.batch, p.num_heads, p.seqlen_q, spec.block_m, random_rows, seed);
  ReferenceOptions options;
  options.softmax_scale = buffers.softmax_scale;
  options.causal = spec.causal;
  const std::vector<ReferenceRow> reference = reference_rows(buffers.q, buffers.k, buffers.v, options, rows);
  return check_rows(spec.dtype, reference, gather_kernel_rows(out, lse, rows));
}

Timing time_forward(Runtime& runtime, const Spec& spec, ForwardBuffers& buffers, int warmup, int iters) {
  if (iters < 1) throw Error(ErrorCode::kInvalidArgument, fmt::format("iters = {} must be >= 1", iters));
  const ForwardArgs args = buffers.args(spec.causal);
  for (int i = 0; i < warmup; ++i) runtime.forward(spec, args, nullptr);
  std::vector<DeviceEvent> start(static_cast<size_t>(iters)), stop(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    start[i].record(nullptr);
    runtime.forward(spec, args, nullptr);
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
  t.tflops = t.median_ms > 0 ? forward_flops(spec) / (t.median_ms * 1e-3) / 1e12 : 0.0;
  return t;
}

}  // namespace fa3jit::cli

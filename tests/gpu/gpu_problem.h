// Shared fixture of the GPU tests: one attention problem with seeded inputs on the device, poisoned
// outputs, a launch through fa3jit::Runtime, and a check against the float64 CPU reference.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "runtime/attention.h"
#include "runtime/driver.h"
#include "runtime/reference.h"
#include "tools/cli/device_memory.h"

namespace fa3jit::test {

/// True when a GPU is present; otherwise prints why the GPU tests are skipped (once) and returns false.
inline bool have_gpu() {
  static const bool available = [] {
    const bool ok = gpu_available();
    if (!ok) std::printf("GPU tests skipped: no CUDA driver or device on this machine\n");
    if (ok) ensure_context(0);
    return ok;
  }();
  return available;
}

/// One process-wide runtime (cache from the environment, like a serving process).
inline Runtime& runtime() {
  static Runtime rt;
  return rt;
}

struct ProblemShape {
  DType dtype = DType::kBf16;
  int64_t batch = 1, seqlen_q = 1, seqlen_k = 1, num_heads = 1, num_heads_kv = 1, head_dim = 128;
  bool causal = false;
};

class GpuProblem {
 public:
  GpuProblem(const ProblemShape& s, uint64_t seed)
      : shape(s),
        q(HostTensor::contiguous(s.dtype, s.batch, s.seqlen_q, s.num_heads, s.head_dim)),
        k(HostTensor::contiguous(s.dtype, s.batch, s.seqlen_k, s.num_heads_kv, s.head_dim)),
        v(HostTensor::contiguous(s.dtype, s.batch, s.seqlen_k, s.num_heads_kv, s.head_dim)),
        out(HostTensor::contiguous(s.dtype, s.batch, s.seqlen_q, s.num_heads, s.head_dim)),
        lse(static_cast<size_t>(s.batch * s.num_heads * s.seqlen_q)) {
    fill_fa3_distribution(q.data, s.dtype, q.data.size(), seed);
    fill_fa3_distribution(k.data, s.dtype, k.data.size(), seed + 1);
    fill_fa3_distribution(v.data, s.dtype, v.data.size(), seed + 2);
    d_q = cli::DeviceBuffer(q.size_bytes());
    d_k = cli::DeviceBuffer(k.size_bytes());
    d_v = cli::DeviceBuffer(v.size_bytes());
    d_out = cli::DeviceBuffer(out.size_bytes());
    d_lse = cli::DeviceBuffer(lse.size() * sizeof(float));
    d_q.upload(q.data.data(), q.size_bytes());
    d_k.upload(k.data.data(), k.size_bytes());
    d_v.upload(v.data.data(), v.size_bytes());
  }

  ForwardArgs args() const {
    ForwardArgs a;
    a.dtype = shape.dtype;
    a.batch = shape.batch;
    a.seqlen_q = shape.seqlen_q;
    a.seqlen_k = shape.seqlen_k;
    a.num_heads = shape.num_heads;
    a.num_heads_kv = shape.num_heads_kv;
    a.head_dim = a.head_dim_v = shape.head_dim;
    a.causal = shape.causal;
    auto view = [](const HostTensor& t, const cli::DeviceBuffer& b) {
      return TensorView{b.get(), t.stride_batch, t.stride_seq, t.stride_head};
    };
    a.q = view(q, d_q);
    a.k = view(k, d_k);
    a.v = view(v, d_v);
    a.out = view(out, d_out);
    a.lse = static_cast<float*>(d_lse.get());
    return a;
  }

  /// Poisons O and LSE with NaN bytes, launches, waits, and copies both back.
  void run(const Spec* spec = nullptr) {
    d_out.fill_bytes(0xFF);
    d_lse.fill_bytes(0xFF);
    if (spec) runtime().forward(*spec, args(), nullptr);
    else runtime().forward(args(), nullptr);
    check_cu(driver().cuCtxSynchronize(nullptr), "cuCtxSynchronize after the attention kernel");
    d_out.download(out.data.data(), out.size_bytes());
    d_lse.download(lse.data(), lse.size() * sizeof(float));
  }

  /// Checks `rows` (all rows when empty and the problem is small) against the reference.
  CheckResult check(std::vector<RowIndex> rows = {}) const {
    if (rows.empty()) rows = all_rows(shape.batch, shape.num_heads, shape.seqlen_q);
    ReferenceOptions opt;
    opt.causal = shape.causal;
    const auto ref = reference_rows(q, k, v, opt, rows);
    return check_rows(shape.dtype, ref, gather_kernel_rows(out, lse, rows));
  }

  ProblemShape shape;
  HostTensor q, k, v, out;
  std::vector<float> lse;
  cli::DeviceBuffer d_q, d_k, d_v, d_out, d_lse;
};

}  // namespace fa3jit::test

// CPU reference, same-precision baseline and checker for the attention forward pass (see reference.h).
#include "testing/reference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "testing/half.h"

namespace fa3jit {
namespace {

constexpr size_t kFillChunk = size_t{1} << 20;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

int worker_count(int requested, size_t work_items) {
  int n = requested > 0 ? requested : static_cast<int>(std::thread::hardware_concurrency());
  n = std::clamp(n, 1, 32);
  return static_cast<int>(std::min<size_t>(static_cast<size_t>(n), std::max<size_t>(work_items, 1)));
}

// Runs fn(i) for i in [0, count) on `threads` workers; rethrows the first exception.
void parallel_for(size_t count, int threads, const std::function<void(size_t)>& fn) {
  if (threads <= 1 || count <= 1) {
    for (size_t i = 0; i < count; ++i) fn(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto work = [&] {
    for (size_t i = next++; i < count; i = next++) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
        next = count;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// bits -> float for every 16-bit pattern: the inner loops then cost one load per element.
const std::vector<float>& decode_table(DType dtype) {
  static const std::vector<float> bf16 = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = bf16_to_float(static_cast<uint16_t>(i));
    return t;
  }();
  static const std::vector<float> fp16 = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = fp16_to_float(static_cast<uint16_t>(i));
    return t;
  }();
  return dtype == DType::kFp16 ? fp16 : bf16;
}

void require_16bit(DType dtype, const char* what) {
  if (dtype != DType::kFp16 && dtype != DType::kBf16) {
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: dtype {} is not supported by the CPU reference (allowed: fp16, bf16)", what,
                            dtype_name(dtype)));
  }
}

// Checks that every element of `t` lies inside t.data.
void check_tensor(const HostTensor& t, const char* name) {
  if (t.batch < 0 || t.seqlen < 0 || t.heads < 0 || t.dim < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: negative extent ({}, {}, {}, {})", name, t.batch, t.seqlen, t.heads, t.dim));
  }
  if (t.stride_batch < 0 || t.stride_seq < 0 || t.stride_head < 0) {
    throw Error(ErrorCode::kInvalidArgument, fmt::format("{}: negative stride", name));
  }
  if (t.batch == 0 || t.seqlen == 0 || t.heads == 0 || t.dim == 0) return;
  const int64_t last = t.offset(t.batch - 1, t.seqlen - 1, t.heads - 1, t.dim - 1);
  if (last >= static_cast<int64_t>(t.data.size())) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("{}: strides ({}, {}, {}) reach element {} but data holds {}", name, t.stride_batch,
                            t.stride_seq, t.stride_head, last, t.data.size()));
  }
}

}  // namespace

void fill_fa3_distribution(std::vector<uint16_t>& out, DType dtype, size_t n, uint64_t seed) {
  require_16bit(dtype, "fill_fa3_distribution");
  out.resize(n);
  const size_t chunks = (n + kFillChunk - 1) / kFillChunk;
  parallel_for(chunks, worker_count(0, chunks), [&](size_t c) {
    std::mt19937_64 gen(splitmix64(seed ^ splitmix64(c)));
    std::normal_distribution<double> normal(0.0, 1.0);
    std::bernoulli_distribution outlier(0.001);
    const size_t end = std::min(n, (c + 1) * kFillChunk);
    for (size_t i = c * kFillChunk; i < end; ++i) {
      double x = normal(gen);
      if (outlier(gen)) x += 10.0 * normal(gen);
      out[i] = float_to_bits(dtype, static_cast<float>(x));
    }
  });
}

HostTensor HostTensor::contiguous(DType dtype, int64_t batch, int64_t seqlen, int64_t heads, int64_t dim) {
  if (batch < 0 || seqlen < 0 || heads < 0 || dim < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("HostTensor: negative extent ({}, {}, {}, {})", batch, seqlen, heads, dim));
  }
  const int64_t limit = std::numeric_limits<int64_t>::max() / 4;
  int64_t total = 1;
  for (int64_t e : {batch, seqlen, heads, dim}) {
    if (e != 0 && total > limit / e) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("HostTensor: ({}, {}, {}, {}) elements overflow", batch, seqlen, heads, dim));
    }
    total *= e;
  }
  HostTensor t;
  t.dtype = dtype;
  t.batch = batch;
  t.seqlen = seqlen;
  t.heads = heads;
  t.dim = dim;
  t.stride_head = dim;
  t.stride_seq = heads * dim;
  t.stride_batch = seqlen * heads * dim;
  t.data.assign(static_cast<size_t>(total), 0);
  return t;
}

float HostTensor::value(int64_t b, int64_t s, int64_t h, int64_t d) const {
  return bits_to_float(dtype, data.at(static_cast<size_t>(offset(b, s, h, d))));
}

std::vector<RowIndex> all_rows(int64_t batch, int64_t num_heads, int64_t seqlen_q) {
  std::vector<RowIndex> rows;
  rows.reserve(static_cast<size_t>(std::max<int64_t>(0, batch * num_heads * seqlen_q)));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < num_heads; ++h)
      for (int64_t r = 0; r < seqlen_q; ++r) rows.push_back({b, h, r});
  return rows;
}

std::vector<RowIndex> sample_rows(int64_t batch, int64_t num_heads, int64_t seqlen_q, int64_t block_m,
                                  int64_t random_rows, uint64_t seed) {
  if (batch <= 0 || num_heads <= 0 || seqlen_q <= 0) return {};
  if (block_m <= 0) {
    throw Error(ErrorCode::kInvalidArgument, fmt::format("sample_rows: block_m {} must be > 0", block_m));
  }
  // As many draws as the problem has rows, or more, would be mostly duplicates (--rows allows 10^8 on any
  // problem): every row is checked instead, and the work is at most the problem's row count.
  int64_t total = 0;
  if (!__builtin_mul_overflow(batch, num_heads, &total) && !__builtin_mul_overflow(total, seqlen_q, &total) &&
      random_rows >= total)
    return all_rows(batch, num_heads, seqlen_q);
  std::vector<RowIndex> rows;
  std::mt19937_64 gen(splitmix64(seed));
  std::uniform_int_distribution<int64_t> pick_b(0, batch - 1), pick_h(0, num_heads - 1),
      pick_r(0, seqlen_q - 1);
  for (int64_t i = 0; i < random_rows; ++i) {
    const int64_t b = pick_b(gen);
    const int64_t h = pick_h(gen);
    rows.push_back({b, h, pick_r(gen)});
  }
  const int64_t b = batch - 1, h = num_heads - 1;
  const int64_t last_block = (seqlen_q - 1) / block_m * block_m;
  for (int64_t r = 0; r < std::min(block_m, seqlen_q); ++r) rows.push_back({b, h, r});
  for (int64_t r = last_block; r < seqlen_q; ++r) rows.push_back({b, h, r});
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

float default_softmax_scale(int64_t head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

std::vector<ReferenceRow> reference_rows(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                                         const ReferenceOptions& options, const std::vector<RowIndex>& rows) {
  const DType dtype = q.dtype;
  require_16bit(dtype, "reference_rows: q");
  if (k.dtype != dtype || v.dtype != dtype) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("reference_rows: dtypes differ (q {}, k {}, v {})", dtype_name(q.dtype),
                            dtype_name(k.dtype), dtype_name(v.dtype)));
  }
  check_tensor(q, "reference_rows: q");
  check_tensor(k, "reference_rows: k");
  check_tensor(v, "reference_rows: v");
  if (k.batch != q.batch || v.batch != q.batch || v.seqlen != k.seqlen || v.heads != k.heads ||
      k.dim != q.dim) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("reference_rows: shapes do not match: q ({}, {}, {}, {}), k ({}, {}, {}, {}), "
                            "v ({}, {}, {}, {}); need equal batch, k/v equal seqlen and heads, q/k equal dim",
                            q.batch, q.seqlen, q.heads, q.dim, k.batch, k.seqlen, k.heads, k.dim, v.batch,
                            v.seqlen, v.heads, v.dim));
  }
  if (k.heads <= 0 || q.heads % k.heads != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("reference_rows: num_heads {} must be a multiple of num_heads_kv {}", q.heads,
                            k.heads));
  }
  const float scale_f = options.softmax_scale == 0.0f ? default_softmax_scale(q.dim) : options.softmax_scale;
  if (!std::isfinite(scale_f)) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("reference_rows: softmax_scale {} must be finite", options.softmax_scale));
  }
  for (const RowIndex& r : rows) {
    if (r.batch < 0 || r.batch >= q.batch || r.head < 0 || r.head >= q.heads || r.row < 0 || r.row >= q.seqlen) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("reference_rows: row (batch {}, head {}, row {}) outside (batch {}, num_heads {}, "
                              "seqlen_q {})", r.batch, r.head, r.row, q.batch, q.heads, q.seqlen));
    }
  }

  if (!options.sinks.empty() && static_cast<int64_t>(options.sinks.size()) != q.heads)
    throw Error(ErrorCode::kInvalidArgument, fmt::format("reference_rows: {} sinks for {} query heads",
                                                         options.sinks.size(), q.heads));
  const float* decode = decode_table(dtype).data();
  const double scale_d = scale_f;
  const int64_t group = q.heads / k.heads;
  const int64_t d_qk = q.dim, d_v = v.dim, seqlen_k = k.seqlen;
  std::vector<ReferenceRow> result(rows.size());

  parallel_for(rows.size(), worker_count(options.threads, rows.size()), [&](size_t i) {
    const RowIndex idx = rows[i];
    ReferenceRow& out = result[i];
    out.index = idx;
    out.out.assign(static_cast<size_t>(d_v), 0.0);
    out.baseline.assign(static_cast<size_t>(d_v), 0.0f);
    const int64_t kv_head = idx.head / group;
    // Bottom-right alignment (FA3): query i sees keys j <= i + seqlen_k - seqlen_q (causal), and with a window
    // i + d - left <= j <= i + d + right.
    const int64_t diag = idx.row + seqlen_k - q.seqlen;
    const int64_t right = options.causal ? 0 : options.window_right;
    const int64_t key_end = right >= 0 ? std::clamp<int64_t>(diag + right + 1, 0, seqlen_k) : seqlen_k;
    const int64_t first =
        options.window_left >= 0 ? std::clamp<int64_t>(diag - options.window_left, 0, key_end) : 0;
    const int64_t visible = key_end - first;
    out.visible_keys = visible;
    out.first_key = first;
    const bool has_sink = !options.sinks.empty();
    const double sink = has_sink ? static_cast<double>(options.sinks[static_cast<size_t>(idx.head)]) : 0.0;
    if (visible == 0) {
      out.lse = has_sink ? sink : -std::numeric_limits<double>::infinity();
      return;
    }
    const double softcap = options.softcap;

    std::vector<float> qf(static_cast<size_t>(d_qk)), row_f(static_cast<size_t>(std::max(d_qk, d_v)));
    const uint16_t* q_ptr = q.data.data() + q.offset(idx.batch, idx.row, idx.head, 0);
    for (int64_t d = 0; d < d_qk; ++d) qf[d] = decode[q_ptr[d]];

    std::vector<double> s_ref(static_cast<size_t>(visible));
    std::vector<float> s_base(static_cast<size_t>(visible));
    double max_ref = -std::numeric_limits<double>::infinity();
    float max_base = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < visible; ++j) {
      const uint16_t* k_ptr = k.data.data() + k.offset(idx.batch, first + j, kv_head, 0);
      double dot_d = 0.0, dot_abs = 0.0;
      float dot_f = 0.0f;
      for (int64_t d = 0; d < d_qk; ++d) {
        const float kd = decode[k_ptr[d]];
        dot_d += static_cast<double>(qf[d]) * static_cast<double>(kd);  // products of 16-bit values are exact
        dot_abs += std::fabs(static_cast<double>(qf[d]) * static_cast<double>(kd));
        dot_f += qf[d] * kd;
      }
      if (options.baseline_p_e4m3) out.lse_slack = std::max(out.lse_slack, kFp8AccumRelTol * dot_abs * scale_d);
      s_ref[j] = dot_d * scale_d;
      float s_f = dot_f * scale_f;
      if (softcap > 0.0) {
        s_ref[j] = softcap * std::tanh(s_ref[j] / softcap);
        s_f = options.softcap * std::tanh(s_f / options.softcap);
      }
      s_base[j] = options.baseline_p_e4m3 ? s_f : round_to(dtype, s_f);
      max_ref = std::max(max_ref, s_ref[j]);
      max_base = std::max(max_base, s_base[j]);
    }

    std::vector<double> acc_ref(static_cast<size_t>(d_v), 0.0);
    std::vector<float> acc_base(static_cast<size_t>(d_v), 0.0f);
    double sum_ref = 0.0;
    float sum_base = 0.0f;
    double weighted_v_max = 0.0;  // sum_j p_j max_d |V_jd|, for the e4m3 slack of O
    for (int64_t j = 0; j < visible; ++j) {
      const double p_ref = std::exp(s_ref[j] - max_ref);
      sum_ref += p_ref;
      const uint16_t* v_ptr = v.data.data() + v.offset(idx.batch, first + j, kv_head, 0);
      double v_max = 0.0;
      for (int64_t d = 0; d < d_v; ++d) {
        acc_ref[d] += p_ref * static_cast<double>(decode[v_ptr[d]]);
        v_max = std::max(v_max, std::fabs(static_cast<double>(decode[v_ptr[d]])));
      }
      weighted_v_max += p_ref * v_max;
    }
    // Every score may be off by lse_slack, so every weight p_j / sum by a factor in [e^-2slack, e^2slack].
    if (options.baseline_p_e4m3) out.out_slack = std::expm1(2.0 * out.lse_slack) * weighted_v_max / sum_ref;
    if (options.baseline_p_e4m3) {
      // The online softmax over key blocks of baseline_block_n, last block first, as the kernel runs it: P is
      // rounded to e4m3 relative to the running max (times 2^8), and the accumulators are rescaled when it grows.
      const int64_t block = options.baseline_block_n > 0 ? options.baseline_block_n : visible;
      float running_max = -std::numeric_limits<float>::infinity();
      for (int64_t start = (visible - 1) / block * block; start >= 0; start -= block) {
        const int64_t end = std::min(visible, start + block);
        float block_max = running_max;
        for (int64_t j = start; j < end; ++j) block_max = std::max(block_max, s_base[j]);
        const float rescale = std::exp(running_max - block_max);  // 0 on the first block (exp(-inf))
        sum_base *= rescale;
        for (int64_t d = 0; d < d_v; ++d) acc_base[d] *= rescale;
        running_max = block_max;
        for (int64_t j = start; j < end; ++j) {
          const float p_base = std::exp(s_base[j] - running_max);
          const float p_rounded = round_to(DType::kE4m3, p_base * 256.0f) / 256.0f;
          sum_base += p_base;
          const uint16_t* v_ptr = v.data.data() + v.offset(idx.batch, first + j, kv_head, 0);
          for (int64_t d = 0; d < d_v; ++d) acc_base[d] += p_rounded * decode[v_ptr[d]];
        }
      }
    } else {
      for (int64_t j = 0; j < visible; ++j) {
        const float p_base = std::exp(s_base[j] - max_base);
        const float p_base_rounded = round_to(dtype, p_base);  // P enters P.V in the input dtype
        sum_base += p_base;
        const uint16_t* v_ptr = v.data.data() + v.offset(idx.batch, first + j, kv_head, 0);
        for (int64_t d = 0; d < d_v; ++d) row_f[d] = decode[v_ptr[d]];
        for (int64_t d = 0; d < d_v; ++d) acc_base[d] += p_base_rounded * row_f[d];
      }
    }
    // The sink joins the normalisers as a key of value 0 (the baseline's sum relative to its own max; the e4m3
    // baseline's running max is the max of the scores, as the kernel's).
    if (has_sink) {
      const double m2 = std::max(max_ref, sink);
      for (int64_t d = 0; d < d_v; ++d) acc_ref[d] *= std::exp(max_ref - m2);
      sum_ref = sum_ref * std::exp(max_ref - m2) + std::exp(sink - m2);
      max_ref = m2;
      sum_base += std::exp(static_cast<float>(sink) - max_base);
    }
    for (int64_t d = 0; d < d_v; ++d) {
      out.out[d] = acc_ref[d] / sum_ref;
      out.baseline[d] = round_to(dtype, acc_base[d] / sum_base);
    }
    out.lse = max_ref + std::log(sum_ref);
  });
  return result;
}

KernelRows gather_kernel_rows(const HostTensor& out, const std::vector<float>& lse,
                              const std::vector<RowIndex>& rows) {
  check_tensor(out, "gather_kernel_rows: out");
  const size_t lse_size = static_cast<size_t>(out.batch * out.heads * out.seqlen);
  if (!lse.empty() && lse.size() != lse_size) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("gather_kernel_rows: lse has {} values, expected batch*num_heads*seqlen_q = {}",
                            lse.size(), lse_size));
  }
  KernelRows result;
  result.out.reserve(rows.size() * static_cast<size_t>(out.dim));
  for (const RowIndex& r : rows) {
    if (r.batch < 0 || r.batch >= out.batch || r.head < 0 || r.head >= out.heads || r.row < 0 ||
        r.row >= out.seqlen) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("gather_kernel_rows: row (batch {}, head {}, row {}) outside out ({}, {}, {}, {})",
                              r.batch, r.head, r.row, out.batch, out.seqlen, out.heads, out.dim));
    }
    const uint16_t* p = out.data.data() + out.offset(r.batch, r.row, r.head, 0);
    result.out.insert(result.out.end(), p, p + out.dim);
    if (!lse.empty()) result.lse.push_back(lse[static_cast<size_t>((r.batch * out.heads + r.head) * out.seqlen + r.row)]);
  }
  return result;
}

CheckResult check_rows(DType dtype, const std::vector<ReferenceRow>& reference, const KernelRows& kernel) {
  require_16bit(dtype, "check_rows");
  const size_t d_v = reference.empty() ? 0 : reference.front().out.size();
  for (const ReferenceRow& r : reference) {
    if (r.out.size() != d_v || r.baseline.size() != d_v) {
      throw Error(ErrorCode::kInvalidArgument, "check_rows: reference rows have different head_dim_v");
    }
  }
  if (kernel.out.size() != reference.size() * d_v) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("check_rows: kernel gave {} output values, expected {} rows x {} = {}",
                            kernel.out.size(), reference.size(), d_v, reference.size() * d_v));
  }
  if (!kernel.lse.empty() && kernel.lse.size() != reference.size()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("check_rows: kernel gave {} lse values for {} rows", kernel.lse.size(),
                            reference.size()));
  }

  CheckResult res;
  res.rows_checked = static_cast<int64_t>(reference.size());
  res.lse_checked = !kernel.lse.empty();
  double sum_err = 0.0, sum_base_err = 0.0;
  int64_t finite_values = 0;
  std::string lse_failure;
  for (size_t i = 0; i < reference.size(); ++i) {
    const ReferenceRow& ref = reference[i];
    for (size_t d = 0; d < d_v; ++d) {
      const double r = ref.out[d];
      // FA3's fwd_atol term: (out_ref + 0.3 - 0.3) with out_ref and every intermediate in the dtype.
      const float r_dt = round_to(dtype, static_cast<float>(r));
      const float shifted = round_to(dtype, round_to(dtype, r_dt + 0.3f) - 0.3f);
      res.rounding_noise = std::max(res.rounding_noise, static_cast<double>(std::fabs(shifted - r_dt)));
      const double base_err = std::fabs(static_cast<double>(ref.baseline[d]) - r);
      res.baseline_max_err = std::max(res.baseline_max_err, base_err);
      sum_base_err += base_err;
      ++res.values_checked;

      const float o = bits_to_float(dtype, kernel.out[i * d_v + d]);
      if (std::isnan(o)) {
        ++res.nan_count;
        continue;
      }
      if (std::isinf(o)) {
        ++res.inf_count;
        continue;
      }
      const double err = std::fabs(static_cast<double>(o) - r);
      sum_err += err;
      ++finite_values;
      res.max_abs_err = std::max(res.max_abs_err, err);
      // The rule compares err - out_slack (0 for 16-bit inputs) with the tolerance; the worst value is reported.
      const double excess = err - ref.out_slack;
      if (excess > res.max_excess || res.worst_col < 0) {
        res.max_excess = excess;
        res.worst_row = ref.index;
        res.worst_col = static_cast<int64_t>(d);
        res.worst_ref = r;
        res.worst_out = o;
        res.worst_slack = ref.out_slack;
      }
    }
    if (res.lse_checked) {
      const float l = kernel.lse[i];
      const bool bad = [&] {
        if (std::isinf(ref.lse)) return !(std::isinf(l) && l < 0);
        if (!std::isfinite(l)) return true;
        const double err = std::fabs(static_cast<double>(l) - ref.lse);
        res.lse_max_err = std::max(res.lse_max_err, err);
        return err > kLseAbsTol + kLseRelTol * std::fabs(ref.lse) + ref.lse_slack;
      }();
      if (bad) {
        if (res.lse_bad_rows == 0) {
          lse_failure = fmt::format("lse of (batch {}, head {}, row {}) is {} but the reference is {}",
                                    ref.index.batch, ref.index.head, ref.index.row, l, ref.lse);
        }
        ++res.lse_bad_rows;
      }
    }
  }
  res.mean_abs_err = finite_values ? sum_err / static_cast<double>(finite_values) : 0.0;
  res.baseline_mean_err = res.values_checked ? sum_base_err / static_cast<double>(res.values_checked) : 0.0;
  res.tolerance = 2.0 * res.baseline_max_err + 2.0 * res.rounding_noise;

  if (res.values_checked == 0) {
    res.failure = "no output values were checked";
  } else if (res.nan_count + res.inf_count > 0) {
    res.failure = fmt::format("{} NaN and {} inf values in the output", res.nan_count, res.inf_count);
  } else if (res.max_excess > res.tolerance) {
    res.failure = fmt::format("error {:.3e} > tolerance {:.3e}{} at (batch {}, head {}, row {}, col {}): out {} vs "
                              "reference {}",
                              std::fabs(res.worst_out - res.worst_ref), res.tolerance,
                              res.worst_slack > 0 ? fmt::format(" + FP8 GEMM slack {:.3e}", res.worst_slack) : "",
                              res.worst_row.batch, res.worst_row.head, res.worst_row.row, res.worst_col, res.worst_out,
                              res.worst_ref);
  } else if (res.lse_bad_rows > 0) {
    res.failure = fmt::format("{} rows with a wrong lse; first: {}", res.lse_bad_rows, lse_failure);
  }
  res.passed = res.failure.empty();
  return res;
}

std::string format_check(const CheckResult& r) {
  std::string lse = r.lse_checked ? fmt::format(" lse_err {:.2e}", r.lse_max_err) : std::string(" lse unchecked");
  return fmt::format("max_err {:.3e} mean_err {:.3e} tol {:.3e} (baseline {:.3e}, noise {:.3e}){} nan {} inf {} {}",
                     r.max_abs_err, r.mean_abs_err, r.tolerance, r.baseline_max_err, r.rounding_noise, lse,
                     r.nan_count, r.inf_count, r.passed ? "PASS" : "FAIL");
}

}  // namespace fa3jit

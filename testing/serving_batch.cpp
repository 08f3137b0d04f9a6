// Serving batches on the host and their check against the float64 reference (serving_batch.h).
#include "testing/serving_batch.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "testing/half.h"

namespace fa3jit::testing {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64: independent streams from nearby seeds
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Page-table entries no sequence uses: outside [0, num_pages), so following one reads outside the pool.
int32_t garbage_page(size_t i, int64_t num_pages) {
  const int32_t values[] = {-7, 1 << 30, static_cast<int32_t>(num_pages), -1, std::numeric_limits<int32_t>::min(),
                            std::numeric_limits<int32_t>::max()};
  return values[i % std::size(values)];
}

// Unused K/V slots: NaN, or finite values of magnitude 64..256 (the data is ~N(0, 1)), so that one garbage key
// read as a real one dominates its row's softmax and one garbage V row moves the output far past the tolerance.
// A table of a prime number of random values repeated: images reach hundreds of millions of elements.
void fill_garbage(std::vector<uint16_t>& image, DType dtype, bool nan, uint64_t seed) {
  if (nan) {
    std::fill(image.begin(), image.end(), uint16_t{0xFFFF});  // NaN in fp16 and bf16
    return;
  }
  std::mt19937_64 gen(mix(seed));
  std::uniform_real_distribution<float> magnitude(64.0f, 256.0f);
  std::vector<uint16_t> table(4093);
  for (uint16_t& x : table) x = float_to_bits(dtype, (gen() & 1 ? 1.0f : -1.0f) * magnitude(gen));
  for (size_t i = 0; i < image.size(); ++i) image[i] = table[i % table.size()];
}

void require(bool ok, const std::string& message) {
  if (!ok) throw Error(ErrorCode::kInvalidArgument, "ServingShape: " + message);
}

int64_t max_of(const std::vector<int64_t>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }
int64_t sum_of(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

}  // namespace

const char* kv_layout_name(KvLayout layout) {
  switch (layout) {
    case KvLayout::kDense: return "dense";
    case KvLayout::kPacked: return "packed";
    case KvLayout::kPaged: return "paged";
  }
  return "?";
}

std::string ServingShape::describe() const {
  std::string kv_text = kv_layout_name(kv);
  if (kv == KvLayout::kPaged) kv_text += fmt::format("({}{})", page_size, page_padding ? "+pad" : "");
  if (kv != KvLayout::kPaged && use_seqused_k) kv_text += fmt::format("+seqused(slack {})", kv_slack);
  std::string lengths;
  for (int64_t b = 0; b < std::min<int64_t>(batch(), 6); ++b) lengths += fmt::format(" {}x{}", seqlens_q[b], seqlens_k[b]);
  if (batch() > 6) lengths += " ...";
  std::string variant;
  if (window_left >= 0 || window_right >= 0) variant += fmt::format(" window({},{})", window_left, window_right);
  if (softcap > 0.0f) variant += fmt::format(" softcap {}", softcap);
  if (sinks) variant += " sinks";
  return fmt::format("{} d{} {}/{}{}{} q {} kv {}{} splits {} pack_gqa {} batch {} [{} ]", dtype_name(dtype),
                     head_dim, num_heads, num_heads_kv, causal ? " causal" : "", variant, packed_q ? "packed" : "dense",
                     kv_text, nan_garbage ? " nan-garbage" : "", num_splits, pack_gqa, batch(), lengths);
}

void validate(const ServingShape& s) {
  require(s.batch() >= 1, "seqlens_q must name at least one sequence");
  require(s.seqlens_k.size() == s.seqlens_q.size(),
          fmt::format("seqlens_k has {} sequences, seqlens_q {}", s.seqlens_k.size(), s.seqlens_q.size()));
  require(s.sequence_seeds.empty() || static_cast<int64_t>(s.sequence_seeds.size()) == s.batch(),
          fmt::format("sequence_seeds has {} entries for {} sequences", s.sequence_seeds.size(), s.batch()));
  for (int64_t b = 0; b < s.batch(); ++b)
    require(s.seqlens_q[b] >= 0 && s.seqlens_k[b] >= 0, fmt::format("sequence {} has a negative length", b));
  require(s.dtype == DType::kBf16 || s.dtype == DType::kFp16, "dtype must be bf16 or fp16");
  require(s.num_heads_kv >= 1 && s.num_heads % s.num_heads_kv == 0,
          fmt::format("num_heads {} must be a multiple of num_heads_kv {}", s.num_heads, s.num_heads_kv));
  require(s.head_dim >= 1, "head_dim must be >= 1");
  require(sum_of(s.seqlens_q) >= 1, "the batch needs at least one query row");
  if (!s.packed_q)
    require(std::all_of(s.seqlens_q.begin(), s.seqlens_q.end(), [&](int64_t l) { return l == s.seqlens_q[0]; }),
            "dense q needs every seqlens_q equal");
  require(s.kv_slack >= 0 && s.page_padding >= 0 && s.spare_pages >= 0 && s.extra_page_columns >= 0,
          "kv_slack, page_padding, spare_pages and extra_page_columns must be >= 0");
  const int64_t slack = s.use_seqused_k ? s.kv_slack : 0;
  switch (s.kv) {
    case KvLayout::kDense:
      require(s.use_seqused_k || std::all_of(s.seqlens_k.begin(), s.seqlens_k.end(),
                                             [&](int64_t l) { return l == s.seqlens_k[0]; }),
              "dense K/V without seqused_k needs every seqlens_k equal");
      require(max_of(s.seqlens_k) + slack >= 1, "dense K/V needs a capacity of at least one row");
      break;
    case KvLayout::kPacked:
      require(sum_of(s.seqlens_k) + slack * s.batch() >= 1, "packed K/V needs at least one row in all");
      break;
    case KvLayout::kPaged:
      require(s.page_size >= 1, fmt::format("page_size {} must be >= 1", s.page_size));
      break;
  }
}

ServingBatch make_serving_batch(const ServingShape& shape, uint64_t seed) {
  validate(shape);
  const ServingShape& s = shape;
  const int64_t B = s.batch(), H = s.num_heads, Hkv = s.num_heads_kv, d = s.head_dim;
  ServingBatch r;
  r.shape = s;
  r.softmax_scale = default_softmax_scale(d);
  if (s.sinks) {
    std::mt19937_64 gen(seed ^ 0x5151u);
    std::uniform_real_distribution<float> logit(-2.0f, 6.0f);
    for (int64_t h = 0; h < H; ++h) r.sinks.push_back(logit(gen));
  }

  for (int64_t b = 0; b < B; ++b) {
    r.q_seq.push_back(HostTensor::contiguous(s.dtype, 1, s.seqlens_q[b], H, d));
    r.k_seq.push_back(HostTensor::contiguous(s.dtype, 1, s.seqlens_k[b], Hkv, d));
    r.v_seq.push_back(HostTensor::contiguous(s.dtype, 1, s.seqlens_k[b], Hkv, d));
  }
  // Sequences are filled on all cores: a decode batch of 64 x 4k keys is hundreds of millions of values. Each
  // sequence's values depend only on its seed (the fill is deterministic per seed), not on the thread.
  std::atomic<int64_t> next{0};
  auto fill_sequences = [&] {
    for (int64_t b = next++; b < B; b = next++) {
      const uint64_t base =
          s.sequence_seeds.empty() ? mix(seed * 1000003 + static_cast<uint64_t>(b)) : s.sequence_seeds[b];
      fill_fa3_distribution(r.q_seq[b].data, s.dtype, r.q_seq[b].data.size(), mix(base ^ 0x51));
      fill_fa3_distribution(r.k_seq[b].data, s.dtype, r.k_seq[b].data.size(), mix(base ^ 0x4B));
      fill_fa3_distribution(r.v_seq[b].data, s.dtype, r.v_seq[b].data.size(), mix(base ^ 0x56));
    }
  };
  {
    const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 32);
    std::vector<std::thread> pool;
    for (int64_t t = 1; t < std::min(threads, B); ++t) pool.emplace_back(fill_sequences);
    fill_sequences();  // fill_fa3_distribution throws only for a dtype validate() has refused
    for (std::thread& t : pool) t.join();
  }

  // q / out: packed rows of every sequence one after the other, or (batch, seqlen_q) dense.
  r.max_seqlen_q = max_of(s.seqlens_q);
  if (s.packed_q) {
    r.cu_seqlens_q.assign(1, 0);
    for (int64_t b = 0; b < B; ++b) r.cu_seqlens_q.push_back(static_cast<int32_t>(r.cu_seqlens_q.back() + s.seqlens_q[b]));
    r.q_rows = r.seqlen_q = r.cu_seqlens_q.back();
  } else {
    r.seqlen_q = s.seqlens_q[0];
    r.q_rows = B * r.seqlen_q;
  }
  r.q_image.assign(static_cast<size_t>(r.q_rows * H * d), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < s.seqlens_q[b]; ++i)
      for (int64_t h = 0; h < H; ++h)
        std::copy_n(r.q_seq[b].data.begin() + r.q_seq[b].offset(0, i, h, 0), d, r.q_image.begin() + r.q_offset(b, i, h));

  // k / v: where each sequence's rows live.
  const int64_t slack = s.use_seqused_k ? s.kv_slack : 0;
  std::mt19937_64 gen(mix(seed ^ 0x9A6E));
  switch (s.kv) {
    case KvLayout::kDense:
      r.kv_capacity = r.seqlen_k = max_of(s.seqlens_k) + slack;
      r.kv_rows = B * r.kv_capacity;
      r.max_seqlen_k = r.kv_capacity;
      break;
    case KvLayout::kPacked:
      r.cu_seqlens_k.assign(1, 0);
      for (int64_t b = 0; b < B; ++b)
        r.cu_seqlens_k.push_back(static_cast<int32_t>(r.cu_seqlens_k.back() + s.seqlens_k[b] + slack));
      r.kv_rows = r.seqlen_k = r.cu_seqlens_k.back();
      r.max_seqlen_k = max_of(s.seqlens_k) + slack;
      break;
    case KvLayout::kPaged: {
      std::vector<int64_t> pages(static_cast<size_t>(B));
      for (int64_t b = 0; b < B; ++b) pages[b] = (s.seqlens_k[b] + s.page_size - 1) / s.page_size;
      r.max_pages = max_of(pages) + s.extra_page_columns;
      r.page_table_stride = r.max_pages + 3;  // padding columns past max_pages: garbage too
      r.num_pages = sum_of(pages) + s.spare_pages;
      r.page_stride_rows = s.page_size + s.page_padding;
      r.kv_rows = r.num_pages * r.page_stride_rows;
      r.seqlen_k = r.max_pages * s.page_size;
      r.max_seqlen_k = max_of(s.seqlens_k);
      std::vector<int32_t> physical(static_cast<size_t>(r.num_pages));
      std::iota(physical.begin(), physical.end(), 0);
      std::shuffle(physical.begin(), physical.end(), gen);
      r.page_table.resize(static_cast<size_t>(B * r.page_table_stride));
      for (size_t i = 0; i < r.page_table.size(); ++i) r.page_table[i] = garbage_page(i, r.num_pages);
      size_t next = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t p = 0; p < pages[b]; ++p) r.page_table[b * r.page_table_stride + p] = physical[next++];
      break;
    }
  }
  if (s.kv == KvLayout::kPaged || s.use_seqused_k)
    for (int64_t b = 0; b < B; ++b) r.seqused_k.push_back(static_cast<int32_t>(s.seqlens_k[b]));

  r.k_image.resize(static_cast<size_t>(r.kv_rows * Hkv * d));
  r.v_image.resize(r.k_image.size());
  fill_garbage(r.k_image, s.dtype, s.nan_garbage, seed ^ 0x6B);
  fill_garbage(r.v_image, s.dtype, s.nan_garbage, seed ^ 0x76);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < s.seqlens_k[b]; ++j)
      for (int64_t h = 0; h < Hkv; ++h) {
        std::copy_n(r.k_seq[b].data.begin() + r.k_seq[b].offset(0, j, h, 0), d, r.k_image.begin() + r.kv_offset(b, j, h));
        std::copy_n(r.v_seq[b].data.begin() + r.v_seq[b].offset(0, j, h, 0), d, r.v_image.begin() + r.kv_offset(b, j, h));
      }
  return r;
}

int64_t ServingBatch::q_offset(int64_t b, int64_t i, int64_t h) const {
  const int64_t row = shape.packed_q ? cu_seqlens_q[b] + i : b * seqlen_q + i;
  return (row * shape.num_heads + h) * shape.head_dim;
}

int64_t ServingBatch::kv_offset(int64_t b, int64_t j, int64_t h) const {
  int64_t row = 0;
  switch (shape.kv) {
    case KvLayout::kDense: row = b * kv_capacity + j; break;
    case KvLayout::kPacked: row = cu_seqlens_k[b] + j; break;
    case KvLayout::kPaged:
      row = int64_t{page_table[b * page_table_stride + j / shape.page_size]} * page_stride_rows + j % shape.page_size;
      break;
  }
  return (row * shape.num_heads_kv + h) * shape.head_dim;
}

int64_t ServingBatch::lse_index(int64_t b, int64_t h, int64_t i) const {
  if (shape.packed_q) return h * q_rows + cu_seqlens_q[b] + i;
  return (b * shape.num_heads + h) * seqlen_q + i;
}

std::vector<uint16_t> ServingBatch::sequence_out(const std::vector<uint16_t>& out_image, int64_t b) const {
  std::vector<uint16_t> result;
  for (int64_t i = 0; i < shape.seqlens_q[b]; ++i)
    for (int64_t h = 0; h < shape.num_heads; ++h) {
      const auto* p = out_image.data() + q_offset(b, i, h);
      result.insert(result.end(), p, p + shape.head_dim);
    }
  return result;
}

std::vector<float> ServingBatch::sequence_lse(const std::vector<float>& lse_image, int64_t b) const {
  std::vector<float> result;
  for (int64_t h = 0; h < shape.num_heads; ++h)
    for (int64_t i = 0; i < shape.seqlens_q[b]; ++i) result.push_back(lse_image[lse_index(b, h, i)]);
  return result;
}

ServingCheck check_serving(const ServingBatch& batch, const std::vector<uint16_t>& out_image,
                           const std::vector<float>& lse_image, const RowSampling& sampling) {
  if (out_image.size() != batch.out_elements() || lse_image.size() != batch.lse_elements()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("check_serving: images of {} out and {} lse values, the batch has {} and {}",
                            out_image.size(), lse_image.size(), batch.out_elements(), batch.lse_elements()));
  }
  const ServingShape& s = batch.shape;
  ReferenceOptions options;
  options.softmax_scale = batch.softmax_scale;
  options.causal = s.causal;
  options.window_left = s.window_left;
  options.window_right = s.window_right;
  options.softcap = s.softcap;
  options.sinks = batch.sinks;
  ServingCheck result;
  for (int64_t b = 0; b < s.batch(); ++b) {
    const int64_t lq = s.seqlens_q[b], lk = s.seqlens_k[b];
    if (lq == 0) continue;
    const std::vector<RowIndex> rows =
        s.num_heads * lq * lk <= sampling.full_limit
            ? all_rows(1, s.num_heads, lq)
            : sample_rows(1, s.num_heads, lq, sampling.block_m, sampling.sampled, sampling.seed + static_cast<uint64_t>(b));
    const std::vector<ReferenceRow> reference = reference_rows(batch.q_seq[b], batch.k_seq[b], batch.v_seq[b], options, rows);
    KernelRows kernel;
    SequenceCheck seq;
    seq.sequence = b;
    for (const ReferenceRow& ref : reference) {
      const uint16_t* p = out_image.data() + batch.q_offset(b, ref.index.row, ref.index.head);
      kernel.out.insert(kernel.out.end(), p, p + s.head_dim);
      kernel.lse.push_back(lse_image[batch.lse_index(b, ref.index.head, ref.index.row)]);
      if (ref.visible_keys == 0) {
        ++seq.empty_rows;
        if (std::any_of(p, p + s.head_dim, [&](uint16_t x) { return bits_to_float(s.dtype, x) != 0.0f; }))
          ++seq.nonzero_empty_rows;
      }
    }
    seq.result = check_rows(s.dtype, reference, kernel);
    if (seq.result.passed && seq.nonzero_empty_rows > 0) {
      seq.result.passed = false;
      seq.result.failure = fmt::format("{} of {} rows without keys have a non-zero output (must be exactly 0)",
                                       seq.nonzero_empty_rows, seq.empty_rows);
    }
    result.rows_checked += seq.result.rows_checked;
    result.max_abs_err = std::max(result.max_abs_err, seq.result.max_abs_err);
    result.max_tolerance = std::max(result.max_tolerance, seq.result.tolerance);
    result.lse_max_err = std::max(result.lse_max_err, seq.result.lse_max_err);
    if (!seq.result.passed && result.failure.empty()) {
      result.failure = fmt::format("sequence {} (seqlen_q {}, seqlen_k {}; rows counted from the sequence's "
                                   "start): {}", b, lq, lk, seq.result.failure);
    }
    result.sequences.push_back(std::move(seq));
  }
  if (result.rows_checked == 0 && result.failure.empty()) result.failure = "no rows were checked";
  result.passed = result.failure.empty();
  return result;
}

std::string format_check(const ServingCheck& c) {
  return fmt::format("{} sequences, {} rows: max_err {:.3e} max_tol {:.3e} lse_err {:.2e} {}{}", c.sequences.size(),
                     c.rows_checked, c.max_abs_err, c.max_tolerance, c.lse_max_err, c.passed ? "PASS" : "FAIL",
                     c.failure.empty() ? "" : ": " + c.failure);
}

}  // namespace fa3jit::testing

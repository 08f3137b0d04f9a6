// A serving batch on the host: sequences of their own lengths laid out as the forward's serving arguments take
// them (kernels/attention_fwd/launch.h, ForwardArgs "serving layouts"), and the check of a kernel's output
// against the float64 reference, sequence by sequence.
//
// Each sequence b is first made as its own small problem: q (1, seqlen_q[b], num_heads, head_dim) and k, v
// (1, seqlen_k[b], num_heads_kv, head_dim), filled from FA3's distribution (reference.h) with a per-sequence
// seed. Those tensors are then copied into the images the device receives:
//   q, out : packed (total_q, num_heads, head_dim) with cu_seqlens_q, or dense (batch, seqlen_q, ...);
//   k, v   : dense (batch, capacity, num_heads_kv, head_dim), packed (total_k, ...) with cu_seqlens_k, or paged
//            (num_pages, page_size, num_heads_kv, head_dim) behind a shuffled page table.
// Every slot of the images that no sequence's attended key occupies (rows past seqused_k, spare pages, the rest
// of a last page) holds garbage: finite values much larger than the data, or NaN; unused page-table entries
// hold indices outside [0, num_pages) (-7, 1 << 30, ...). A kernel that reads any of them gives a wrong answer.
// The reference of sequence b is reference_rows() on its own tensors (causal bottom-right aligned per
// sequence), so the serving path is judged by the same float64 reference and FA3 rule as the dense one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "testing/reference.h"

namespace fa3jit::testing {

enum class KvLayout { kDense, kPacked, kPaged };
const char* kv_layout_name(KvLayout layout);

struct ServingShape {
  DType dtype = DType::kBf16;
  int64_t num_heads = 8, num_heads_kv = 2, head_dim = 128;
  bool causal = false;
  /// Per sequence: query rows and attended keys (seqused_k where one is passed). Equal sizes (the batch).
  std::vector<int64_t> seqlens_q, seqlens_k;
  /// Per sequence: the seed of its q, k, v (the same seed and lengths give the same data in any batch).
  /// Empty: derived from the batch's seed and the sequence's position.
  std::vector<uint64_t> sequence_seeds;
  /// true: q and out packed with cu_seqlens_q; false: dense (batch, seqlen_q, ...), every seqlens_q equal.
  bool packed_q = true;
  KvLayout kv = KvLayout::kPacked;
  /// Dense / packed K/V: pass seqused_k, and give every sequence kv_slack garbage rows past its keys (dense: the
  /// capacity is the longest sequence plus kv_slack). Without it, dense K/V needs every seqlens_k equal. Paged
  /// K/V always passes seqused_k.
  bool use_seqused_k = false;
  int64_t kv_slack = 0;
  /// Paged only: rows per page, garbage rows between pages (page stride = page_size + page_padding rows),
  /// spare (never mapped) pages, and extra page-table columns past the longest sequence's pages.
  int64_t page_size = 16;
  int64_t page_padding = 0;
  int64_t spare_pages = 3;
  int64_t extra_page_columns = 2;
  /// Unused K/V slots hold NaN instead of large finite values.
  bool nan_garbage = false;
  /// The attention variant (ForwardArgs): window sides (-1 unbounded), softcap (0 off), and whether each query
  /// head gets a sink logit (values from the batch's seed, in [-2, 6]: some below, some above the scores' max).
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  bool sinks = false;
  int num_splits = 1;  // ForwardArgs::num_splits (0 heuristic, 1 none, > 1 that many)
  int pack_gqa = -1;   // ForwardArgs::pack_gqa

  int64_t batch() const { return static_cast<int64_t>(seqlens_q.size()); }
  /// One line, e.g. "bf16 d128 8/2 causal q packed kv paged(16) splits 0 pack_gqa -1 batch 4 [1x300, 1x2047 ...]".
  std::string describe() const;
};

/// Throws Error(kInvalidArgument) naming the field for a shape make_serving_batch cannot lay out.
void validate(const ServingShape& shape);

/// What the device receives, as host images, and where each sequence's rows are in them.
struct ServingBatch {
  ServingShape shape;
  float softmax_scale = 0.0f;
  std::vector<float> sinks;  // (num_heads) when shape.sinks, else empty
  /// The logical tensors of every sequence: batch 1, seqlen seqlens_q[b] / seqlens_k[b], contiguous.
  std::vector<HostTensor> q_seq, k_seq, v_seq;

  /// Images. q and out share one layout (out: head_dim values per row as q); lse is (num_heads, total_q) when
  /// packed, (batch, num_heads, seqlen_q) when dense. k and v share one layout.
  std::vector<uint16_t> q_image, k_image, v_image;
  int64_t q_rows = 0;         // total_q (packed) or batch * seqlen_q (dense)
  int64_t seqlen_q = 0;       // ForwardArgs::seqlen_q: total_q (packed) or the common seqlen_q (dense)
  int64_t max_seqlen_q = 0;   // longest sequence's queries
  int64_t kv_rows = 0;        // rows of k/v images: batch * capacity, total_k or num_pages * page stride rows
  int64_t kv_capacity = 0;    // dense: rows per sequence
  int64_t seqlen_k = 0;       // ForwardArgs::seqlen_k (dense capacity, total_k; paged: max_pages * page_size)
  int64_t max_seqlen_k = 0;   // longest sequence's keys
  int64_t page_stride_rows = 0, num_pages = 0, max_pages = 0, page_table_stride = 0;
  std::vector<int32_t> cu_seqlens_q, cu_seqlens_k, seqused_k, page_table;  // empty when not passed

  /// Element offset of (sequence b, query i, head h, 0) in q_image and the out image.
  int64_t q_offset(int64_t b, int64_t i, int64_t h) const;
  /// Element offset of (sequence b, key j, kv head h, 0) in k_image / v_image.
  int64_t kv_offset(int64_t b, int64_t j, int64_t h) const;
  /// Index of (sequence b, head h, query i) in the lse image.
  int64_t lse_index(int64_t b, int64_t h, int64_t i) const;
  size_t out_elements() const { return q_image.size(); }
  size_t lse_elements() const { return static_cast<size_t>(q_rows * shape.num_heads); }

  /// Sequence b's output (seqlen_q[b] x num_heads x head_dim bits, row-major) and lse (num_heads x seqlen_q[b]),
  /// gathered from images of the kernel's out and lse.
  std::vector<uint16_t> sequence_out(const std::vector<uint16_t>& out_image, int64_t b) const;
  std::vector<float> sequence_lse(const std::vector<float>& lse_image, int64_t b) const;
};

/// Builds the batch (data, layout, shuffled pages, garbage) deterministically from (shape, seed).
ServingBatch make_serving_batch(const ServingShape& shape, uint64_t seed);

/// Which rows of each sequence are checked, as gpu_test.h rows_to_check: every row of a sequence whose
/// num_heads x seqlen_q x seqlen_k is at most full_limit, else `sampled` random rows plus the first and last
/// block_m rows of its last head (sample_rows).
struct RowSampling {
  int64_t block_m = 128;
  int64_t full_limit = int64_t{1} << 22;
  int64_t sampled = 256;
  uint64_t seed = 7;
};

struct SequenceCheck {
  int64_t sequence = 0;
  CheckResult result;
  int64_t empty_rows = 0;          // checked rows that see no key: out must be exactly 0, lse -inf
  int64_t nonzero_empty_rows = 0;  // of those, rows with a non-zero output value
};

struct ServingCheck {
  std::vector<SequenceCheck> sequences;  // every sequence with at least one query row, in order
  int64_t rows_checked = 0;
  double max_abs_err = 0.0;    // over all sequences
  double max_tolerance = 0.0;  // the largest sequence tolerance
  double lse_max_err = 0.0;
  bool passed = false;
  std::string failure;  // the first failing sequence and why; empty when passed
};

/// Judges images of a kernel's out and lse: every sequence by check_rows against its own reference (FA3's rule,
/// tolerance from that sequence's baseline), plus exact zeros for rows without keys. A batch in which no row
/// is checked fails. Error(kInvalidArgument) when an image has the wrong size.
ServingCheck check_serving(const ServingBatch& batch, const std::vector<uint16_t>& out_image,
                           const std::vector<float>& lse_image, const RowSampling& sampling);

/// One line: rows, max error, largest tolerance, lse error, PASS/FAIL and the failure.
std::string format_check(const ServingCheck& check);

}  // namespace fa3jit::testing

// fa3jit CPU reference for the attention forward pass, and the checker that judges a kernel against it.
//
// Used by `fa3jit run`, `fa3jit tune` and the GPU tests. Host only, no CUDA. Method (FA3
// hopper/test_flash_attn.py, docs/kernel-design.md §8):
//   * reference  - float64 math on the dtype inputs: S = scale * Q K^T, bottom-right causal mask,
//                  softmax, O = P V; plus lse = log(sum exp(S)) (natural log).
//   * baseline   - "the same math in the input precision" (FA3's out_pt): it estimates the error an honest
//                  low-precision implementation makes, so the tolerance scales with the dtype and the data.
//   * checker    - FA3's forward rule: max|out - ref| <= 2 * max|baseline - ref| + fwd_atol, with
//                  fwd_atol = 2 * max|(ref + 0.3 - 0.3) - ref| evaluated in the output dtype.
// A full check of a large problem is slow on a CPU, so every function takes an explicit list of rows;
// sample_rows() gives the sampling the CLI uses.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace fa3jit {

/// Fills `out` with `n` values drawn from FA3's Table 3 distribution, N(0,1) + N(0,10^2) * Bernoulli(0.001)
/// (0.1% outliers with standard deviation 10), each rounded to `dtype` (RNE) and stored as its bits.
/// Deterministic for a given (seed, n): the values come from std::mt19937_64 streams, one per chunk of
/// 2^20 elements, each seeded from (seed, chunk index), so the result does not depend on the thread count.
/// dtype must be fp16 or bf16 (Error kUnsupported otherwise).
void fill_fa3_distribution(std::vector<uint16_t>& out, DType dtype, size_t n, uint64_t seed);

/// A host tensor of 16-bit values in the (batch, seqlen, heads, dim) layout, element strides, dim stride 1.
struct HostTensor {
  DType dtype = DType::kBf16;
  int64_t batch = 0, seqlen = 0, heads = 0, dim = 0;
  int64_t stride_batch = 0, stride_seq = 0, stride_head = 0;  // in elements
  std::vector<uint16_t> data;                                 // dtype bits

  /// Zero-filled, contiguous (stride_head = dim, stride_seq = heads * dim, stride_batch = seqlen * stride_seq).
  /// Throws Error(kInvalidArgument) for a negative extent or a size that overflows.
  static HostTensor contiguous(DType dtype, int64_t batch, int64_t seqlen, int64_t heads, int64_t dim);

  int64_t offset(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return b * stride_batch + s * stride_seq + h * stride_head + d;
  }
  float value(int64_t b, int64_t s, int64_t h, int64_t d) const;
  size_t size_bytes() const { return data.size() * sizeof(uint16_t); }
};

/// One output row: query `row` of head `head` in batch `batch`.
struct RowIndex {
  int64_t batch = 0, head = 0, row = 0;
  auto operator<=>(const RowIndex&) const = default;
};

/// Every row of a (batch, num_heads, seqlen_q) problem, in (batch, head, row) order.
std::vector<RowIndex> all_rows(int64_t batch, int64_t num_heads, int64_t seqlen_q);

/// The CLI's sample: `random_rows` uniformly random rows (with replacement, then de-duplicated) plus every
/// row of the first and the last block of `block_m` query rows of the last head of the last batch (the
/// m-blocks where boundary and masking bugs show). Sorted by (batch, head, row); deterministic by seed.
/// `random_rows` at least the problem's row count gives every row (all_rows): the work never exceeds the row count.
std::vector<RowIndex> sample_rows(int64_t batch, int64_t num_heads, int64_t seqlen_q, int64_t block_m,
                                  int64_t random_rows, uint64_t seed);

/// 1 / sqrt(head_dim) as the float the kernel receives.
float default_softmax_scale(int64_t head_dim);

struct ReferenceOptions {
  float softmax_scale = 0.0f;  // 0 = default_softmax_scale(q.dim)
  bool causal = false;         // bottom-right aligned: key j visible to query i iff j <= i + seqlen_k - seqlen_q
  /// Sliding window (ForwardArgs::window_left/right, FA3's window_size): query i sees keys i + d - window_left ..
  /// i + d + window_right, d = seqlen_k - seqlen_q; -1 = unbounded; causal sets window_right 0.
  int64_t window_left = -1;
  int64_t window_right = -1;
  /// > 0: S' = softcap * tanh(S / softcap) (S scaled), the baseline in fp32 rounded to dtype.
  float softcap = 0.0f;
  /// Empty, or one logit per query head (in the units of S) joining each row's normaliser as a key of value 0.
  std::vector<float> sinks;
  /// The baseline of an e4m3 kernel (inputs given dequantized, e.g. e4m3 values times power-of-two descales,
  /// exact in bf16): S stays fp32 (the fp8 GEMM accumulates in fp32) and P is rounded to e4m3 as the kernel
  /// does, after FA3's max offset (P * 256, softmax.cuh), instead of to the input dtype.
  bool baseline_p_e4m3 = false;
  /// With baseline_p_e4m3: the kernel's block_n. The baseline then runs the online softmax over key blocks of
  /// this size, last block first, and rounds P relative to the running max as the kernel does (0: one block,
  /// P rounded relative to the row's final max).
  int64_t baseline_block_n = 0;
  int threads = 0;             // worker threads; 0 = std::thread::hardware_concurrency() (at most 32)
};

struct ReferenceRow {
  RowIndex index;
  int64_t visible_keys = 0;    // keys this row attends to (0: O = 0, lse = -inf or the row's sink)
  int64_t first_key = 0;       // the first of them (a sliding window starts past 0)
  std::vector<double> out;     // head_dim_v values, float64 reference
  double lse = 0.0;            // natural log of sum_j exp(S_ij); -inf when visible_keys == 0
  std::vector<float> baseline; // head_dim_v values of the same-precision baseline, already in dtype
  /// Extra lse error the inputs' GEMM may make: with baseline_p_e4m3, kFp8AccumRelTol times the largest
  /// softmax_scale * sum_i |q_i k_ji| over the row's visible keys (the FP8 tensor cores accumulate S with about
  /// 13 bits of relative precision, docs/hopper-ptx.md §1); 0 otherwise.
  double lse_slack = 0.0;
  /// Extra O error the same score error allows, with baseline_p_e4m3: (e^(2 lse_slack) - 1) times the softmax-weighted
  /// mean of max_d |V_jd| (each weight p_j / sum moves by at most that factor); 0 otherwise.
  double out_slack = 0.0;
};

/// Relative precision allowed to the FP8 tensor cores' accumulation of S = Q.K^T: 2^-9, a margin of about 16
/// over the ~2^-13 measured for e4m3 wgmma (docs/hopper-ptx.md §1, "FP8 accuracy").
inline constexpr double kFp8AccumRelTol = 1.0 / 512.0;

/// Computes the reference and the baseline for `rows`.
/// q: (batch, seqlen_q, num_heads, head_dim); k: (batch, seqlen_k, num_heads_kv, head_dim);
/// v: (batch, seqlen_k, num_heads_kv, head_dim_v); all of one dtype (fp16 or bf16); GQA/MQA when
/// num_heads_kv divides num_heads: query head h reads kv head h / (num_heads / num_heads_kv).
/// Baseline per row (documented choices of FA3's out_pt): S = fp32 dot of the dtype inputs, times the
/// fp32 scale, rounded to dtype; m = max S; p_j = expf(S_j - m) in fp32; P_j = p_j rounded to dtype;
/// acc = sum_j P_j * V_j accumulated in fp32; O = acc / sum_j p_j (fp32 row sum of the unrounded
/// exponentials, as the kernel keeps it) rounded to dtype.
/// Throws Error(kInvalidArgument) naming the tensor or row for inconsistent shapes, dtypes, strides that
/// reach outside `data`, or a row out of range; Error(kUnsupported) for e4m3.
std::vector<ReferenceRow> reference_rows(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                                         const ReferenceOptions& options, const std::vector<RowIndex>& rows);

/// What a kernel produced for the checked rows, in the order of the reference rows.
struct KernelRows {
  std::vector<uint16_t> out;  // rows.size() * head_dim_v dtype bits
  std::vector<float> lse;     // rows.size() values, or empty when the kernel wrote no lse (not checked)
};

/// Gathers the rows from a kernel's output tensor `out` (batch, seqlen_q, num_heads, head_dim_v) and its
/// lse (batch, num_heads, seqlen_q) contiguous fp32 (empty = none). Error(kInvalidArgument) on a size mismatch.
KernelRows gather_kernel_rows(const HostTensor& out, const std::vector<float>& lse,
                              const std::vector<RowIndex>& rows);

/// Allowed |lse - lse_ref| for a finite reference lse: kLseAbsTol + kLseRelTol * |lse_ref| + the row's lse_slack. The kernel's lse
/// comes from fp32 scores and fast exp2/log2 (error ~1e-5); a wrong scale or log base is off by >> 1e-2.
inline constexpr double kLseAbsTol = 1e-3;
inline constexpr double kLseRelTol = 1e-4;

struct CheckResult {
  int64_t rows_checked = 0;
  int64_t values_checked = 0;
  double max_abs_err = 0.0;        // max |out - ref| over finite kernel values
  double mean_abs_err = 0.0;
  double baseline_max_err = 0.0;   // max |baseline - ref|
  double baseline_mean_err = 0.0;
  double rounding_noise = 0.0;     // max |(r + 0.3 - 0.3) - r| with r = ref in dtype and every step in dtype
  double tolerance = 0.0;          // 2 * baseline_max_err + 2 * rounding_noise
  double max_excess = 0.0;         // max over values of |out - ref| - the row's out_slack (= max_abs_err for 16-bit)
  int64_t nan_count = 0;           // NaN values in the kernel's output
  int64_t inf_count = 0;           // +-inf values in the kernel's output
  bool lse_checked = false;
  double lse_max_err = 0.0;        // over rows whose reference lse is finite
  int64_t lse_bad_rows = 0;        // rows over the lse tolerance, or -inf expected but not given (or vice versa)
  // Where the largest output error is (for diagnosis).
  RowIndex worst_row;
  int64_t worst_col = -1;
  double worst_ref = 0.0, worst_out = 0.0, worst_slack = 0.0;
  /// pass = at least one value checked, no NaN/inf in the output, every |out - ref| <= tolerance + its row's
  /// out_slack (max_abs_err <= tolerance for 16-bit inputs), and, when the
  /// lse was given: every row with reference lse -inf has kernel lse exactly -inf, and every finite one is
  /// finite and within kLseAbsTol + kLseRelTol * |lse_ref|.
  bool passed = false;
  std::string failure;             // why it failed (first reason), empty when passed
};

/// Judges `kernel` against `reference` (same rows, same order). Error(kInvalidArgument) on size mismatch.
CheckResult check_rows(DType dtype, const std::vector<ReferenceRow>& reference, const KernelRows& kernel);

/// One line, e.g. "max_err 1.953e-03 mean_err 1.201e-04 tol 1.172e-02 (baseline 3.906e-03, noise 1.953e-03)
/// lse_err 2.10e-06 nan 0 inf 0 PASS".
std::string format_check(const CheckResult& result);

}  // namespace fa3jit

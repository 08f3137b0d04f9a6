// Float64 host model of the FP8 pre-pass (kernels/quantize_fp8/spec.h; FA3 paper §3.3): what the kernel's
// q8, k8, v8 and descales approximate, with bounds on the kernel's fp32 arithmetic error, and the tolerance
// rule a test judges a dequantised element with. Host only, no CUDA; used by the GPU tests and any FP8
// attention test that needs the real values behind e4m3 inputs.
//
// Model, per head vector x of Q or K (head_dim elements, the values of the 16-bit inputs):
//   x' = RoPE(x) at position = token index (pairs and table columns as device/layout.cuh defines them),
//   z  = H.D.x' / sqrt(head_dim) with the explicit matrix H[i][j] = (-1)^popcount(i & j) and
//        D = diag(hadamard_sign(seed, i)) (O(d^2), independent of the kernel's butterflies), or z = x';
// V is not transformed. amax per descale entry (Q/K: block of block_rows tokens of one head; V: one channel
// over all tokens), descale = amax / 448, 1 for amax 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/quantize_fp8/spec.h"
#include "testing/reference.h"

namespace fa3jit::testing {

/// Unit roundoff of fp32 (2^-24).
inline constexpr double kFp32Unit = 1.0 / 16777216.0;

struct Fp8PrepassInputs {
  const HostTensor* q = nullptr;  // (batch, seqlen_q, num_heads, head_dim), bf16 | fp16
  const HostTensor* k = nullptr;  // (batch, seqlen_k, num_heads_kv, head_dim)
  const HostTensor* v = nullptr;  // (batch, seqlen_k, num_heads_kv, head_dim_v)
  const float* rope_cos = nullptr;  // (rows >= max(seqlen_q, seqlen_k), rotary_dim / 2); with RoPE only
  const float* rope_sin = nullptr;
  uint64_t seed = 0;
};

/// One tensor's expected result; value/err contiguous (batch, seqlen, heads, dim), amax/descale in the
/// descale layout of the tensor (params.h).
struct Fp8TensorReference {
  int64_t batch = 0, seqlen = 0, heads = 0, dim = 0;
  std::vector<double> value;     // z (Q, K) or the input (V)
  std::vector<double> err;       // per element: bound on |kernel's fp32 z - z| (0 for V)
  std::vector<double> amax;      // per descale entry
  std::vector<double> amax_err;  // per descale entry: bound on |kernel's amax - amax| (max err of the entry)
  std::vector<double> descale;   // amax / 448, 1 when amax is 0
  int64_t index(int64_t b, int64_t s, int64_t h, int64_t d) const { return ((b * seqlen + s) * heads + h) * dim + d; }
};

struct Fp8PrepassReference {
  Fp8TensorReference q, k, v;
};

/// z for one head vector `x` (head_dim values) of token `position`: RoPE then H.D / sqrt(head_dim) as `spec`
/// says. `err` (may be null) receives the bound on the kernel's fp32 error per element: 4u(|x1| + |x2|) for a
/// rotated pair, 2u|x| otherwise, and with the Hadamard rotation (log2(d) + 4) u sum_j a_j / sqrt(d) for
/// every element, a_j being those per-element magnitudes (u = 2^-24).
void fp8_transform_row(const quantize_fp8::Spec& spec, const float* x, int64_t position, const float* rope_cos,
                       const float* rope_sin, uint64_t seed, double* z, double* err);

/// The whole model. Throws Error(kInvalidArgument) when a tensor is missing, of another dtype or head dim
/// than the spec, or shaped inconsistently, or when RoPE tables are missing.
Fp8PrepassReference fp8_prepass_reference(const quantize_fp8::Spec& spec, const Fp8PrepassInputs& inputs);

/// Half the spacing of e4m3 values at magnitude w in [0, 448]: the largest error of round-to-nearest there
/// (2^-10 in the subnormal range below 2^-6, else 2^(floor(log2 w) - 4)).
double e4m3_half_ulp(double magnitude);

/// Allowed |e4m3 value * descale - z| for an element with reference z, fp32 error bound err, quantised with the
/// kernel's descale: descale * e4m3_half_ulp(min(448, (|z| + err) / descale * (1 + 2^-20))) + err + 4u|z|.
double fp8_element_tolerance(double z, double err, double descale);

/// Element strides of an output tensor (batch, seqlen, heads, dim), dim contiguous.
struct Fp8OutputLayout {
  int64_t stride_batch = 0, stride_seq = 0, stride_head = 0;
};

struct Fp8CheckResult {
  bool passed = true;
  int64_t checked = 0;       // elements judged
  double worst_ratio = 0.0;  // max |error| / tolerance over the elements
  std::string failure;       // the first failure, empty when passed
  void fail(const std::string& what);
};

/// Judges a kernel's e4m3 output `bytes` (laid out as `out`, from its base) and its descales against `ref`:
///   - descales: 1 where the reference amax is 0; else, with `exact_descale`, bit-equal to
///     descale_from_amax(float(amax)) (amax computed without rounding), otherwise within
///     amax_err / 448 + 2^-21 descale of the reference (three fp32 roundings); always finite and positive;
///   - each element: |e4m3 value * its descale - z| <= fp8_element_tolerance(z, err, descale) (NaN fails);
///   - bytes of `bytes` outside the tensor (padding) must still be 0xFF, the poison written before the launch.
/// block_rows > 0: one descale per (batch, head, block of block_rows tokens); 0: one per (batch, head, channel).
/// Failures are recorded in `result` (the first one's message kept), never thrown.
void check_fp8_tensor(const char* name, const Fp8TensorReference& ref, const std::vector<uint8_t>& bytes,
                      const Fp8OutputLayout& out, const std::vector<float>& descale, int block_rows,
                      bool exact_descale, Fp8CheckResult& result);

/// What an exact pre-pass would write for `ref`: descales descale_from_amax(float(amax)) and bytes
/// e4m3(z / descale) at `out` (other bytes 0xFF, `elements` bytes in all). For testing the checker itself.
void fp8_quantize_reference(const Fp8TensorReference& ref, const Fp8OutputLayout& out, int64_t elements,
                            int block_rows, std::vector<uint8_t>& bytes, std::vector<float>& descale);

}  // namespace fa3jit::testing

// FP8 accuracy against the unquantised inputs: what an e4m3 attention kernel gives for 16-bit data once it is
// quantised with a given granularity (and, optionally, rotated by the Hadamard transform of FA3 paper §3.3), as
// RMSE and max error against the float64 attention of the original data. Used by `fa3jit run` on e4m3 specs and
// by bench/fp8_accuracy.cpp (the FA3 paper's Table 3 ablation and the long-context sweep). Needs a GPU.
//
// Quantisation happens on the host: descale = amax / 448 per scale group (per_tensor: one; per_head: one per
// (batch, head); per_block: one per (batch, head, block_m rows) of Q, (batch, kv head, block_n rows) of K, one per
// (batch, kv head, channel) of V); Hadamard: x -> H.D.x / sqrt(head_dim) per head vector of Q and K, D from
// quantize_fp8::hadamard_sign (the same D for Q and K, so Q.K^T is unchanged). The GPU pre-pass
// (kernels/quantize_fp8) computes the same transform; its tests compare it with a host model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention_fwd/launch.h"

namespace fa3jit::testing {

/// Inputs of one accuracy problem: q (batch, seqlen_q, heads, d), k and v (batch, seqlen_k, kv_heads(), d),
/// contiguous float values exact in bf16.
struct AccuracyProblem {
  int64_t batch = 1, seqlen_q = 0, seqlen_k = 0, heads = 0, heads_kv = 0, d = 128;  // heads_kv 0: heads
  bool causal = false;  // bottom-right aligned (key j visible to query i iff j <= i + seqlen_k - seqlen_q)
  std::vector<float> q, k, v;
  int64_t kv_heads() const { return heads_kv == 0 ? heads : heads_kv; }
};

enum class Scale { kTensor, kHead, kBlock };
const char* scale_name(Scale s);

/// The FA3 paper's Table 3 distribution: N(0,1) + N(0,10^2) with probability 0.001, rounded to bf16.
void fill_table3(std::vector<float>& x, size_t n, uint64_t seed);

/// Query rows (batch, head, row) drawn uniformly, `n` of them.
struct SampledRows {
  std::vector<int64_t> b, h, s;
};
SampledRows sample_rows(const AccuracyProblem& p, int n, uint64_t seed);

/// float64 attention rows of O (softmax_scale 1/sqrt(d), p.causal's mask), rows.size() x d values; a row that sees
/// no key is 0.
std::vector<double> reference_rows(const AccuracyProblem& p, const SampledRows& rows);

struct Rmse {
  double vs_reference = 0;    // RMSE against the float64 attention of the unquantised inputs
  double max_err = 0;         // max |out - reference|
  double vs_dequantised = 0;  // e4m3: RMSE against the float64 attention of the kernel's dequantised inputs (the
                              // kernel's own error: P in e4m3, the FP8 GEMMs); 16-bit: the same as vs_reference
};

/// Runs the kernel of `spec` (bf16/fp16, or e4m3 with inputs quantised at `scale`, rotated when `hadamard`) on
/// `p` and measures the sampled rows against `reference` (reference_rows of p). For e4m3, `scale` must agree with
/// spec.quant (kTensor and kHead: per_head; kBlock: per_block) and spec.causal with p.causal.
Rmse measure(Runtime& runtime, const attention_fwd::Spec& spec, const AccuracyProblem& p, const SampledRows& rows,
             const std::vector<double>& reference, Scale scale, bool hadamard);

}  // namespace fa3jit::testing

// The CLI's GPU harness: seeded inputs on the device, one checked forward call, and event timing.
// Shared by `fa3jit run`, `bench` and `tune`.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/attention.h"
#include "runtime/reference.h"
#include "tools/cli/device_memory.h"

namespace fa3jit::cli {

/// Inputs and outputs of one attention problem: host copies of q, k, v (kept for the reference) and device
/// buffers q, k, v, out, lse, all contiguous in the (batch, seqlen, heads, dim) layout; lse is
/// (batch, num_heads, seqlen_q) fp32.
struct ForwardBuffers {
  DType dtype = DType::kBf16;
  Problem problem;
  int head_dim = 0, head_dim_v = 0;
  float softmax_scale = 0.0f;  // 1/sqrt(head_dim), passed explicitly so kernel and reference use one float
  HostTensor q, k, v;
  DeviceBuffer d_q, d_k, d_v, d_out, d_lse;

  /// Fills q, k, v with fill_fa3_distribution (seeds seed, seed+1, seed+2) and uploads them. Needs the
  /// current context of the target device. Error(kInvalidSpec) when the spec has no problem section.
  static ForwardBuffers create(const Spec& spec, uint64_t seed);
  /// True when these buffers fit `spec` (same dtype, head dims and problem).
  bool fits(const Spec& spec) const;
  ForwardArgs args(bool causal);
};

/// The spec's problem, or Error(kInvalidSpec) `spec has no "problem" section`.
const Problem& require_problem(const Spec& spec);

/// FLOPs of one forward call, FA3's convention: 4 * batch * num_heads * seqlen_q * seqlen_k * head_dim,
/// halved for causal.
double forward_flops(const Spec& spec);

/// Poisons out and lse with 0xFF bytes (NaN in bf16/fp16/fp32), runs the forward once on the default stream,
/// synchronizes, copies out and lse back and checks `random_rows` random rows plus the first and last m-block
/// of the last head against the CPU reference.
CheckResult run_and_check(Runtime& runtime, const Spec& spec, ForwardBuffers& buffers, int64_t random_rows,
                          uint64_t seed);

struct Timing {
  double median_ms = 0.0, min_ms = 0.0, max_ms = 0.0;
  int iters = 0;
  double tflops = 0.0;  // forward_flops / median
};

/// Times `iters` forward calls after `warmup` untimed ones; each call is bracketed by its own event pair
/// and the median is reported (robust to a stray slow launch).
Timing time_forward(Runtime& runtime, const Spec& spec, ForwardBuffers& buffers, int warmup, int iters);

/// "bf16 d128 causal 128x128 wg2 st2 | batch 2, seqlen_q 8192, seqlen_k 8192, heads 16/16".
std::string problem_summary(const Spec& spec);

/// True when a GPU is usable (driver + device); on true also makes device `device`'s primary context
/// current. Error(kInvalidArgument) when `device` is out of range.
bool open_gpu(int device);

}  // namespace fa3jit::cli

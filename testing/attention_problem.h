// One attention forward problem on the device, for the CLI (`run`, `bench`, `tune`) and the GPU tests: seeded
// inputs (FA3's outlier distribution), host copies for the float64 reference, poisoned outputs, a launch
// through the runtime (tile-table kernel or an explicit one), the check against the reference with FA3's
// rule, and event timing.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/attention_fwd/launch.h"
#include "testing/device_memory.h"
#include "testing/problem.h"
#include "testing/reference.h"

namespace fa3jit::testing {

struct ProblemShape {
  DType dtype = DType::kBf16;
  int64_t batch = 1, seqlen_q = 1, seqlen_k = 1, num_heads = 1, num_heads_kv = 1, head_dim = 128;
  bool causal = false;
  int64_t head_dim_v = 0;  // 0 = head_dim
  // e4m3 only: output dtype, scale granularity and, for per_block, the kernel's block_m / block_n (0: the
  // tile table's for this shape).
  DType out_dtype = DType::kBf16;
  attention_fwd::Quant quant = attention_fwd::Quant::kPerHead;
  int64_t quant_block_m = 0, quant_block_n = 0;
  // e4m3 only: the device gets V transposed (spec field v_layout "d_major"; v_to_d_major below).
  bool v_d_major = false;
};

/// The d_major image (launch.h: ForwardArgs::v) of a contiguous (batch, seqlen_k, heads_kv, head_dim_v) e4m3 tensor:
/// (batch, heads_kv, head_dim_v, d_major_keys(seqlen_k)) bytes, contiguous, key 16 g + j of a row at 16 g +
/// fp8_key_position(j) (params.h); the positions of keys past seqlen_k hold `pad` (any finite e4m3 value is allowed
/// there; a test passes a non-zero one).
std::vector<uint8_t> v_to_d_major(const std::vector<uint8_t>& v8, int64_t batch, int64_t seqlen_k, int64_t heads_kv,
                                  int64_t head_dim_v, uint8_t pad = 0);

/// The shape of a spec file's problem.
ProblemShape shape_of(const AttentionCase& c);

struct Timing {
  double median_ms = 0.0, min_ms = 0.0, max_ms = 0.0;
  int iters = 0;
  double tflops = 0.0;  // flops() / median
};

/// Times `iters` calls of `launch` (which enqueues work on the default stream) after `warmup` untimed ones; each
/// call is bracketed by its own event pair and the median is reported (robust to a stray slow launch); tflops is
/// left 0. Error(kInvalidArgument) for iters < 1.
Timing time_calls(const std::function<void()>& launch, int warmup, int iters);

class AttentionProblem {
 public:
  /// Fills q, k, v with fill_fa3_distribution (seeds seed, seed+1, seed+2), all contiguous in the
  /// (batch, seqlen, heads, dim) layout, and uploads them; out and lse are allocated. Needs the current
  /// context of the target device.
  /// e4m3: every scale group (per_head: (batch, kv head) of q, k, v; per_block: (batch, head, block_m rows) of
  /// q, (batch, kv head, block_n rows) of k, (batch, kv head, channel) of v) is multiplied by its own random power
  /// of two in [1/4, 4], then quantised with a power-of-two descale (the smallest with amax / descale <= 448).
  /// The device gets the e4m3 bytes and the descales; the host tensors q, k, v hold the dequantised values,
  /// which are exact in bf16, so the float64 reference sees exactly what the kernel was given.
  AttentionProblem(const ProblemShape& shape, uint64_t seed);

  /// Arguments of the forward call; softmax_scale is passed explicitly (1/sqrt(head_dim)) so the kernel and
  /// the reference use the same float. With use_workspace, the workspace of a dense call (a causal persistent grid's
  /// tile counter; launch.cpp workspace_layout), else none (that grid's static order).
  attention_fwd::ForwardArgs args() const;

  /// Poisons out, lse and the workspace with 0xFF bytes (NaN in every dtype), launches once on the default stream (the
  /// tile-table kernel, or `kernel`), synchronises and copies out and lse back.
  void run(Runtime& runtime, const attention_fwd::Kernel* kernel = nullptr);

  /// Checks `rows` (all rows when empty) against the float64 reference.
  CheckResult check(std::vector<RowIndex> rows = {}) const;
  /// Checks `random_rows` random rows plus the first and last m-block (of `block_m` rows) of the last head.
  CheckResult check_sampled(int64_t block_m, int64_t random_rows, uint64_t seed) const;

  /// Times `iters` calls after `warmup` untimed ones; each call is bracketed by its own event pair and the
  /// median is reported (robust to a stray slow launch).
  Timing time(Runtime& runtime, const attention_fwd::Kernel* kernel, int warmup, int iters) const;

  /// FLOPs of one call, FA3's convention: 2 * batch * num_heads * seqlen_q * seqlen_k * (head_dim +
  /// head_dim_v), halved for causal (as FA3's benchmark does even when seqlen_q != seqlen_k).
  double flops() const;

  ProblemShape shape;
  float softmax_scale;
  HostTensor q, k, v, out;
  std::vector<float> lse;
  std::vector<float> q_descale, k_descale, v_descale;  // e4m3: launch.h ScaleView layouts, contiguous
  DeviceBuffer d_q, d_k, d_v, d_out, d_lse, d_q_descale, d_k_descale, d_v_descale, d_workspace;
  bool use_workspace = true;
  // What a dense call can need (run() checks it against workspace_size).
  static constexpr size_t kWorkspaceBytes = attention_fwd::kTileCounterBytes;

 private:
  void quantize_e4m3(uint64_t seed);
};

/// True when a GPU is usable (driver + device); on true also makes device `device`'s primary context
/// current. Error(kInvalidArgument) when `device` is out of range.
bool open_gpu(int device);

}  // namespace fa3jit::testing

// Attention forward: the C++ API a serving process calls, and the launch path behind it.
//
//   fa3jit::Runtime rt;                                       // runtime/runtime.h
//   fa3jit::attention_fwd::ForwardArgs a = ...;               // device pointers + shapes + strides
//   fa3jit::attention_fwd::forward(rt, a, stream);            // tile-table kernel, compiled once, launched
//
// Layout (FlashAttention's): q (batch, seqlen_q, num_heads, head_dim), k (batch, seqlen_k, num_heads_kv,
// head_dim), v (batch, seqlen_k, num_heads_kv, head_dim_v), out like q with head_dim_v; the last dimension
// is contiguous, the batch/seqlen/head strides are free (in elements) but must be multiples of 16 bytes
// (TMA, PTX ISA "Tensor copy" / cuTensorMapEncodeTiled). lse is float32 (batch, num_heads, seqlen_q),
// contiguous, natural log; may be null. dtype of q/k/v/out: one of capabilities().dtypes.
//
// The hot path: a call is classified into a shape class of integers (dtype, head dims, effective mask,
// context); a per-thread memo, then the runtime's plan map, gives the plan (spec, loaded kernel, function
// with its shared-memory attribute); then the call's arguments are checked, the parameters and tensor maps
// built and the kernel launched. Messages are formatted only on failure. No allocation, no
// synchronisation and no compilation happen once a shape class has been seen (CUDA-graph safe).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "kernels/attention_fwd/params.h"
#include "kernels/attention_fwd/tile_table.h"
#include "runtime/runtime.h"
#include "runtime/tensor_check.h"

namespace fa3jit::attention_fwd {

/// FP32 descale factors of an e4m3 input (the stored value times its descale is the real value), indexed
/// (batch, head, i): data[batch * stride_batch + head * stride_head + i], strides in elements, i's stride 1.
/// Per spec field "quant" (spec.h):
///   per_head : q_descale, k_descale, v_descale (batch, num_heads_kv), i = 0 (FA3's contract; stride 0 is
///              allowed, so one scalar broadcast with stride_batch = stride_head = 0 is a per-tensor scale);
///   per_block: q_descale (batch, num_heads, ceil(seqlen_q / block_m)), k_descale (batch, num_heads_kv,
///              ceil(seqlen_k / block_n)), v_descale (batch, num_heads_kv, head_dim_v): one per row block of
///              the kernel's tile (block_m, block_n of its spec) and one per V channel.
/// Values must be positive and finite; the kernel clamps any other into [FLT_MIN, FLT_MAX] (it cannot report them).
/// Unused (null) for 16-bit dtypes.
struct ScaleView {
  const float* data = nullptr;
  int64_t stride_batch = 0;
  int64_t stride_head = 0;
};

struct ForwardArgs {
  DType dtype = DType::kBf16;     // of q, k, v
  std::optional<DType> out_dtype;  // of out; empty: dtype for 16-bit, bf16 for e4m3
  Quant quant = Quant::kNone;      // e4m3: kPerHead or kPerBlock (spec.h); 16-bit: kNone
  ScaleView q_descale, k_descale, v_descale;  // e4m3 only
  int64_t batch = 0, seqlen_q = 0, seqlen_k = 0, num_heads = 0, num_heads_kv = 0;
  int64_t head_dim = 0, head_dim_v = 0;  // head_dim_v 0 = head_dim
  TensorView q, k, v, out;
  float* lse = nullptr;          // (batch, num_heads, seqlen_q) fp32, or null
  float softmax_scale = 0.0f;    // 0 = 1/sqrt(head_dim)
  bool causal = false;
  void* workspace = nullptr;     // workspace_size() bytes (0 today), owned by the caller
  size_t workspace_bytes = 0;
};

/// Largest seqlen_q / seqlen_k accepted: the kernel's row and column indices are 32-bit with up to one tile
/// (256) of headroom.
inline constexpr int64_t kMaxSeqlen = 0x7fffffff - 1024;

/// A chosen, loaded kernel: what the C ABI's kernel handle holds. Immutable once built.
class Kernel {
 public:
  Kernel(const KernelConfig& config, std::shared_ptr<LoadedKernel> loaded);
  const Spec& spec() const { return config_.spec; }
  const KernelConfig& config() const { return config_; }
  LoadedKernel& loaded() const { return *loaded_; }

 private:
  KernelConfig config_;
  std::shared_ptr<LoadedKernel> loaded_;
};

/// Compiles (or fetches) and loads the kernel of `spec` in `runtime`; once per spec per runtime.
std::shared_ptr<const Kernel> load_kernel(Runtime& runtime, const Spec& spec);

/// Checks `args` (every check is listed in tensor_check.h and launch.cpp), then launches on `stream` (a
/// CUstream of the current context; null = its default stream) the kernel the tile table gives for
/// (dtype, head_dim, head_dim_v, causal). The current context must be on q's device; with no current
/// context, that device's primary context is made current.
/// Throws Error(kInvalidArgument) naming the argument for a bad pointer, stride, alignment, shape, head
/// count, softmax_scale, an extent past its allocation, an overlapping out or lse, or a stream/context on
/// another device; Error(kUnsupported) for a dtype or head dims outside capabilities(); Error(kNoDriver)
/// without a driver; Error(kCompileFailed) / Error(kCacheError) when the kernel cannot be built or its cache
/// entry is foreign; Error(kDriverError) when a driver call fails (the launch included). Asynchronous: the
/// kernel may still run when this returns.
void forward(Runtime& runtime, const ForwardArgs& args, void* stream);

/// Same, on an explicit kernel; `args` must agree with its spec (dtype, head dims, mask), else
/// Error(kInvalidArgument) naming the argument and the spec's value.
void forward(const Kernel& kernel, const ForwardArgs& args, void* stream);

/// What a call launches: built by prepare_launch (every check, parameters, tensor maps), launched by launch.
/// forward() is the two in a row; tests and the host-cost benchmark use them apart.
struct LaunchPlan {
  Params params;
  unsigned grid = 0;
  CUfunction function = nullptr;
  LaunchInvariants launch;
  CUstream stream = nullptr;
};
LaunchPlan prepare_launch(Runtime& runtime, const ForwardArgs& args, void* stream);
LaunchPlan prepare_launch(const Kernel& kernel, const ForwardArgs& args, void* stream);
/// cuLaunchKernelEx of a prepared plan; Error(kDriverError) when the driver refuses it.
void launch(LaunchPlan& plan);

/// Bytes of caller-owned workspace a call with these arguments needs (0: the forward kernel needs none).
size_t workspace_size(const ForwardArgs& args);

}  // namespace fa3jit::attention_fwd

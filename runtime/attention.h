// fa3jit runtime: the C++ API a serving process calls.
//
//   fa3jit::Runtime rt;                      // cache dir from the environment
//   fa3jit::ForwardArgs a = ...;             // device pointers + shapes + strides
//   rt.forward(a, stream);                   // picks a spec from the tile table, compiles once, launches
//
// Layout (FlashAttention's): q (batch, seqlen_q, num_heads, head_dim), k (batch, seqlen_k, num_heads_kv,
// head_dim), v (batch, seqlen_k, num_heads_kv, head_dim_v), out like q (head_dim_v); the last dimension is
// contiguous, the batch/seqlen/head strides are free (in elements) but must be multiples of 16 bytes
// (TMA, PTX ISA "Tensor copy" / cuTensorMapEncodeTiled). lse is float32 (batch, num_heads, seqlen_q),
// contiguous, natural log; may be null. dtype of q/k/v/out: fp16 or bf16.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "generator/spec.h"
#include "runtime/cubin_cache.h"

namespace fa3jit {

/// A (batch, seqlen, heads, dim) tensor on the device; strides in elements, dim stride is 1.
struct TensorView {
  void* data = nullptr;
  int64_t stride_batch = 0;
  int64_t stride_seq = 0;
  int64_t stride_head = 0;
};

struct ForwardArgs {
  DType dtype = DType::kBf16;
  int64_t batch = 0, seqlen_q = 0, seqlen_k = 0, num_heads = 0, num_heads_kv = 0;
  int64_t head_dim = 0, head_dim_v = 0;  // head_dim_v 0 = head_dim
  TensorView q, k, v, out;
  float* lse = nullptr;              // (batch, num_heads, seqlen_q) fp32, or null
  float softmax_scale = 0.0f;        // 0 = 1/sqrt(head_dim)
  bool causal = false;
};

struct RuntimeOptions {
  std::string cache_dir;  // empty = default_cache_dir()
};

/// A compiled kernel loaded into the driver (context-independent library), with its launch geometry.
class LoadedKernel;

/// Result of preparing a kernel (what `fa3jit compile` prints).
struct PreparedKernel {
  KernelConfig config;
  std::string key;
  bool cache_hit = false;
  double ms = 0.0;
  std::shared_ptr<const CompiledKernel> compiled;
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// Generates and compiles (or fetches from the cache) the kernel for `spec`. Needs no GPU.
  PreparedKernel prepare(const Spec& spec);

  /// Validates `args` against `spec` (runtime/arguments.h lists every check), then launches on `stream` (a
  /// CUstream of the current context; null = its default stream). The current context must be on q's
  /// device; with no current context, that device's primary context is made current.
  /// Throws Error(kInvalidArgument) naming the argument for a bad pointer, stride, alignment, shape, head
  /// count, softmax_scale, an extent past its allocation, an overlapping out or lse, or a stream/context on
  /// another device; Error(kUnsupported) for e4m3 or head_dim_v != head_dim; Error(kNoDriver) without a
  /// driver; Error(kCompileFailed) / Error(kCacheError) when the kernel cannot be built or its cache entry
  /// is foreign; Error(kDriverError) when a driver call fails (the launch included). Asynchronous: the
  /// kernel may still run when this returns.
  void forward(const Spec& spec, const ForwardArgs& args, void* stream);

  /// Same, with the spec chosen from the tile table for (dtype, head_dim, causal).
  void forward(const ForwardArgs& args, void* stream);

  CubinCache& cache();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The spec the runtime uses for a call: tile-table defaults for (dtype, head_dim, causal).
Spec default_spec_for(DType dtype, int head_dim, int head_dim_v, bool causal);

}  // namespace fa3jit

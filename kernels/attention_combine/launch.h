// Split-KV combine: the C++ API a serving process calls after the split attention passes, and the launch
// path behind it.
//
//   fa3jit::Runtime rt;                                              // runtime/runtime.h
//   fa3jit::attention_combine::CombineArgs a = ...;                  // device pointers + sizes + out strides
//   fa3jit::attention_combine::combine(rt, a, stream);               // kernel chosen, compiled once, launched
//
// Layouts (FlashDecoding / FA3 flash_fwd_combine_kernel.h; params.h says the same):
//   out_partial  fp32 (num_splits, batch, seqlen_q, num_heads, head_dim_v), contiguous, 16-byte aligned:
//                split s's output, already normalised by its own softmax sum
//   lse_partial  fp32 (num_splits, batch, num_heads, seqlen_q), contiguous, 4-byte aligned: split s's
//                log-sum-exp (natural log), -inf for a split that saw no key (its out_partial is never read)
//   out          out_dtype (bf16 | fp16) (batch, seqlen_q, num_heads, head_dim_v): the last dimension
//                contiguous, batch/seq/head strides free (in elements) but multiples of 4 elements, base 8-byte
//                aligned (the kernel stores 4 outputs at once); must not overlap itself or any other tensor
//   lse          fp32 (batch, num_heads, seqlen_q), contiguous, 4-byte aligned, natural log; may be null
// Result per row: L = log(sum_s exp(L_s)), O = sum_s exp(L_s - L) O_s; a row whose splits are all empty
// gives O = 0, L = -inf.
//
// The kernel is chosen by (out_dtype, head_dim_v) and the smallest max_splits bound of {128, 256} that holds
// num_splits; its plan (the loaded kernel) is kept in the runtime, so a warm call compiles nothing and
// allocates nothing.
#pragma once

#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "jit/loaded_kernel.h"
#include "kernels/attention_combine/params.h"
#include "kernels/attention_combine/spec.h"
#include "runtime/runtime.h"
#include "runtime/tensor_check.h"

namespace fa3jit::attention_combine {

struct CombineArgs {
  DType out_dtype = DType::kBf16;
  int64_t num_splits = 0;  // [1, max_splits]: at most 256 (capabilities().max_splits_limit)
  int64_t batch = 0, seqlen_q = 0, num_heads = 0;
  int64_t head_dim_v = 0;  // a multiple of 8 in [8, 512]
  const float* out_partial = nullptr;
  const float* lse_partial = nullptr;
  TensorView out;  // data + batch/seq/head strides in elements
  float* lse = nullptr;
};

/// batch x num_heads x seqlen_q above this is refused: the kernel's row index is 32-bit, with one CTA (at
/// most 1024 rows) of headroom past the last row.
inline constexpr int64_t kMaxRows = 0x7fffffff - 1024;

/// Checks `args` (see below), then launches on `stream` (a CUstream of the current context; null = its
/// default stream) the kernel of default_spec(out_dtype, head_dim_v, 128 or 256). The current context must
/// be on out_partial's device; with no current context, that device's primary context is made current.
/// Throws, before touching any tensor: Error(kUnsupported) for an out_dtype or head_dim_v outside
/// capabilities(); Error(kInvalidArgument) naming the argument for num_splits outside [1, 256], a size < 1,
/// more than kMaxRows rows, a null, misaligned or foreign pointer, tensors on different devices, an out
/// stride that is not a positive multiple of 4 elements, an out that overlaps itself or another tensor, an
/// extent past its allocation, or a stream of another context; Error(kNoDriver) without a driver;
/// Error(kCompileFailed / kCacheError) when the kernel cannot be built; Error(kDriverError) when a driver call
/// (the launch included) fails. Asynchronous: the kernel may still run when this returns.
void combine(Runtime& runtime, const CombineArgs& args, void* stream);

/// Same with an explicit (e.g. tuned) spec: args.out_dtype and head_dim_v must equal the spec's and
/// num_splits must not exceed its max_splits, else Error(kInvalidArgument) naming the argument and the
/// spec's value. Error(kInvalidSpec) for a spec validate() refuses.
void combine(Runtime& runtime, const Spec& spec, const CombineArgs& args, void* stream);

/// A loaded combine kernel, kept by a split-KV forward kernel beside its own (attention_fwd::Kernel) so that its
/// calls launch the combine without a plan lookup.
struct LoadedCombine {
  Spec spec;
  std::shared_ptr<LoadedKernel> loaded;
};
/// The runtime's combine kernel for (out_dtype, head_dim_v, max_splits), compiled or fetched once.
LoadedCombine load_combine(Runtime& runtime, DType out_dtype, int head_dim_v, int max_splits);

/// The combine launch of a split-KV forward call. The forward has already checked every tensor it hands over on the
/// device (its workspace, out, lse: attention_fwd/launch.cpp), so only the arithmetic checks run here.
struct PreparedLaunch {
  Params params{};
  unsigned grid = 0;
  CUfunction function = nullptr;
  LaunchInvariants launch;
};
PreparedLaunch prepare_prechecked(const LoadedCombine& kernel, const CombineArgs& args, CUcontext ctx);
void launch(const PreparedLaunch& plan, CUstream stream);

}  // namespace fa3jit::attention_combine

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

#include "kernels/attention_combine/launch.h"
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

/// Whether a paged KV cache of `page_size` keys per page needs the kernel's gather path (spec field paged_gather:
/// the producer copies rows with cp.async): TMA boxes of gcd(page_size, block_n) rows stay on 1024-byte swizzle atoms
/// only when that is a multiple of 8, i.e. when page_size is (block_n is a multiple of 16). The one statement of the
/// rule: the launch, the shape classes and `fa3jit cache warm` derive the layout from it.
constexpr bool pages_need_gather(int64_t page_size) { return page_size % 8 != 0; }

struct ForwardArgs {
  DType dtype = DType::kBf16;     // of q, k, v
  std::optional<DType> out_dtype;  // of out; empty: dtype for 16-bit, bf16 for e4m3
  Quant quant = Quant::kNone;      // e4m3: kPerHead or kPerBlock (spec.h); 16-bit: kNone
  ScaleView q_descale, k_descale, v_descale;  // e4m3 only
  int64_t batch = 0, seqlen_q = 0, seqlen_k = 0, num_heads = 0, num_heads_kv = 0;
  int64_t head_dim = 0, head_dim_v = 0;  // head_dim_v 0 = head_dim
  TensorView q, k, v, out;
  /// How v is laid out (spec field v_layout). kSeqMajor: (batch, seqlen_k, num_heads_kv, head_dim_v) as above.
  /// kDMajor (e4m3 only; not with cu_seqlens_k, page_table or seqused_k): v is V transposed, (batch, num_heads_kv, head_dim_v,
  /// seqlen_k_pad) with seqlen_k_pad = seqlen_k rounded up to 16, keys contiguous: v.stride_seq is the stride
  /// between two channels (at least seqlen_k_pad; 16-byte multiples, as every stride), stride_head and stride_batch
  /// as usual. Inside every aligned group of 16 keys the key 16 g + j is stored at position 16 g + 4 ((j & 7) >> 1) +
  /// (j & 1) + 2 (j >> 3): the order in which the kernel packs P's FP8 fragment (device/transpose_v.cuh), so V
  /// reaches the tensor cores without a transpose or a shuffle. The positions of keys past seqlen_k must hold finite
  /// values (0: they are multiplied by a probability of 0). fa3jit_quantize_fp8 with v_layout d_major writes it;
  /// fa3jit.v_to_d_major (Python) converts an e4m3 V.
  VLayout v_layout = VLayout::kSeqMajor;
  float* lse = nullptr;          // (batch, num_heads, seqlen_q) fp32, or null
  float softmax_scale = 0.0f;    // 0 = 1/sqrt(head_dim)
  bool causal = false;

  // ---- attention variant (FlashAttention-3's window_size, softcap; gpt-oss's sinks; device/variant.cuh) ----
  /// Sliding window: query i of a sequence sees keys i + d - window_left .. i + d + window_right, where d =
  /// seqlen_k - seqlen_q (bottom-right aligned, as causal); -1 leaves that side unbounded; (-1, -1) is no window.
  /// causal = true is window_right 0 (then window_right must be -1 or 0). A window at least as wide as every
  /// sequence hides nothing and runs the kernel without one. Each side: -1 or an integer in [0, 2^31).
  int64_t window_left = -1;
  int64_t window_right = -1;
  /// > 0: every score is capped as softcap * tanh(score * softmax_scale / softcap) before the softmax (Gemma-2's
  /// logit softcapping, FA3's softcap); 0: off. Finite and >= 0.
  float softcap = 0.0f;
  /// fp32 (num_heads) device tensor or null: one learnable logit per query head, in the units of the scaled scores,
  /// that joins every row's softmax normaliser as a key of value 0 (gpt-oss's attention sinks): out is scaled by
  /// sum_j exp(s_j - m) / (sum_j exp(s_j - m) + exp(sink - m)) and lse includes the sink. Values only the GPU reads:
  /// NaN and infinities are clamped into [-1e30, 1e30].
  const float* sinks = nullptr;

  // ---- serving layouts (FlashAttention-3's flash_attn_varlen_func / flash_attn_with_kvcache) ----
  // Every pointer below is an int32 device tensor that only the GPU reads: the kernel clamps its values into the
  // tensors given (a length past its tensor, a page index outside [0, num_pages)), so no value can make it read or
  // write outside them; a wrong value gives a wrong answer for its own sequence only. To find such a value, set
  // FA3JIT_CHECK_INDICES=1 (or call check_index_values, index_check.h): every call then synchronises, reads the
  // tensors on the host and fails with the first bad value named (debugging only; not under graph capture).
  /// (batch + 1) offsets, non-decreasing, cu_seqlens_q[batch] <= seqlen_q: q and out are packed, seqlen_q is the
  /// total number of query rows (total_q), q.stride_batch and out.stride_batch are unused, lse is (num_heads,
  /// total_q). Sequence b has rows [cu_seqlens_q[b], cu_seqlens_q[b+1]). Rows of no sequence (padding past
/// cu_seqlens_q[batch]) are left as they are, or set to 0 (lse -inf) by a split-KV call's combine.
  const int32_t* cu_seqlens_q = nullptr;
  int64_t max_seqlen_q = 0;  // with cu_seqlens_q: >= every sequence's query length (sizes the grid); rows past it
                             // are not computed
  /// (batch + 1) offsets into packed k and v, which are then (total_k = seqlen_k, num_heads_kv, head_dim);
  /// k/v.stride_batch unused. Exclusive with page_table.
  const int32_t* cu_seqlens_k = nullptr;
  int64_t max_seqlen_k = 0;  // with cu_seqlens_k or page_table: >= every sequence's key length (split heuristic)
  /// (batch): keys of sequence b actually attended, at most its capacity (dense: seqlen_k; cu_seqlens_k: its
  /// span; paged: max_pages * page_size). Required with page_table (FA3's cache_seqlens).
  const int32_t* seqused_k = nullptr;
  /// Paged KV cache: k and v are (num_pages, page_size, num_heads_kv, head_dim) (TensorView: stride_batch is the
  /// page stride); page_table (batch, max_pages) int32 with row stride page_table_stride (elements) maps
  /// sequence b's key j to page page_table[b][j / page_size], row j % page_size. seqlen_k is unused.
  const int32_t* page_table = nullptr;
  int64_t page_table_stride = 0;
  int64_t max_pages = 0;  // page_table's second dimension (pages per sequence)
  int64_t num_pages = 0;
  int64_t page_size = 0;  // >= 1: multiples of 8 load as TMA boxes, others row by row (pages_need_gather)
  /// Split-KV (FlashDecoding): each row block's keys are cut into num_splits ranges run by separate CTAs, whose
  /// fp32 partial outputs and LSEs go to `workspace` and are merged by the attention_combine kernel on the same
  /// stream. 1 (the default, as FA3's flash_attn_func): no split, no workspace; 0: the heuristic
  /// (num_splits_heuristic) decides; > 1: that many (at most kMaxSplits).
  int num_splits = 1;
  /// GQA packing: the num_heads / num_heads_kv query heads of one KV head share an M tile (decode fills it with
  /// one token x the group). -1: the heuristic decides; 0 / 1: off / on.
  int pack_gqa = -1;
  void* workspace = nullptr;     // workspace_size(args) bytes, 16-byte aligned, owned by the caller
  size_t workspace_bytes = 0;
};

/// Most KV splits a call may use (the combine kernel's largest max_splits).
inline constexpr int kMaxSplits = 256;
/// Workspace bytes of a causal persistent grid's tile counter (launch.cpp: workspace_layout): an int32, 16 so that a
/// caller's 16-byte alignment rule holds for it too.
inline constexpr int64_t kTileCounterBytes = 16;

/// Largest seqlen_q / seqlen_k accepted: the kernel's row and column indices are 32-bit with up to one tile
/// (256) of headroom.
inline constexpr int64_t kMaxSeqlen = 0x7fffffff - 1024;

/// A chosen, loaded kernel: what the C ABI's kernel handle holds. Immutable once built.
class Kernel {
 public:
  Kernel(const KernelConfig& config, std::shared_ptr<LoadedKernel> loaded,
         std::optional<attention_combine::LoadedCombine> combine = std::nullopt);
  const Spec& spec() const { return config_.spec; }
  const KernelConfig& config() const { return config_; }
  LoadedKernel& loaded() const { return *loaded_; }
  /// The combine kernel a split_kv kernel launches after its split pass (empty otherwise).
  const std::optional<attention_combine::LoadedCombine>& combine() const { return combine_; }

 private:
  KernelConfig config_;
  std::shared_ptr<LoadedKernel> loaded_;
  std::optional<attention_combine::LoadedCombine> combine_;
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
  unsigned grid = 0;  // 0: nothing to launch (a packed batch of empty sequences)
  CUfunction function = nullptr;
  LaunchInvariants launch;
  CUstream stream = nullptr;
  bool combine = false;  // split-KV: the combine kernel runs after the split pass, on the same stream
  attention_combine::PreparedLaunch combine_plan;
  // split-KV with varlen_q: lse_partial is first filled with -inf (cuMemsetD32Async), so that the rows of packed q
  // that belong to no sequence (padding past cu_seqlens_q[batch]) merge to out 0 and lse -inf instead of
  // whatever the workspace held.
  float* clear_lse_partial = nullptr;
  size_t clear_count = 0;
};
/// The kernel spec a call of `args` runs when no kernel is given: the tile table's choice for its shape class, as
/// forward(runtime, ...) picks it (the same functions). Reads the shapes, the mask and which pointers are null;
/// no pointer is dereferenced and no device is needed. `num_splits` stands for the split heuristic's answer when
/// args.num_splits is 0 (the heuristic needs the device's SM count): > 1 gives the split_kv kernel. The argument
/// checks throw as forward does. `fa3jit cache warm` compiles a serving manifest's calls with it (manifest.h).
Spec call_spec(const ForwardArgs& args, int num_splits);

LaunchPlan prepare_launch(Runtime& runtime, const ForwardArgs& args, void* stream);
LaunchPlan prepare_launch(const Kernel& kernel, const ForwardArgs& args, void* stream);
/// cuLaunchKernelEx of a prepared plan; Error(kDriverError) when the driver refuses it.
void launch(LaunchPlan& plan);

/// How a call runs: the kernel's spec and the resolved heuristics (pack_gqa_heuristic, num_splits_heuristic in
/// scheduler.h), computed by the same function the launch uses. Reads the shapes only (tensor pointers may be null).
/// With num_splits 0 it needs the driver for the SM count of q's device (the current context's device when q is
/// null; cached per device); throws as forward() does for arguments it refuses on the host. plan_info(args).spec
/// is the tile table's kernel: the runtime may run a tuned tile instead (not for quant per_block, whose descale
/// blocks are the built-in tile's, nor for a split).
struct CallPlanInfo {
  Spec spec;               // the kernel that runs (the tile table's for the call's shape class, or `kernel`'s)
  int num_splits = 1;      // 1 = no split
  bool pack_gqa = false;
  size_t workspace_bytes = 0;  // what `workspace` must hold: workspace_size below
};
CallPlanInfo plan_info(const ForwardArgs& args);
CallPlanInfo plan_info(const Kernel& kernel, const ForwardArgs& args);

/// plan_info(args).workspace_bytes: bytes of caller-owned workspace the call needs (launch.cpp: workspace_layout): a
/// split call's partials, a causal persistent grid's tile counter (optional: without it a static order), else 0. For a
/// CUDA graph, size the workspace once with the largest shapes it will replay (the bytes grow with batch,
/// max_seqlen_q and num_heads, and num_splits <= kMaxSplits).
size_t workspace_size(const ForwardArgs& args);
size_t workspace_size(const Kernel& kernel, const ForwardArgs& args);

}  // namespace fa3jit::attention_fwd

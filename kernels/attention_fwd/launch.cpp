// Attention forward launch path (launch.h): shape checks, plan cache, device checks, parameters, launch.
#include "kernels/attention_fwd/launch.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <cstring>
#include <utility>
#include <tuple>
#include <map>
#include <optional>
#include <shared_mutex>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "jit/driver.h"
#include "kernels/attention_fwd/emit.h"
#include "kernels/attention_fwd/index_check.h"
#include "kernels/attention_fwd/scheduler.h"
#include "kernels/attention_fwd/tuned.h"
#include "kernels/attention_combine/launch.h"

namespace fa3jit::attention_fwd {

namespace {

constexpr float kLog2e = 1.4426950408889634f;

// The arguments after the shape checks, in the units the launcher needs.
struct CallShape {
  int64_t batch, seqlen_q, seqlen_k, num_heads, num_heads_kv, head_dim, head_dim_v;
  DType out_dtype;
  int elem_bytes, out_elem_bytes;
  float softmax_scale;  // resolved: 1/sqrt(head_dim) when the argument was 0
  // Serving layouts (ForwardArgs): which ones the call uses, and the per-sequence bounds.
  bool varlen_q, varlen_k, paged;
  bool paged_gather;     // paged with a page size no TMA box fits (pages_need_gather)
  int64_t max_seqlen_q;  // longest query length of a sequence: seqlen_q when dense
  int64_t max_seqlen_k;  // longest key length: seqlen_k when dense, max_pages * page_size when paged
  int64_t group;         // num_heads / num_heads_kv
  // The mask after resolving causal and the window (resolve_mask): a causal kernel, a sliding-window (local) one,
  // or neither; the window sides as the kernel takes them (unbounded: 0x7fffffff).
  bool causal, local;
  int window_left, window_right;
  float softcap_log2;  // softcap * log2(e); 0: no softcap
};

// The output dtype a call asks for: given, or the default of its input dtype.
DType resolved_out_dtype(const ForwardArgs& a) { return a.out_dtype ? *a.out_dtype : default_out_dtype(a.dtype); }

// The sequence lengths and the serving layouts: seqlen_q / seqlen_k (dense, or the totals of packed tensors),
// max_seqlen_q / max_seqlen_k, the page geometry, num_splits and pack_gqa. Arithmetic only.
void check_serving_shape(const ForwardArgs& a, CallShape& s) {
  s.varlen_q = a.cu_seqlens_q != nullptr;
  s.varlen_k = a.cu_seqlens_k != nullptr;
  s.paged = a.page_table != nullptr;
  s.paged_gather = false;
  if (s.varlen_k && s.paged)
    bad_argument("arguments cu_seqlens_k and page_table are both given; k and v are either packed or paged, expected "
                 "at most one of them");
  if (s.varlen_q) {
    // A packed batch may hold no query at all (every sequence empty): nothing to launch then.
    if (a.seqlen_q < 0 || a.seqlen_q > kMaxSeqlen)
      bad_argument(fmt::format("argument seqlen_q = {} (total_q, the rows of packed q) is out of range; expected an "
                               "integer in [0, {}]",
                               a.seqlen_q, kMaxSeqlen));
    s.seqlen_q = a.seqlen_q;
    if (a.max_seqlen_q < 0 || a.max_seqlen_q > kMaxSeqlen)
      bad_argument(fmt::format("argument max_seqlen_q = {} is out of range; with cu_seqlens_q it bounds every "
                               "sequence's query length, expected an integer in [0, {}]",
                               a.max_seqlen_q, kMaxSeqlen));
    if (s.seqlen_q > 0 && a.max_seqlen_q < 1)
      bad_argument(fmt::format("argument max_seqlen_q = {} is not allowed with cu_seqlens_q and {} query rows; it "
                               "bounds every sequence's query length (rows past it are not computed), expected an "
                               "integer in [1, {}]",
                               a.max_seqlen_q, s.seqlen_q, kMaxSeqlen));
    s.max_seqlen_q = std::min(a.max_seqlen_q, s.seqlen_q);
  } else {
    s.seqlen_q = checked_extent(a.seqlen_q, "seqlen_q", kMaxSeqlen);
    s.max_seqlen_q = s.seqlen_q;
  }
  if (s.paged) {
    if (a.seqused_k == nullptr)
      bad_argument("argument seqused_k is null; a paged KV cache (page_table) needs each sequence's key count "
                   "(FA3's cache_seqlens), int32 of shape (batch)");
    if (a.page_size < 1 || a.page_size > kMaxSeqlen)
      bad_argument(fmt::format("argument page_size = {} is out of range; expected keys per page in [1, {}]",
                               a.page_size, kMaxSeqlen));
    s.paged_gather = pages_need_gather(a.page_size);
    const int64_t max_pages = checked_extent(a.max_pages, "max_pages", kMaxSeqlen);
    checked_extent(a.num_pages, "num_pages", 0x7fffffff);
    if (a.page_table_stride < max_pages || a.page_table_stride > 0x7fffffff)
      bad_argument(fmt::format("argument page_table_stride = {} is not allowed; expected an element stride in "
                               "[max_pages = {}, 2^31)",
                               a.page_table_stride, max_pages));
    const int64_t capacity = checked_mul_add(max_pages, a.page_size, 0, "max_pages x page_size");
    if (capacity > kMaxSeqlen)
      bad_argument(fmt::format("arguments max_pages {} x page_size {} = {} keys per sequence; at most {} are allowed",
                               max_pages, a.page_size, capacity, kMaxSeqlen));
    s.seqlen_k = capacity;
    s.max_seqlen_k = a.max_seqlen_k > 0 ? std::min(a.max_seqlen_k, capacity) : capacity;
  } else if (s.varlen_k) {
    s.seqlen_k = checked_extent(a.seqlen_k, "seqlen_k (total_k, the rows of packed k)", kMaxSeqlen);
    if (a.max_seqlen_k < 0 || a.max_seqlen_k > kMaxSeqlen)
      bad_argument(fmt::format("argument max_seqlen_k = {} is out of range; expected an integer in [0, {}]",
                               a.max_seqlen_k, kMaxSeqlen));
    s.max_seqlen_k = a.max_seqlen_k > 0 ? std::min(a.max_seqlen_k, s.seqlen_k) : s.seqlen_k;
  } else {
    s.seqlen_k = checked_extent(a.seqlen_k, "seqlen_k", kMaxSeqlen);
    s.max_seqlen_k = s.seqlen_k;
  }
  if ((s.varlen_q || s.varlen_k || s.paged) && a.quant == Quant::kPerBlock)
    bad_argument("argument quant = per_block is not allowed with cu_seqlens_q, cu_seqlens_k or page_table; per-block "
                 "descales are laid out for dense tensors, expected per_head");
  if (a.num_splits < 0 || a.num_splits > kMaxSplits)
    bad_argument(fmt::format("argument num_splits = {} is out of range; expected 0 (heuristic), 1 (no split) or up "
                             "to {}",
                             a.num_splits, kMaxSplits));
  if (a.pack_gqa < -1 || a.pack_gqa > 1)
    bad_argument(fmt::format("argument pack_gqa = {} is not allowed; expected -1 (heuristic), 0 or 1", a.pack_gqa));
}

// causal, window_left/right and softcap: the kernel's mask (FA3's rules: causal is window_right 0; a window side
// that hides no key of any sequence is dropped, so a decode step's causal mask is no mask at all) and its values.
void resolve_mask(const ForwardArgs& a, CallShape& s) {
  const struct {
    int64_t value;
    const char* name;
  } sides[] = {{a.window_left, "window_left"}, {a.window_right, "window_right"}};
  for (const auto& side : sides)
    if (side.value < -1 || side.value > 0x7ffffffe)
      bad_argument(fmt::format("argument {} = {} is out of range; expected -1 (unbounded) or a key count in [0, 2^31 "
                               "- 1)",
                               side.name, side.value));
  if (a.causal && a.window_right > 0)
    bad_argument(fmt::format("argument window_right = {} is not allowed with causal = true; a causal mask is "
                             "window_right 0, expected -1 or 0",
                             a.window_right));
  int64_t left = a.window_left;
  int64_t right = a.causal ? 0 : a.window_right;
  // Query i of a sequence (seqlen_q <= max_seqlen_q, seqlen_k <= the keys the tensors hold) sees keys from
  // i + d - left, at most 0 for every i when left >= seqlen_k - 1, to i + d + right, at least seqlen_k - 1 for every
  // i when right >= max_seqlen_q - 1 (FA3's rule). The left side is judged against the keys the tensors can hold
  // (s.seqlen_k: the paged capacity, total_k), not the max_seqlen_k hint, which may understate a sequence.
  if (left >= s.seqlen_k - 1) left = -1;
  if (right >= s.max_seqlen_q - 1) right = -1;
  s.causal = left < 0 && right == 0;
  s.local = !s.causal && (left >= 0 || right >= 0);
  s.window_left = left < 0 ? 0x7fffffff : static_cast<int>(left);
  s.window_right = right < 0 ? 0x7fffffff : static_cast<int>(right);
  // The kernel computes tanh(s * c / softcap_log2) and scales by softcap_log2: both it and its reciprocal must be
  // normal floats.
  if (!(a.softcap == 0.0f || (a.softcap >= 1e-30f && a.softcap <= 1e30f)))
    bad_argument(fmt::format("argument softcap = {} is not allowed; expected 0 (off) or a number in [1e-30, 1e30]",
                             a.softcap));
  s.softcap_log2 = a.softcap * kLog2e;
  // The kernel's window bounds are int32 sums of a query index, seqlen_k and the clamped sides.
  if (s.local && s.seqlen_k + s.seqlen_q > 0x7fffffff - 2)
    bad_argument(fmt::format("a sliding window needs seqlen_k + seqlen_q < 2^31 - 2 (the kernel's int32 window "
                             "bounds); the call has {} keys (capacity) and {} query rows",
                             s.seqlen_k, s.seqlen_q));
}

// Arithmetic checks only: no driver, no allocation, no string on success.
CallShape check_shape(const ForwardArgs& a) {
  CallShape s{};
  if (!supports_dtype(a.dtype))
    throw Error(ErrorCode::kUnsupported, fmt::format("argument dtype = {} is not supported; expected {}",
                                                     dtype_name(a.dtype), allowed_dtypes()));
  s.out_dtype = resolved_out_dtype(a);
  const bool fp8 = a.dtype == DType::kE4m3;
  if (!supports_out_dtype(a.dtype, s.out_dtype))
    bad_argument(fmt::format("argument out_dtype = {} is not allowed with dtype {}; expected {}",
                             dtype_name(s.out_dtype), dtype_name(a.dtype), allowed_out_dtypes(a.dtype)));
  if (fp8 ? !(a.quant == Quant::kPerHead || a.quant == Quant::kPerBlock) : a.quant != Quant::kNone)
    bad_argument(fmt::format("argument quant = {} is not allowed with dtype {}; expected {}", quant_name(a.quant),
                             dtype_name(a.dtype), fp8 ? "per_head or per_block" : "none"));
  s.head_dim = a.head_dim;
  s.head_dim_v = a.head_dim_v == 0 ? a.head_dim : a.head_dim_v;
  const HeadDimRule& rule = head_dim_rule(a.dtype);
  if (!rule.allows(s.head_dim))
    bad_argument(fmt::format("argument head_dim = {} is not supported for dtype {}; supported head dims are {}",
                             a.head_dim, dtype_name(a.dtype), allowed_head_dims(a.dtype)));
  if (!rule.allows(s.head_dim_v))
    bad_argument(fmt::format("argument head_dim_v = {} is not supported for dtype {}; supported head dims are {}",
                             a.head_dim_v, dtype_name(a.dtype), allowed_head_dims(a.dtype)));
  // Every equal pair has a tile (tile_table.h); a pair of different dims may not, which is told before the driver.
  if (s.head_dim != s.head_dim_v) {
    try {
      (void)default_tile(a.dtype, static_cast<int>(s.head_dim), static_cast<int>(s.head_dim_v), false);
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("arguments head_dim = {}, head_dim_v = {}: {}", s.head_dim, s.head_dim_v,
                                        e.what()));
    }
  }
  s.batch = checked_extent(a.batch, "batch", 0x7fffffff);
  s.num_heads = checked_extent(a.num_heads, "num_heads", 0x7fffffff);
  s.num_heads_kv = checked_extent(a.num_heads_kv, "num_heads_kv", 0x7fffffff);
  if (s.num_heads % s.num_heads_kv != 0)
    bad_argument(fmt::format("argument num_heads = {} is not a multiple of num_heads_kv = {}", s.num_heads,
                             s.num_heads_kv));
  s.group = s.num_heads / s.num_heads_kv;
  check_serving_shape(a, s);
  resolve_mask(a, s);
  if (a.sinks != nullptr && reinterpret_cast<uintptr_t>(a.sinks) % 4 != 0)
    bad_argument("argument sinks is not 4-byte aligned (float32 of shape (num_heads) expected)");
  s.softmax_scale = a.softmax_scale == 0.0f ? 1.0f / std::sqrt(static_cast<float>(a.head_dim)) : a.softmax_scale;
  // The kernel keeps the running max of the scaled scores, which is right only for a positive scale, and folds
  // scale * log2(e) into one constant that must stay finite.
  if (!(s.softmax_scale > 0.0f) || !std::isfinite(s.softmax_scale * kLog2e))
    bad_argument(fmt::format("argument softmax_scale = {} is not allowed; expected a positive finite number below "
                             "2.3e38 (0 selects 1/sqrt(head_dim))",
                             a.softmax_scale));
  if (a.lse != nullptr && reinterpret_cast<uintptr_t>(a.lse) % 4 != 0)
    bad_argument("argument lse is not 4-byte aligned (float32 expected)");
  // With seqused_k too: the kernel zeroes V's keys past a sequence's length in its last block (0 x garbage in P.V
  // would reach the output) for a V given seq-major only (device/mainloop.cuh: first_block_keys).
  if (a.v_layout == VLayout::kDMajor && (!fp8 || s.varlen_k || s.paged || a.seqused_k != nullptr))
    bad_argument(fmt::format("argument v_layout = d_major is not allowed {}; a transposed V is for e4m3 inputs in "
                             "dense (batch, num_heads_kv, head_dim_v, seqlen_k) tensors of seqlen_k keys each, "
                             "expected seq_major",
                             !fp8      ? fmt::format("with dtype {}", dtype_name(a.dtype))
                             : s.paged ? std::string("with page_table")
                             : s.varlen_k ? std::string("with cu_seqlens_k")
                                          : std::string("with seqused_k")));
  if (!fp8 && (a.q_descale.data || a.k_descale.data || a.v_descale.data))
    bad_argument(fmt::format("arguments q_descale, k_descale, v_descale must be null with dtype {}: descales belong "
                             "to e4m3 inputs",
                             dtype_name(a.dtype)));
  s.elem_bytes = dtype_size(a.dtype);
  s.out_elem_bytes = dtype_size(s.out_dtype);
  return s;
}

// A forced kernel must describe the same problem as the arguments; otherwise it would read the tensors with
// the wrong element size, head_dim or mask. The one place spec and arguments are compared.
void check_agrees(const Spec& spec, const ForwardArgs& a, const CallShape& s) {
  if (a.dtype != spec.dtype)
    bad_argument(fmt::format("argument dtype = {} does not match the kernel spec's dtype {}", dtype_name(a.dtype),
                             dtype_name(spec.dtype)));
  if (s.head_dim != spec.head_dim || s.head_dim_v != spec.head_dim_v)
    bad_argument(fmt::format("arguments head_dim = {}, head_dim_v = {} do not match the kernel spec ({}, {})",
                             s.head_dim, s.head_dim_v, spec.head_dim, spec.head_dim_v));
  if (s.out_dtype != spec.out_dtype)
    bad_argument(fmt::format("argument out_dtype = {} does not match the kernel spec's out_dtype {}",
                             dtype_name(s.out_dtype), dtype_name(spec.out_dtype)));
  if (a.quant != spec.quant)
    bad_argument(fmt::format("argument quant = {} does not match the kernel spec's quant {}", quant_name(a.quant),
                             quant_name(spec.quant)));
  if (a.v_layout != spec.v_layout)
    bad_argument(fmt::format("argument v_layout = {} does not match the kernel spec's v_layout {}",
                             v_layout_name(a.v_layout), v_layout_name(spec.v_layout)));
  // A local kernel takes any window at run time, a causal one included; any other kernel has its mask built in.
  if (!spec.local) {
    if (a.causal != spec.causal)
      bad_argument(fmt::format("argument causal = {} does not match the kernel spec's causal {}", a.causal,
                               spec.causal));
    if (s.causal && !spec.causal)
      bad_argument(fmt::format("arguments window_left = {}, window_right = {} are a causal mask; the kernel spec's "
                               "causal is false (pass causal = true to a causal kernel)",
                               a.window_left, a.window_right));
    if (s.local)
      bad_argument(fmt::format("arguments window_left = {}, window_right = {} need a kernel with local true; the "
                               "kernel spec's local is false",
                               a.window_left, a.window_right));
  }
  if ((s.softcap_log2 > 0.0f) != spec.softcap)
    bad_argument(fmt::format("argument softcap = {} does not match the kernel spec's softcap {} (expected {})",
                             a.softcap, spec.softcap, spec.softcap ? "a value > 0" : "0"));
  if ((a.sinks != nullptr) != spec.sinks)
    bad_argument(fmt::format("argument sinks is {} but the kernel spec's sinks is {}",
                             a.sinks != nullptr ? "given" : "null", spec.sinks));
  const struct {
    bool given, in_spec;
    const char *argument, *field;
  } layouts[] = {{s.varlen_q, spec.varlen_q, "cu_seqlens_q", "varlen_q"},
                 {s.varlen_k, spec.varlen_k, "cu_seqlens_k", "varlen_k"},
                 {s.paged, spec.paged_kv, "page_table", "paged_kv"}};
  for (const auto& l : layouts)
    if (l.given != l.in_spec)
      bad_argument(fmt::format("argument {} is {} but the kernel spec's {} is {}", l.argument,
                               l.given ? "given" : "null", l.field, l.in_spec));
  // A gather kernel loads any page size; a TMA-box one only those pages_need_gather leaves to it.
  if (s.paged_gather && !spec.paged_gather)
    bad_argument(fmt::format("argument page_size = {} needs a kernel with paged_gather true (pages that are not a "
                             "multiple of 8 keys are copied row by row); the kernel spec's paged_gather is false",
                             a.page_size));
  if (a.pack_gqa != -1 && (a.pack_gqa == 1) != spec.pack_gqa)
    bad_argument(fmt::format("argument pack_gqa = {} does not match the kernel spec's pack_gqa {}", a.pack_gqa,
                             spec.pack_gqa));
  if (a.num_splits > 1 && !spec.split_kv)
    bad_argument(fmt::format("argument num_splits = {} needs a kernel with split_kv true; the kernel spec's split_kv "
                             "is false",
                             a.num_splits));
}

// Tensor map of a (batch, seqlen, heads, dim) tensor with 128-byte swizzle (docs/kernel-design.md §3): one box is
// one 128-byte column block of a tile (64 16-bit or 128 e4m3 columns).
//  - 4-D {dim, seqlen, heads, batch}, box {128 bytes, box_rows, 1, 1};
//  - pack_gqa (group > 0): 5-D {dim, group, seqlen, heads / group, batch}, box {128 bytes, group, box_rows, 1, 1}:
//    the group's heads of box_rows queries, one after the other (device/mainloop.cuh: load_q).
//  - a d_major V (box_cols 32 keys, 32-byte swizzle): 4-D {keys, head_dim_v, heads, batch}, box {32, kVRows, 1, 1}
//    (device/mainloop.cuh: load_v_d_major).
TmaDesc make_tensor_map(const TensorView& t, const TensorShape& s, CUtensorMapDataType type, int elem_bytes,
                        int box_rows, int64_t group = 0, int box_cols = 0,
                        CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  if (box_cols == 0) box_cols = 128 / elem_bytes;
  // A size-1 dimension's stride is never stepped, whatever the caller passed (DLPack producers often give
  // 1 or 0): hand TMA any valid value, the row size rounded up to 16 bytes.
  const auto unused_stride = static_cast<cuuint64_t>((s.dim * elem_bytes + 15) / 16 * 16);
  auto stride_or = [&](int64_t extent, int64_t stride) {
    return extent == 1 ? unused_stride : static_cast<cuuint64_t>(stride * elem_bytes);
  };
  const auto u64 = [](int64_t x) { return static_cast<cuuint64_t>(x); };
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5];
  const cuuint32_t elem_strides[5] = {1, 1, 1, 1, 1};
  cuuint32_t rank = 4;
  if (group > 0) {
    rank = 5;
    const int64_t kv_heads = s.heads / group;
    const cuuint64_t d[5] = {u64(s.dim), u64(group), u64(s.seqlen), u64(kv_heads), u64(s.batch)};
    const cuuint64_t st[4] = {stride_or(group, t.stride_head), stride_or(s.seqlen, t.stride_seq),
                              stride_or(kv_heads, t.stride_head * group), stride_or(s.batch, t.stride_batch)};
    const cuuint32_t b[5] = {static_cast<cuuint32_t>(128 / elem_bytes), static_cast<cuuint32_t>(group),
                             static_cast<cuuint32_t>(box_rows), 1, 1};
    std::copy(d, d + 5, dims);
    std::copy(st, st + 4, strides);
    std::copy(b, b + 5, box);
  } else {
    const cuuint64_t d[4] = {u64(s.dim), u64(s.seqlen), u64(s.heads), u64(s.batch)};
    const cuuint64_t st[3] = {stride_or(s.seqlen, t.stride_seq), stride_or(s.heads, t.stride_head),
                              stride_or(s.batch, t.stride_batch)};
    const cuuint32_t b[4] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows), 1, 1};
    std::copy(d, d + 4, dims);
    std::copy(st, st + 3, strides);
    std::copy(b, b + 4, box);
  }
  // Encoded into a CUtensorMap (128-byte aligned on the host) and copied into the 64-byte aligned kernel
  // parameter (the alignment a __grid_constant__ tensor map needs, docs/hopper-ptx.md).
  static_assert(sizeof(TmaDesc) == sizeof(CUtensorMap), "hopper/abi.h TmaDesc must hold a CUtensorMap");
  CUtensorMap encoded;
  const CUresult r = driver().cuTensorMapEncodeTiled(&encoded, type, rank, t.data, dims, strides, box, elem_strides,
                                                     CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) check_cu(r, fmt::format("cuTensorMapEncodeTiled for {}", s.name).c_str());
  TmaDesc map;
  std::memcpy(&map, &encoded, sizeof(map));
  return map;
}

CUtensorMapDataType tensor_map_type(DType dtype) {
  switch (dtype) {
    case DType::kBf16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::kFp16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::kE4m3: return CU_TENSOR_MAP_DATA_TYPE_UINT8;  // TMA copies bytes; wgmma reads them as e4m3
  }
  return CU_TENSOR_MAP_DATA_TYPE_UINT8;
}

// One descale tensor (launch.h: ScaleView): (batch, heads, inner) with inner's stride 1 and free batch/head strides
// (0 allowed: a broadcast scale), in bounds of its allocation, on the call's device, not overlapping an output.
ByteRange check_descale(const ScaleView& view, const char* name, int64_t batch, int64_t heads, int64_t inner,
                        const char* shape_text, const CallDevice& device, const ByteRange& out, const ByteRange& lse) {
  if (view.data == nullptr)
    bad_argument(fmt::format("argument {} is null; an e4m3 call needs it, fp32 of shape {}", name, shape_text));
  if (reinterpret_cast<uintptr_t>(view.data) % 4 != 0)
    bad_argument(fmt::format("argument {} is not 4-byte aligned (float32 expected)", name));
  if (view.stride_batch < 0 || view.stride_head < 0 || view.stride_batch > 0x7fffffff || view.stride_head > 0x7fffffff)
    bad_argument(fmt::format("argument {} has strides (batch {}, head {}); expected non-negative element strides "
                             "below 2^31",
                             name, view.stride_batch, view.stride_head));
  // The last element read: (batch-1, heads-1, inner-1).
  const int64_t last = checked_mul_add(batch - 1, view.stride_batch,
                                       checked_mul_add(heads - 1, view.stride_head, inner - 1, name), name);
  if (last > 0x7fffffff)
    bad_argument(fmt::format("argument {} spans {} elements; expected fewer than 2^31", name, last + 1));
  const ByteRange r = check_allocation(view.data, static_cast<uint64_t>(last + 1) * 4, device, name, nullptr, nullptr);
  if (r.overlaps(out) || r.overlaps(lse)) bad_argument(fmt::format("argument {} overlaps out or lse", name));
  return r;
}

// The bytes the three descales span (the workspace must not overlap them: launch writes it).
struct DescaleRanges {
  ByteRange q, k, v;
};
DescaleRanges check_descales(const Spec& spec, const ForwardArgs& a, const CallShape& s, const CallDevice& device,
                             const ByteRange& out, const ByteRange& lse) {
  if (spec.quant == Quant::kPerHead) {
    const auto per_head = [&](const ScaleView& view, const char* name) {
      return check_descale(view, name, s.batch, s.num_heads_kv, 1, "(batch, num_heads_kv)", device, out, lse);
    };
    return {per_head(a.q_descale, "q_descale"), per_head(a.k_descale, "k_descale"), per_head(a.v_descale, "v_descale")};
  }
  const int64_t m_blocks = (s.seqlen_q + spec.block_m - 1) / spec.block_m;
  const int64_t n_blocks = (s.seqlen_k + spec.block_n - 1) / spec.block_n;
  return {check_descale(a.q_descale, "q_descale", s.batch, s.num_heads, m_blocks,
                        "(batch, num_heads, ceil(seqlen_q / block_m))", device, out, lse),
          check_descale(a.k_descale, "k_descale", s.batch, s.num_heads_kv, n_blocks,
                        "(batch, num_heads_kv, ceil(seqlen_k / block_n))", device, out, lse),
          check_descale(a.v_descale, "v_descale", s.batch, s.num_heads_kv, s.head_dim_v,
                        "(batch, num_heads_kv, head_dim_v)", device, out, lse)};
}

// ---- serving heuristics ---------------------------------------------------------------------------------

// Share of an M tile's rows that hold queries, over all tiles of `rows` rows (FA3's tile efficiency).
double tile_efficiency(int64_t rows, int block_m) {
  if (rows <= 0) return 1.0;
  const int64_t tiles = (rows + block_m - 1) / block_m;
  return static_cast<double>(rows) / static_cast<double>(tiles * block_m);
}

// pack_gqa when the call leaves it to us: when packing the group into the M tile fills it clearly better (decode,
// short chunks, speculative-decode verification), never past 64 heads per KV head (one 64-row tile must hold the
// group) or with per-block q descales (a packed tile holds several heads). FA3: should_pack_gqa.
// Packing is kept to query tiles of at most 128 packed rows (decode, speculative verification), where it is
// measured (bench/NOTES.md); a prefill keeps the TMA-stored prefill kernel.
bool pack_gqa_heuristic(const CallShape& s, Quant quant) {
  if (s.group <= 1 || s.group > 64 || quant == Quant::kPerBlock || s.max_seqlen_q * s.group > 128) return false;
  return tile_efficiency(s.max_seqlen_q, 128) < 0.9 * tile_efficiency(s.max_seqlen_q * s.group, 128);
}

// Whether the call runs the decode tile (decode_tile: one 64-row M block per (batch, head or KV head)). Per-block
// descales are laid out by the prefill tile (fa3jit_attention_quant_blocks), which must not change with the call's
// length. With varlen_q the tile must not depend on max_seqlen_q, so that a sequence's output does not depend on the
// batch it came in (num_splits 1): the decode tile is for dense q (flash_attn_with_kvcache's decode steps).
bool decode_shaped(const ForwardArgs& a, const CallShape& s, bool pack_gqa) {
  return !s.varlen_q && a.quant != Quant::kPerBlock && (pack_gqa ? s.max_seqlen_q * s.group : s.max_seqlen_q) <= 64;
}

// The serving fields of the call's kernel, split_kv left to resolve_splits.
Layout base_layout(const ForwardArgs& a, const CallShape& s) {
  Layout l;
  l.varlen_q = s.varlen_q;
  l.varlen_k = s.varlen_k;
  l.paged_kv = s.paged;
  l.paged_gather = s.paged_gather;
  l.pack_gqa = a.pack_gqa == -1 ? pack_gqa_heuristic(s, a.quant) : a.pack_gqa == 1;
  l.v_d_major = a.v_layout == VLayout::kDMajor;
  l.short_q = decode_shaped(a, s, l.pack_gqa);
  // Dense only, for the same reasons: a packed batch's sequences keep one tile whatever the batch, and a paged cache's
  // capacity says nothing about the keys a call sees.
  l.short_causal = s.causal && !s.local && !l.short_q && !s.varlen_q && !s.varlen_k && !s.paged &&
                   a.quant != Quant::kPerBlock && !l.pack_gqa &&
                   s.seqlen_k <= short_causal_max_seqlen_k(a.dtype, static_cast<int>(s.head_dim),
                                                           static_cast<int>(s.head_dim_v));
  return l;
}

GridShape grid_shape(const CallShape& s, bool pack_gqa, int64_t num_splits) {
  return GridShape{s.batch, s.num_heads, s.num_heads_kv, s.max_seqlen_q, s.max_seqlen_k, pack_gqa, num_splits};
}

// Splits of the call: the argument's, or the heuristic's over the tiles of one split; `decode` (the call's
// decode_shaped, which the caller has) marks a memory-bound decode step (scheduler.h: kMemoryBoundFill).
int resolve_splits(const ForwardArgs& a, const CallShape& s, int block_m, int block_n, bool pack_gqa, bool decode,
                   int ordinal) {
  if (a.num_splits > 0) return a.num_splits;
  const int64_t rows = pack_gqa ? std::max<int64_t>(1, block_m / s.group) : block_m;
  const int64_t m_blocks = (s.max_seqlen_q + rows - 1) / rows;
  // Each factor is below 2^31; the heuristic only compares the tile count with a few waves of SMs, so the product
  // saturates at 2^31 instead of overflowing (a fuzzed call with 2^31 of each found the overflow).
  constexpr int64_t kSaturated = int64_t{1} << 31;
  const int64_t tiles =
      std::min(kSaturated, std::min(kSaturated, m_blocks * (pack_gqa ? s.num_heads_kv : s.num_heads)) * s.batch);
  const int64_t n_blocks = (s.max_seqlen_k + block_n - 1) / block_n;
  return num_splits_heuristic(tiles, n_blocks, multiprocessor_count(ordinal), kMaxSplits,
                              decode ? kMemoryBoundFill : kComputeBoundFill);
}

// Rows of the split partials: (lse_batch, seqlen_q, num_heads), lse_batch 1 with varlen_q.
int64_t partial_rows(const CallShape& s) {
  return checked_mul_add(checked_mul_add(s.varlen_q ? 1 : s.batch, s.seqlen_q, 0, "the workspace size"), s.num_heads,
                         0, "the workspace size");
}

// Workspace of a call:
//  - split: fp32 out_partial (num_splits, rows, head_dim_v), then fp32 lse_partial (num_splits, rows) at the next
//    16-byte boundary (attention_combine/params.h); required;
//  - causal persistent grid: the dynamic tile scheduler's int32 counter (device/kernel.cuh: PersistentTiles), which
//    the launch zeroes on the stream; optional: without it the grid runs a static order (device/scheduler.cuh).
// (A persistent grid never splits: spec.h persistent_conflict.)
struct WorkspaceLayout {
  int64_t lse_offset, bytes;
  bool tile_counter;
};
WorkspaceLayout workspace_layout(const Spec& spec, const CallShape& s, int num_splits) {
  if (spec.persistent && spec.causal) return {0, kTileCounterBytes, true};
  if (num_splits <= 1) return {0, 0, false};
  const int64_t rows = checked_mul_add(partial_rows(s), num_splits, 0, "the workspace size");
  const int64_t o_bytes = checked_mul_add(checked_mul_add(rows, s.head_dim_v, 0, "the workspace size"), 4, 0,
                                          "the workspace size");
  const int64_t lse_offset = (o_bytes + 15) / 16 * 16;
  return {lse_offset, checked_mul_add(rows, 4, lse_offset, "the workspace size"), false};
}

// An int32 tensor of `count` elements that only the GPU reads (cu_seqlens, seqused_k, page_table).
ByteRange check_index_tensor(const int32_t* ptr, int64_t count, const char* name, const char* shape_text,
                             const CallDevice& device) {
  if (reinterpret_cast<uintptr_t>(ptr) % 4 != 0)
    bad_argument(fmt::format("argument {} is not 4-byte aligned (int32 of shape {} expected)", name, shape_text));
  return check_allocation(ptr, static_cast<uint64_t>(checked_mul_add(count, 4, 0, name)), device, name, nullptr,
                          nullptr);
}

// What a kernel's launches on one device need that depends on the kernel and the device alone, kept by a thread's
// memo per (kernel, context): the function, and for a persistent kernel the most CTAs its grid takes.
struct ContextKernel {
  CUfunction function = nullptr;
  int64_t persistent_ctas = 0;  // 0 for a kernel with one CTA per tile
};

ContextKernel context_kernel(const Kernel& kernel, const CallDevice& device) {
  const Spec& spec = kernel.config().spec;
  LoadedKernel& loaded = kernel.loaded();
  ContextKernel ck{loaded.function_for(device.ctx), 0};
  // A persistent kernel runs one CTA per SM (its __launch_bounds__(threads, 1) registers and shared memory fit one).
  // With a cluster, as many whole clusters as the device runs at once: a GPC whose SMs do not pair up leaves one
  // idle, and a cluster beyond the resident ones would run its whole share of the tiles after them; at least one.
  if (!spec.persistent) return ck;
  const int64_t sms = multiprocessor_count(device.ordinal);
  if (spec.cluster_m == 1) {
    ck.persistent_ctas = sms;
  } else {
    const int64_t clusters = std::min<int64_t>(sms / spec.cluster_m, loaded.active_clusters(device.ctx));
    ck.persistent_ctas = std::max<int64_t>(1, clusters) * spec.cluster_m;
  }
  return ck;
}

// Device-side checks and parameters: everything a call does once its kernel is known, but the launch.
LaunchPlan build_launch(const Kernel& kernel, const ContextKernel& ck, const CallDevice& device, const ForwardArgs& a,
                        const CallShape& s, int num_splits, void* stream) {
  const KernelConfig& cfg = kernel.config();
  const Spec& spec = cfg.spec;
  check_context_and_stream(device, stream);
  LaunchPlan plan;
  plan.function = ck.function;
  plan.launch = kernel.loaded().launch();
  plan.stream = static_cast<CUstream>(stream);
  const int64_t q_batch = s.varlen_q ? 1 : s.batch;
  const TensorShape q_shape{"q", q_batch, s.seqlen_q, s.num_heads, s.head_dim};
  const TensorShape o_shape{"out", q_batch, s.seqlen_q, s.num_heads, s.head_dim_v};
  const TensorShape k_shape = s.paged    ? TensorShape{"k", a.num_pages, a.page_size, s.num_heads_kv, s.head_dim}
                              : s.varlen_k ? TensorShape{"k", 1, s.seqlen_k, s.num_heads_kv, s.head_dim}
                                           : TensorShape{"k", s.batch, s.seqlen_k, s.num_heads_kv, s.head_dim};
  // v_layout d_major: (batch, head_dim_v channel rows, num_heads_kv, keys padded to 16) in the view's (batch, seq,
  // head) strides (launch.h: ForwardArgs::v).
  const bool v_d_major = spec.v_layout == VLayout::kDMajor;
  const TensorShape v_shape = v_d_major ? TensorShape{"v", s.batch, s.head_dim_v, s.num_heads_kv, d_major_keys(s.seqlen_k),
                                                      kDMajorExtents}
                                        : TensorShape{"v", k_shape.batch, k_shape.seqlen, s.num_heads_kv, s.head_dim_v};
  if (s.seqlen_q == 0 || s.max_seqlen_q == 0) return plan;  // a packed batch of empty sequences: nothing to do
  // A d_major V's channel rows hold the padded keys each: a shorter stride would read one channel's last keys from
  // the next (other strides are free, as for every input: heads or batches may share memory).
  if (v_d_major && s.head_dim_v > 1 && a.v.stride_seq < v_shape.dim)
    bad_argument(fmt::format("argument v.stride_seq = {} is too small for v_layout d_major: the stride between two "
                             "channel rows must be at least the keys padded to 16, {} for seqlen_k {}",
                             a.v.stride_seq, v_shape.dim, s.seqlen_k));
  const ByteRange q = check_tensor(a.q, q_shape, s.elem_bytes, device);
  const ByteRange k = check_tensor(a.k, k_shape, s.elem_bytes, device);
  const ByteRange v = check_tensor(a.v, v_shape, s.elem_bytes, device);
  const ByteRange out = check_tensor(a.out, o_shape, s.out_elem_bytes, device);
  check_no_self_overlap(a.out, o_shape);
  // In place only when every CTA overwrites exactly the bytes of its own Q tile: same element size too (an e4m3
  // q under a 16-bit out would have out rows land on other CTAs' Q rows).
  const bool in_place = a.out.data == a.q.data && a.out.stride_batch == a.q.stride_batch &&
                        a.out.stride_seq == a.q.stride_seq && a.out.stride_head == a.q.stride_head &&
                        s.head_dim_v == s.head_dim && s.out_elem_bytes == s.elem_bytes;
  if (out.overlaps(k) || out.overlaps(v) || (out.overlaps(q) && !in_place))
    bad_argument("argument out overlaps q, k or v; the output may only alias q exactly (same pointer, strides and "
                 "element size)");
  ByteRange lse{};
  if (a.lse != nullptr) {
    const int64_t lse_rows = partial_rows(s);
    const int64_t lse_bytes = checked_mul_add(lse_rows, 4, 0, "lse's size");
    const TensorShape lse_shape{"lse", q_batch, s.num_heads, s.seqlen_q, 1};
    lse = check_allocation(a.lse, static_cast<uint64_t>(lse_bytes), device, "lse", &lse_shape, nullptr);
    if (lse.overlaps(q) || lse.overlaps(k) || lse.overlaps(v) || lse.overlaps(out))
      bad_argument("argument lse overlaps q, k, v or out");
  }
  if (s.varlen_q) check_index_tensor(a.cu_seqlens_q, s.batch + 1, "cu_seqlens_q", "(batch + 1)", device);
  if (s.varlen_k) check_index_tensor(a.cu_seqlens_k, s.batch + 1, "cu_seqlens_k", "(batch + 1)", device);
  if (a.seqused_k != nullptr) check_index_tensor(a.seqused_k, s.batch, "seqused_k", "(batch)", device);
  if (s.paged)
    check_index_tensor(a.page_table, checked_mul_add(s.batch - 1, a.page_table_stride, a.max_pages, "page_table"),
                       "page_table", "(batch, max_pages)", device);
  ByteRange sinks;
  if (a.sinks != nullptr)
    sinks = check_allocation(a.sinks, static_cast<uint64_t>(s.num_heads) * 4, device, "sinks", nullptr, nullptr);

  const TileSchedule sched = schedule_tiles(cfg, grid_shape(s, spec.pack_gqa, num_splits));
  if (spec.pack_gqa && sched.pack_rows < 1)
    bad_argument(fmt::format("argument pack_gqa = 1 needs num_heads / num_heads_kv = {} <= the kernel's block_m {}",
                             s.group, spec.block_m));
  if (s.num_heads * s.batch > 0x7fffffff || sched.num_tiles > 0x7fffffff)
    bad_argument(fmt::format("arguments batch {} x num_heads {} x seqlen_q {} x num_splits {} make more than 2^31 "
                             "tiles",
                             s.batch, s.num_heads, s.max_seqlen_q, num_splits));
  DescaleRanges descales;
  if (a.dtype == DType::kE4m3) descales = check_descales(spec, a, s, device, out, lse);

  const WorkspaceLayout ws = workspace_layout(spec, s, num_splits);
  float* out_partial = nullptr;
  float* lse_partial = nullptr;
  int* tile_counter = nullptr;
  // The tile counter is optional: a workspace of 0 bytes (or none) runs the static order.
  if (ws.bytes > 0 && ((a.workspace != nullptr && a.workspace_bytes > 0) || !ws.tile_counter)) {
    if (a.workspace == nullptr || a.workspace_bytes < static_cast<size_t>(ws.bytes))
      bad_argument(fmt::format("argument workspace holds {} bytes{}; this call {} needs {} bytes (workspace_size)",
                               a.workspace == nullptr ? 0 : a.workspace_bytes, a.workspace == nullptr ? " (null)" : "",
                               ws.tile_counter ? "(its tile scheduler's counter)"
                                               : fmt::format("runs {} KV splits and", num_splits),
                               ws.bytes));
    if (reinterpret_cast<uintptr_t>(a.workspace) % 16 != 0)
      bad_argument("argument workspace is not 16-byte aligned");
    const ByteRange w =
        check_allocation(a.workspace, static_cast<uint64_t>(ws.bytes), device, "workspace", nullptr, nullptr);
    if (w.overlaps(q) || w.overlaps(k) || w.overlaps(v) || w.overlaps(out) || w.overlaps(lse))
      bad_argument("argument workspace overlaps q, k, v, out or lse");
    if (w.overlaps(descales.q) || w.overlaps(descales.k) || w.overlaps(descales.v) || w.overlaps(sinks))
      bad_argument("argument workspace overlaps q_descale, k_descale, v_descale or sinks");
    if (ws.tile_counter) {
      tile_counter = static_cast<int*>(a.workspace);
    } else {
      out_partial = static_cast<float*>(a.workspace);
      lse_partial = reinterpret_cast<float*>(static_cast<char*>(a.workspace) + ws.lse_offset);
    }
  }

  const CUtensorMapDataType type = tensor_map_type(a.dtype);
  // A persistent grid's CTAs (context_kernel) each stride over the tiles (device/scheduler.cuh: persistent_tile);
  // fewer tiles than that, one CTA each. With a cluster the tile count is a multiple of cluster_m (scheduler.cpp) and
  // the cluster's CTAs take adjacent tiles of each round (device/kernel.cuh).
  plan.grid = static_cast<unsigned>(spec.persistent ? std::min<int64_t>(sched.num_tiles, ck.persistent_ctas)
                                                    : sched.num_tiles);
  // A persistent CTA's next index is a count plus the grid (device/kernel.cuh: PersistentTiles): below 2^31 too.
  if (spec.persistent && sched.num_tiles > 0x7fffffff - static_cast<int64_t>(plan.grid))
    bad_argument(fmt::format("arguments batch {} x num_heads {} x seqlen_q {} make {} tiles; a persistent grid of {} "
                             "CTAs takes at most 2^31 - 1 - {}",
                             s.batch, s.num_heads, s.max_seqlen_q, sched.num_tiles, plan.grid, plan.grid));
  Params& p = plan.params;
  std::memset(&p, 0, sizeof(p));  // padding and the fields a kernel does not use (tm_o of a self-storing epilogue)
  p.tm_q = make_tensor_map(a.q, q_shape, type, s.elem_bytes, static_cast<int>(sched.pack_rows),
                           spec.pack_gqa ? s.group : 0);
  // With a cluster each CTA loads half of every K/V block and multicasts it (device/mainloop.cuh); a page is loaded
  // in boxes that never cross a page boundary.
  const int kv_box_rows = s.paged ? std::gcd(static_cast<int>(a.page_size), spec.block_n) : spec.block_n / spec.cluster_m;
  if (spec.paged_gather) {  // rows by cp.async (device/mainloop.cuh gather_kv_block): no tensor maps for k and v
    p.k_data = static_cast<const char*>(a.k.data);
    p.v_data = static_cast<const char*>(a.v.data);
    p.k_stride_page = a.k.stride_batch * s.elem_bytes;
    p.k_stride_row = a.k.stride_seq * s.elem_bytes;
    p.k_stride_head = a.k.stride_head * s.elem_bytes;
    p.v_stride_page = a.v.stride_batch * s.elem_bytes;
    p.v_stride_row = a.v.stride_seq * s.elem_bytes;
    p.v_stride_head = a.v.stride_head * s.elem_bytes;
  } else {
    p.tm_k = make_tensor_map(a.k, k_shape, type, s.elem_bytes, kv_box_rows);
    p.tm_v = v_d_major ? make_tensor_map(a.v, v_shape, type, s.elem_bytes, transposed_v_rows(spec.head_dim_v), 0,
                                         kDMajorBoxKeys, CU_TENSOR_MAP_SWIZZLE_32B)
                       : make_tensor_map(a.v, v_shape, type, s.elem_bytes, kv_box_rows);
  }
  if (!(spec.varlen_q || spec.pack_gqa))
    p.tm_o = make_tensor_map(a.out, o_shape, tensor_map_type(s.out_dtype), s.out_elem_bytes, 64);
  p.lse = a.lse;
  p.seqlen_q = static_cast<int>(s.seqlen_q);
  p.seqlen_k = static_cast<int>(s.seqlen_k);
  p.num_heads = static_cast<int>(s.num_heads);
  p.head_group = static_cast<int>(s.group);
  p.batch = static_cast<int>(s.batch);
  p.num_m_blocks = static_cast<int>(sched.num_m_blocks);
  p.section_heads = static_cast<int>(sched.section_heads);
  p.num_tiles = static_cast<int>(sched.num_tiles);
  p.tile_counter = tile_counter;
  p.scale_log2 = s.softmax_scale * kLog2e;
  p.q_descale = a.q_descale.data;
  p.k_descale = a.k_descale.data;
  p.v_descale = a.v_descale.data;
  p.q_descale_stride_batch = static_cast<int>(a.q_descale.stride_batch);
  p.q_descale_stride_head = static_cast<int>(a.q_descale.stride_head);
  p.k_descale_stride_batch = static_cast<int>(a.k_descale.stride_batch);
  p.k_descale_stride_head = static_cast<int>(a.k_descale.stride_head);
  p.v_descale_stride_batch = static_cast<int>(a.v_descale.stride_batch);
  p.v_descale_stride_head = static_cast<int>(a.v_descale.stride_head);
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.cu_seqlens_k = a.cu_seqlens_k;
  p.seqused_k = a.seqused_k;
  p.page_table = a.page_table;
  p.page_table_stride = static_cast<int>(a.page_table_stride);
  p.max_pages = static_cast<int>(a.max_pages);
  p.num_pages = static_cast<int>(a.num_pages);
  p.page_size = static_cast<int>(a.page_size);
  p.page_box_rows = kv_box_rows;
  p.num_heads_kv = static_cast<int>(s.num_heads_kv);
  p.pack_rows = static_cast<int>(sched.pack_rows);
  p.num_splits = num_splits;
  p.out_partial = out_partial;
  p.lse_partial = lse_partial;
  p.out = a.out.data;
  p.out_stride_batch = a.out.stride_batch;
  p.out_stride_seq = a.out.stride_seq;
  p.out_stride_head = a.out.stride_head;
  p.window_left = s.window_left;
  p.window_right = s.window_right;
  p.softcap_log2 = spec.softcap ? s.softcap_log2 : 1.0f;
  p.sinks = a.sinks;

  if (num_splits > 1) {
    attention_combine::CombineArgs c;
    c.out_dtype = s.out_dtype;
    c.num_splits = num_splits;
    c.batch = q_batch;
    c.seqlen_q = s.seqlen_q;
    c.num_heads = s.num_heads;
    c.head_dim_v = s.head_dim_v;
    c.out_partial = out_partial;
    c.lse_partial = lse_partial;
    c.out = a.out;
    c.lse = a.lse;
    plan.combine = true;
    if (s.varlen_q) {
      plan.clear_lse_partial = lse_partial;
      plan.clear_count = static_cast<size_t>(partial_rows(s) * num_splits);
    }
    plan.combine_plan = attention_combine::prepare_prechecked(*kernel.combine(), c, device.ctx);
  }
  return plan;
}

// ---- plan cache ---------------------------------------------------------------------------------------

// Everything the kernel choice depends on: integers only.
// The tile fields of a class, comparable (TileDefaults has no order).
auto tile_tie(const TileDefaults& t) {
  return std::tie(t.block_m, t.block_n, t.consumer_warpgroups, t.stages, t.pingpong, t.intra_wg_overlap, t.cluster_m,
                  t.fp32_two_level_accum, t.persistent, t.rescale_o_before_pv, t.load_k_ahead,
                  t.mask_free_loop, t.softmax_in_mask_arms, t.lazy_rescale, t.l2_evict_hints, t.p_in_smem,
                  t.pin_pv_wait);
}

struct ShapeClass {
  int dtype, out_dtype, quant, head_dim, head_dim_v, causal;
  int layout;  // bits: varlen_q, varlen_k, paged_kv, pack_gqa, split_kv, short_q, local, softcap, sinks, paged_gather,
               // v_d_major, short_causal (layout_bits)
  TileDefaults tile;  // the built-in tile of the class, or the tuning database's (tuned.h)
  bool operator<(const ShapeClass& o) const {
    return std::tuple_cat(std::tie(dtype, out_dtype, quant, head_dim, head_dim_v, causal, layout), tile_tie(tile)) <
           std::tuple_cat(std::tie(o.dtype, o.out_dtype, o.quant, o.head_dim, o.head_dim_v, o.causal, o.layout),
                          tile_tie(o.tile));
  }
  bool operator==(const ShapeClass& o) const {
    return !(*this < o) && !(o < *this);
  }
};

int layout_bits(const Layout& l) {
  return (l.varlen_q ? 1 : 0) | (l.varlen_k ? 2 : 0) | (l.paged_kv ? 4 : 0) | (l.pack_gqa ? 8 : 0) |
         (l.split_kv ? 16 : 0) | (l.short_q ? 32 : 0) | (l.local ? 64 : 0) | (l.softcap ? 128 : 0) |
         (l.sinks ? 256 : 0) | (l.paged_gather ? 512 : 0) | (l.v_d_major ? 1024 : 0) | (l.short_causal ? 2048 : 0);
}
Layout layout_of(int bits) {
  Layout l;
  l.varlen_q = bits & 1;
  l.varlen_k = bits & 2;
  l.paged_kv = bits & 4;
  l.pack_gqa = bits & 8;
  l.split_kv = bits & 16;
  l.short_q = bits & 32;
  l.local = bits & 64;
  l.softcap = bits & 128;
  l.sinks = bits & 256;
  l.paged_gather = bits & 512;
  l.v_d_major = bits & 1024;
  l.short_causal = bits & 2048;
  return l;
}

// The runtime's plans: one loaded kernel per shape class, kept for the runtime's life.
struct Plans {
  std::shared_mutex mu;
  std::map<ShapeClass, std::shared_ptr<const Kernel>> by_class;
};

// The spec of a class: its tile in its layout. A tuned tile was validated without split_kv (tuned_tile); should it
// not hold with it, the built-in tile runs and the warning says why.
Spec class_spec(const ShapeClass& key) {
  const DType dtype = static_cast<DType>(key.dtype), out = static_cast<DType>(key.out_dtype);
  const Quant quant = static_cast<Quant>(key.quant);
  const Layout layout = layout_of(key.layout);
  Spec spec = tiled_spec(dtype, out, quant, key.head_dim, key.head_dim_v, key.causal != 0, key.tile, layout);
  try {
    validate(spec);
  } catch (const Error& e) {
    const Spec builtin = default_spec(dtype, out, quant, key.head_dim, key.head_dim_v, key.causal != 0, layout);
    if (canonical_string(builtin) == canonical_string(spec)) throw;
    log(LogLevel::kWarn, fmt::format("the tuned tile of \"{}\" does not hold for this call's layout ({}); the built-in "
                                     "tile is used",
                                     spec_summary(spec), e.what()));
    spec = builtin;
  }
  return spec;
}

const Kernel& plan_for(Runtime& runtime, const ShapeClass& key) {
  Plans& plans = runtime.family_state<Plans>();
  {
    std::shared_lock<std::shared_mutex> lock(plans.mu);
    auto it = plans.by_class.find(key);
    if (it != plans.by_class.end()) return *it->second;
  }
  const Spec spec = class_spec(key);
  std::shared_ptr<const Kernel> kernel = load_kernel(runtime, spec);  // compiles outside the lock
  std::unique_lock<std::shared_mutex> lock(plans.mu);
  return *plans.by_class.emplace(key, std::move(kernel)).first->second;
}

// The last (runtime, shape class, context) this thread launched, with its kernel and function: a warm call
// takes no lock and searches no map. The runtime id is never reused, so a destroyed runtime is never matched.
struct Memo {
  uint64_t runtime_id = 0;
  ShapeClass key{};
  CUcontext ctx = nullptr;
  const Kernel* kernel = nullptr;
  ContextKernel context;
};
thread_local Memo t_memo;

// The shape class and splits of a call without an explicit kernel (the tile table's choice).
struct ClassChoice {
  ShapeClass key;
  int num_splits;
};
// The layout and variant bits of a call, all but split_kv. The mask is the one resolve_mask found: with one query
// row the bottom-right causal mask hides no key (row 0 sees j <= seqlen_k - 1), so a decode step runs the
// non-causal kernel and gives exactly the non-causal result (FA3 does the same).
Layout call_layout(const ForwardArgs& a, const CallShape& s) {
  Layout l = base_layout(a, s);
  l.local = s.local;
  l.softcap = s.softcap_log2 > 0.0f;
  l.sinks = a.sinks != nullptr;
  return l;
}

// The tile a shape class runs (the tile table's; no allocation: the hot path calls it), memoised per thread for the
// last class: variant_tile runs the budget checks for the tiles it narrows (head-dim pairs between the table's rows,
// the gather layouts' register split), work that depends on the class alone.
TileDefaults class_tile(DType dtype, int head_dim, int head_dim_v, bool causal, Quant quant, const Layout& l) {
  struct Memo {
    int dtype = -1, head_dim = 0, head_dim_v = 0, bits = 0, quant = -1;
    bool causal = false;
    TileDefaults tile{};
  };
  thread_local Memo memo;
  const int bits = layout_bits(l);
  if (memo.dtype != static_cast<int>(dtype) || memo.head_dim != head_dim || memo.head_dim_v != head_dim_v ||
      memo.bits != bits || memo.quant != static_cast<int>(quant) || memo.causal != causal)
    memo = Memo{static_cast<int>(dtype), head_dim, head_dim_v, bits, static_cast<int>(quant), causal,
                variant_tile(dtype, head_dim, head_dim_v, causal, quant, l)};
  return memo.tile;
}

// The tuning database's tile for a class that does not split (tuned.h), memoised per thread for the last
// (runtime, device, class); none without a runtime (plan_info: the built-in choice).
std::optional<TileDefaults> class_tuned_tile(Runtime* runtime, int ordinal, const ForwardArgs& a, const CallShape& s,
                                             const Layout& l) {
  if (runtime == nullptr) return std::nullopt;
  struct Memo {
    uint64_t runtime_id = 0;
    int ordinal = -1, dtype = -1, out_dtype = -1, quant = -1, head_dim = 0, head_dim_v = 0, bits = 0;
    bool causal = false;
    std::optional<TileDefaults> tile;
  };
  thread_local Memo memo;
  const int bits = layout_bits(l);
  const Memo want{runtime->id(), ordinal, static_cast<int>(a.dtype), static_cast<int>(s.out_dtype),
                  static_cast<int>(a.quant), static_cast<int>(s.head_dim), static_cast<int>(s.head_dim_v), bits,
                  s.causal, std::nullopt};
  if (std::tie(memo.runtime_id, memo.ordinal, memo.dtype, memo.out_dtype, memo.quant, memo.head_dim, memo.head_dim_v,
               memo.bits, memo.causal) != std::tie(want.runtime_id, want.ordinal, want.dtype, want.out_dtype,
                                                   want.quant, want.head_dim, want.head_dim_v, want.bits, want.causal)) {
    memo = want;
    memo.tile = tuned_tile(*runtime, ordinal, a.dtype, s.out_dtype, a.quant, static_cast<int>(s.head_dim),
                           static_cast<int>(s.head_dim_v), s.causal, l);
  }
  return memo.tile;
}

// The class of a call: splits come from the built-in tile (so plan_info's workspace size holds for every runtime);
// a call that does not split takes the runtime's tuned tile for its class when the tuning database has one.
ClassChoice choose_class(Runtime* runtime, const ForwardArgs& a, const CallShape& s, int ordinal) {
  Layout l = call_layout(a, s);
  const bool causal = s.causal;
  TileDefaults tile =
      class_tile(a.dtype, static_cast<int>(s.head_dim), static_cast<int>(s.head_dim_v), causal, a.quant, l);
  const int splits = resolve_splits(a, s, tile.block_m, tile.block_n, l.pack_gqa, l.short_q, ordinal);
  l.split_kv = splits > 1;
  if (!l.split_kv)
    if (const std::optional<TileDefaults> tuned = class_tuned_tile(runtime, ordinal, a, s, l)) tile = *tuned;
  return {ShapeClass{static_cast<int>(a.dtype), static_cast<int>(s.out_dtype), static_cast<int>(a.quant),
                     static_cast<int>(s.head_dim), static_cast<int>(s.head_dim_v), causal ? 1 : 0, layout_bits(l),
                     tile},
          splits};
}

// The splits of a call on an explicit kernel: the argument's, or the heuristic's when the kernel can split.
int kernel_splits(const Kernel& kernel, const ForwardArgs& a, const CallShape& s, int ordinal) {
  const Spec& spec = kernel.spec();
  if (!spec.split_kv) return 1;
  return resolve_splits(a, s, spec.block_m, spec.block_n, spec.pack_gqa, decode_shaped(a, s, spec.pack_gqa), ordinal);
}

}  // namespace

Kernel::Kernel(const KernelConfig& config, std::shared_ptr<LoadedKernel> loaded,
               std::optional<attention_combine::LoadedCombine> combine)
    : config_(config), loaded_(std::move(loaded)), combine_(std::move(combine)) {}

std::shared_ptr<const Kernel> load_kernel(Runtime& runtime, const Spec& spec) {
  const KernelConfig config = make_kernel_config(spec);
  std::optional<attention_combine::LoadedCombine> combine;
  if (spec.split_kv)
    combine = attention_combine::load_combine(runtime, spec.out_dtype, spec.head_dim_v, kMaxSplits);
  return std::make_shared<const Kernel>(config, runtime.load(make_request(config)), std::move(combine));
}

namespace {

// The device whose SM count the split heuristic uses: q's, else the current context's, else device 0 (a workspace
// may be sized before the tensors exist).
int heuristic_device(const ForwardArgs& a) {
  if (a.q.data != nullptr) return pointer_device(a.q.data, "q.data");
  CUcontext ctx = nullptr;
  CUdevice dev = 0;
  const Driver& d = driver();
  if (d.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx != nullptr && d.cuCtxGetDevice(&dev, ctx) == CUDA_SUCCESS)
    return static_cast<int>(dev);
  return 0;
}

void check_q_pointer(const ForwardArgs& a) {
  if (a.q.data == nullptr) bad_argument("argument q.data is null");
}

}  // namespace

LaunchPlan prepare_launch(Runtime& runtime, const ForwardArgs& args, void* stream) {
  const CallShape shape = check_shape(args);
  check_q_pointer(args);
  const CallDevice device = call_device(args.q.data, "q.data", "q");
  const ClassChoice choice = choose_class(&runtime, args, shape, device.ordinal);
  Memo& memo = t_memo;
  if (!(memo.runtime_id == runtime.id() && memo.key == choice.key && memo.ctx == device.ctx)) {
    const Kernel& kernel = plan_for(runtime, choice.key);
    memo = Memo{runtime.id(), choice.key, device.ctx, &kernel, context_kernel(kernel, device)};
  }
  return build_launch(*memo.kernel, memo.context, device, args, shape, choice.num_splits, stream);
}

LaunchPlan prepare_launch(const Kernel& kernel, const ForwardArgs& args, void* stream) {
  const CallShape shape = check_shape(args);
  check_q_pointer(args);
  check_agrees(kernel.spec(), args, shape);
  const CallDevice device = call_device(args.q.data, "q.data", "q");
  return build_launch(kernel, context_kernel(kernel, device), device, args, shape,
                      kernel_splits(kernel, args, shape, device.ordinal), stream);
}

void forward(Runtime& runtime, const ForwardArgs& args, void* stream) {
  LaunchPlan plan = prepare_launch(runtime, args, stream);
  if (plan.grid != 0 && index_check_enabled()) check_index_values(args, stream);  // only calls that launch
  launch(plan);
}

Spec call_spec(const ForwardArgs& args, int num_splits) {
  const CallShape shape = check_shape(args);
  Layout l = call_layout(args, shape);
  l.split_kv = (args.num_splits > 0 ? args.num_splits : num_splits) > 1;
  return default_spec(args.dtype, shape.out_dtype, args.quant, static_cast<int>(shape.head_dim),
                      static_cast<int>(shape.head_dim_v), shape.causal, l);
}

void forward(const Kernel& kernel, const ForwardArgs& args, void* stream) {
  LaunchPlan plan = prepare_launch(kernel, args, stream);
  if (plan.grid != 0 && index_check_enabled()) check_index_values(args, stream);  // only calls that launch
  launch(plan);
}

void launch(LaunchPlan& plan) {
  if (plan.grid == 0) return;  // nothing to compute (every sequence empty)
  if (plan.clear_lse_partial != nullptr)
    check_cu(driver().cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(plan.clear_lse_partial), 0xff800000u,
                                       plan.clear_count, plan.stream),
             "cuMemsetD32Async (clearing the split-KV workspace)");
  // A causal persistent grid's tile counter (Params.tile_counter, in the call's workspace) starts from zero.
  if (plan.params.tile_counter != nullptr)
    check_cu(driver().cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(plan.params.tile_counter), 0u, 1, plan.stream),
             "cuMemsetD32Async (clearing the tile scheduler's counter)");
  launch_kernel(plan.function, plan.launch, plan.grid, &plan.params, plan.stream, "launching the attention kernel");
  if (plan.combine) attention_combine::launch(plan.combine_plan, plan.stream);
}

CallPlanInfo plan_info(const ForwardArgs& args) {
  const CallShape shape = check_shape(args);
  // The device matters only to the split heuristic (its SM count): a call that fixes num_splits needs no driver.
  const int ordinal = args.num_splits == 0 ? heuristic_device(args) : 0;
  const ClassChoice choice = choose_class(nullptr, args, shape, ordinal);
  CallPlanInfo info;
  info.spec = class_spec(choice.key);
  info.num_splits = choice.num_splits;
  info.pack_gqa = info.spec.pack_gqa;
  info.workspace_bytes = static_cast<size_t>(workspace_layout(info.spec, shape, choice.num_splits).bytes);
  return info;
}

CallPlanInfo plan_info(const Kernel& kernel, const ForwardArgs& args) {
  const CallShape shape = check_shape(args);
  check_agrees(kernel.spec(), args, shape);
  const int ordinal = args.num_splits == 0 && kernel.spec().split_kv ? heuristic_device(args) : 0;
  CallPlanInfo info;
  info.spec = kernel.spec();
  info.num_splits = kernel_splits(kernel, args, shape, ordinal);
  info.pack_gqa = info.spec.pack_gqa;
  info.workspace_bytes = static_cast<size_t>(workspace_layout(info.spec, shape, info.num_splits).bytes);
  return info;
}

size_t workspace_size(const ForwardArgs& args) { return plan_info(args).workspace_bytes; }
size_t workspace_size(const Kernel& kernel, const ForwardArgs& args) { return plan_info(kernel, args).workspace_bytes; }

}  // namespace fa3jit::attention_fwd

#include "runtime/arguments.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "generator/error.h"
#include "runtime/driver.h"

namespace fa3jit {
namespace {

[[noreturn]] void bad_argument(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }

int64_t in_range(int64_t value, const char* name, int64_t max) {
  if (value < 1) bad_argument(fmt::format("argument {} = {} is not allowed; expected >= 1", name, value));
  if (value > max) bad_argument(fmt::format("argument {} = {} is too large; expected <= {}", name, value, max));
  return value;
}

// a * b + c without wrapping; the argument names the result for the message.
int64_t checked_mul_add(int64_t a, int64_t b, int64_t c, const char* what) {
  int64_t product = 0, sum = 0;
  if (__builtin_mul_overflow(a, b, &product) || __builtin_add_overflow(product, c, &sum))
    bad_argument(fmt::format("arguments make {} overflow 64 bits", what));
  return sum;
}

struct ByteRange {
  uint64_t lo = 0, hi = 0;  // [lo, hi)
  bool overlaps(const ByteRange& o) const { return lo < o.hi && o.lo < hi; }
};

int pointer_device(const void* ptr, const char* name) {
  int ordinal = -1;
  if (driver().cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                     reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS)
    bad_argument(fmt::format("argument {} = {} is not a CUDA device pointer", name, ptr));
  return ordinal;
}

// [ptr, ptr + bytes) must lie inside the allocation holding ptr, on `device`.
ByteRange check_allocation(const void* ptr, uint64_t bytes, int device, const std::string& name,
                           const std::string& shape) {
  const int ordinal = pointer_device(ptr, name.c_str());
  if (ordinal != device)
    bad_argument(fmt::format("argument {} is on device {}, but q is on device {}; all tensors must be on one device",
                             name, ordinal, device));
  const Driver& d = driver();
  const auto addr = reinterpret_cast<CUdeviceptr>(ptr);
  CUdeviceptr start = 0;
  size_t size = 0;
  if (d.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, addr) == CUDA_SUCCESS &&
      d.cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, addr) == CUDA_SUCCESS) {
    if (bytes > start + size - addr)
      bad_argument(fmt::format("argument {}: {} needs {} bytes, {} bytes past its allocation", name, shape, bytes,
                               bytes - (start + size - addr)));
  }
  return {addr, addr + bytes};
}

// Pointer, alignment, strides and extent of a (batch, seqlen, heads, dim) tensor. Returns its byte range.
ByteRange check_tensor(const TensorView& t, const TensorShape& s, int elem_bytes, int device) {
  const auto addr = reinterpret_cast<uintptr_t>(t.data);
  if (t.data == nullptr) bad_argument(fmt::format("argument {}.data is null", s.name));
  if (addr % 16 != 0)
    bad_argument(fmt::format("argument {}.data = {:#x} is not 16-byte aligned; TMA needs 16-byte aligned base "
                             "addresses (PTX ISA, tensor copy)", s.name, addr));
  const struct {
    const char* field;
    int64_t stride, extent;
  } strides[] = {{"stride_batch", t.stride_batch, s.batch}, {"stride_seq", t.stride_seq, s.seqlen},
                 {"stride_head", t.stride_head, s.heads}};
  int64_t last = s.dim - 1;  // offset of the last element, in elements
  for (const auto& st : strides) {
    if (st.extent == 1) continue;  // the stride of a size-1 dimension is never used
    if (st.stride <= 0)
      bad_argument(fmt::format("argument {}.{} = {} is not allowed; expected a positive stride in elements",
                               s.name, st.field, st.stride));
    if (st.stride >= (int64_t{1} << 39) / elem_bytes)
      bad_argument(fmt::format("argument {}.{} = {} elements is too large for TMA (limit 2^39 bytes)", s.name,
                               st.field, st.stride));
    if ((st.stride * elem_bytes) % 16 != 0)
      bad_argument(fmt::format("argument {}.{} = {} elements ({} bytes) is not a multiple of 16 bytes; TMA needs "
                               "16-byte aligned strides",
                               s.name, st.field, st.stride, st.stride * elem_bytes));
    last = checked_mul_add(st.extent - 1, st.stride, last, "a tensor's extent");
  }
  const int64_t bytes = checked_mul_add(last + 1, elem_bytes, 0, "a tensor's extent");
  return check_allocation(t.data, static_cast<uint64_t>(bytes), device, fmt::format("{}.data", s.name),
                          fmt::format("shape (batch {}, seqlen {}, heads {}, dim {}) with strides ({}, {}, {})",
                                      s.batch, s.seqlen, s.heads, s.dim, t.stride_batch, t.stride_seq,
                                      t.stride_head));
}

// out is written by many CTAs at once: no two of its elements may share an address. Sufficient condition:
// ordered by stride, each stride covers the whole extent of the dimensions below it.
void check_no_self_overlap(const TensorView& t, const TensorShape& s) {
  std::vector<std::pair<int64_t, int64_t>> dims = {{1, s.dim}};  // (stride, extent)
  if (s.seqlen > 1) dims.emplace_back(t.stride_seq, s.seqlen);
  if (s.heads > 1) dims.emplace_back(t.stride_head, s.heads);
  if (s.batch > 1) dims.emplace_back(t.stride_batch, s.batch);
  std::sort(dims.begin(), dims.end());
  for (size_t i = 1; i < dims.size(); ++i) {
    if (dims[i].first < checked_mul_add(dims[i - 1].first, dims[i - 1].second, 0, "out's extent"))
      bad_argument(fmt::format("argument {}: strides (batch {}, seq {}, head {}) make distinct elements share "
                               "memory; the output must not overlap itself",
                               s.name, t.stride_batch, t.stride_seq, t.stride_head));
  }
}

// The current context must be on q's device, and a stream must belong to it.
void check_context_and_stream(int device, void* stream) {
  const Driver& d = driver();
  CUcontext current = nullptr;
  check_cu(d.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  CUdevice current_device = 0, q_device = 0;
  check_cu(d.cuCtxGetDevice(&current_device, current), "cuCtxGetDevice");
  check_cu(d.cuDeviceGet(&q_device, device), "cuDeviceGet");
  if (current_device != q_device)
    bad_argument(fmt::format("the current CUDA context is not on q's device {}; make that device current (for "
                             "example with torch.cuda.device) before the call", device));
  const auto handle = reinterpret_cast<uintptr_t>(stream);
  if (handle == 0 || handle == reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY) ||
      handle == reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD))
    return;  // the default streams of the current context
  CUcontext stream_ctx = nullptr;
  CUgreenCtx green = nullptr;
  if (d.cuStreamGetCtx(static_cast<CUstream>(stream), &stream_ctx, &green) != CUDA_SUCCESS)
    bad_argument(fmt::format("argument stream = {} is not a valid CUDA stream", stream));
  if (stream_ctx != nullptr && stream_ctx != current)
    bad_argument(fmt::format("argument stream = {} belongs to another CUDA context than the current one (q's "
                             "device {})", stream, device));
}

}  // namespace

ValidatedArgs validate_forward_args(const Spec& spec, const ForwardArgs& a, void* stream) {
  if (a.dtype == DType::kE4m3) throw Error(ErrorCode::kUnsupported, "argument dtype = e4m3 is not yet supported");
  if (a.dtype != spec.dtype)
    bad_argument(fmt::format("argument dtype = {} does not match the kernel spec's dtype {}", dtype_name(a.dtype),
                             dtype_name(spec.dtype)));
  ValidatedArgs v;
  v.head_dim = a.head_dim;
  v.head_dim_v = a.head_dim_v == 0 ? a.head_dim : a.head_dim_v;
  if (v.head_dim != spec.head_dim || v.head_dim_v != spec.head_dim_v)
    bad_argument(fmt::format("arguments head_dim = {}, head_dim_v = {} do not match the kernel spec ({}, {}); "
                             "supported head dims are 64, 128, 256 with head_dim_v = head_dim",
                             v.head_dim, v.head_dim_v, spec.head_dim, spec.head_dim_v));
  if (a.causal != spec.causal)
    bad_argument(fmt::format("argument causal = {} does not match the kernel spec", a.causal));
  v.batch = in_range(a.batch, "batch", 0x7fffffff);
  v.seqlen_q = in_range(a.seqlen_q, "seqlen_q", kMaxSeqlen);
  v.seqlen_k = in_range(a.seqlen_k, "seqlen_k", kMaxSeqlen);
  v.num_heads = in_range(a.num_heads, "num_heads", 0x7fffffff);
  v.num_heads_kv = in_range(a.num_heads_kv, "num_heads_kv", 0x7fffffff);
  if (v.num_heads % v.num_heads_kv != 0)
    bad_argument(fmt::format("argument num_heads = {} is not a multiple of num_heads_kv = {}", v.num_heads,
                             v.num_heads_kv));
  v.softmax_scale = a.softmax_scale == 0.0f ? 1.0f / std::sqrt(static_cast<float>(a.head_dim)) : a.softmax_scale;
  // The kernel keeps the running max of the raw scores, which is right only for a positive scale, and folds
  // scale * log2(e) into one constant that must stay finite.
  if (!(v.softmax_scale > 0.0f) || !std::isfinite(v.softmax_scale * 1.4426950408889634f))
    bad_argument(fmt::format("argument softmax_scale = {} is not allowed; expected a positive finite number below "
                             "2.3e38 (0 selects 1/sqrt(head_dim))",
                             a.softmax_scale));
  if (a.lse != nullptr && reinterpret_cast<uintptr_t>(a.lse) % 4 != 0)
    bad_argument("argument lse is not 4-byte aligned (float32 expected)");

  if (a.q.data == nullptr) bad_argument("argument q.data is null");
  v.device = pointer_device(a.q.data, "q.data");
  ensure_context(v.device);
  check_context_and_stream(v.device, stream);
  v.elem_bytes = dtype_size(a.dtype);
  v.q = {"q", v.batch, v.seqlen_q, v.num_heads, v.head_dim};
  v.k = {"k", v.batch, v.seqlen_k, v.num_heads_kv, v.head_dim};
  v.v = {"v", v.batch, v.seqlen_k, v.num_heads_kv, v.head_dim_v};
  v.out = {"out", v.batch, v.seqlen_q, v.num_heads, v.head_dim_v};
  const ByteRange q = check_tensor(a.q, v.q, v.elem_bytes, v.device);
  const ByteRange k = check_tensor(a.k, v.k, v.elem_bytes, v.device);
  const ByteRange vv = check_tensor(a.v, v.v, v.elem_bytes, v.device);
  const ByteRange out = check_tensor(a.out, v.out, v.elem_bytes, v.device);
  check_no_self_overlap(a.out, v.out);
  const bool in_place = a.out.data == a.q.data && a.out.stride_batch == a.q.stride_batch &&
                        a.out.stride_seq == a.q.stride_seq && a.out.stride_head == a.q.stride_head &&
                        v.head_dim_v == v.head_dim;
  if (out.overlaps(k) || out.overlaps(vv) || (out.overlaps(q) && !in_place))
    bad_argument("argument out overlaps q, k or v; the output may only alias q exactly (same pointer and strides)");
  if (a.lse != nullptr) {
    const int64_t lse_bytes =
        checked_mul_add(checked_mul_add(v.batch, v.num_heads, 0, "lse's size"), v.seqlen_q * 4, 0, "lse's size");
    const ByteRange lse = check_allocation(a.lse, static_cast<uint64_t>(lse_bytes), v.device, "lse",
                                           fmt::format("(batch {}, num_heads {}, seqlen_q {}) float32", v.batch,
                                                       v.num_heads, v.seqlen_q));
    if (lse.overlaps(q) || lse.overlaps(k) || lse.overlaps(vv) || lse.overlaps(out))
      bad_argument("argument lse overlaps q, k, v or out");
  }
  return v;
}

}  // namespace fa3jit

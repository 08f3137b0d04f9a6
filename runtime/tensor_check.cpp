// Device tensor checks shared by the launch paths (tensor_check.h).
#include "runtime/tensor_check.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "jit/driver.h"

namespace fa3jit {

void bad_argument(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }

int64_t checked_extent(int64_t value, const char* name, int64_t max) {
  if (value < 1) bad_argument(fmt::format("argument {} = {} is not allowed; expected >= 1", name, value));
  if (value > max) bad_argument(fmt::format("argument {} = {} is too large; expected <= {}", name, value, max));
  return value;
}

int64_t checked_mul_add(int64_t a, int64_t b, int64_t c, const char* what) {
  int64_t product = 0, sum = 0;
  if (__builtin_mul_overflow(a, b, &product) || __builtin_add_overflow(product, c, &sum))
    bad_argument(fmt::format("arguments make {} overflow 64 bits", what));
  return sum;
}

int pointer_device(const void* ptr, const char* name) {
  int ordinal = -1;
  if (driver().cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                     reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS)
    bad_argument(fmt::format("argument {} = {} is not a CUDA device pointer", name, ptr));
  return ordinal;
}

ByteRange check_allocation(const void* ptr, uint64_t bytes, const CallDevice& device, const char* name,
                           const TensorShape* shape, const TensorView* view) {
  const auto addr = reinterpret_cast<CUdeviceptr>(ptr);
  int ordinal = -1;
  CUdeviceptr start = 0;
  size_t size = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[] = {&ordinal, &start, &size};
  if (driver().cuPointerGetAttributes(3, attrs, data, addr) != CUDA_SUCCESS) {
    ordinal = pointer_device(ptr, name);  // names a foreign pointer; else the range is unknown: not checked
    size = 0;
  }
  if (ordinal != device.ordinal)
    bad_argument(fmt::format("argument {} is on device {}, but {} is on device {}; all tensors must be on one device",
                             name, ordinal, device.anchor, device.ordinal));
  if (size != 0 && bytes > start + size - addr) {
    const std::string what =
        shape == nullptr
            ? std::string("the tensor")
            : fmt::format("shape {}{}",
                          fmt::format(fmt::runtime(shape->extents != nullptr ? shape->extents
                                                                             : "(batch {}, seqlen {}, heads {}, dim {})"),
                                      shape->batch, shape->seqlen, shape->heads, shape->dim),
                          view == nullptr ? std::string()
                                          : fmt::format(" with strides ({}, {}, {})", view->stride_batch,
                                                        view->stride_seq, view->stride_head));
    bad_argument(fmt::format("argument {}: {} needs {} bytes, {} bytes past its allocation", name, what, bytes,
                             bytes - (start + size - addr)));
  }
  return {addr, addr + bytes};
}

ByteRange check_tensor(const TensorView& t, const TensorShape& s, int elem_bytes, const CallDevice& device) {
  const auto addr = reinterpret_cast<uintptr_t>(t.data);
  if (t.data == nullptr) bad_argument(fmt::format("argument {}.data is null", s.name));
  if (addr % 16 != 0)
    bad_argument(fmt::format("argument {}.data = {:#x} is not 16-byte aligned; TMA needs 16-byte aligned base "
                             "addresses (PTX ISA, tensor copy)",
                             s.name, addr));
  const struct {
    const char* field;
    int64_t stride, extent;
  } strides[] = {{"stride_batch", t.stride_batch, s.batch}, {"stride_seq", t.stride_seq, s.seqlen},
                 {"stride_head", t.stride_head, s.heads}};
  int64_t last = s.dim - 1;  // offset of the last element, in elements
  for (const auto& st : strides) {
    if (st.extent == 1) continue;  // the stride of a size-1 dimension is never used
    if (st.stride <= 0)
      bad_argument(fmt::format("argument {}.{} = {} is not allowed; expected a positive stride in elements", s.name,
                               st.field, st.stride));
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
  char name[32];
  fmt::format_to_n(name, sizeof(name) - 1, "{}.data", s.name).out[0] = '\0';
  return check_allocation(t.data, static_cast<uint64_t>(bytes), device, name, &s, &t);
}

void check_no_self_overlap(const TensorView& t, const TensorShape& s) {
  // Sufficient condition: ordered by stride, each stride covers the whole extent of the dimensions below it.
  std::pair<int64_t, int64_t> dims[4] = {{1, s.dim}};  // (stride, extent)
  int n = 1;
  if (s.seqlen > 1) dims[n++] = {t.stride_seq, s.seqlen};
  if (s.heads > 1) dims[n++] = {t.stride_head, s.heads};
  if (s.batch > 1) dims[n++] = {t.stride_batch, s.batch};
  std::sort(dims, dims + n);
  for (int i = 1; i < n; ++i) {
    if (dims[i].first < checked_mul_add(dims[i - 1].first, dims[i - 1].second, 0, "out's extent"))
      bad_argument(fmt::format("argument {}: strides (batch {}, seq {}, head {}) make distinct elements share "
                               "memory; the output must not overlap itself",
                               s.name, t.stride_batch, t.stride_seq, t.stride_head));
  }
}

CallDevice call_device(const void* anchor_ptr, const char* pointer_name, const char* anchor) {
  const Driver& d = driver();
  CallDevice device;
  device.anchor = anchor;
  device.ordinal = pointer_device(anchor_ptr, pointer_name);
  check_cu(d.cuCtxGetCurrent(&device.ctx), "cuCtxGetCurrent");
  if (device.ctx == nullptr) {
    ensure_context(device.ordinal);
    check_cu(d.cuCtxGetCurrent(&device.ctx), "cuCtxGetCurrent");
  }
  return device;
}

void check_context_and_stream(const CallDevice& device, void* stream) {
  const Driver& d = driver();
  CUdevice current_device = 0, anchor_device = 0;
  check_cu(d.cuCtxGetDevice(&current_device, device.ctx), "cuCtxGetDevice");
  check_cu(d.cuDeviceGet(&anchor_device, device.ordinal), "cuDeviceGet");
  if (current_device != anchor_device)
    bad_argument(fmt::format("the current CUDA context is not on {}'s device {}; make that device current (for "
                             "example with torch.cuda.device) before the call",
                             device.anchor, device.ordinal));
  const auto handle = reinterpret_cast<uintptr_t>(stream);
  if (handle == 0 || handle == reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY) ||
      handle == reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD))
    return;  // the default streams of the current context
  CUcontext stream_ctx = nullptr;
  CUgreenCtx green = nullptr;
  if (d.cuStreamGetCtx(static_cast<CUstream>(stream), &stream_ctx, &green) != CUDA_SUCCESS)
    bad_argument(fmt::format("argument stream = {} is not a valid CUDA stream", stream));
  if (stream_ctx != nullptr && stream_ctx != device.ctx)
    bad_argument(fmt::format("argument stream = {} belongs to another CUDA context than the current one ({}'s "
                             "device {})",
                             stream, device.anchor, device.ordinal));
}

}  // namespace fa3jit

// Checks of device tensors that every launch path makes before anything touches the GPU's memory: pointers,
// alignment, strides, extents inside the allocation that holds the base pointer, overlaps, and the
// context/stream the call runs on. Every failure is Error(kInvalidArgument) naming the argument, its value
// and what is allowed; messages are built only on failure.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

namespace fa3jit {

/// A (batch, seqlen, heads, dim) tensor on the device; strides in elements, the dim stride is 1.
struct TensorView {
  void* data = nullptr;
  int64_t stride_batch = 0;
  int64_t stride_seq = 0;
  int64_t stride_head = 0;
};

/// A (batch, seqlen, heads, dim) tensor's logical shape, with its argument name for messages.
struct TensorShape {
  const char* name;
  int64_t batch, seqlen, heads, dim;
  /// The four extents' names for messages when they are not (batch, seqlen, heads, dim): a format with four {}.
  const char* extents = nullptr;
};

/// TensorShape::extents of a V in v_layout d_major (kernels/attention_fwd/device/fp8_v_layout.h), for the attention
/// kernel's v and the pre-pass's v8.
inline constexpr const char* kDMajorExtents = "(batch {}, channel rows {}, heads {}, padded keys {}) (v_layout d_major)";

struct ByteRange {
  uint64_t lo = 0, hi = 0;  // [lo, hi)
  bool overlaps(const ByteRange& o) const { return lo < o.hi && o.lo < hi; }
};

[[noreturn]] void bad_argument(const std::string& message);

/// `value` in [1, max]; the message names `name`.
int64_t checked_extent(int64_t value, const char* name, int64_t max);

/// a * b + c without wrapping; `what` names the result for the message.
int64_t checked_mul_add(int64_t a, int64_t b, int64_t c, const char* what);

/// Device ordinal of a device pointer; bad_argument when `ptr` is no CUDA device pointer.
int pointer_device(const void* ptr, const char* name);

/// Where a call runs: the device of its first tensor (`anchor`, named in messages) and the context.
struct CallDevice {
  CUcontext ctx = nullptr;
  int ordinal = -1;
  const char* anchor = "";
};

/// The call's device and context: the current context, or the anchor's device's primary context made current
/// when none is. bad_argument naming `pointer_name` (e.g. "q.data") when `anchor_ptr` is no device pointer;
/// later messages name the tensor `anchor` (e.g. "q").
CallDevice call_device(const void* anchor_ptr, const char* pointer_name, const char* anchor);

/// [ptr, ptr + bytes) must lie inside the allocation holding ptr, on the call's device (one
/// cuPointerGetAttributes). `shape` and `view` (either may be null) describe the tensor for the message.
ByteRange check_allocation(const void* ptr, uint64_t bytes, const CallDevice& device, const char* name,
                           const TensorShape* shape, const TensorView* view);

/// Pointer, 16-byte alignment, strides (TMA) and extent of a tensor; returns its byte range.
ByteRange check_tensor(const TensorView& t, const TensorShape& s, int elem_bytes, const CallDevice& device);

/// A tensor written by many CTAs at once: no two of its elements may share an address.
void check_no_self_overlap(const TensorView& t, const TensorShape& s);

/// The current context must be on the call's device, and a stream must belong to it.
void check_context_and_stream(const CallDevice& device, void* stream);

}  // namespace fa3jit

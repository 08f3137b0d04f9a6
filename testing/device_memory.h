// RAII wrappers for the driver objects the CLI and the GPU tests own: device allocations and timing events.
// Every driver call is checked with check_cu (Error kDriverError naming the call); destructors never throw.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <string>
#include <utility>

#include "core/error.h"
#include "jit/driver.h"

namespace fa3jit::testing {

/// One cuMemAlloc'ed buffer, freed on destruction. Needs a current context (ensure_context).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) check_cu(driver().cuMemAlloc(&ptr_, bytes_), "cuMemAlloc");
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      ptr_ = std::exchange(other.ptr_, 0);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }

  void upload(const void* host, size_t bytes) {
    check_size(bytes);
    if (bytes) check_cu(driver().cuMemcpyHtoD(ptr_, host, bytes), "cuMemcpyHtoD");
  }
  void download(void* host, size_t bytes) const {
    check_size(bytes);
    if (bytes) check_cu(driver().cuMemcpyDtoH(host, ptr_, bytes), "cuMemcpyDtoH");
  }
  void fill_bytes(unsigned char value) {
    if (bytes_) check_cu(driver().cuMemsetD8(ptr_, value, bytes_), "cuMemsetD8");
  }

  void* get() const { return reinterpret_cast<void*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void check_size(size_t bytes) const {
    if (bytes > bytes_) {
      throw Error(ErrorCode::kInternal, "device copy of " + std::to_string(bytes) + " bytes into a buffer of " +
                                            std::to_string(bytes_) + " bytes");
    }
  }
  void reset() noexcept {
    if (ptr_) driver().cuMemFree(ptr_);  // failure here cannot be reported from a destructor
    ptr_ = 0;
    bytes_ = 0;
  }
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

/// One CUDA event (default flags: timing enabled).
class DeviceEvent {
 public:
  DeviceEvent() { check_cu(driver().cuEventCreate(&event_, CU_EVENT_DEFAULT), "cuEventCreate"); }
  ~DeviceEvent() {
    if (event_) driver().cuEventDestroy(event_);
  }
  DeviceEvent(const DeviceEvent&) = delete;
  DeviceEvent& operator=(const DeviceEvent&) = delete;
  DeviceEvent(DeviceEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  DeviceEvent& operator=(DeviceEvent&&) = delete;

  void record(CUstream stream) { check_cu(driver().cuEventRecord(event_, stream), "cuEventRecord"); }
  void synchronize() { check_cu(driver().cuEventSynchronize(event_), "cuEventSynchronize"); }
  /// Milliseconds from `start` to this event (both recorded and completed).
  float ms_since(const DeviceEvent& start) const {
    float ms = 0.0f;
    check_cu(driver().cuEventElapsedTime(&ms, start.event_, event_), "cuEventElapsedTime");
    return ms;
  }

 private:
  CUevent event_ = nullptr;
};

}  // namespace fa3jit::testing

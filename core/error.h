// fa3jit: the one exception type of the C++ API.
//
// Every failure the library reports (bad spec field, bad launch argument, NVRTC or driver error,
// cache I/O problem) is an fa3jit::Error carrying an ErrorCode and a message that names the field or
// argument, the offending value and what is allowed. The C ABI maps the code 1:1 to its return value.
#pragma once

#include <stdexcept>
#include <string>

namespace fa3jit {

enum class ErrorCode : int {
  kOk = 0,
  kInvalidSpec = 1,      // a JSON spec field is unknown, of the wrong type, out of range or infeasible
  kInvalidArgument = 2,  // a launch argument (pointer, stride, shape, dtype, head count) is not accepted
  kUnsupported = 3,      // valid request that this build does not implement (yet)
  kCompileFailed = 4,    // NVRTC rejected the generated source
  kNoDriver = 5,         // libcuda.so.1 could not be opened or lacks an entry point
  kDriverError = 6,      // a CUDA driver call returned an error
  kCacheError = 7,       // the disk cache could not be used (reported only when no fallback exists)
  kIoError = 8,          // a file given by the caller could not be read or written
  kInternal = 9,
};

/// Name of an error code, e.g. "invalid_spec".
const char* error_code_name(ErrorCode code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace fa3jit

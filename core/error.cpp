// fa3jit: names of the error codes (error.h). The C ABI and the CLI print these next to the message.
#include "core/error.h"

namespace fa3jit {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidSpec: return "invalid_spec";
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kCompileFailed: return "compile_failed";
    case ErrorCode::kNoDriver: return "no_driver";
    case ErrorCode::kDriverError: return "driver_error";
    case ErrorCode::kCacheError: return "cache_error";
    case ErrorCode::kIoError: return "io_error";
    case ErrorCode::kInternal: return "internal";
  }
  // A value outside the enum (e.g. an int cast by a C caller) still gets a printable name.
  return "unknown";
}

}  // namespace fa3jit

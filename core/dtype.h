// Element types of the tensors a kernel reads and writes, with their names and sizes. Every family's spec
// and every launch check speaks of element types through this one enum.
#pragma once

#include <string_view>

namespace fa3jit {

enum class DType { kFp16, kBf16, kE4m3 };

/// "fp16", "bf16", "e4m3" ("unknown" for a value outside the enum).
constexpr const char* dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFp16: return "fp16";
    case DType::kBf16: return "bf16";
    case DType::kE4m3: return "e4m3";
  }
  return "unknown";
}

/// The dtype named `name` ("fp16", "bf16", "e4m3"); false when the name is none of them.
constexpr bool dtype_from_name(std::string_view name, DType& out) noexcept {
  for (DType d : {DType::kFp16, DType::kBf16, DType::kE4m3}) {
    if (name == dtype_name(d)) {
      out = d;
      return true;
    }
  }
  return false;
}

/// Size of one element in bytes (2 for fp16/bf16, 1 for e4m3).
constexpr int dtype_size(DType dtype) noexcept { return dtype == DType::kE4m3 ? 1 : 2; }

}  // namespace fa3jit

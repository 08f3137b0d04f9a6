// fa3jit C ABI (runtime/include/fa3jit/fa3jit.h) over the C++ API (runtime/attention.h).
//
// Every entry point runs its body inside `guarded`, which turns any exception into a status and a
// thread-local message, so nothing escapes into C (an exception crossing extern "C" terminates the process).
// Only what is C-specific is checked here (NULL handles, struct_size, enum ranges, NULL data pointers,
// spec/params agreement); shapes, strides and alignment are checked by Runtime::forward.
#include "fa3jit/fa3jit.h"

#include <cmath>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "generator/error.h"
#include "generator/spec.h"
#include "runtime/attention.h"

#ifndef FA3JIT_PROJECT_VERSION
#error "FA3JIT_PROJECT_VERSION must be defined by the build (CMakeLists.txt, install section)"
#endif

struct fa3jit_runtime {
  explicit fa3jit_runtime(fa3jit::RuntimeOptions options) : runtime(std::move(options)) {}
  fa3jit::Runtime runtime;
};

namespace {

using fa3jit::Error;
using fa3jit::ErrorCode;

thread_local std::string t_last_error;
// Set when even the error message could not be stored (host memory exhausted).
thread_local bool t_message_lost = false;

// A struct larger than this is almost surely an unset struct_size, not a future header.
constexpr size_t kMaxStructSize = 4096;

fa3jit_status record(fa3jit_status status, const char* message) noexcept {
  try {
    t_last_error = message;
    t_message_lost = false;
  } catch (...) {
    t_last_error.clear();
    t_message_lost = true;
  }
  return status;
}

fa3jit_status status_of(ErrorCode code) noexcept {
  const int value = static_cast<int>(code);
  if (value <= FA3JIT_OK || value > FA3JIT_ERROR_INTERNAL) return FA3JIT_ERROR_INTERNAL;
  return static_cast<fa3jit_status>(value);
}

template <class Body>
fa3jit_status guarded(const char* function, Body&& body) noexcept {
  try {
    t_last_error.clear();
    t_message_lost = false;
    body();
    return FA3JIT_OK;
  } catch (const Error& e) {
    return record(status_of(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return record(FA3JIT_ERROR_INTERNAL, "out of host memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    try {
      return record(FA3JIT_ERROR_INTERNAL, fmt::format("{}: unexpected exception: {}", function, e.what()).c_str());
    } catch (...) {
      return record(FA3JIT_ERROR_INTERNAL, "unexpected exception");
    }
  } catch (...) {
    return record(FA3JIT_ERROR_INTERNAL, "unexpected non-standard exception");
  }
}

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }

// Accepts struct_size == sizeof (this header), larger sizes whose extra bytes are all zero (a newer header
// whose new fields are left at their defaults), and rejects smaller sizes (an older, incompatible header).
template <class T>
void check_struct_size(const T* value, const char* name, bool check_extra_bytes) {
  const size_t size = value->struct_size;
  if (size < sizeof(T) || size > kMaxStructSize) {
    invalid(fmt::format("{}.struct_size is {}; expected sizeof({}) = {} (ABI version {}); was it set?", name, size,
                        name, sizeof(T), FA3JIT_ABI_VERSION));
  }
  if (!check_extra_bytes) return;
  const auto* bytes = reinterpret_cast<const unsigned char*>(value);
  for (size_t i = sizeof(T); i < size; ++i) {
    if (bytes[i] != 0) {
      invalid(fmt::format("{} has non-zero fields at byte {} that fa3jit {} (ABI version {}, struct size {}) "
                          "does not know",
                          name, i, FA3JIT_PROJECT_VERSION, FA3JIT_ABI_VERSION, sizeof(T)));
    }
  }
}

fa3jit::DType to_dtype(int value) {
  switch (value) {
    case FA3JIT_DTYPE_FP16: return fa3jit::DType::kFp16;
    case FA3JIT_DTYPE_BF16: return fa3jit::DType::kBf16;
    case FA3JIT_DTYPE_E4M3: return fa3jit::DType::kE4m3;
  }
  invalid(fmt::format("params.dtype is {}; expected FA3JIT_DTYPE_FP16 (0), FA3JIT_DTYPE_BF16 (1) or "
                      "FA3JIT_DTYPE_E4M3 (2)",
                      value));
}

fa3jit::TensorView to_view(const fa3jit_tensor& t, const char* name) {
  if (t.data == nullptr) invalid(fmt::format("params.{}.data is NULL; expected a device pointer", name));
  return fa3jit::TensorView{t.data, t.stride_batch, t.stride_seq, t.stride_head};
}

// A forced spec must describe the same problem as the params; otherwise the kernel would read the tensors
// with the wrong element size, head_dim or mask.
void check_spec_agrees(const fa3jit::Spec& spec, const fa3jit::ForwardArgs& args) {
  const int64_t head_dim_v = args.head_dim_v == 0 ? args.head_dim : args.head_dim_v;
  if (spec.dtype != args.dtype) {
    invalid(fmt::format("params.dtype is {} but spec_json has dtype {}", fa3jit::dtype_name(args.dtype),
                        fa3jit::dtype_name(spec.dtype)));
  }
  if (spec.head_dim != args.head_dim) {
    invalid(fmt::format("params.head_dim is {} but spec_json has head_dim {}", args.head_dim, spec.head_dim));
  }
  if (spec.head_dim_v != head_dim_v) {
    invalid(fmt::format("params.head_dim_v is {} but spec_json has head_dim_v {}", head_dim_v, spec.head_dim_v));
  }
  if (spec.causal != args.causal) {
    invalid(fmt::format("params.causal is {} but spec_json has causal {}", args.causal ? 1 : 0, spec.causal));
  }
}

template <size_t N>
void copy_string(char (&destination)[N], const std::string& source, const char* name) {
  if (source.size() >= N) {
    throw Error(ErrorCode::kInternal,
                fmt::format("{} '{}' is {} characters; fa3jit_kernel_info holds {}", name, source, source.size(), N - 1));
  }
  std::memcpy(destination, source.c_str(), source.size() + 1);
}

}  // namespace

extern "C" {

const char* fa3jit_status_name(fa3jit_status status) {
  return fa3jit::error_code_name(static_cast<ErrorCode>(status));
}

const char* fa3jit_last_error(void) {
  if (t_message_lost) return "an error occurred but its message could not be stored (out of host memory)";
  return t_last_error.c_str();
}

const char* fa3jit_version(void) { return FA3JIT_PROJECT_VERSION; }

fa3jit_status fa3jit_runtime_create(const fa3jit_runtime_options* options, fa3jit_runtime** out) {
  return guarded("fa3jit_runtime_create", [&] {
    if (out == nullptr) invalid("fa3jit_runtime_create: out is NULL; expected the address of a fa3jit_runtime*");
    *out = nullptr;
    fa3jit::RuntimeOptions runtime_options;
    if (options != nullptr) {
      check_struct_size(options, "fa3jit_runtime_options", true);
      if (options->cache_dir != nullptr) runtime_options.cache_dir = options->cache_dir;
    }
    *out = new fa3jit_runtime(std::move(runtime_options));
  });
}

void fa3jit_runtime_destroy(fa3jit_runtime* runtime) { delete runtime; }

fa3jit_status fa3jit_forward(fa3jit_runtime* runtime, const fa3jit_forward_params* params, void* cuda_stream) {
  return guarded("fa3jit_forward", [&] {
    if (runtime == nullptr) invalid("fa3jit_forward: runtime is NULL; create one with fa3jit_runtime_create");
    if (params == nullptr) invalid("fa3jit_forward: params is NULL");
    check_struct_size(params, "fa3jit_forward_params", true);
    if (params->causal != 0 && params->causal != 1) {
      invalid(fmt::format("params.causal is {}; expected 0 or 1", params->causal));
    }
    if (!std::isfinite(params->softmax_scale)) {
      invalid(fmt::format("params.softmax_scale is {}; expected a finite value (0 = 1/sqrt(head_dim))",
                          params->softmax_scale));
    }
    fa3jit::ForwardArgs args;
    args.dtype = to_dtype(static_cast<int>(params->dtype));
    args.batch = params->batch;
    args.seqlen_q = params->seqlen_q;
    args.seqlen_k = params->seqlen_k;
    args.num_heads = params->num_heads;
    args.num_heads_kv = params->num_heads_kv;
    args.head_dim = params->head_dim;
    args.head_dim_v = params->head_dim_v;
    args.q = to_view(params->q, "q");
    args.k = to_view(params->k, "k");
    args.v = to_view(params->v, "v");
    args.out = to_view(params->out, "out");
    args.lse = params->lse;
    args.softmax_scale = params->softmax_scale;
    args.causal = params->causal != 0;
    if (params->spec_json != nullptr) {
      const fa3jit::Spec spec = fa3jit::parse_spec(std::string(params->spec_json));
      check_spec_agrees(spec, args);
      runtime->runtime.forward(spec, args, cuda_stream);
    } else {
      runtime->runtime.forward(args, cuda_stream);
    }
  });
}

fa3jit_status fa3jit_compile_spec(fa3jit_runtime* runtime, const char* spec_json, fa3jit_kernel_info* out) {
  return guarded("fa3jit_compile_spec", [&] {
    if (runtime == nullptr) invalid("fa3jit_compile_spec: runtime is NULL; create one with fa3jit_runtime_create");
    if (spec_json == nullptr) invalid("fa3jit_compile_spec: spec_json is NULL; expected a JSON spec");
    if (out != nullptr) check_struct_size(out, "fa3jit_kernel_info", false);
    const fa3jit::Spec spec = fa3jit::parse_spec(std::string(spec_json));
    const fa3jit::PreparedKernel prepared = runtime->runtime.prepare(spec);
    if (out == nullptr) return;
    fa3jit_kernel_info info;
    std::memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    copy_string(info.key, prepared.key, "cache key");
    copy_string(info.kernel_name, prepared.compiled ? prepared.compiled->kernel_name : std::string(), "kernel name");
    info.cache_hit = prepared.cache_hit ? 1 : 0;
    info.ms = prepared.ms;
    const fa3jit::ResourceReport report = prepared.compiled ? prepared.compiled->report : fa3jit::ResourceReport{};
    info.registers = report.registers;
    info.spill_store_bytes = report.spill_store_bytes;
    info.spill_load_bytes = report.spill_load_bytes;
    info.smem_bytes = prepared.config.smem_bytes;
    info.num_threads = prepared.config.num_threads;
    info.block_m = prepared.config.spec.block_m;
    info.block_n = prepared.config.spec.block_n;
    // Keep the caller's struct_size: a caller with a newer, larger struct keeps its trailing fields as they were.
    const size_t caller_size = out->struct_size;
    std::memcpy(out, &info, sizeof(info));
    out->struct_size = caller_size;
  });
}

}  // extern "C"

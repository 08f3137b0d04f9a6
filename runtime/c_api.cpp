// fa3jit C ABI (runtime/include/fa3jit/fa3jit.h) over the C++ API (runtime/runtime.h and the families'
// launch.h).
//
// Every entry point runs its body inside `guarded`, which turns any exception into a status and a
// thread-local message, so nothing escapes into C (an exception crossing extern "C" terminates the process).
// Only what is C-specific is checked here (NULL and stale handles, struct_size, enum ranges, NULL data
// pointers); shapes, strides, alignment and spec/argument agreement are checked by the family's launch path.
#include "fa3jit/fa3jit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <memory>
#include <utility>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/attention_fwd/emit.h"
#include "core/json_fields.h"
#include "kernels/attention_fwd/launch.h"
#include "kernels/attention_fwd/manifest.h"
#include "kernels/quantize_fp8/launch.h"
#include "runtime/runtime.h"

#ifndef FA3JIT_PROJECT_VERSION
#error "FA3JIT_PROJECT_VERSION must be defined by the build (CMakeLists.txt, install section)"
#endif

// Handles carry a magic number that destroy overwrites: a handle destroyed twice or used after destroy is an
// error where the memory still holds it (best effort; the memory may have been reused).
constexpr uint64_t kRuntimeMagic = 0x66613367'72756e74ULL;  // "fa3grunt"
constexpr uint64_t kKernelMagic = 0x66613367'6b65726eULL;   // "fa3gkern"
constexpr uint64_t kDeadMagic = 0xdeadULL;

struct fa3jit_runtime {
  explicit fa3jit_runtime(fa3jit::RuntimeOptions options) : runtime(std::move(options)) {}
  uint64_t magic = kRuntimeMagic;
  fa3jit::Runtime runtime;
};

struct fa3jit_kernel {
  uint64_t magic = kKernelMagic;
  fa3jit::PreparedKernel prepared;
  std::shared_ptr<const fa3jit::attention_fwd::Kernel> attention;  // set for attention_fwd kernels
};

namespace {

using fa3jit::Error;
using fa3jit::ErrorCode;

thread_local std::string t_last_error;
// Set when even the error message could not be stored (host memory exhausted).
thread_local bool t_message_lost = false;

// A struct larger than this is almost surely an unset struct_size, not a future header. The cap also bounds
// what check_struct_size reads: the bytes up to struct_size are the caller's promise (fa3jit.h), and a
// garbage size must not send the library reading far past the caller's object.
constexpr size_t kMaxStructSize = 4096;

// A C enum field may hold any int the caller stored; loading it as the C++ enum type when its value is out of
// the enum's range is undefined behaviour. Its bytes are read as the integer they are, then range-checked.
template <class Enum>
int32_t enum_value(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int32_t), "the C ABI's enums are 32-bit");
  int32_t value = 0;
  std::memcpy(&value, &field, sizeof(value));
  return value;
}

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

// The size of an older header's struct, which ended there: its caller knows only the fields before it.
struct OlderSize {
  size_t size;
  const char* what;  // e.g. "the struct before its e4m3 fields"
};

// Accepts struct_size == sizeof (this header), larger sizes whose extra bytes are all zero (a newer header
// whose new fields are left at their defaults), the sizes of `older` headers, and rejects other smaller sizes.
template <class T, size_t N = 0>
void check_struct_size(const T* value, const char* name, bool check_extra_bytes,
                       const std::array<OlderSize, N>& older = {}) {
  const size_t size = value->struct_size;
  for (const OlderSize& o : older)
    if (size == o.size) return;
  if (size < sizeof(T) || size > kMaxStructSize) {
    std::string sizes;
    for (const OlderSize& o : older) sizes += fmt::format(" or {} ({})", o.size, o.what);
    invalid(fmt::format("{}.struct_size is {}; expected sizeof({}) = {}{} (ABI version {}); was it set?", name, size,
                        name, sizeof(T), sizes, FA3JIT_ABI_VERSION));
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

void check_runtime(const fa3jit_runtime* runtime, const char* function) {
  if (runtime == nullptr)
    invalid(fmt::format("{}: runtime is NULL; create one with fa3jit_runtime_create", function));
  if (runtime->magic != kRuntimeMagic)
    invalid(fmt::format("{}: runtime is not a live fa3jit_runtime (destroyed, or not one)", function));
}

void check_kernel(const fa3jit_kernel* kernel, const char* function) {
  if (kernel->magic != kKernelMagic)
    invalid(fmt::format("{}: kernel is not a live fa3jit_kernel (destroyed, or not one)", function));
}

// fa3jit_forward_params as older headers laid it out: before the e4m3 fields, and before the serving fields.
// Those callers send that many bytes; the fields they do not know take the defaults of
// fa3jit_forward_params_init, which are what their calls meant (16-bit, no serving layout, no split).
constexpr size_t kForwardParamsSizeBeforeE4m3 = offsetof(fa3jit_forward_params, out_dtype);
constexpr size_t kForwardParamsSizeBeforeServing = offsetof(fa3jit_forward_params, cu_seqlens_q);
constexpr size_t kForwardParamsSizeBeforeVariant = offsetof(fa3jit_forward_params, window_left);
constexpr size_t kForwardParamsSizeBeforeVLayout = offsetof(fa3jit_forward_params, v_layout);
constexpr std::array<OlderSize, 4> kOlderForwardParams{{
    {kForwardParamsSizeBeforeE4m3, "the struct before its e4m3 fields"},
    {kForwardParamsSizeBeforeServing, "the struct before its serving fields"},
    {kForwardParamsSizeBeforeVariant, "the struct before its attention-variant fields"},
    {kForwardParamsSizeBeforeVLayout, "the struct before its v_layout field"},
}};

// field: "dtype" or "out_dtype" (which also takes FA3JIT_DTYPE_DEFAULT, handled by the caller).
fa3jit::DType to_dtype(int32_t value, const char* field, bool default_allowed = false) {
  switch (value) {
    case FA3JIT_DTYPE_FP16: return fa3jit::DType::kFp16;
    case FA3JIT_DTYPE_BF16: return fa3jit::DType::kBf16;
    case FA3JIT_DTYPE_E4M3: return fa3jit::DType::kE4m3;
  }
  invalid(fmt::format("params.{} is {}; expected FA3JIT_DTYPE_FP16 (0), FA3JIT_DTYPE_BF16 (1) or "
                      "FA3JIT_DTYPE_E4M3 (2){}",
                      field, value, default_allowed ? ", or FA3JIT_DTYPE_DEFAULT (-1)" : ""));
}

fa3jit::attention_fwd::Quant to_quant(int32_t value) {
  switch (value) {
    case FA3JIT_QUANT_NONE: return fa3jit::attention_fwd::Quant::kNone;
    case FA3JIT_QUANT_PER_HEAD: return fa3jit::attention_fwd::Quant::kPerHead;
    case FA3JIT_QUANT_PER_BLOCK: return fa3jit::attention_fwd::Quant::kPerBlock;
  }
  invalid(fmt::format("params.quant is {}; expected FA3JIT_QUANT_NONE (0), FA3JIT_QUANT_PER_HEAD (1) or "
                      "FA3JIT_QUANT_PER_BLOCK (2)",
                      value));
}

// The reserved field of either params struct: 0, or a field of a newer header that this library does not know.
void check_reserved(int32_t value, const char* name) {
  if (value != 0)
    invalid(fmt::format("{}.reserved is {}; expected 0 (fa3jit {} does not know a field there: a newer header's?)",
                        name, value, FA3JIT_PROJECT_VERSION));
}

// params.v_layout of either struct (an fa3jit_v_layout).
fa3jit::attention_fwd::VLayout to_v_layout(int32_t value) {
  switch (value) {
    case FA3JIT_V_LAYOUT_SEQ_MAJOR: return fa3jit::attention_fwd::VLayout::kSeqMajor;
    case FA3JIT_V_LAYOUT_D_MAJOR: return fa3jit::attention_fwd::VLayout::kDMajor;
  }
  invalid(fmt::format("params.v_layout is {}; expected FA3JIT_V_LAYOUT_SEQ_MAJOR (0) or FA3JIT_V_LAYOUT_D_MAJOR (1)",
                      value));
}

fa3jit::attention_fwd::ScaleView to_scale(const fa3jit_scale& s) {
  return fa3jit::attention_fwd::ScaleView{s.data, s.stride_batch, s.stride_head};
}

// Tensors are required (a device pointer) for a launch; fa3jit_attention_plan reads only the shapes and may take NULL.
enum class Tensors { kRequired, kOptional };

fa3jit::TensorView to_view(const fa3jit_tensor& t, const char* name, Tensors tensors = Tensors::kRequired) {
  if (t.data == nullptr && tensors == Tensors::kRequired)
    invalid(fmt::format("params.{}.data is NULL; expected a device pointer", name));
  return fa3jit::TensorView{t.data, t.stride_batch, t.stride_seq, t.stride_head};
}

template <size_t N>
void copy_string(char (&destination)[N], const std::string& source, const char* name) {
  if (source.size() >= N) {
    throw Error(ErrorCode::kInternal,
                fmt::format("{} '{}' is {} characters; fa3jit_kernel_info holds {}", name, source, source.size(), N - 1));
  }
  std::memcpy(destination, source.c_str(), source.size() + 1);
}

// The caller's struct as this header's: an older caller's bytes (one of the sizes in `older`) over the defaults (`init`) of
// the fields it does not know. Reads no byte past the caller's struct_size.
template <class T, size_t N>
T current_struct(const T& caller, const char* name, const std::array<OlderSize, N>& older, void (*init)(T*)) {
  check_struct_size(&caller, name, true, older);
  if (caller.struct_size >= sizeof(T)) return caller;
  T current;
  init(&current);
  std::memcpy(&current, &caller, caller.struct_size);  // one of `older`'s sizes
  current.struct_size = sizeof(current);
  return current;
}

fa3jit_forward_params current_params(const fa3jit_forward_params& caller) {
  return current_struct(caller, "fa3jit_forward_params", kOlderForwardParams, &fa3jit_forward_params_init);
}

// The two enum-like serving fields, range-checked as C integers (the launch path takes them as they are).
void check_serving_options(const fa3jit_forward_params& params) {
  if (params.num_splits < 0 || params.num_splits > fa3jit::attention_fwd::kMaxSplits)
    invalid(fmt::format("params.num_splits is {}; expected 0 (the heuristic), 1 (no split) or a count up to {}",
                        params.num_splits, fa3jit::attention_fwd::kMaxSplits));
  if (params.pack_gqa < -1 || params.pack_gqa > 1)
    invalid(fmt::format("params.pack_gqa is {}; expected -1 (the heuristic), 0 (off) or 1 (on)", params.pack_gqa));
}

fa3jit::attention_fwd::ForwardArgs to_args(const fa3jit_forward_params& caller, Tensors tensors = Tensors::kRequired) {
  const fa3jit_forward_params params = current_params(caller);
  check_reserved(params.reserved, "fa3jit_forward_params");
  if (params.causal != 0 && params.causal != 1) invalid(fmt::format("params.causal is {}; expected 0 or 1", params.causal));
  if (!std::isfinite(params.softmax_scale))
    invalid(fmt::format("params.softmax_scale is {}; expected a finite value (0 = 1/sqrt(head_dim))",
                        params.softmax_scale));
  fa3jit::attention_fwd::ForwardArgs args;
  args.dtype = to_dtype(enum_value(params.dtype), "dtype");
  const int32_t out_dtype = enum_value(params.out_dtype);
  if (out_dtype != FA3JIT_DTYPE_DEFAULT) args.out_dtype = to_dtype(out_dtype, "out_dtype", true);
  args.quant = to_quant(params.quant);
  args.q_descale = to_scale(params.q_descale);
  args.k_descale = to_scale(params.k_descale);
  args.v_descale = to_scale(params.v_descale);
  args.batch = params.batch;
  args.seqlen_q = params.seqlen_q;
  args.seqlen_k = params.seqlen_k;
  args.num_heads = params.num_heads;
  args.num_heads_kv = params.num_heads_kv;
  args.head_dim = params.head_dim;
  args.head_dim_v = params.head_dim_v;
  args.q = to_view(params.q, "q", tensors);
  args.k = to_view(params.k, "k", tensors);
  args.v = to_view(params.v, "v", tensors);
  args.out = to_view(params.out, "out", tensors);
  args.lse = params.lse;
  args.softmax_scale = params.softmax_scale;
  args.causal = params.causal != 0;
  args.workspace = params.workspace;
  args.workspace_bytes = params.workspace_bytes;
  // Serving layouts: passed through; their shapes and combinations are checked by the launch path.
  check_serving_options(params);
  args.cu_seqlens_q = params.cu_seqlens_q;
  args.max_seqlen_q = params.max_seqlen_q;
  args.cu_seqlens_k = params.cu_seqlens_k;
  args.max_seqlen_k = params.max_seqlen_k;
  args.seqused_k = params.seqused_k;
  args.page_table = params.page_table;
  args.page_table_stride = params.page_table_stride;
  args.max_pages = params.max_pages;
  args.num_pages = params.num_pages;
  args.page_size = params.page_size;
  args.num_splits = params.num_splits;
  args.pack_gqa = params.pack_gqa;
  // Attention variant: ranges are checked by the launch path (resolve_mask), which names the fields.
  if (!std::isfinite(params.softcap))
    invalid(fmt::format("params.softcap is {}; expected 0 (off) or a positive finite value", params.softcap));
  args.window_left = params.window_left;
  args.window_right = params.window_right;
  args.softcap = params.softcap;
  args.sinks = params.sinks;
  args.v_layout = to_v_layout(params.v_layout);
  return args;
}

fa3jit::quantize_fp8::Rope to_rope(int32_t value) {
  switch (value) {
    case FA3JIT_ROPE_NONE: return fa3jit::quantize_fp8::Rope::kNone;
    case FA3JIT_ROPE_NEOX: return fa3jit::quantize_fp8::Rope::kNeox;
    case FA3JIT_ROPE_INTERLEAVED: return fa3jit::quantize_fp8::Rope::kInterleaved;
  }
  invalid(fmt::format("params.rope is {}; expected FA3JIT_ROPE_NONE (0), FA3JIT_ROPE_NEOX (1) or "
                      "FA3JIT_ROPE_INTERLEAVED (2)",
                      value));
}

// fa3jit_quantize_params -> the pre-pass's options and arguments. Only the C-specific checks (enums as integers,
// flags, the block rows a C caller must set); the launch path checks the rest and names the argument.
struct QuantizeCall {
  fa3jit::quantize_fp8::QuantizeOptions options;
  fa3jit::quantize_fp8::QuantizeArgs args;
};

constexpr std::array<OlderSize, 1> kOlderQuantizeParams{{
    {offsetof(fa3jit_quantize_params, v_layout), "the struct before its v_layout field"},
}};

QuantizeCall to_quantize_call(const fa3jit_quantize_params& caller) {
  const fa3jit_quantize_params params =
      current_struct(caller, "fa3jit_quantize_params", kOlderQuantizeParams, &fa3jit_quantize_params_init);
  check_reserved(params.reserved, "fa3jit_quantize_params");
  QuantizeCall call;
  call.options.v_d_major = to_v_layout(params.v_layout) == fa3jit::attention_fwd::VLayout::kDMajor;
  call.args.dtype = to_dtype(enum_value(params.dtype), "dtype");
  if (params.hadamard != 0 && params.hadamard != 1)
    invalid(fmt::format("params.hadamard is {}; expected 0 or 1", params.hadamard));
  call.options.hadamard = params.hadamard != 0;
  call.options.rope = to_rope(params.rope);
  if (params.rotary_dim < 0)
    invalid(fmt::format("params.rotary_dim is {}; expected 0 (head_dim) or more", params.rotary_dim));
  call.options.rotary_dim = params.rotary_dim;
  // No default: the rows must be the block_m / block_n of the attention kernel that reads the descales, and a
  // wrong value would pass every extent check of the attention call.
  if (params.q_block_rows == 0 || params.k_block_rows == 0)
    invalid(fmt::format("params.q_block_rows is {} and params.k_block_rows is {}; set both (non-zero) to the block_m "
                        "and block_n of the attention kernel that reads the descales (fa3jit_attention_quant_blocks)",
                        params.q_block_rows, params.k_block_rows));
  call.options.q_block_rows = params.q_block_rows;
  call.options.k_block_rows = params.k_block_rows;
  fa3jit::quantize_fp8::QuantizeArgs& a = call.args;
  a.batch = params.batch;
  a.seqlen_q = params.seqlen_q;
  a.seqlen_k = params.seqlen_k;
  a.num_heads = params.num_heads;
  a.num_heads_kv = params.num_heads_kv;
  a.head_dim = params.head_dim;
  a.head_dim_v = params.head_dim_v == 0 ? params.head_dim : params.head_dim_v;
  a.q = to_view(params.q, "q");
  a.k = to_view(params.k, "k");
  a.v = to_view(params.v, "v");
  a.q8 = to_view(params.q8, "q8");
  a.k8 = to_view(params.k8, "k8");
  a.v8 = to_view(params.v8, "v8");
  a.q_descale = params.q_descale;
  a.k_descale = params.k_descale;
  a.v_descale = params.v_descale;
  a.rope_cos = params.rope_cos;
  a.rope_sin = params.rope_sin;
  a.rope_max_seqlen = params.rope_max_seqlen;
  a.seed = params.seed;
  return call;
}

void fill_info(const fa3jit::PreparedKernel& prepared, fa3jit_kernel_info* out) {
  fa3jit_kernel_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  copy_string(info.key, prepared.key, "cache key");
  copy_string(info.kernel_name, prepared.compiled ? prepared.compiled->kernel_name : std::string(), "kernel name");
  copy_string(info.kind, prepared.request.kind, "kind");
  std::string summary = prepared.request.summary.substr(0, sizeof(info.summary) - 1);
  copy_string(info.summary, summary, "summary");
  info.cache_hit = prepared.cache_hit ? 1 : 0;
  info.ms = prepared.ms;
  const fa3jit::ResourceReport report = prepared.compiled ? prepared.compiled->report : fa3jit::ResourceReport{};
  info.registers = report.registers;
  info.spill_store_bytes = report.spill_store_bytes;
  info.spill_load_bytes = report.spill_load_bytes;
  info.smem_bytes = prepared.request.launch.smem_bytes;
  info.num_threads = prepared.request.launch.num_threads;
  // Keep the caller's struct_size: a caller with a newer, larger struct keeps its trailing fields as they were.
  const size_t caller_size = out->struct_size;
  std::memcpy(out, &info, sizeof(info));
  out->struct_size = caller_size;
}

}  // namespace

extern "C" {

const char* fa3jit_status_name(fa3jit_status status) {
  return fa3jit::error_code_name(static_cast<ErrorCode>(enum_value(status)));  // ErrorCode holds any int
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

void fa3jit_runtime_destroy(fa3jit_runtime* runtime) {
  if (runtime == nullptr || runtime->magic != kRuntimeMagic) return;
  runtime->magic = kDeadMagic;
  delete runtime;
}

fa3jit_status fa3jit_attention_forward(fa3jit_runtime* runtime, const fa3jit_kernel* kernel,
                                       const fa3jit_forward_params* params, void* cuda_stream) {
  return guarded("fa3jit_attention_forward", [&] {
    // Handles first: a stale handle is the caller's bug to report, whatever the params hold.
    check_runtime(runtime, "fa3jit_attention_forward");
    if (kernel != nullptr) check_kernel(kernel, "fa3jit_attention_forward");
    if (params == nullptr) invalid("fa3jit_attention_forward: params is NULL");
    const fa3jit::attention_fwd::ForwardArgs args = to_args(*params);
    if (kernel == nullptr) return fa3jit::attention_fwd::forward(runtime->runtime, args, cuda_stream);
    if (!kernel->attention)
      invalid(fmt::format("fa3jit_attention_forward: kernel is of kind \"{}\", not \"attention_fwd\"",
                          kernel->prepared.request.kind));
    fa3jit::attention_fwd::forward(*kernel->attention, args, cuda_stream);
  });
}

fa3jit_status fa3jit_attention_workspace_size(fa3jit_runtime* runtime, const fa3jit_forward_params* params,
                                              size_t* bytes) {
  return guarded("fa3jit_attention_workspace_size", [&] {
    check_runtime(runtime, "fa3jit_attention_workspace_size");
    if (params == nullptr || bytes == nullptr) invalid("fa3jit_attention_workspace_size: params or bytes is NULL");
    const fa3jit_forward_params current = current_params(*params);
    check_reserved(current.reserved, "fa3jit_forward_params");
    check_serving_options(current);
    // Without a split the size depends on the shape class alone (a causal persistent grid's tile counter), so
    // sizing the workspace of such a call needs no tensors and no driver, as before the serving fields.
    // (to_args reads the caller's struct itself: a newer header's is larger than `current`.)
    *bytes = fa3jit::attention_fwd::workspace_size(
        to_args(*params, current.num_splits == 1 ? Tensors::kOptional : Tensors::kRequired));
  });
}

fa3jit_status fa3jit_attention_plan(fa3jit_runtime* runtime, const fa3jit_kernel* kernel,
                                    const fa3jit_forward_params* params, fa3jit_call_plan* plan) {
  return guarded("fa3jit_attention_plan", [&] {
    // The plan never depends on the runtime (tuned tiles are not part of it): NULL is allowed, a stale one is not.
    if (runtime != nullptr) check_runtime(runtime, "fa3jit_attention_plan");
    if (kernel != nullptr) check_kernel(kernel, "fa3jit_attention_plan");
    if (params == nullptr || plan == nullptr) invalid("fa3jit_attention_plan: params or plan is NULL");
    check_struct_size(plan, "fa3jit_call_plan", false);
    const fa3jit::attention_fwd::ForwardArgs args = to_args(*params, Tensors::kOptional);
    fa3jit::attention_fwd::CallPlanInfo info;
    if (kernel == nullptr) {
      info = fa3jit::attention_fwd::plan_info(args);
    } else {
      if (!kernel->attention)
        invalid(fmt::format("fa3jit_attention_plan: kernel is of kind \"{}\", not \"attention_fwd\"",
                            kernel->prepared.request.kind));
      info = fa3jit::attention_fwd::plan_info(*kernel->attention, args);
    }
    plan->num_splits = info.num_splits;
    plan->pack_gqa = info.pack_gqa ? 1 : 0;
    plan->block_m = info.spec.block_m;
    plan->block_n = info.spec.block_n;
    plan->workspace_bytes = info.workspace_bytes;
  });
}

fa3jit_status fa3jit_fp8_key_positions(int32_t positions[16]) {
  return guarded("fa3jit_fp8_key_positions", [&] {
    if (positions == nullptr) invalid("fa3jit_fp8_key_positions: positions is NULL; expected an array of 16 int32_t");
    for (int j = 0; j < 16; ++j) positions[j] = fa3jit::attention_fwd::fp8_key_position(j);
  });
}

fa3jit_status fa3jit_attention_quant_blocks(const fa3jit_kernel* kernel, int64_t head_dim, int32_t causal,
                                            int32_t* block_m, int32_t* block_n) {
  return guarded("fa3jit_attention_quant_blocks", [&] {
    if (block_m == nullptr || block_n == nullptr)
      invalid("fa3jit_attention_quant_blocks: block_m or block_n is NULL; expected the addresses of two int32_t");
    using fa3jit::DType;
    using namespace fa3jit::attention_fwd;
    if (kernel != nullptr) {
      check_kernel(kernel, "fa3jit_attention_quant_blocks");
      if (!kernel->attention)
        invalid(fmt::format("fa3jit_attention_quant_blocks: kernel is of kind \"{}\", not \"attention_fwd\"",
                            kernel->prepared.request.kind));
      *block_m = kernel->attention->spec().block_m;
      *block_n = kernel->attention->spec().block_n;
      return;
    }
    if (causal != 0 && causal != 1) invalid(fmt::format("causal is {}; expected 0 or 1", causal));
    if (head_dim < 1 || head_dim > 0x7fffffff ||
        !supports_head_dims(DType::kE4m3, static_cast<int>(head_dim), static_cast<int>(head_dim)))
      invalid(fmt::format("head_dim = {} is not supported for dtype e4m3; expected {}", head_dim,
                          allowed_head_dims(DType::kE4m3)));
    // The tile table's kernel, as a call with no explicit kernel gets it (launch.cpp: plan_for); the tile does
    // not depend on out_dtype or quant.
    const Spec spec = default_spec(DType::kE4m3, DType::kBf16, Quant::kPerBlock, static_cast<int>(head_dim),
                                   static_cast<int>(head_dim), causal != 0);
    *block_m = spec.block_m;
    *block_n = spec.block_n;
  });
}

fa3jit_status fa3jit_quantize_fp8(fa3jit_runtime* runtime, const fa3jit_quantize_params* params, void* cuda_stream) {
  return guarded("fa3jit_quantize_fp8", [&] {
    check_runtime(runtime, "fa3jit_quantize_fp8");
    if (params == nullptr) invalid("fa3jit_quantize_fp8: params is NULL");
    const QuantizeCall call = to_quantize_call(*params);
    fa3jit::quantize_fp8::quantize_fp8(runtime->runtime, call.options, call.args, cuda_stream);
  });
}

fa3jit_status fa3jit_kernel_create(fa3jit_runtime* runtime, const char* spec_json, fa3jit_kernel** out) {
  return guarded("fa3jit_kernel_create", [&] {
    if (out == nullptr) invalid("fa3jit_kernel_create: out is NULL; expected the address of a fa3jit_kernel*");
    *out = nullptr;
    check_runtime(runtime, "fa3jit_kernel_create");
    if (spec_json == nullptr) invalid("fa3jit_kernel_create: spec_json is NULL; expected a JSON spec");
    const fa3jit::SpecDocument doc = fa3jit::parse_spec_document(std::string(spec_json));
    auto kernel = std::make_unique<fa3jit_kernel>();
    if (doc.kind == fa3jit::attention_fwd::kKind) {
      const fa3jit::attention_fwd::Spec spec = fa3jit::attention_fwd::parse_spec(doc.spec);
      kernel->prepared = runtime->runtime.prepare(
          fa3jit::attention_fwd::make_request(fa3jit::attention_fwd::make_kernel_config(spec)));
      kernel->attention = fa3jit::attention_fwd::load_kernel(runtime->runtime, spec);
    } else {
      const fa3jit::KernelRequest request = fa3jit::request_for(doc);
      kernel->prepared = runtime->runtime.prepare(request);
      runtime->runtime.load(request);
    }
    *out = kernel.release();
  });
}

void fa3jit_kernel_destroy(fa3jit_kernel* kernel) {
  if (kernel == nullptr || kernel->magic != kKernelMagic) return;
  kernel->magic = kDeadMagic;
  delete kernel;
}

fa3jit_status fa3jit_compile_spec(fa3jit_runtime* runtime, const char* spec_json, fa3jit_kernel_info* out) {
  return guarded("fa3jit_compile_spec", [&] {
    check_runtime(runtime, "fa3jit_compile_spec");
    if (spec_json == nullptr) invalid("fa3jit_compile_spec: spec_json is NULL; expected a JSON spec");
    if (out != nullptr) check_struct_size(out, "fa3jit_kernel_info", false);
    const fa3jit::PreparedKernel prepared = runtime->runtime.prepare(std::string(spec_json));
    if (out != nullptr) fill_info(prepared, out);
  });
}

fa3jit_status fa3jit_warm_manifest(fa3jit_runtime* runtime, const char* manifest_json, size_t* compiled) {
  return guarded("fa3jit_warm_manifest", [&] {
    check_runtime(runtime, "fa3jit_warm_manifest");
    if (manifest_json == nullptr) invalid("fa3jit_warm_manifest: manifest_json is NULL; expected a serving manifest");
    const size_t n = fa3jit::attention_fwd::warm_manifest(runtime->runtime,
                                                          fa3jit::json_fields::parse_text(std::string(manifest_json)));
    if (compiled != nullptr) *compiled = n;
  });
}

fa3jit_status fa3jit_kernel_get_info(const fa3jit_kernel* kernel, fa3jit_kernel_info* out) {
  return guarded("fa3jit_kernel_get_info", [&] {
    if (kernel == nullptr || out == nullptr) invalid("fa3jit_kernel_get_info: kernel or out is NULL");
    check_kernel(kernel, "fa3jit_kernel_get_info");
    check_struct_size(out, "fa3jit_kernel_info", false);
    fill_info(kernel->prepared, out);
  });
}

const char* fa3jit_capabilities_json(void) {
  static const std::string kJson = [] {
    try {
      nlohmann::json doc{{"abi_version", FA3JIT_ABI_VERSION}, {"version", FA3JIT_PROJECT_VERSION}};
      nlohmann::json families = nlohmann::json::object();
      for (const fa3jit::KernelFamily& f : fa3jit::families()) {
        nlohmann::json c = f.capabilities();
        c["description"] = std::string(f.description);
        families[std::string(f.kind)] = std::move(c);
      }
      doc["families"] = std::move(families);
      return doc.dump();
    } catch (...) {
      return std::string("{}");
    }
  }();
  return kJson.c_str();
}

}  // extern "C"

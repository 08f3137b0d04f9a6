// The C ABI (runtime/c_api.cpp) under hostile or careless callers: deeply nested and overflowing specs, handles
// that are not live, out-of-range enum values and struct sizes (older headers' among them). Every case is a
// status and a message, never a crash. No GPU: every call here fails before the driver is opened, or needs none.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "../jit/temp_dir.h"
#include "../small_stack.h"
#include "fa3jit/fa3jit.h"

using Catch::Matchers::Contains;

namespace {

struct RuntimeHandle {
  fa3jit_runtime* rt = nullptr;
  explicit RuntimeHandle(const std::string& cache_dir) {
    fa3jit_runtime_options options{sizeof(options), cache_dir.c_str()};
    REQUIRE(fa3jit_runtime_create(&options, &rt) == FA3JIT_OK);
  }
  ~RuntimeHandle() { fa3jit_runtime_destroy(rt); }
};

std::string nested_spec(size_t depth) {
  return "{\"dtype\": " + std::string(depth, '[') + std::string(depth, ']') + ", \"head_dim\": 128}";
}

fa3jit_forward_params shape_params() {
  fa3jit_forward_params p;
  fa3jit_forward_params_init(&p);
  p.dtype = FA3JIT_DTYPE_BF16;
  p.batch = p.seqlen_q = p.seqlen_k = p.num_heads = p.num_heads_kv = 1;
  p.head_dim = 128;
  return p;
}

}  // namespace

TEST_CASE("C ABI: a deeply nested spec is INVALID_SPEC on a 256 KiB stack", "[capi][hostile]") {
  fa3jit::test::TempDir cache;
  RuntimeHandle h(cache.path);
  for (const size_t bytes : {size_t{4} << 10, size_t{10} << 20}) {
    const std::string spec = nested_spec(bytes / 2);
    INFO("spec of " << spec.size() << " bytes");
    fa3jit_status compile = FA3JIT_OK, create = FA3JIT_OK;
    std::string compile_message, create_message;
    fa3jit_kernel* kernel = reinterpret_cast<fa3jit_kernel*>(&h);  // must come back NULL
    fa3jit::test::run_on_small_stack([&] {
      fa3jit_kernel_info info;
      std::memset(&info, 0, sizeof(info));
      info.struct_size = sizeof(info);
      compile = fa3jit_compile_spec(h.rt, spec.c_str(), &info);
      compile_message = fa3jit_last_error();
      create = fa3jit_kernel_create(h.rt, spec.c_str(), &kernel);
      create_message = fa3jit_last_error();
    });
    CHECK(compile == FA3JIT_ERROR_INVALID_SPEC);
    CHECK_THAT(compile_message, Contains("more than 64 levels deep"));
    CHECK(create == FA3JIT_ERROR_INVALID_SPEC);
    CHECK_THAT(create_message, Contains("more than 64 levels deep"));
    CHECK(kernel == nullptr);
  }
}

TEST_CASE("C ABI: a number beyond a double is INVALID_SPEC naming the field", "[capi][hostile]") {
  fa3jit::test::TempDir cache;
  RuntimeHandle h(cache.path);
  CHECK(fa3jit_compile_spec(h.rt, R"({"dtype": "bf16", "head_dim": 1e309})", nullptr) == FA3JIT_ERROR_INVALID_SPEC);
  CHECK_THAT(fa3jit_last_error(), Contains("\"head_dim\"") && Contains("1e309") && Contains("column"));
}

TEST_CASE("C ABI: a value echoed in the last error is escaped and cut at a character boundary", "[capi][hostile]") {
  fa3jit::test::TempDir cache;
  RuntimeHandle h(cache.path);
  CHECK(fa3jit_compile_spec(h.rt, R"({"kind": "attention_fwd\u0000x"})", nullptr) == FA3JIT_ERROR_INVALID_SPEC);
  CHECK_THAT(fa3jit_last_error(), Contains(R"("kind": "attention_fwd\u0000x" is not a kernel family)"));
  // "a" then 100 x U+00E9: cut before the 28th, whose two bytes the 60-character limit would split.
  std::string accented = "a", shown = "\"a";
  for (int i = 0; i < 100; ++i) accented += "\xc3\xa9";
  for (int i = 0; i < 27; ++i) shown += "\xc3\xa9";
  const std::string spec = R"({"head_dim": 64, "dtype": ")" + accented + "\"}";
  CHECK(fa3jit_compile_spec(h.rt, spec.c_str(), nullptr) == FA3JIT_ERROR_INVALID_SPEC);
  CHECK_THAT(fa3jit_last_error(), Contains("\"dtype\": " + shown + "... is not allowed"));
}

TEST_CASE("C ABI: every entry point refuses a handle that is not a live one", "[capi][hostile]") {
  // Zeroed memory stands for a destroyed handle (destroy overwrites the magic) or a wild pointer; reading a
  // really freed handle would be undefined behaviour in the test itself.
  alignas(64) static unsigned char not_a_handle[512] = {};
  auto* rt = reinterpret_cast<fa3jit_runtime*>(not_a_handle);
  auto* kernel = reinterpret_cast<fa3jit_kernel*>(not_a_handle);
  const fa3jit_forward_params p = shape_params();
  size_t bytes = 0;
  fa3jit_kernel* out = nullptr;
  fa3jit_kernel_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);

  CHECK(fa3jit_attention_forward(rt, nullptr, &p, nullptr) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("not a live fa3jit_runtime"));
  CHECK(fa3jit_attention_workspace_size(rt, &p, &bytes) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("not a live fa3jit_runtime"));
  fa3jit_call_plan plan;
  plan.struct_size = sizeof(plan);
  CHECK(fa3jit_attention_plan(rt, nullptr, &p, &plan) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("not a live fa3jit_runtime"));
  CHECK(fa3jit_kernel_create(rt, R"({"dtype": "bf16", "head_dim": 128})", &out) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("not a live fa3jit_runtime"));
  CHECK(out == nullptr);
  CHECK(fa3jit_compile_spec(rt, R"({"dtype": "bf16", "head_dim": 128})", &info) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("not a live fa3jit_runtime"));
  CHECK(fa3jit_kernel_get_info(kernel, &info) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("not a live fa3jit_kernel"));

  // A live runtime with a kernel handle that is not live.
  fa3jit::test::TempDir cache;
  RuntimeHandle h(cache.path);
  CHECK(fa3jit_attention_forward(h.rt, kernel, &p, nullptr) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("not a live fa3jit_kernel"));

  // Destroying what is not a live handle does nothing (and does not free it).
  fa3jit_runtime_destroy(rt);
  fa3jit_kernel_destroy(kernel);
  CHECK(not_a_handle[0] == 0);
}

TEST_CASE("C ABI: an out-of-range dtype is read as an integer and refused", "[capi][hostile]") {
  fa3jit::test::TempDir cache;
  RuntimeHandle h(cache.path);
  fa3jit_forward_params p = shape_params();
  // Stored as the caller's C code would; assigning 7 to the enum in C++ would itself be undefined.
  for (const int32_t value : {7, -1, INT32_MAX}) {
    std::memcpy(&p.dtype, &value, sizeof(value));
    CHECK(fa3jit_attention_forward(h.rt, nullptr, &p, nullptr) == FA3JIT_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(fa3jit_last_error(), Contains("params.dtype is " + std::to_string(value)));
  }
  // 15 is no status but lies inside the enum's value range (0..15 for enumerators 0..9), so C++ may hold it;
  // a value beyond that range exists only in C: loading it here would be undefined (UBSan stops the test).
  const auto bogus = static_cast<fa3jit_status>(15);
  CHECK(std::string(fa3jit_status_name(bogus)) == "unknown");
}

TEST_CASE("C ABI: struct_size is capped and extra bytes must be zero", "[capi][hostile]") {
  fa3jit::test::TempDir cache;
  RuntimeHandle h(cache.path);
  size_t bytes = 0;
  // A garbage size far above any header: refused without reading the caller's memory up to it.
  fa3jit_forward_params p = shape_params();
  p.struct_size = size_t{1} << 40;
  CHECK(fa3jit_attention_workspace_size(h.rt, &p, &bytes) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("struct_size is 1099511627776"));
  p.struct_size = 4097;
  CHECK(fa3jit_attention_workspace_size(h.rt, &p, &bytes) == FA3JIT_ERROR_INVALID_ARGUMENT);

  // A newer header's larger struct (here: 64 more bytes the caller really owns) with zero extra bytes is
  // accepted; a non-zero extra byte names its offset.
  struct Newer {
    fa3jit_forward_params params;
    unsigned char extra[64];
  } newer{};
  newer.params = shape_params();
  newer.params.struct_size = sizeof(newer);
  CHECK(fa3jit_attention_workspace_size(h.rt, &newer.params, &bytes) == FA3JIT_OK);
  newer.extra[10] = 1;
  CHECK(fa3jit_attention_workspace_size(h.rt, &newer.params, &bytes) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("non-zero fields at byte " + std::to_string(sizeof(fa3jit_forward_params) + 10)));

  // The tail padding is an explicit field: a newer header's int32 there is seen and refused, not ignored.
  p = shape_params();
  p.reserved = 7;
  CHECK(fa3jit_attention_forward(h.rt, nullptr, &p, nullptr) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("fa3jit_forward_params.reserved is 7"));
  fa3jit_quantize_params qp;
  fa3jit_quantize_params_init(&qp);
  CHECK(qp.reserved == 0);
  qp.reserved = -1;
  CHECK(fa3jit_quantize_fp8(h.rt, &qp, nullptr) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("fa3jit_quantize_params.reserved is -1"));
}

TEST_CASE("C ABI: the struct sizes of older headers are read with the later fields off", "[capi][hostile]") {
  fa3jit::test::TempDir cache;
  RuntimeHandle h(cache.path);
  size_t bytes = 1;
  const fa3jit_forward_params shape = shape_params();
  for (const size_t old_size :
       {offsetof(fa3jit_forward_params, out_dtype), offsetof(fa3jit_forward_params, cu_seqlens_q)}) {
    INFO("struct_size " << old_size);
    // The bytes past an older caller's struct are not its own: garbage here, never read.
    fa3jit_forward_params p;
    std::memset(&p, 0xab, sizeof(p));
    std::memcpy(&p, &shape, old_size);
    p.struct_size = old_size;
    bytes = 1;
    CHECK(fa3jit_attention_workspace_size(h.rt, &p, &bytes) == FA3JIT_OK);
    CHECK(bytes == 0);
    // A size between two headers is no header's.
    p.struct_size = old_size + 8;
    CHECK(fa3jit_attention_workspace_size(h.rt, &p, &bytes) == FA3JIT_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(fa3jit_last_error(), Contains("struct_size is " + std::to_string(old_size + 8)));
  }

  // This header's serving enums are range-checked as integers, with or without a split.
  fa3jit_forward_params p = shape_params();
  CHECK(p.num_splits == 1);
  CHECK(p.pack_gqa == 0);
  for (const int32_t value : {-1, 257, INT32_MIN}) {
    p.num_splits = value;
    CHECK(fa3jit_attention_workspace_size(h.rt, &p, &bytes) == FA3JIT_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(fa3jit_last_error(), Contains("params.num_splits is " + std::to_string(value)));
  }
  p.num_splits = 1;
  p.pack_gqa = 2;
  CHECK(fa3jit_attention_workspace_size(h.rt, &p, &bytes) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("params.pack_gqa is 2"));
  // With a possible split the size depends on the call, which is checked as fa3jit_attention_forward checks it
  // (shape_params' tensors are NULL); without one nothing else is read.
  p.pack_gqa = -1;
  p.num_splits = 0;
  CHECK(fa3jit_attention_workspace_size(h.rt, &p, &bytes) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("params.q.data is NULL"));
  p.num_splits = 1;
  bytes = 1;
  CHECK(fa3jit_attention_workspace_size(h.rt, &p, &bytes) == FA3JIT_OK);
  CHECK(bytes == 0);
}

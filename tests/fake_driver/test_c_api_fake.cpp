// The C ABI's e4m3 fields (fa3jit.h: out_dtype, quant, q/k/v_descale) against the fake CUDA driver: an e4m3
// call through fa3jit_attention_forward reaches the kernel's Params with the caller's descale pointers and
// strides and launches the e4m3 kernel of its quant; out-of-range enums are INVALID_ARGUMENT read as integers
// (never loaded as the C enum); a caller of the header before these fields (the old struct_size) still makes
// 16-bit calls. Callers of the headers before the serving fields launch bit for bit as before, and the serving
// enums (num_splits, pack_gqa) are range-checked as integers. Kernels compile for real with NVRTC into a
// temporary cache; only the driver is fake.
#include <catch2/catch.hpp>
#include <dlfcn.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <string>

#include "fa3jit/fa3jit.h"
#include "fake_cuda.h"
#include "fake_support.h"
#include "kernels/attention_combine/params.h"
#include "kernels/attention_fwd/emit.h"
#include "kernels/attention_fwd/launch.h"
#include "kernels/quantize_fp8/emit.h"
#include "kernels/quantize_fp8/launch.h"
#include "kernels/quantize_fp8/params.h"

using namespace fa3jit::attention_fwd;
using Catch::Matchers::Contains;

namespace {

using fake_support::last_launch;
using fake_support::launch_count;
using fake_support::launch_number;
using fake_support::params_of;

void* device_alloc(uint64_t bytes) {
  const uint64_t p = fake_support::fake_driver().alloc(bytes);
  REQUIRE(p != 0);
  return reinterpret_cast<void*>(p);
}

// One runtime on a temporary cache directory for the file (kernels compile once), removed at exit.
struct CapiRuntime {
  fake_support::TempDir dir{"fa3jit-fake-capi-test"};
  fa3jit_runtime* rt = nullptr;
  CapiRuntime() {
    fa3jit_runtime_options options = {sizeof(options), dir.path.c_str()};
    if (dir.path.empty() || fa3jit_runtime_create(&options, &rt) != FA3JIT_OK) rt = nullptr;
  }
  ~CapiRuntime() { fa3jit_runtime_destroy(rt); }  // before dir's destructor removes the directory
};

fa3jit_runtime* runtime() {
  static CapiRuntime r;
  REQUIRE(r.rt != nullptr);
  (void)fake_support::fake_driver();
  return r.rt;
}

// A contiguous (batch, seqlen, heads, dim) tensor of `elem_bytes` elements in its own fake allocation.
fa3jit_tensor tensor(int64_t batch, int64_t seqlen, int64_t heads, int64_t dim, int64_t elem_bytes) {
  return {device_alloc(static_cast<uint64_t>(batch * seqlen * heads * dim * elem_bytes)), seqlen * heads * dim,
          heads * dim, dim};
}

// e4m3 q/k/v, bf16 out: batch 2, seqlen_q 300, seqlen_k 257, GQA 8:2, head_dim 128; descales not set.
fa3jit_forward_params e4m3_params(int32_t quant) {
  fa3jit_forward_params p;
  fa3jit_forward_params_init(&p);
  p.dtype = FA3JIT_DTYPE_E4M3;
  p.quant = quant;
  p.batch = 2, p.seqlen_q = 300, p.seqlen_k = 257, p.num_heads = 8, p.num_heads_kv = 2, p.head_dim = 128;
  p.q = tensor(2, 300, 8, 128, 1);
  p.k = tensor(2, 257, 2, 128, 1);
  p.v = tensor(2, 257, 2, 128, 1);
  p.out = tensor(2, 300, 8, 128, 2);
  return p;
}

// A dense bf16 call (head_dim 128, contiguous tensors), made with this header's defaults.
fa3jit_forward_params bf16_params(int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int64_t heads, int64_t heads_kv,
                                  bool causal) {
  fa3jit_forward_params p;
  fa3jit_forward_params_init(&p);
  p.dtype = FA3JIT_DTYPE_BF16;
  p.causal = causal ? 1 : 0;
  p.batch = batch, p.seqlen_q = seqlen_q, p.seqlen_k = seqlen_k, p.num_heads = heads, p.num_heads_kv = heads_kv;
  p.head_dim = 128;
  p.q = tensor(batch, seqlen_q, heads, 128, 2);
  p.k = tensor(batch, seqlen_k, heads_kv, 128, 2);
  p.v = tensor(batch, seqlen_k, heads_kv, 128, 2);
  p.out = tensor(batch, seqlen_q, heads, 128, 2);
  return p;
}

fa3jit_scale scale(int64_t floats, int64_t stride_batch, int64_t stride_head) {
  return {static_cast<const float*>(device_alloc(static_cast<uint64_t>(floats * 4))), stride_batch, stride_head};
}

void expect_invalid(const fa3jit_forward_params& p, const std::string& fragment) {
  const int before = launch_count();
  CHECK(fa3jit_attention_forward(runtime(), nullptr, &p, nullptr) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains(fragment));
  CHECK(launch_count() == before);
}

}  // namespace

TEST_CASE("C ABI: an e4m3 per_head call reaches Params with the descale pointers and strides",
          "[fake_driver][capi][fp8]") {
  fa3jit_forward_params p = e4m3_params(FA3JIT_QUANT_PER_HEAD);
  // (batch 2, num_heads_kv 2): q's a transposed view (strides 1, 2), k's contiguous, v's one broadcast scalar.
  p.q_descale = scale(4, 1, 2);
  p.k_descale = scale(4, 2, 1);
  p.v_descale = scale(1, 0, 0);
  const int before = launch_count();
  INFO(fa3jit_last_error());
  REQUIRE(fa3jit_attention_forward(runtime(), nullptr, &p, nullptr) == FA3JIT_OK);
  REQUIRE(launch_count() == before + 1);
  const FakeCudaLaunch r = last_launch();
  const Spec spec = default_spec(fa3jit::DType::kE4m3, fa3jit::DType::kBf16, Quant::kPerHead, 128, 128, false);
  CHECK(std::string(r.kernel_name) == kernel_name(spec));
  const Params k = params_of(r);
  CHECK(k.q_descale == p.q_descale.data);
  CHECK(k.k_descale == p.k_descale.data);
  CHECK(k.v_descale == p.v_descale.data);
  CHECK(k.q_descale_stride_batch == 1);
  CHECK(k.q_descale_stride_head == 2);
  CHECK(k.k_descale_stride_batch == 2);
  CHECK(k.k_descale_stride_head == 1);
  CHECK(k.v_descale_stride_batch == 0);
  CHECK(k.v_descale_stride_head == 0);
  CHECK(k.seqlen_q == 300);
  CHECK(k.head_group == 4);
}

TEST_CASE("C ABI: a d_major v's channel rows must hold the padded keys", "[fake_driver][capi][fp8]") {
  // seqlen_k 257 pads to 272 keys per channel row: (batch 2, num_heads_kv 2, head_dim_v 128, 272) with the
  // channel stride in v.stride_seq.
  fa3jit_forward_params p = e4m3_params(FA3JIT_QUANT_PER_HEAD);
  p.q_descale = scale(4, 2, 1);
  p.k_descale = scale(4, 2, 1);
  p.v_descale = scale(4, 2, 1);
  p.v_layout = FA3JIT_V_LAYOUT_D_MAJOR;
  p.v = {device_alloc(2 * 2 * 128 * 272), 2 * 128 * 272, 272, 128 * 272};
  const int before = launch_count();
  INFO(fa3jit_last_error());
  REQUIRE(fa3jit_attention_forward(runtime(), nullptr, &p, nullptr) == FA3JIT_OK);
  REQUIRE(launch_count() == before + 1);
  // A wider channel stride is fine (rows padded further); a narrower one would read a channel's last keys from the
  // next channel, inside the allocation: refused, naming the field, its value and the least allowed.
  p.v = {device_alloc(2 * 2 * 128 * 288), 2 * 128 * 288, 288, 128 * 288};
  CHECK(fa3jit_attention_forward(runtime(), nullptr, &p, nullptr) == FA3JIT_OK);
  for (const int64_t stride : {256, 16, 0}) {
    INFO("stride_seq " << stride);
    p.v.stride_seq = stride;
    expect_invalid(p, "v.stride_seq = " + std::to_string(stride) + " is too small for v_layout d_major");
    CHECK_THAT(fa3jit_last_error(), Contains("272 for seqlen_k 257"));
  }
  // Too small an allocation: the message names the d_major extents.
  p.v = {device_alloc(2 * 2 * 128 * 200), 2 * 128 * 272, 272, 128 * 272};
  expect_invalid(p, "shape (batch 2, channel rows 128, heads 2, padded keys 272) (v_layout d_major)");
  // seqused_k: the kernel zeroes the V keys past a sequence's length for a seq-major V only (0 x NaN in P.V).
  p.v = {device_alloc(2 * 2 * 128 * 272), 2 * 128 * 272, 272, 128 * 272};
  p.seqused_k = static_cast<const int32_t*>(device_alloc(2 * 4));
  expect_invalid(p, "argument v_layout = d_major is not allowed with seqused_k");
}

TEST_CASE("C ABI: an e4m3 per_block call with fp16 out runs the per_block kernel its quant blocks describe",
          "[fake_driver][capi][fp8]") {
  int32_t block_m = 0, block_n = 0;
  REQUIRE(fa3jit_attention_quant_blocks(nullptr, 128, 0, &block_m, &block_n) == FA3JIT_OK);
  const Spec spec = default_spec(fa3jit::DType::kE4m3, fa3jit::DType::kFp16, Quant::kPerBlock, 128, 128, false);
  CHECK(block_m == spec.block_m);
  CHECK(block_n == spec.block_n);
  fa3jit_forward_params p = e4m3_params(FA3JIT_QUANT_PER_BLOCK);
  p.out_dtype = FA3JIT_DTYPE_FP16;
  const int64_t m_blocks = (300 + block_m - 1) / block_m, n_blocks = (257 + block_n - 1) / block_n;
  p.q_descale = scale(2 * 8 * m_blocks, 8 * m_blocks, m_blocks);
  p.k_descale = scale(2 * 2 * n_blocks, 2 * n_blocks, n_blocks);
  p.v_descale = scale(2 * 2 * 128, 2 * 128, 128);
  INFO(fa3jit_last_error());
  REQUIRE(fa3jit_attention_forward(runtime(), nullptr, &p, nullptr) == FA3JIT_OK);
  const FakeCudaLaunch r = last_launch();
  CHECK(std::string(r.kernel_name) == kernel_name(spec));
  const Params k = params_of(r);
  CHECK(k.q_descale == p.q_descale.data);
  CHECK(k.k_descale == p.k_descale.data);
  CHECK(k.v_descale == p.v_descale.data);
  CHECK(k.q_descale_stride_batch == 8 * m_blocks);
  CHECK(k.q_descale_stride_head == m_blocks);
  CHECK(k.k_descale_stride_head == n_blocks);
  CHECK(k.v_descale_stride_batch == 2 * 128);
  CHECK(k.v_descale_stride_head == 128);

  SECTION("a k_descale one block short of its allocation is refused by name") {
    p.k_descale = scale(2 * 2 * n_blocks - 1, 2 * n_blocks, n_blocks);
    expect_invalid(p, "k_descale");
  }
}

TEST_CASE("C ABI: out-of-range quant and out_dtype are read as integers and refused", "[fake_driver][capi][fp8]") {
  fa3jit_forward_params p = e4m3_params(FA3JIT_QUANT_PER_HEAD);
  p.q_descale = p.k_descale = p.v_descale = scale(1, 0, 0);
  // Stored as the caller's C code would; assigning them to the enums in C++ would itself be undefined.
  for (const int32_t value : {3, -1, 7, INT32_MAX, INT32_MIN}) {
    p.quant = value;
    expect_invalid(p, "params.quant is " + std::to_string(value));
  }
  p.quant = FA3JIT_QUANT_PER_HEAD;
  for (const int32_t value : {-2, 3, INT32_MAX}) {
    std::memcpy(&p.out_dtype, &value, sizeof(value));
    expect_invalid(p, "params.out_dtype is " + std::to_string(value));
  }
  SECTION("an e4m3 call needs PER_HEAD or PER_BLOCK") {
    p.out_dtype = FA3JIT_DTYPE_DEFAULT;
    p.quant = FA3JIT_QUANT_NONE;
    expect_invalid(p, "quant = none");
  }
  SECTION("an e4m3 call writes bf16 or fp16") {
    p.out_dtype = FA3JIT_DTYPE_E4M3;
    expect_invalid(p, "out_dtype = e4m3");
  }
  SECTION("a missing descale is refused by name") {
    p.out_dtype = FA3JIT_DTYPE_DEFAULT;
    p.v_descale.data = nullptr;
    expect_invalid(p, "v_descale is null");
  }
  SECTION("a negative descale stride is refused") {
    p.out_dtype = FA3JIT_DTYPE_DEFAULT;
    p.k_descale.stride_head = -1;
    expect_invalid(p, "k_descale has strides");
  }
}

TEST_CASE("C ABI: a bf16 call refuses descales and a quant", "[fake_driver][capi][fp8]") {
  fa3jit_forward_params p;
  fa3jit_forward_params_init(&p);
  p.dtype = FA3JIT_DTYPE_BF16;
  p.batch = 1, p.seqlen_q = 64, p.seqlen_k = 64, p.num_heads = 2, p.num_heads_kv = 2, p.head_dim = 128;
  p.q = tensor(1, 64, 2, 128, 2);
  p.k = tensor(1, 64, 2, 128, 2);
  p.v = tensor(1, 64, 2, 128, 2);
  p.out = tensor(1, 64, 2, 128, 2);
  REQUIRE(fa3jit_attention_forward(runtime(), nullptr, &p, nullptr) == FA3JIT_OK);
  SECTION("quant") {
    p.quant = FA3JIT_QUANT_PER_HEAD;
    expect_invalid(p, "quant = per_head");
  }
  SECTION("a descale") {
    p.q_descale = scale(1, 0, 0);
    expect_invalid(p, "q_descale, k_descale, v_descale must be null");
  }
  SECTION("out_dtype other than the dtype") {
    p.out_dtype = FA3JIT_DTYPE_FP16;
    expect_invalid(p, "out_dtype = fp16");
  }
  SECTION("out_dtype equal to the dtype is the default") {
    p.out_dtype = FA3JIT_DTYPE_BF16;
    CHECK(fa3jit_attention_forward(runtime(), nullptr, &p, nullptr) == FA3JIT_OK);
  }
}

TEST_CASE("C ABI: a caller of the header before the e4m3 fields makes 16-bit calls", "[fake_driver][capi][fp8]") {
  // The older caller's struct ends where out_dtype begins; the bytes after it are not its own (here: garbage
  // that the library must not read).
  fa3jit_forward_params p;
  std::memset(&p, 0xab, sizeof(p));
  p.struct_size = offsetof(fa3jit_forward_params, out_dtype);
  p.dtype = FA3JIT_DTYPE_BF16;
  p.causal = 0;
  p.batch = 1, p.seqlen_q = 64, p.seqlen_k = 64, p.num_heads = 2, p.num_heads_kv = 2, p.head_dim = 128,
  p.head_dim_v = 0;
  p.q = tensor(1, 64, 2, 128, 2);
  p.k = tensor(1, 64, 2, 128, 2);
  p.v = tensor(1, 64, 2, 128, 2);
  p.out = tensor(1, 64, 2, 128, 2);
  p.lse = nullptr;
  p.softmax_scale = 0.0f;
  p.workspace = nullptr;
  p.workspace_bytes = 0;
  const int before = launch_count();
  INFO(fa3jit_last_error());
  REQUIRE(fa3jit_attention_forward(runtime(), nullptr, &p, nullptr) == FA3JIT_OK);
  REQUIRE(launch_count() == before + 1);
  const Params k = params_of(last_launch());
  CHECK(k.q_descale == nullptr);
  CHECK(k.v_descale == nullptr);
  size_t bytes = 1;
  CHECK(fa3jit_attention_workspace_size(runtime(), &p, &bytes) == FA3JIT_OK);
  CHECK(bytes == 0);
  // An older caller's struct cannot describe an e4m3 call (it has no quant): refused as a 16-bit call would be.
  p.dtype = FA3JIT_DTYPE_E4M3;
  expect_invalid(p, "quant = none");
  // A size between the two headers is no header's.
  p.dtype = FA3JIT_DTYPE_BF16;
  p.struct_size = offsetof(fa3jit_forward_params, quant);
  expect_invalid(p, "struct_size is " + std::to_string(offsetof(fa3jit_forward_params, quant)));
}

TEST_CASE("C ABI: callers of the headers before the serving fields launch exactly as before",
          "[fake_driver][capi][serving]") {
  // A decode step with GQA 8:1 (the shape the split and packing heuristics act on), made with this header's
  // defaults (fa3jit_forward_params_init: num_splits 1, pack_gqa 0, no index tensors) ...
  fa3jit_forward_params p = bf16_params(2, 1, 1000, 8, 1, true);
  CHECK(p.num_splits == 1);
  CHECK(p.pack_gqa == 0);
  int before = launch_count();
  INFO(fa3jit_last_error());
  REQUIRE(fa3jit_attention_forward(runtime(), nullptr, &p, nullptr) == FA3JIT_OK);
  REQUIRE(launch_count() == before + 1);
  const FakeCudaLaunch current = last_launch();
  size_t bytes = 1;
  CHECK(fa3jit_attention_workspace_size(runtime(), &p, &bytes) == FA3JIT_OK);
  CHECK(bytes == 0);

  // ... and the same call from a caller whose struct ends before the serving fields (or before the e4m3 ones):
  // the bytes past its struct_size are garbage it does not own, never read; the launch is bit-identical.
  for (const size_t old_size :
       {offsetof(fa3jit_forward_params, cu_seqlens_q), offsetof(fa3jit_forward_params, out_dtype)}) {
    INFO("struct_size " << old_size);
    fa3jit_forward_params old;
    std::memset(&old, 0xab, sizeof(old));
    std::memcpy(&old, &p, old_size);
    old.struct_size = old_size;
    before = launch_count();
    REQUIRE(fa3jit_attention_forward(runtime(), nullptr, &old, nullptr) == FA3JIT_OK);
    REQUIRE(launch_count() == before + 1);
    const FakeCudaLaunch r = last_launch();
    CHECK(std::string(r.kernel_name) == current.kernel_name);
    CHECK(std::memcmp(r.grid, current.grid, sizeof(r.grid)) == 0);
    CHECK(r.shared_mem_bytes == current.shared_mem_bytes);
    CHECK(std::memcmp(r.params, current.params, sizeof(Params)) == 0);
    bytes = 1;
    CHECK(fa3jit_attention_workspace_size(runtime(), &old, &bytes) == FA3JIT_OK);
    CHECK(bytes == 0);
  }
}

TEST_CASE("C ABI: a split call's combine kernel is launched with programmatic stream serialization",
          "[fake_driver][capi][serving]") {
  // Decode, GQA 8:1, 4 splits: the attention kernel and then the combine kernel, which begins with
  // griddepcontrol.wait and so may start while the attention kernel finishes; the attention kernel waits on
  // nothing and is launched in plain stream order.
  fa3jit_forward_params p;
  fa3jit_forward_params_init(&p);
  p.dtype = FA3JIT_DTYPE_BF16;
  p.batch = 2, p.seqlen_q = 1, p.seqlen_k = 4000, p.num_heads = 8, p.num_heads_kv = 1, p.head_dim = 128;
  p.q = tensor(2, 1, 8, 128, 2);
  p.k = tensor(2, 4000, 1, 128, 2);
  p.v = tensor(2, 4000, 1, 128, 2);
  p.out = tensor(2, 1, 8, 128, 2);
  p.num_splits = 4;
  size_t bytes = 0;
  REQUIRE(fa3jit_attention_workspace_size(runtime(), &p, &bytes) == FA3JIT_OK);
  REQUIRE(bytes > 0);
  p.workspace = device_alloc(bytes);
  p.workspace_bytes = bytes;
  int before = launch_count();
  INFO(fa3jit_last_error());
  REQUIRE(fa3jit_attention_forward(runtime(), nullptr, &p, nullptr) == FA3JIT_OK);
  REQUIRE(launch_count() == before + 2);
  const FakeCudaLaunch combine = last_launch();
  CHECK_THAT(std::string(combine.kernel_name), Contains("fa3jit_attention_combine_"));
  CHECK(combine.programmatic_serialization == 1);
  p.num_splits = 1;
  before = launch_count();
  REQUIRE(fa3jit_attention_forward(runtime(), nullptr, &p, nullptr) == FA3JIT_OK);
  REQUIRE(launch_count() == before + 1);
  const FakeCudaLaunch attention = last_launch();
  CHECK_THAT(std::string(attention.kernel_name), Contains("fa3jit_attention_fwd_"));
  CHECK(attention.programmatic_serialization == 0);
}

TEST_CASE("C ABI: fa3jit_attention_plan says how the call runs, from the shapes alone", "[fake_driver][capi][serving]") {
  // A decode step over a long context with GQA 8:1: the heuristics split the keys and pack the group.
  fa3jit_forward_params p;
  fa3jit_forward_params_init(&p);
  p.dtype = FA3JIT_DTYPE_BF16;
  p.batch = 1, p.seqlen_q = 1, p.seqlen_k = 16000, p.num_heads = 8, p.num_heads_kv = 1, p.head_dim = 128;
  p.num_splits = 0;
  p.pack_gqa = -1;
  fa3jit_call_plan shapes_only;
  shapes_only.struct_size = sizeof(shapes_only);
  INFO(fa3jit_last_error());
  const fa3jit_status planned = fa3jit_attention_plan(runtime(), nullptr, &p, &shapes_only);  // no tensor given
  INFO(fa3jit_last_error());
  REQUIRE(planned == FA3JIT_OK);
  CHECK(shapes_only.num_splits > 1);
  CHECK(shapes_only.pack_gqa == 1);
  size_t bytes = 0;
  p.q = tensor(1, 1, 8, 128, 2);
  p.k = tensor(1, 16000, 1, 128, 2);
  p.v = tensor(1, 16000, 1, 128, 2);
  p.out = tensor(1, 1, 8, 128, 2);
  REQUIRE(fa3jit_attention_workspace_size(runtime(), &p, &bytes) == FA3JIT_OK);
  CHECK(shapes_only.workspace_bytes == bytes);
  fa3jit_call_plan with_tensors;
  with_tensors.struct_size = sizeof(with_tensors);
  REQUIRE(fa3jit_attention_plan(runtime(), nullptr, &p, &with_tensors) == FA3JIT_OK);
  CHECK(with_tensors.num_splits == shapes_only.num_splits);
  CHECK(with_tensors.pack_gqa == 1);
  // The launch does what the plan said: the split kernel with that many splits, packed, then the combine.
  p.workspace = device_alloc(bytes);
  p.workspace_bytes = bytes;
  const int before = launch_count();
  REQUIRE(fa3jit_attention_forward(runtime(), nullptr, &p, nullptr) == FA3JIT_OK);
  REQUIRE(launch_count() == before + 2);
  CHECK_THAT(std::string(last_launch().kernel_name), Contains("fa3jit_attention_combine_"));
  // Pinned choices come back as given.
  p.num_splits = 3;
  p.pack_gqa = 0;
  REQUIRE(fa3jit_attention_plan(runtime(), nullptr, &p, &with_tensors) == FA3JIT_OK);
  CHECK(with_tensors.num_splits == 3);
  CHECK(with_tensors.pack_gqa == 0);
  p.num_splits = 1;
  REQUIRE(fa3jit_attention_plan(runtime(), nullptr, &p, &with_tensors) == FA3JIT_OK);
  CHECK(with_tensors.num_splits == 1);
  CHECK(with_tensors.workspace_bytes == 0);
  // Bad arguments name themselves.
  CHECK(fa3jit_attention_plan(runtime(), nullptr, &p, nullptr) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("plan is NULL"));
  with_tensors.struct_size = 4;
  CHECK(fa3jit_attention_plan(runtime(), nullptr, &p, &with_tensors) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("fa3jit_call_plan.struct_size is 4"));
  with_tensors.struct_size = sizeof(with_tensors);
  p.num_splits = 0;
  p.head_dim = 0;
  CHECK(fa3jit_attention_plan(runtime(), nullptr, &p, &with_tensors) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("head_dim"));
}

TEST_CASE("C ABI: out-of-range num_splits and pack_gqa are refused before launching", "[fake_driver][capi][serving]") {
  fa3jit_forward_params p;
  fa3jit_forward_params_init(&p);
  p.dtype = FA3JIT_DTYPE_BF16;
  p.batch = 1, p.seqlen_q = 64, p.seqlen_k = 64, p.num_heads = 2, p.num_heads_kv = 2, p.head_dim = 128;
  p.q = tensor(1, 64, 2, 128, 2);
  p.k = tensor(1, 64, 2, 128, 2);
  p.v = tensor(1, 64, 2, 128, 2);
  p.out = tensor(1, 64, 2, 128, 2);
  for (const int32_t value : {-1, kMaxSplits + 1, INT32_MIN, INT32_MAX}) {
    p.num_splits = value;
    expect_invalid(p, "params.num_splits is " + std::to_string(value));
  }
  p.num_splits = 1;
  for (const int32_t value : {-2, 2, INT32_MIN, INT32_MAX}) {
    p.pack_gqa = value;
    expect_invalid(p, "params.pack_gqa is " + std::to_string(value));
  }
}

TEST_CASE("C ABI: fa3jit_attention_quant_blocks gives the tile of the e4m3 kernel", "[fake_driver][capi][fp8]") {
  int32_t block_m = 0, block_n = 0;
  for (const int64_t d : {64, 128, 256})
    for (const int32_t causal : {0, 1}) {
      const Spec spec = default_spec(fa3jit::DType::kE4m3, d, d, causal != 0);
      REQUIRE(fa3jit_attention_quant_blocks(nullptr, d, causal, &block_m, &block_n) == FA3JIT_OK);
      CHECK(block_m == spec.block_m);
      CHECK(block_n == spec.block_n);
    }
  CHECK(fa3jit_attention_quant_blocks(nullptr, 72, 0, &block_m, &block_n) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("head_dim = 72") && Contains("expected a multiple of 16 in [16, 256]"));
  REQUIRE(fa3jit_attention_quant_blocks(nullptr, 96, 0, &block_m, &block_n) == FA3JIT_OK);
  CHECK(block_m == default_spec(fa3jit::DType::kE4m3, 96, 96, false).block_m);
  CHECK(fa3jit_attention_quant_blocks(nullptr, int64_t{1} << 40, 0, &block_m, &block_n) ==
        FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK(fa3jit_attention_quant_blocks(nullptr, 128, 2, &block_m, &block_n) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains("causal is 2"));
  CHECK(fa3jit_attention_quant_blocks(nullptr, 128, 0, nullptr, &block_n) == FA3JIT_ERROR_INVALID_ARGUMENT);

  // A kernel handle: its spec's tile, whatever head_dim and causal say.
  fa3jit_kernel* kernel = nullptr;
  const char* spec_json = R"({"dtype": "e4m3", "head_dim": 128, "quant": "per_block", "tile": {"block_n": 128}})";
  REQUIRE(fa3jit_kernel_create(runtime(), spec_json, &kernel) == FA3JIT_OK);
  REQUIRE(fa3jit_attention_quant_blocks(kernel, 0, 7, &block_m, &block_n) == FA3JIT_OK);
  CHECK(block_n == 128);
  CHECK(block_m == parse_spec(std::string(spec_json)).block_m);
  fa3jit_kernel_destroy(kernel);
}

// ---- fa3jit_quantize_fp8 (the FP8 pre-pass) ----------------------------------------------------------------

namespace {

namespace qf = fa3jit::quantize_fp8;

// Records the pre-pass's Params (larger than the attention kernel's) while alive, then the attention's again.
struct RecordQuantizeParams {
  void (*set_param_bytes)(uint64_t) = nullptr;
  RecordQuantizeParams() {
    set_param_bytes = fake_support::fake_driver().set_param_bytes;
    set_param_bytes(sizeof(qf::Params));
  }
  ~RecordQuantizeParams() { set_param_bytes(sizeof(Params)); }
};

// bf16 q/k/v, e4m3 outputs: batch 2, seqlen_q 300, seqlen_k 257, GQA 8:2, head_dim 128, the e4m3 attention
// kernel's blocks.
fa3jit_quantize_params quantize_params() {
  int32_t block_m = 0, block_n = 0;
  REQUIRE(fa3jit_attention_quant_blocks(nullptr, 128, 0, &block_m, &block_n) == FA3JIT_OK);
  fa3jit_quantize_params p;
  fa3jit_quantize_params_init(&p);
  p.dtype = FA3JIT_DTYPE_BF16;
  p.batch = 2, p.seqlen_q = 300, p.seqlen_k = 257, p.num_heads = 8, p.num_heads_kv = 2, p.head_dim = 128;
  p.q = tensor(2, 300, 8, 128, 2);
  p.k = tensor(2, 257, 2, 128, 2);
  p.v = tensor(2, 257, 2, 128, 2);
  p.q8 = tensor(2, 300, 8, 128, 1);
  p.k8 = tensor(2, 257, 2, 128, 1);
  p.v8 = tensor(2, 257, 2, 128, 1);
  p.q_block_rows = block_m;
  p.k_block_rows = block_n;
  const int64_t m_blocks = (300 + block_m - 1) / block_m, n_blocks = (257 + block_n - 1) / block_n;
  p.q_descale = static_cast<float*>(device_alloc(static_cast<uint64_t>(2 * 8 * m_blocks * 4)));
  p.k_descale = static_cast<float*>(device_alloc(static_cast<uint64_t>(2 * 2 * n_blocks * 4)));
  p.v_descale = static_cast<float*>(device_alloc(2 * 2 * 128 * 4));
  return p;
}

void expect_quantize_invalid(const fa3jit_quantize_params& p, const std::string& fragment) {
  const int before = launch_count();
  CHECK(fa3jit_quantize_fp8(runtime(), &p, nullptr) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(fa3jit_last_error(), Contains(fragment));
  CHECK(launch_count() == before);
}

}  // namespace

TEST_CASE("C ABI: fa3jit_quantize_fp8 launches the three passes with the caller's pointers",
          "[fake_driver][capi][fp8]") {
  RecordQuantizeParams record;
  fa3jit_quantize_params p = quantize_params();
  p.seed = 0x1234567890abcdefULL;
  const int before = launch_count();
  INFO(fa3jit_last_error());
  REQUIRE(fa3jit_quantize_fp8(runtime(), &p, nullptr) == FA3JIT_OK);
  REQUIRE(launch_count() == before + 3);
  const FakeCudaLaunch r = last_launch();
  qf::QuantizeOptions options;
  options.q_block_rows = p.q_block_rows;
  options.k_block_rows = p.k_block_rows;
  qf::QuantizeArgs args;
  args.dtype = fa3jit::DType::kBf16;
  args.head_dim = args.head_dim_v = 128;
  const qf::Spec spec = qf::spec_for(args, options);
  CHECK(std::string(r.kernel_name) == qf::entry_name(spec, qf::kPassVQuant));  // the last of the three
  qf::Params k;
  std::memcpy(&k, r.params, sizeof(k));
  CHECK(k.q == p.q.data);
  CHECK(k.k8 == p.k8.data);
  CHECK(k.v_descale == p.v_descale);
  CHECK(k.seed == p.seed);
  CHECK(k.seqlen_q == 300);
  CHECK(k.seqlen_k == 257);
  CHECK(k.q_blocks == (300 + p.q_block_rows - 1) / p.q_block_rows);
  CHECK(k.k_blocks == (257 + p.k_block_rows - 1) / p.k_block_rows);
  CHECK(k.rope_cos == nullptr);
  // Only the V passes may overlap the pass before them; the first waits for all earlier work on the stream.
  const FakeCudaLaunch passes[3] = {launch_number(before + 1), launch_number(before + 2), launch_number(before + 3)};
  // Each pass runs its own entry point, in Pass order, with the same parameters.
  const qf::Pass order[3] = {qf::kPassQk, qf::kPassVAmax, qf::kPassVQuant};
  for (int i = 0; i < 3; ++i) {
    CHECK(std::string(passes[i].kernel_name) == qf::entry_name(spec, order[i]));
    CHECK(std::memcmp(passes[i].params, r.params, sizeof(qf::Params)) == 0);
  }
  CHECK(passes[0].programmatic_serialization == 0);
  CHECK(passes[1].programmatic_serialization == 1);
  CHECK(passes[2].programmatic_serialization == 1);
  // The V passes use no cluster feature: one CTA per V unit (batch x num_heads_kv x chunks), no cluster attribute,
  // whatever clusters the Q/K pass spans its blocks over.
  qf::Params v_pass;
  std::memcpy(&v_pass, passes[1].params, sizeof(v_pass));
  CHECK(v_pass.v_units == 2 * 2 * v_pass.v_chunks);
  for (int i = 1; i < 3; ++i) {
    CHECK(passes[i].cluster_x == 1);
    CHECK(passes[i].grid[0] == static_cast<unsigned>(v_pass.v_units));
  }

  SECTION("with RoPE tables") {
    p.rope = FA3JIT_ROPE_INTERLEAVED;
    p.rotary_dim = 64;
    p.rope_max_seqlen = 300;
    p.rope_cos = static_cast<const float*>(device_alloc(300 * 32 * 4));
    p.rope_sin = static_cast<const float*>(device_alloc(300 * 32 * 4));
    REQUIRE(fa3jit_quantize_fp8(runtime(), &p, nullptr) == FA3JIT_OK);
    REQUIRE(launch_count() == before + 6);
    std::memcpy(&k, last_launch().params, sizeof(k));
    CHECK(k.rope_cos == p.rope_cos);
    CHECK(k.rope_sin == p.rope_sin);
  }
}

TEST_CASE("C ABI: fa3jit_quantize_fp8 refuses bad enums, flags and block rows before launching",
          "[fake_driver][capi][fp8]") {
  RecordQuantizeParams record;
  fa3jit_quantize_params p = quantize_params();
  // Stored as a C caller would; the library reads them as integers, never as the enum.
  for (const int32_t value : {3, -1, INT32_MAX, INT32_MIN}) {
    p.rope = value;
    expect_quantize_invalid(p, "params.rope is " + std::to_string(value));
  }
  p.rope = FA3JIT_ROPE_NONE;
  for (const int32_t value : {-2, 3, INT32_MAX}) {
    std::memcpy(&p.dtype, &value, sizeof(value));
    expect_quantize_invalid(p, "params.dtype is " + std::to_string(value));
  }
  p.dtype = FA3JIT_DTYPE_BF16;
  SECTION("hadamard") {
    p.hadamard = 2;
    expect_quantize_invalid(p, "params.hadamard is 2");
  }
  SECTION("block rows left at 0") {
    p.k_block_rows = 0;
    expect_quantize_invalid(p, "fa3jit_attention_quant_blocks");
  }
  SECTION("RoPE without tables") {
    p.rope = FA3JIT_ROPE_NEOX;
    expect_quantize_invalid(p, "rope_cos is null");
  }
  SECTION("tables without RoPE") {
    p.rope_cos = p.rope_sin = static_cast<const float*>(device_alloc(300 * 64 * 4));
    p.rope_max_seqlen = 300;
    expect_quantize_invalid(p, "rope_cos / rope_sin is set");
  }
  SECTION("a NULL output") {
    p.v8.data = nullptr;
    expect_quantize_invalid(p, "params.v8.data is NULL");
  }
  SECTION("struct_size") {
    p.struct_size = sizeof(p) - 4;  // between the header before v_layout and this one
    expect_quantize_invalid(p, "fa3jit_quantize_params.struct_size");
  }
  SECTION("v_layout out of range") {
    p.v_layout = 7;
    expect_quantize_invalid(p, "params.v_layout is 7");
  }
  SECTION("a caller of the header before v_layout: its bytes past the old struct are not read") {
    p.struct_size = offsetof(fa3jit_quantize_params, v_layout);
    p.v_layout = 7;  // beyond the caller's struct: must be ignored (SEQ_MAJOR)
    const int before = launch_count();
    CHECK(fa3jit_quantize_fp8(runtime(), &p, nullptr) == FA3JIT_OK);
    CHECK(launch_count() == before + 3);  // the pre-pass's three launches
  }
  SECTION("an e4m3 input dtype is unsupported") {
    p.dtype = FA3JIT_DTYPE_E4M3;
    CHECK(fa3jit_quantize_fp8(runtime(), &p, nullptr) == FA3JIT_ERROR_UNSUPPORTED);
  }
  SECTION("a bad block size is an invalid spec") {
    p.q_block_rows = 100;
    CHECK(fa3jit_quantize_fp8(runtime(), &p, nullptr) == FA3JIT_ERROR_INVALID_SPEC);
    CHECK_THAT(fa3jit_last_error(), Contains("q_block_rows"));
  }
  CHECK(fa3jit_quantize_fp8(runtime(), nullptr, nullptr) == FA3JIT_ERROR_INVALID_ARGUMENT);
  CHECK(fa3jit_quantize_fp8(nullptr, &p, nullptr) == FA3JIT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("C ABI: a dense causal call counts its tiles in the workspace it is given, or runs a static order",
          "[fake_driver][capi][persistent]") {
  fa3jit_forward_params p = bf16_params(2, 1023, 1023, 8, 2, true);
  size_t bytes = 0;
  REQUIRE(fa3jit_attention_workspace_size(runtime(), &p, &bytes) == FA3JIT_OK);
  CHECK(bytes == 16);
  // With the workspace: the kernel's counter is its first bytes (zeroed by the launch on the stream).
  void* workspace = device_alloc(bytes);
  p.workspace = workspace;
  p.workspace_bytes = bytes;
  REQUIRE(fa3jit_attention_forward(runtime(), nullptr, &p, nullptr) == FA3JIT_OK);
  CHECK(params_of(last_launch()).tile_counter == workspace);
  CHECK(std::string(last_launch().kernel_name).find("causal") != std::string::npos);
  // None, or 0 bytes of one: the static order (no counter), not an error.
  p.workspace_bytes = 0;
  REQUIRE(fa3jit_attention_forward(runtime(), nullptr, &p, nullptr) == FA3JIT_OK);
  CHECK(params_of(last_launch()).tile_counter == nullptr);
  p.workspace = nullptr;
  REQUIRE(fa3jit_attention_forward(runtime(), nullptr, &p, nullptr) == FA3JIT_OK);
  CHECK(params_of(last_launch()).tile_counter == nullptr);
  // Too small, misaligned, or over an input: refused by name.
  p.workspace = workspace;
  p.workspace_bytes = 8;
  expect_invalid(p, "argument workspace holds 8 bytes; this call (its tile scheduler's counter) needs 16 bytes");
  p.workspace = static_cast<char*>(device_alloc(64)) + 4;
  p.workspace_bytes = 32;
  expect_invalid(p, "not 16-byte aligned");
  p.workspace = p.q.data;
  p.workspace_bytes = 16;
  expect_invalid(p, "overlaps q");
  p.workspace = device_alloc(64);
  p.sinks = static_cast<const float*>(p.workspace);  // the counter's zeroing would overwrite them
  expect_invalid(p, "argument workspace overlaps q_descale, k_descale, v_descale or sinks");
  p.sinks = nullptr;
  // A non-causal call uses no counter, whatever it is given.
  p.causal = 0;
  p.workspace = workspace;
  REQUIRE(fa3jit_attention_workspace_size(runtime(), &p, &bytes) == FA3JIT_OK);
  CHECK(bytes == 0);
  REQUIRE(fa3jit_attention_forward(runtime(), nullptr, &p, nullptr) == FA3JIT_OK);
  CHECK(params_of(last_launch()).tile_counter == nullptr);
}

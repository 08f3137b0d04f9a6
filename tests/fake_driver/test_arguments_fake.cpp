// Launch-argument validation of attention_fwd::forward (kernels/attention_fwd/launch.cpp, runtime/tensor_check.cpp)
// and the launch it produces, run
// against the fake CUDA driver (fake_cuda.cpp) so that it needs no GPU. Kernels are compiled for real with
// NVRTC (into a temporary cache); only the driver is fake. Bad calls must throw the documented ErrorCode with
// a message naming the argument and must not launch; good calls are checked against what reached the fake
// cuLaunchKernelEx (grid, block, shared memory, cluster, Params) and cuTensorMapEncodeTiled.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <dlfcn.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "core/error.h"
#include "fake_cuda.h"
#include "fake_support.h"
#include "jit/driver.h"
#include "kernels/attention_fwd/emit.h"
#include "kernels/attention_fwd/launch.h"

using namespace fa3jit;
using namespace fa3jit::attention_fwd;
using Catch::Matchers::Contains;

namespace {

using fake_support::last_launch;
using fake_support::launch_count;
using fake_support::params_of;

// One runtime on one cache directory for the whole run (kernels compile once, not once per test case).
Runtime& runtime() {
  static fake_support::TempDir dir("fa3jit-fake-driver-test");
  REQUIRE(!dir.path.empty());
  static Runtime rt(RuntimeOptions{dir.path});
  (void)fake_support::fake_driver();
  return rt;
}

void* device_alloc(uint64_t bytes) {
  (void)fake_support::fake_driver();
  CUdeviceptr p = 0;
  REQUIRE(driver().cuMemAlloc(&p, bytes) == CUDA_SUCCESS);
  return reinterpret_cast<void*>(p);
}

// A contiguous (batch, seqlen, heads, dim) bf16 tensor in its own allocation.
TensorView contiguous(int64_t batch, int64_t seqlen, int64_t heads, int64_t dim) {
  return {device_alloc(static_cast<uint64_t>(batch * seqlen * heads * dim * 2)), seqlen * heads * dim, heads * dim,
          dim};
}

ForwardArgs problem(int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int64_t heads, int64_t heads_kv,
                    int64_t head_dim, bool causal = false) {
  ForwardArgs a;
  a.dtype = DType::kBf16;
  a.batch = batch, a.seqlen_q = seqlen_q, a.seqlen_k = seqlen_k, a.num_heads = heads, a.num_heads_kv = heads_kv;
  a.head_dim = head_dim;
  a.causal = causal;
  a.q = contiguous(batch, seqlen_q, heads, head_dim);
  a.k = contiguous(batch, seqlen_k, heads_kv, head_dim);
  a.v = contiguous(batch, seqlen_k, heads_kv, head_dim);
  a.out = contiguous(batch, seqlen_q, heads, head_dim);
  return a;
}

void expect_rejected(const ForwardArgs& a, ErrorCode code, const std::string& fragment) {
  Runtime& rt = runtime();
  const int before = launch_count();
  try {
    forward(rt, a, nullptr);
    FAIL("forward accepted the arguments; expected an error containing \"" << fragment << "\"");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(static_cast<int>(e.code()) == static_cast<int>(code));
    CHECK_THAT(std::string(e.what()), Contains(fragment));
  }
  CHECK(launch_count() == before);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

TEST_CASE("misaligned, badly strided, null and host pointers are rejected by name", "[fake_driver][arguments]") {
  ForwardArgs a = problem(1, 64, 64, 2, 2, 128);
  SECTION("q 2 bytes past a 16-byte boundary") {
    a.q.data = static_cast<char*>(a.q.data) + 2;
    expect_rejected(a, ErrorCode::kInvalidArgument, "argument q.data");
    expect_rejected(a, ErrorCode::kInvalidArgument, "16-byte aligned");
  }
  SECTION("k stride_seq of 260 elements (520 bytes)") {
    a.k.stride_seq = 260;
    a.k.stride_batch = 64 * 260;
    expect_rejected(a, ErrorCode::kInvalidArgument, "argument k.stride_seq = 260 elements (520 bytes)");
  }
  SECTION("null v") {
    a.v.data = nullptr;
    expect_rejected(a, ErrorCode::kInvalidArgument, "argument v.data is null");
  }
  SECTION("out in host memory") {
    alignas(16) static unsigned char host[64 * 2 * 128 * 2];
    a.out.data = host;
    expect_rejected(a, ErrorCode::kInvalidArgument, "argument out.data");
    expect_rejected(a, ErrorCode::kInvalidArgument, "is not a CUDA device pointer");
  }
}

TEST_CASE("extents past an allocation are rejected with the overrun", "[fake_driver][arguments]") {
  ForwardArgs a = problem(1, 64, 64, 2, 2, 128);
  SECTION("seqlen_k one row past k's allocation") {
    a.seqlen_k = 65;
    a.v = contiguous(1, 65, 2, 128);  // v is large enough: only k overruns
    // k needs 65 * 2 * 128 * 2 bytes, its allocation holds 64 rows: one row of 512 bytes too many.
    expect_rejected(a, ErrorCode::kInvalidArgument, "argument k.data");
    expect_rejected(a, ErrorCode::kInvalidArgument, "512 bytes past its allocation");
  }
  SECTION("lse one float too small") {
    a.lse = static_cast<float*>(device_alloc(1 * 2 * 64 * 4 - 4));
    expect_rejected(a, ErrorCode::kInvalidArgument, "argument lse");
    expect_rejected(a, ErrorCode::kInvalidArgument, "4 bytes past its allocation");
  }
}

TEST_CASE("an output that aliases k or overlaps itself is rejected", "[fake_driver][arguments]") {
  ForwardArgs a = problem(1, 64, 64, 2, 2, 128);
  SECTION("out is k") {
    a.out = a.k;
    expect_rejected(a, ErrorCode::kInvalidArgument, "argument out overlaps q, k or v");
  }
  SECTION("out.stride_seq 64 < head_dim 128") {
    a.num_heads = a.num_heads_kv = 1;
    a.out.stride_seq = 64;
    a.out.stride_batch = 64 * 64;
    expect_rejected(a, ErrorCode::kInvalidArgument, "the output must not overlap itself");
    expect_rejected(a, ErrorCode::kInvalidArgument, "argument out: strides (batch 4096, seq 64, head 128)");
  }
}

TEST_CASE("bad scalars, head dims, head counts and dtypes are rejected", "[fake_driver][arguments]") {
  ForwardArgs a = problem(1, 64, 64, 2, 2, 128);
  SECTION("negative softmax_scale") {
    a.softmax_scale = -0.125f;
    expect_rejected(a, ErrorCode::kInvalidArgument, "argument softmax_scale = -0.125");
  }
  SECTION("head_dim 84") {
    a.head_dim = 84;
    expect_rejected(a, ErrorCode::kInvalidArgument, "argument head_dim = 84");
    expect_rejected(a, ErrorCode::kInvalidArgument, "a multiple of 8 in [8, 256]");
  }
  SECTION("num_heads 6 with num_heads_kv 4") {
    ForwardArgs b = problem(1, 64, 64, 6, 4, 128);
    expect_rejected(b, ErrorCode::kInvalidArgument, "argument num_heads = 6 is not a multiple of num_heads_kv = 4");
  }
  SECTION("head_dim_v 260 is not a head dim") {
    a.head_dim_v = 260;
    expect_rejected(a, ErrorCode::kInvalidArgument, "argument head_dim_v = 260");
  }
  SECTION("head_dim 64 with head_dim_v 256 has no tile") {
    a.head_dim = 64;
    a.head_dim_v = 256;
    expect_rejected(a, ErrorCode::kUnsupported, "\"head_dim_v\" (256)");
  }
  SECTION("e4m3 without descales") {
    a.dtype = DType::kE4m3;
    a.quant = Quant::kPerHead;
    expect_rejected(a, ErrorCode::kInvalidArgument, "argument q_descale is null");
  }
  SECTION("e4m3 with quant none") {
    a.dtype = DType::kE4m3;
    expect_rejected(a, ErrorCode::kInvalidArgument, "argument quant = none is not allowed with dtype e4m3");
  }
  SECTION("bf16 with descales") {
    float* scale = static_cast<float*>(device_alloc(64));
    a.q_descale = {scale, 0, 0};
    expect_rejected(a, ErrorCode::kInvalidArgument, "q_descale, k_descale, v_descale must be null with dtype bf16");
  }
  SECTION("bf16 with out_dtype fp16") {
    a.out_dtype = DType::kFp16;
    expect_rejected(a, ErrorCode::kInvalidArgument, "argument out_dtype = fp16 is not allowed with dtype bf16");
  }
}

TEST_CASE("a valid call launches the default spec with its geometry and parameters", "[fake_driver][launch]") {
  // GQA 8:2, seqlen_q not a multiple of block_m, seqlen_k not a multiple of block_n, with lse.
  ForwardArgs a = problem(2, 300, 257, 8, 2, 128);
  a.lse = static_cast<float*>(device_alloc(2 * 8 * 300 * 4));
  const Spec spec = default_spec(DType::kBf16, 128, 128, false);
  const KernelConfig cfg = make_kernel_config(spec);
  REQUIRE(spec.cluster_m == 1);
  const int before = launch_count();
  forward(runtime(), a, nullptr);
  REQUIRE(launch_count() == before + 1);
  const FakeCudaLaunch r = last_launch();

  CHECK(std::string(r.kernel_name) == attention_fwd::kernel_name(spec));
  CHECK(r.grid[0] == ceil_div(300, spec.block_m) * 8 * 2);
  CHECK(r.grid[1] == 1);
  CHECK(r.grid[2] == 1);
  CHECK(r.block[0] == 128u * static_cast<unsigned>(spec.consumer_warpgroups + 1));
  CHECK(r.block[1] == 1);
  CHECK(r.shared_mem_bytes == static_cast<unsigned>(cfg.smem_bytes));
  CHECK(r.cluster_x == 1);

  const Params p = params_of(r);
  CHECK(p.seqlen_q == 300);
  CHECK(p.seqlen_k == 257);
  CHECK(p.num_heads == 8);
  CHECK(p.head_group == 4);
  CHECK(p.batch == 2);
  CHECK(p.num_m_blocks == ceil_div(300, spec.block_m));
  CHECK(p.section_heads >= 1);
  CHECK(p.section_heads <= 16);
  CHECK(p.q_descale == nullptr);
  CHECK(p.k_descale == nullptr);
  CHECK(p.v_descale == nullptr);
  CHECK(p.scale_log2 == Approx(std::log2(std::exp(1.0)) / std::sqrt(128.0)).epsilon(1e-6));
  CHECK(p.lse == a.lse);

  // Tensor maps in order q, k, v, out: {dim, seqlen, heads, batch}, byte strides of seq, head, batch.
  CHECK(r.tensor_map_dims[0][0] == 128);
  CHECK(r.tensor_map_dims[0][1] == 300);
  CHECK(r.tensor_map_dims[0][2] == 8);
  CHECK(r.tensor_map_dims[0][3] == 2);
  CHECK(r.tensor_map_strides[0][0] == 8 * 128 * 2);
  CHECK(r.tensor_map_strides[0][1] == 128 * 2);
  CHECK(r.tensor_map_strides[0][2] == 300 * 8 * 128 * 2);
  CHECK(r.tensor_map_box[0][1] == static_cast<uint32_t>(spec.block_m));
  CHECK(r.tensor_map_dims[1][1] == 257);
  CHECK(r.tensor_map_dims[1][2] == 2);
  CHECK(r.tensor_map_box[1][1] == static_cast<uint32_t>(spec.block_n));
  CHECK(r.tensor_map_dims[3][1] == 300);
}

TEST_CASE("a page size that is not a multiple of 8 launches the gather kernel with k and v as bytes",
          "[fake_driver][launch][serving]") {
  // A decode step over pages of 3 keys: (num_pages, 3, heads_kv, d) with a padded page stride.
  const int64_t batch = 2, heads = 8, heads_kv = 2, d = 128, page_size = 3, num_pages = 50, max_pages = 20;
  ForwardArgs a = problem(batch, 1, 1, heads, heads_kv, d, true);
  const int64_t row = heads_kv * d, page_stride = (page_size + 1) * row;  // one row of padding per page
  a.k = {device_alloc(static_cast<uint64_t>(num_pages * page_stride * 2)), page_stride, row, d};
  a.v = {device_alloc(static_cast<uint64_t>(num_pages * page_stride * 2)), page_stride, row, d};
  a.page_table = static_cast<const int32_t*>(device_alloc(batch * max_pages * 4));
  a.seqused_k = static_cast<const int32_t*>(device_alloc(batch * 4));
  a.page_table_stride = max_pages, a.max_pages = max_pages, a.num_pages = num_pages, a.page_size = page_size;
  a.num_splits = 1;
  forward(runtime(), a, nullptr);
  const FakeCudaLaunch r = last_launch();
  CHECK_THAT(std::string(r.kernel_name), Contains("_pagedgather_"));
  const Params p = params_of(r);
  CHECK(p.page_size == 3);
  CHECK(p.k_data == a.k.data);
  CHECK(p.v_data == a.v.data);
  CHECK(p.k_stride_page == page_stride * 2);
  CHECK(p.k_stride_row == row * 2);
  CHECK(p.k_stride_head == d * 2);
  CHECK(p.v_stride_page == page_stride * 2);
  // The pages of 16 keys of the same cache load as TMA boxes: the TMA kernel, k and v as tensor maps.
  ForwardArgs b = a;
  b.page_size = 16;
  b.k.stride_batch = b.v.stride_batch = 16 * row;
  b.k.data = device_alloc(static_cast<uint64_t>(num_pages * 16 * row * 2));
  b.v.data = device_alloc(static_cast<uint64_t>(num_pages * 16 * row * 2));
  forward(runtime(), b, nullptr);
  CHECK_THAT(std::string(last_launch().kernel_name), !Contains("gather") && Contains("_paged_"));
  CHECK(params_of(last_launch()).k_data == nullptr);
  // A forced TMA-box kernel refuses the page size it cannot load; page_size 0 is out of range.
  Layout tma_pages;
  tma_pages.paged_kv = true;
  tma_pages.short_q = tma_pages.pack_gqa = true;
  const Spec tma = default_spec(DType::kBf16, DType::kBf16, Quant::kNone, d, d, false, tma_pages);
  a.causal = false;  // the forced kernel's mask
  try {
    forward(*load_kernel(runtime(), tma), a, nullptr);
    FAIL("a TMA-box kernel accepted page_size 3");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Contains("page_size = 3 needs a kernel with paged_gather true"));
  }
  a.page_size = 0;
  expect_rejected(a, ErrorCode::kInvalidArgument, "argument page_size = 0 is out of range");
}

TEST_CASE("an explicit softmax_scale reaches the kernel", "[fake_driver][launch]") {
  ForwardArgs a = problem(1, 64, 64, 2, 2, 128);
  a.softmax_scale = 0.5f;
  forward(runtime(), a, nullptr);
  const Params p = params_of(last_launch());
  CHECK(p.scale_log2 == Approx(0.5 * std::log2(std::exp(1.0))).epsilon(1e-6));
  CHECK(p.lse == nullptr);
}

TEST_CASE("a causal decode step runs the non-causal kernel", "[fake_driver][launch]") {
  ForwardArgs a = problem(3, 1, 500, 4, 4, 128, /*causal=*/true);
  const int before = launch_count();
  forward(runtime(), a, nullptr);
  REQUIRE(launch_count() == before + 1);
  const FakeCudaLaunch r = last_launch();
  // The decode tile (decode_tile(): at most 64 query rows), without the causal mask.
  Layout decode;
  decode.short_q = true;
  CHECK(std::string(r.kernel_name) ==
        attention_fwd::kernel_name(default_spec(DType::kBf16, DType::kBf16, Quant::kNone, 128, 128, false, decode)));
  CHECK(std::string(r.kernel_name) !=
        attention_fwd::kernel_name(default_spec(DType::kBf16, DType::kBf16, Quant::kNone, 128, 128, true, decode)));
  CHECK(r.grid[0] == 1 * 4 * 3);
  CHECK(params_of(r).seqlen_q == 1);
  CHECK(params_of(r).seqlen_k == 500);
}

TEST_CASE("the split heuristic: decode steps run unsplit from 40 % of the SMs, other calls from 80 %",
          "[fake_driver][plan]") {
  // The fake device 0 has 132 SMs. A decode step (the decode tile: GQA 32/8 packed, one token) of batch 8 has
  // 8 x 8 = 64 tiles: unsplit (64 >= 0.4 x 132); batch 4's 32 tiles split (scheduler.h: kMemoryBoundFill).
  ForwardArgs eight = problem(8, 1, 1024, 32, 8, 128, /*causal=*/true);
  eight.num_splits = 0;
  eight.pack_gqa = -1;
  CHECK(plan_info(eight).num_splits == 1);
  ForwardArgs four = problem(4, 1, 1024, 32, 8, 128, /*causal=*/true);
  four.num_splits = 0;
  four.pack_gqa = -1;
  CHECK(plan_info(four).num_splits > 1);
  // A prefill tile's call (100 rows per head, one 128-row block) of 2 x 32 heads has 64 tiles too, and splits: it is
  // held to FA3's 80 %.
  ForwardArgs prefill = problem(2, 100, 8192, 32, 32, 128);
  prefill.num_splits = 0;
  CHECK(plan_info(prefill).num_splits > 1);
}

TEST_CASE("window, softcap and sinks pick the variant kernel and reach its parameters", "[fake_driver][variant]") {
  ForwardArgs a = problem(2, 300, 700, 8, 2, 128, /*causal=*/true);
  a.window_left = 100;
  a.softcap = 30.0f;
  a.sinks = static_cast<const float*>(device_alloc(8 * 4));
  int before = launch_count();
  forward(runtime(), a, nullptr);
  REQUIRE(launch_count() == before + 1);
  Layout variant;
  variant.local = variant.softcap = variant.sinks = true;
  const Spec local = default_spec(DType::kBf16, DType::kBf16, Quant::kNone, 128, 128, false, variant);
  FakeCudaLaunch r = last_launch();
  CHECK(std::string(r.kernel_name) == attention_fwd::kernel_name(local));
  CHECK(local.block_n == default_spec(DType::kBf16, 128, 128, true).block_n);  // a window takes the causal tile
  const Params& p = params_of(r);
  CHECK((p.window_left == 100 && p.window_right == 0));  // causal is window_right 0
  CHECK(p.softcap_log2 == Approx(30.0 * 1.4426950408889634));
  CHECK(p.sinks == a.sinks);

  // A window wider than every sequence hides nothing: the plain causal kernel, without the variant (700 keys: the
  // short-causal tile of a dense causal call).
  ForwardArgs wide = problem(2, 300, 700, 8, 2, 128, /*causal=*/true);
  wide.window_left = 700;
  before = launch_count();
  forward(runtime(), wide, nullptr);
  REQUIRE(launch_count() == before + 1);
  Layout short_causal;
  short_causal.short_causal = true;
  CHECK(std::string(last_launch().kernel_name) ==
        attention_fwd::kernel_name(default_spec(DType::kBf16, DType::kBf16, Quant::kNone, 128, 128, true, short_causal)));

  // Bad values name the argument; a variant kernel refuses calls of another mask.
  ForwardArgs bad = problem(2, 300, 700, 8, 2, 128, /*causal=*/true);
  bad.window_right = 4;
  expect_rejected(bad, ErrorCode::kInvalidArgument, "argument window_right = 4 is not allowed with causal = true");
  bad.window_right = -1, bad.window_left = -2;
  expect_rejected(bad, ErrorCode::kInvalidArgument, "argument window_left = -2 is out of range");
  bad.window_left = -1, bad.softcap = std::nanf("");
  expect_rejected(bad, ErrorCode::kInvalidArgument, "argument softcap = nan is not allowed");
  bad.softcap = -1.0f;
  expect_rejected(bad, ErrorCode::kInvalidArgument, "argument softcap = -1 is not allowed");
  bad.softcap = 0.0f, bad.sinks = reinterpret_cast<const float*>(reinterpret_cast<const char*>(a.sinks) + 2);
  expect_rejected(bad, ErrorCode::kInvalidArgument, "argument sinks is not 4-byte aligned");
  bad.sinks = a.sinks;
  bad.num_heads = 16, bad.q = contiguous(2, 300, 16, 128), bad.out = contiguous(2, 300, 16, 128);
  expect_rejected(bad, ErrorCode::kInvalidArgument, "sinks");  // 16 heads' logits past its 8-float allocation
  ForwardArgs plain = problem(2, 300, 700, 8, 2, 128, /*causal=*/true);
  CHECK_THROWS_WITH(forward(*load_kernel(runtime(), local), plain, nullptr),
                    Contains("argument softcap = 0 does not match the kernel spec's softcap true"));
  // A window of (-1, 0) is a causal mask: a non-causal kernel must refuse it rather than ignore it.
  ForwardArgs causal_window = problem(2, 300, 700, 8, 2, 128, /*causal=*/false);
  causal_window.window_right = 0;
  CHECK_THROWS_WITH(forward(*load_kernel(runtime(), default_spec(DType::kBf16, 128, 128, false)), causal_window,
                            nullptr),
                    Contains("are a causal mask"));
  // Softcaps whose reciprocal is not a normal float, and windows whose int32 bounds could overflow, are refused.
  bad = problem(2, 300, 700, 8, 2, 128, /*causal=*/true);
  bad.softcap = 1e-35f;
  expect_rejected(bad, ErrorCode::kInvalidArgument, "[1e-30, 1e30]");
}

TEST_CASE("a size-1 seqlen dimension accepts stride_seq 1", "[fake_driver][launch]") {
  ForwardArgs a = problem(2, 1, 128, 4, 4, 128);
  a.q.stride_seq = 1;  // DLPack producers give 1 (or 0) for a dimension of size 1
  a.out.stride_seq = 1;
  const int before = launch_count();
  forward(runtime(), a, nullptr);
  REQUIRE(launch_count() == before + 1);
  const FakeCudaLaunch r = last_launch();
  CHECK(r.grid[0] == 1 * 4 * 2);
  // The unused seq stride handed to TMA is one row rounded up to 16 bytes, not 1 element.
  CHECK(r.tensor_map_strides[0][0] == 128 * 2);
  CHECK(r.tensor_map_strides[3][0] == 128 * 2);
}

TEST_CASE("cluster_m 2 launches 2-CTA clusters over an even number of row blocks", "[fake_driver][launch]") {
  const Spec spec = parse_spec(std::string(R"({"dtype": "bf16", "head_dim": 128, "cluster_m": 2})"));
  REQUIRE(spec.cluster_m == 2);
  const KernelConfig cfg = make_kernel_config(spec);
  const int64_t seqlen_q = 3 * spec.block_m - 5;  // 3 row blocks: odd, rounded up to 4 per head
  ForwardArgs a = problem(2, seqlen_q, 400, 4, 4, 128);
  const int before = launch_count();
  forward(*load_kernel(runtime(), spec), a, nullptr);
  REQUIRE(launch_count() == before + 1);
  const FakeCudaLaunch r = last_launch();
  CHECK(std::string(r.kernel_name) == attention_fwd::kernel_name(spec));
  CHECK(r.cluster_x == 2);
  CHECK(r.grid[0] == 4 * 4 * 2);
  CHECK(r.grid[0] % 2 == 0);
  CHECK(r.block[0] == static_cast<unsigned>(cfg.num_threads));
  CHECK(r.shared_mem_bytes == static_cast<unsigned>(cfg.smem_bytes));
  CHECK(params_of(r).num_m_blocks == 4);
  // Each CTA of the pair loads half of every K/V block and multicasts it.
  CHECK(r.tensor_map_box[1][1] == static_cast<uint32_t>(spec.block_n / 2));
  CHECK(r.tensor_map_box[2][1] == static_cast<uint32_t>(spec.block_n / 2));
  // The table's grid for it is persistent: more tiles than SMs give whole clusters on every SM (132, even).
  REQUIRE(spec.persistent);
  ForwardArgs many = problem(2, 33 * spec.block_m - 5, 400, 4, 4, 128);  // 33 row blocks, 34 per head
  forward(*load_kernel(runtime(), spec), many, nullptr);
  CHECK(last_launch().grid[0] == 132);
  CHECK(last_launch().cluster_x == 2);
  CHECK(params_of(last_launch()).num_tiles == 34 * 4 * 2);
}

TEST_CASE("a persistent grid of clusters holds only the clusters the device runs at once", "[fake_driver][launch]") {
  // A device whose GPCs leave SMs unpaired: 60 2-CTA clusters at once on 132 SMs, not 66. The answer is asked once
  // per loaded kernel and context, so the kernel comes from a runtime of this test's own (a fresh load), and the
  // fake's answer is restored however the test ends.
  const Spec spec = parse_spec(std::string(R"({"dtype": "bf16", "head_dim": 256, "cluster_m": 2})"));
  REQUIRE(spec.persistent);
  fake_support::TempDir dir("fa3jit-fake-driver-clusters");
  REQUIRE(!dir.path.empty());
  Runtime own(RuntimeOptions{dir.path});
  fake_support::fake_driver().set_max_active_clusters(60);
  struct Restore {
    ~Restore() { fake_support::fake_driver().set_max_active_clusters(0); }
  } restore;
  const std::shared_ptr<const attention_fwd::Kernel> kernel = load_kernel(own, spec);
  ForwardArgs many = problem(2, 70 * spec.block_m, 300, 2, 2, 256);  // 70 row blocks x 2 heads x 2 sequences
  forward(*kernel, many, nullptr);
  CHECK(last_launch().cluster_x == 2);
  CHECK(last_launch().grid[0] == 120);
  CHECK(params_of(last_launch()).num_tiles == 70 * 2 * 2);
  // Fewer tiles than resident clusters hold: one CTA per tile, as without the limit.
  ForwardArgs few = problem(1, 10 * spec.block_m, 300, 2, 2, 256);
  forward(*kernel, few, nullptr);
  CHECK(last_launch().grid[0] == 20);
}

TEST_CASE("the parameter struct reaches the kernel as its one argument, as prepare_launch built it",
          "[fake_driver][launch]") {
  ForwardArgs a = problem(2, 300, 257, 8, 2, 128, /*causal=*/true);
  LaunchPlan plan = prepare_launch(runtime(), a, nullptr);
  launch(plan);
  const FakeCudaLaunch r = last_launch();
  CHECK(r.params_address == reinterpret_cast<uint64_t>(&plan.params));
  const Params p = params_of(r);
  CHECK(std::memcmp(&p, &plan.params, sizeof(Params)) == 0);
  CHECK(r.grid[0] == plan.grid);
  // The tensor maps travel inside the struct: 4 x 128 bytes at its start, 64-byte aligned.
  CHECK(offsetof(Params, tm_q) == 0);
  CHECK(offsetof(Params, tm_o) == 3 * 128);
  CHECK(alignof(Params) == 64);
  CHECK(p.seqlen_q == 300);
  CHECK(p.head_group == 4);
}

TEST_CASE("the plan cache: one kernel per shape class, reused by later calls and other threads",
          "[fake_driver][plan]") {
  // Query tiles of more than 64 rows: the prefill tile (up to 64 rows take the decode tile, decode_tile()).
  ForwardArgs small = problem(1, 200, 64, 2, 2, 128);
  ForwardArgs large = problem(3, 700, 900, 8, 2, 128);  // same class (bf16, d128, non-causal): same kernel
  ForwardArgs causal = problem(1, 200, 64, 2, 2, 128, /*causal=*/true);
  ForwardArgs d64 = problem(1, 200, 64, 2, 2, 64);
  const LaunchPlan p1 = prepare_launch(runtime(), small, nullptr);
  const LaunchPlan p2 = prepare_launch(runtime(), large, nullptr);
  const LaunchPlan p3 = prepare_launch(runtime(), causal, nullptr);
  const LaunchPlan p4 = prepare_launch(runtime(), d64, nullptr);
  CHECK(p1.function == p2.function);
  CHECK(p1.function != p3.function);
  CHECK(p1.function != p4.function);
  CHECK(p3.function != p4.function);
  CHECK(p2.grid != p1.grid);
  // Another thread (an empty per-thread memo) finds the same plan.
  CUfunction other = nullptr;
  std::thread([&] { other = prepare_launch(runtime(), large, nullptr).function; }).join();
  CHECK(other == p1.function);
  // A second runtime has plans of its own; the first runtime's memo is not taken for it.
  Runtime second(RuntimeOptions{runtime().cache().directory()});
  const LaunchPlan q1 = prepare_launch(second, small, nullptr);
  CHECK(q1.function != nullptr);
  CHECK(q1.launch.smem_bytes == p1.launch.smem_bytes);
  // A causal decode step (seqlen_q 1) is in the non-causal class.
  ForwardArgs decode = problem(1, 1, 64, 2, 2, 128, /*causal=*/true);
  ForwardArgs decode_full = problem(1, 1, 64, 2, 2, 128);
  CHECK(prepare_launch(runtime(), decode, nullptr).function == prepare_launch(runtime(), decode_full, nullptr).function);
}

TEST_CASE("an explicit kernel must agree with the arguments", "[fake_driver][plan]") {
  const auto kernel = load_kernel(runtime(), default_spec(DType::kBf16, 128, 128, true));
  ForwardArgs a = problem(1, 64, 64, 2, 2, 128, /*causal=*/true);
  const int before = launch_count();
  forward(*kernel, a, nullptr);
  CHECK(launch_count() == before + 1);
  a.causal = false;
  CHECK_THROWS_WITH(forward(*kernel, a, nullptr), Contains("argument causal = false does not match the kernel spec"));
  ForwardArgs b = problem(1, 64, 64, 2, 2, 64, /*causal=*/true);
  CHECK_THROWS_WITH(forward(*kernel, b, nullptr), Contains("head_dim = 64") && Contains("(128, 128)"));
  b = problem(1, 64, 64, 2, 2, 128, /*causal=*/true);
  b.dtype = DType::kFp16;
  CHECK_THROWS_WITH(forward(*kernel, b, nullptr), Contains("argument dtype = fp16 does not match"));
  CHECK(launch_count() == before + 1);
}

TEST_CASE("an e4m3 call may not write its 16-bit out over q", "[fake_driver][launch][fp8]") {
  // Same pointer and element strides, but out's elements are twice q's: rows of one CTA's output would land on
  // another CTA's Q tile, so this aliasing is refused.
  ForwardArgs a = problem(1, 128, 128, 2, 2, 128);
  a.dtype = DType::kE4m3;
  a.quant = Quant::kPerHead;
  float* scales = static_cast<float*>(device_alloc(64));
  a.q_descale = a.k_descale = a.v_descale = ScaleView{scales, 0, 0};
  a.out = a.q;
  expect_rejected(a, ErrorCode::kInvalidArgument, "the output may only alias q exactly");
  // A descale that overlaps lse is refused as well.
  ForwardArgs b = problem(1, 128, 128, 2, 2, 128);
  b.dtype = DType::kE4m3;
  b.quant = Quant::kPerHead;
  b.lse = static_cast<float*>(device_alloc(2 * 128 * 4));
  b.q_descale = b.k_descale = b.v_descale = ScaleView{b.lse, 0, 0};
  expect_rejected(b, ErrorCode::kInvalidArgument, "overlaps out or lse");
}

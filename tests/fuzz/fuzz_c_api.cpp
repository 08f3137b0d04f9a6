// Harness: fa3jit_attention_forward (the C ABI) with fuzzed fa3jit_forward_params against the fake CUDA driver
// (tests/fake_driver, built as libcuda.so.1 and found through LD_LIBRARY_PATH; tools/fuzz.sh sets it).
//
// Promises checked (docs/reliability.md): every call returns a status of the enum, with a message when it is
// not OK; a rejected call launches nothing; an accepted call launches once, and every tensor map of that launch
// (q, k, v, out, in that order, based at the tensors' pointers), and lse, lie inside the fake allocation that
// holds their base pointer; out overlaps no input unless it aliases q exactly.
//
// Pointers come from a fixed set of fake allocations (fake_cuda_alloc) at fuzzed offsets, or are fuzzed
// outright; the fake never dereferences them. Kernels are "compiled" by the stand-in NVRTC of fake_nvrtc.cpp, which
// returns at once: every shape class a fuzzed call names costs microseconds, so the calls run at the launch
// path's own speed (a few kernels are warmed in LLVMFuzzerInitialize as before).
#include <dlfcn.h>
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "fa3jit/fa3jit.h"
#include "fake_cuda.h"
#include "fuzz_util.h"
#include "kernels/attention_combine/params.h"
#include "kernels/attention_fwd/params.h"

namespace {

struct Fake {
  int (*last_launch)(FakeCudaLaunch*) = nullptr;
  int (*launch)(int, FakeCudaLaunch*) = nullptr;
  uint64_t (*alloc)(uint64_t) = nullptr;
};
Fake g_fake;

struct Allocation {
  uint64_t start, size;
};
// From 256 bytes to 64 GiB: the fake hands out addresses only, so huge ones cost nothing. The last five are
// the homes of q, k, v, out and lse in a well-formed call, so that a useful share of calls reaches a launch.
constexpr std::array<uint64_t, 11> kAllocationBytes = {256, 4096, 1 << 16, 1 << 20, 1 << 24, 1 << 28,
                                                       uint64_t{1} << 36, uint64_t{1} << 36, uint64_t{1} << 36,
                                                       uint64_t{1} << 36, uint64_t{1} << 36};
constexpr size_t kFirstHome = 6;
std::vector<Allocation> g_allocations;

fa3jit_runtime* g_runtime = nullptr;
fa3jit_kernel* g_attention_kernel = nullptr;  // a pinned attention_fwd spec (bf16, d128, non-causal)
fa3jit_kernel* g_combine_kernel = nullptr;    // a kernel of another family: must be refused by the forward

const Allocation* allocation_of(uint64_t address) {
  for (const Allocation& a : g_allocations)
    if (address >= a.start && address - a.start < a.size) return &a;
  return nullptr;
}

bool inside_allocation(uint64_t lo, uint64_t bytes) {
  const Allocation* a = allocation_of(lo);
  return a != nullptr && bytes <= a->start + a->size - lo;
}

// ---- fuzzed values --------------------------------------------------------------------------------------
int64_t pick_extent(FuzzedDataProvider& in) {
  // Choices are ordered so that an exhausted input (the provider then returns minimums) makes a valid call.
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 5: return in.ConsumeIntegral<int64_t>();
    case 6: return in.PickValueInArray<int64_t>({0, -1, INT32_MAX, int64_t{1} << 31, INT64_MAX, INT64_MIN,
                                                 0x7fffffff - 1024, 0x7fffffff - 1023});
    case 7: return in.ConsumeIntegralInRange<int64_t>(1, 1 << 20);
    default: return in.ConsumeIntegralInRange<int64_t>(1, 300);
  }
}

int64_t pick_head_dim(FuzzedDataProvider& in) {
  if (in.ConsumeIntegralInRange<int>(0, 9) == 9) return in.ConsumeIntegral<int64_t>();
  return in.PickValueInArray<int64_t>({64, 128, 256, 64, 128, 256, 96, 0});
}

// `home`: the allocation a well-formed call uses for this argument.
void* pick_pointer(FuzzedDataProvider& in, bool allow_null, size_t home) {
  const int how = in.ConsumeIntegralInRange<int>(0, 15);
  if (how == 15 && allow_null) return nullptr;
  if (how == 14) return reinterpret_cast<void*>(in.ConsumeIntegral<uintptr_t>());
  const bool anywhere = how >= 10;
  const Allocation& a =
      g_allocations[anywhere ? in.ConsumeIntegralInRange<size_t>(0, g_allocations.size() - 1) : kFirstHome + home];
  uint64_t offset = 0;
  if (how == 13) offset = in.ConsumeIntegralInRange<uint64_t>(0, a.size + 64);   // anywhere, even past the end
  else if (how >= 8) offset = in.ConsumeIntegralInRange<uint64_t>(0, 64) * 16;  // aligned, near the start
  return reinterpret_cast<void*>(a.start + offset);
}

// Strides in elements: the contiguous ones for (seqlen, heads, dim) most of the time, else perturbed or raw.
fa3jit_tensor pick_tensor(FuzzedDataProvider& in, size_t home, int64_t seqlen, int64_t heads, int64_t dim) {
  fa3jit_tensor t{};
  t.data = pick_pointer(in, true, home);
  // Wrapping products of huge fuzzed extents are just more fuzz; unsigned, so the harness has no UB of its own.
  const auto mul = [](int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); };
  t.stride_head = dim, t.stride_seq = mul(heads, dim), t.stride_batch = mul(seqlen, mul(heads, dim));
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 7: t.stride_batch = in.ConsumeIntegral<int64_t>(); break;
    case 6: t.stride_seq = in.ConsumeIntegral<int64_t>(); break;
    case 5: t.stride_head = in.ConsumeIntegral<int64_t>(); break;
    case 4:  // padded rows, the fused-qkv layout
      t.stride_seq = static_cast<int64_t>(static_cast<uint64_t>(t.stride_seq) + 8 * in.ConsumeIntegralInRange<int64_t>(-4, 64));
      t.stride_batch = mul(t.stride_seq, seqlen);
      break;
    default: break;
  }
  return t;
}

// ---- the oracle -----------------------------------------------------------------------------------------
struct Span {
  uint64_t lo, hi;
  bool overlaps(const Span& o) const { return lo < o.hi && o.lo < hi; }
};

// Bytes one tensor map can reach from its base: the last element of every dimension, inclusive.
Span reach_of(const void* base, const FakeCudaLaunch& l, int map) {
  const uint64_t* dims = l.tensor_map_dims[map];
  const uint64_t* strides = l.tensor_map_strides[map];
  unsigned __int128 reach = dims[0] * 2;  // fp16 / bf16; 128 bits: 2^32 rows of a 2^40-byte stride do not wrap
  for (int d = 1; d < 4; ++d) reach += static_cast<unsigned __int128>(dims[d] - 1) * strides[d - 1];
  const auto lo = reinterpret_cast<uint64_t>(base);
  const unsigned __int128 hi = lo + reach;
  return {lo, hi > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(hi)};
}

// `l`: the attention kernel's launch of the call (a split-KV call launches the combine kernel after it).
void check_launch(const fa3jit_forward_params& p, const FakeCudaLaunch& l) {
  fa3jit::attention_fwd::Params params;
  std::memcpy(&params, l.params, sizeof(params));
  const fa3jit_tensor* tensors[4] = {&p.q, &p.k, &p.v, &p.out};
  const char* names[4] = {"q", "k", "v", "out"};
  const int64_t head_dim_v = p.head_dim_v == 0 ? p.head_dim : p.head_dim_v;
  const int64_t expect[4][4] = {{p.head_dim, p.seqlen_q, p.num_heads, p.batch},
                                {p.head_dim, p.seqlen_k, p.num_heads_kv, p.batch},
                                {head_dim_v, p.seqlen_k, p.num_heads_kv, p.batch},
                                {head_dim_v, p.seqlen_q, p.num_heads, p.batch}};
  Span spans[4];
  for (int m = 0; m < 4; ++m) {
    for (int d = 0; d < 4; ++d)
      FUZZ_REQUIRE(l.tensor_map_dims[m][d] == static_cast<uint64_t>(expect[m][d]), "%s map dim %d is %llu, not %lld",
                   names[m], d, static_cast<unsigned long long>(l.tensor_map_dims[m][d]),
                   static_cast<long long>(expect[m][d]));
    spans[m] = reach_of(tensors[m]->data, l, m);
    FUZZ_REQUIRE(spans[m].hi > spans[m].lo && inside_allocation(spans[m].lo, spans[m].hi - spans[m].lo),
                 "launched with %s's tensor map reaching [%#llx, %#llx) outside its allocation", names[m],
                 static_cast<unsigned long long>(spans[m].lo), static_cast<unsigned long long>(spans[m].hi));
  }
  const bool in_place = p.out.data == p.q.data && p.out.stride_batch == p.q.stride_batch &&
                        p.out.stride_seq == p.q.stride_seq && p.out.stride_head == p.q.stride_head &&
                        head_dim_v == p.head_dim;
  FUZZ_REQUIRE(!spans[3].overlaps(spans[1]) && !spans[3].overlaps(spans[2]), "launched with out overlapping k or v");
  FUZZ_REQUIRE(in_place || !spans[3].overlaps(spans[0]), "launched with out overlapping q");
  FUZZ_REQUIRE(params.lse == p.lse, "Params.lse differs from the argument");
  FUZZ_REQUIRE(params.batch == p.batch && params.num_heads == p.num_heads && params.seqlen_q == p.seqlen_q &&
                   params.seqlen_k == p.seqlen_k,
               "Params shape differs from the arguments");
  if (p.lse != nullptr) {
    const uint64_t bytes = static_cast<uint64_t>(p.batch) * static_cast<uint64_t>(p.num_heads) *
                           static_cast<uint64_t>(p.seqlen_q) * 4;
    const auto lo = reinterpret_cast<uint64_t>(p.lse);
    FUZZ_REQUIRE(inside_allocation(lo, bytes), "launched with lse [%#llx, +%llu) outside its allocation",
                 static_cast<unsigned long long>(lo), static_cast<unsigned long long>(bytes));
    const Span lse{lo, lo + bytes};
    for (int m = 0; m < 4; ++m) FUZZ_REQUIRE(!lse.overlaps(spans[m]), "launched with lse overlapping %s", names[m]);
  }
  FUZZ_REQUIRE(l.grid[0] >= 1 && l.grid[1] == 1 && l.grid[2] == 1, "grid %u x %u x %u", l.grid[0], l.grid[1], l.grid[2]);
  FUZZ_REQUIRE(std::isfinite(params.scale_log2) && params.scale_log2 > 0.0f, "softmax scale_log2 %g",
               static_cast<double>(params.scale_log2));
}

// A valid call, so that every plan the fuzzer can reach is compiled before fuzzing starts.
fa3jit_status warm_call(fa3jit_dtype dtype, int64_t head_dim, int32_t causal) {
  fa3jit_forward_params p;
  fa3jit_forward_params_init(&p);
  p.dtype = dtype;
  p.causal = causal;
  p.batch = 1, p.seqlen_q = 128, p.seqlen_k = 128, p.num_heads = 1, p.num_heads_kv = 1, p.head_dim = head_dim;
  fa3jit_tensor* ts[4] = {&p.q, &p.k, &p.v, &p.out};
  for (int i = 0; i < 4; ++i)
    *ts[i] = fa3jit_tensor{reinterpret_cast<void*>(g_allocations[4 + i % 2].start + (i / 2) * (1 << 23)),
                           128 * head_dim, head_dim, head_dim};
  return fa3jit_attention_forward(g_runtime, nullptr, &p, nullptr);
}

// Statuses seen, printed at exit when FA3JIT_FUZZ_STATS is set: shows how many calls got through to a launch.
std::array<uint64_t, 10> g_statuses{};
void print_statuses() {
  for (int i = 0; i < 10; ++i)
    if (g_statuses[i]) std::fprintf(stderr, "fuzz_c_api: %-18s %llu\n", fa3jit_status_name(static_cast<fa3jit_status>(i)),
                                    static_cast<unsigned long long>(g_statuses[i]));
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "fuzz_c_api: %s\n", what);
  std::exit(2);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("FA3JIT_LOG", "quiet", 1);
  // The runtime dlopens libcuda.so.1 on its first forward call; this must be the fake, never a GPU's driver.
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (cuda == nullptr) die("libcuda.so.1 not found; run with LD_LIBRARY_PATH=<build>/fake_driver (tools/fuzz.sh)");
  g_fake.last_launch = reinterpret_cast<int (*)(FakeCudaLaunch*)>(dlsym(cuda, "fake_cuda_last_launch"));
  g_fake.launch = reinterpret_cast<int (*)(int, FakeCudaLaunch*)>(dlsym(cuda, "fake_cuda_launch"));
  g_fake.alloc = reinterpret_cast<uint64_t (*)(uint64_t)>(dlsym(cuda, "fake_cuda_alloc"));
  auto set_param_bytes = reinterpret_cast<void (*)(uint64_t)>(dlsym(cuda, "fake_cuda_set_param_bytes"));
  auto set_param_bytes_for =
      reinterpret_cast<void (*)(const char*, uint64_t)>(dlsym(cuda, "fake_cuda_set_param_bytes_for"));
  if (!g_fake.last_launch || !g_fake.launch || !g_fake.alloc || !set_param_bytes || !set_param_bytes_for)
    die("the libcuda.so.1 found is not the fake driver (tests/fake_driver); refusing to run against a real one");
  set_param_bytes(sizeof(fa3jit::attention_fwd::Params));
  set_param_bytes_for("fa3jit_attention_combine", sizeof(fa3jit::attention_combine::Params));
  if (std::getenv("FA3JIT_FUZZ_STATS") != nullptr) std::atexit(print_statuses);
  for (uint64_t bytes : kAllocationBytes) g_allocations.push_back({g_fake.alloc(bytes), bytes});

  fa3jit_runtime_options options = {sizeof(options), nullptr};  // cache: FA3JIT_CACHE_DIR
  if (fa3jit_runtime_create(&options, &g_runtime) != FA3JIT_OK) die(fa3jit_last_error());
  for (fa3jit_dtype dtype : {FA3JIT_DTYPE_FP16, FA3JIT_DTYPE_BF16})
    for (int64_t head_dim : {64, 128, 256})
      for (int32_t causal : {0, 1})
        if (warm_call(dtype, head_dim, causal) != FA3JIT_OK) die(fa3jit_last_error());
  if (fa3jit_kernel_create(g_runtime, R"({"dtype": "bf16", "head_dim": 128})", &g_attention_kernel) != FA3JIT_OK)
    die(fa3jit_last_error());
  if (fa3jit_kernel_create(g_runtime, R"({"kind": "attention_combine", "out_dtype": "bf16", "head_dim_v": 128})",
                           &g_combine_kernel) != FA3JIT_OK)
    die(fa3jit_last_error());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  // Room for any struct_size the library accepts (it reads up to 4096 bytes to check that unknown trailing
  // fields are zero), so a fuzzed struct_size never makes the library read past the caller's object.
  alignas(fa3jit_forward_params) unsigned char buffer[4096 + 64] = {};
  auto& p = *reinterpret_cast<fa3jit_forward_params*>(buffer);
  p.struct_size = sizeof(p);
  if (in.ConsumeIntegralInRange<int>(0, 15) == 15) p.struct_size = in.ConsumeIntegralInRange<size_t>(0, sizeof(buffer));
  if (in.ConsumeIntegralInRange<int>(0, 31) == 31) buffer[in.ConsumeIntegralInRange<size_t>(sizeof(p), sizeof(buffer) - 1)] = 1;

  // Stored as a C caller would store any int: through the bytes (an out-of-range enum value is no C++ UB then).
  const int32_t dtype = in.ConsumeIntegralInRange<int>(0, 15) == 15 ? in.ConsumeIntegral<int32_t>()
                                                                    : in.ConsumeIntegralInRange<int>(0, 2);
  std::memcpy(&p.dtype, &dtype, sizeof(dtype));
  // out_dtype and quant as a caller sets them: mostly the init default / a valid value, sometimes any int.
  const int32_t out_dtype = in.ConsumeIntegralInRange<int>(0, 15) == 15 ? in.ConsumeIntegral<int32_t>()
                                                                        : in.ConsumeIntegralInRange<int>(-1, 2);
  std::memcpy(&p.out_dtype, &out_dtype, sizeof(out_dtype));
  p.quant = in.ConsumeIntegralInRange<int>(0, 15) == 15 ? in.ConsumeIntegral<int32_t>() : in.ConsumeIntegralInRange<int>(0, 2);
  p.causal = in.ConsumeIntegralInRange<int>(0, 15) == 15 ? in.ConsumeIntegral<int32_t>() : in.ConsumeBool();
  p.batch = pick_extent(in);
  p.seqlen_q = pick_extent(in);
  p.seqlen_k = pick_extent(in);
  p.num_heads_kv = pick_extent(in);
  p.num_heads = in.ConsumeBool() ? static_cast<int64_t>(static_cast<uint64_t>(p.num_heads_kv) *
                                                        in.ConsumeIntegralInRange<uint64_t>(1, 8))
                                 : pick_extent(in);
  p.head_dim = pick_head_dim(in);
  p.head_dim_v = in.ConsumeIntegralInRange<int>(0, 7) == 7 ? pick_head_dim(in) : 0;
  const int64_t dv = p.head_dim_v == 0 ? p.head_dim : p.head_dim_v;
  p.q = pick_tensor(in, 0, p.seqlen_q, p.num_heads, p.head_dim);
  p.k = pick_tensor(in, 1, p.seqlen_k, p.num_heads_kv, p.head_dim);
  p.v = pick_tensor(in, 2, p.seqlen_k, p.num_heads_kv, dv);
  p.out = in.ConsumeIntegralInRange<int>(0, 7) == 7 ? p.q : pick_tensor(in, 3, p.seqlen_q, p.num_heads, dv);
  p.lse = in.ConsumeBool() ? nullptr : static_cast<float*>(pick_pointer(in, true, 4));
  p.softmax_scale = in.ConsumeBool() ? in.ConsumeFloatingPoint<float>() : 0.0f;
  // Splits: mostly none; the heuristic, a few, or out of range (dense q and K/V: the tensor-map checks below hold).
  p.num_splits = in.PickValueInArray<int32_t>({1, 1, 1, 1, 0, 2, 7, -1, 300});
  if (in.ConsumeIntegralInRange<int>(0, 7) == 7) {
    p.workspace = pick_pointer(in, true, in.ConsumeIntegralInRange<size_t>(0, 4));
    p.workspace_bytes = in.ConsumeIntegral<size_t>();
  }
  void* stream = nullptr;
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 5: stream = reinterpret_cast<void*>(uintptr_t{1}); break;  // CU_STREAM_LEGACY
    case 6: stream = reinterpret_cast<void*>(uintptr_t{2}); break;  // CU_STREAM_PER_THREAD
    case 7: stream = reinterpret_cast<void*>(in.ConsumeIntegral<uintptr_t>() | 0x1000); break;
    default: break;
  }
  const fa3jit_kernel* kernel = nullptr;
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 6: kernel = g_attention_kernel; break;
    case 7: kernel = g_combine_kernel; break;
    default: break;
  }

  const int before = g_fake.last_launch(nullptr);
  const fa3jit_status status = fa3jit_attention_forward(g_runtime, kernel, &p, stream);
  const int launches = g_fake.last_launch(nullptr) - before;
  FUZZ_REQUIRE(status >= FA3JIT_OK && status <= FA3JIT_ERROR_INTERNAL, "status %d is outside the enum", status);
  ++g_statuses[status];
  if (status != FA3JIT_OK) {
    FUZZ_REQUIRE(*fa3jit_last_error() != '\0', "status %s without a message", fa3jit_status_name(status));
    FUZZ_REQUIRE(status != FA3JIT_ERROR_INTERNAL, "internal error: %s", fa3jit_last_error());
    FUZZ_REQUIRE(launches == 0, "a refused call (%s: %s) launched", fa3jit_status_name(status), fa3jit_last_error());
    return 0;
  }
  // One launch, or with split-KV (num_splits 0 or > 1) the attention kernel and then the combine kernel.
  FUZZ_REQUIRE(launches == 1 || (launches == 2 && p.num_splits != 1), "an accepted call (num_splits %d) launched %d "
               "times", p.num_splits, launches);
  FakeCudaLaunch attention{};
  FUZZ_REQUIRE(g_fake.launch(before + 1, &attention) == 1, "launch %d not recorded", before + 1);
  FUZZ_REQUIRE(std::strncmp(attention.kernel_name, "fa3jit_attention_fwd_", 21) == 0, "first launch is %s",
               attention.kernel_name);
  check_launch(p, attention);
  if (launches == 2) {
    FakeCudaLaunch combine{};
    FUZZ_REQUIRE(g_fake.launch(before + 2, &combine) == 1, "launch %d not recorded", before + 2);
    FUZZ_REQUIRE(std::strncmp(combine.kernel_name, "fa3jit_attention_combine_", 25) == 0, "second launch is %s",
                 combine.kernel_name);
    FUZZ_REQUIRE(p.workspace != nullptr && inside_allocation(reinterpret_cast<uint64_t>(p.workspace), 1),
                 "a split call launched without a workspace inside an allocation");
    // The combine kernel waits for the split kernel itself (griddepcontrol.wait), so it is launched with
    // programmatic stream serialization; the attention kernel never is (it does not wait).
    FUZZ_REQUIRE(combine.programmatic_serialization == 1, "the combine launch lacks programmatic serialization");
  }
  FUZZ_REQUIRE(attention.programmatic_serialization == 0, "the attention kernel was launched with programmatic "
               "serialization");
  if (kernel == nullptr) {
    // The plan of the call (fa3jit_attention_plan), from the params and from their shapes alone (no tensor), is what
    // the launch did: as many splits, and the workspace it sized.
    fa3jit::attention_fwd::Params launched;
    std::memcpy(&launched, attention.params, sizeof(launched));
    fa3jit_forward_params shapes = p;  // this header's bytes only: a larger struct_size's trailing zeros are not copied
    shapes.struct_size = std::min(p.struct_size, sizeof(shapes));
    for (fa3jit_tensor* t : {&shapes.q, &shapes.k, &shapes.v, &shapes.out}) t->data = nullptr;
    for (const fa3jit_forward_params* asked : {&p, &shapes}) {
      fa3jit_call_plan plan;
      plan.struct_size = sizeof(plan);
      FUZZ_REQUIRE(fa3jit_attention_plan(g_runtime, nullptr, asked, &plan) == FA3JIT_OK,
                   "the plan of an accepted call failed: %s", fa3jit_last_error());
      FUZZ_REQUIRE(plan.num_splits == launched.num_splits && (launches == 2) == (plan.num_splits > 1),
                   "the plan says %d splits, the launch ran %d (%d launches)", plan.num_splits, launched.num_splits,
                   launches);
      // Without a split the plan's workspace is none or a causal persistent grid's tile counter, which the launch
      // used only from a workspace it was given (else the static order); a split's fits the call's.
      FUZZ_REQUIRE(plan.num_splits == 1 ? plan.workspace_bytes == 0 || plan.workspace_bytes == 16
                                        : plan.workspace_bytes <= p.workspace_bytes,
                   "the plan's workspace %zu bytes, the call's %zu", plan.workspace_bytes, p.workspace_bytes);
      FUZZ_REQUIRE(launched.tile_counter == nullptr ||
                       (plan.workspace_bytes == 16 && launched.tile_counter == p.workspace && p.workspace_bytes >= 16),
                   "the launch counted tiles at %p; the plan's workspace %zu bytes, the call's %p (%zu bytes)",
                   static_cast<void*>(launched.tile_counter), plan.workspace_bytes, p.workspace, p.workspace_bytes);
    }
  }
  return 0;
}

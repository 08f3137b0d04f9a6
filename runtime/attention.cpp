// Runtime: spec -> (emit, compile or cache) -> loaded kernel -> validated launch.
#include "runtime/attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "generator/emit.h"
#include "generator/error.h"
#include "generator/tile_table.h"
#include "runtime/arguments.h"
#include "runtime/compiler.h"
#include "runtime/driver.h"
#include "runtime/log.h"

namespace fa3jit {

// Mirrors templates/hopper/types.cuh FwdParams byte for byte.
struct FwdParams {
  int seqlen_q;
  int seqlen_k;
  int num_heads;
  int head_group;
  int batch;
  int num_m_blocks;
  int section_heads;
  int reserved;
  float softmax_scale;
  float scale_log2;
  float* lse;
};
static_assert(sizeof(FwdParams) == 48, "FwdParams must match the kernel's layout");

class LoadedKernel {
 public:
  LoadedKernel(KernelConfig config, std::shared_ptr<const CompiledKernel> compiled)
      : config_(std::move(config)), compiled_(std::move(compiled)) {
    const Driver& d = driver();
    check_cu(d.cuLibraryLoadData(&library_, compiled_->cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
             "cuLibraryLoadData (loading the compiled attention kernel)");
    check_cu(d.cuLibraryGetKernel(&kernel_, library_, compiled_->kernel_name.c_str()), "cuLibraryGetKernel");
  }
  ~LoadedKernel() {
    try {
      driver().cuLibraryUnload(library_);
    } catch (...) {
    }
  }
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;

  const KernelConfig& config() const { return config_; }

  /// The function for the current context, with its dynamic shared-memory limit raised (once per context).
  CUfunction function_for(CUcontext ctx) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = functions_.find(ctx);
    if (it != functions_.end()) return it->second;
    const Driver& d = driver();
    CUfunction f = nullptr;
    check_cu(d.cuKernelGetFunction(&f, kernel_), "cuKernelGetFunction");
    check_cu(d.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, config_.smem_bytes),
             "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    functions_.emplace(ctx, f);
    return f;
  }

 private:
  KernelConfig config_;
  std::shared_ptr<const CompiledKernel> compiled_;
  CUlibrary library_ = nullptr;
  CUkernel kernel_ = nullptr;
  std::mutex mu_;
  std::map<CUcontext, CUfunction> functions_;
};

namespace {

[[noreturn]] void bad_argument(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }

// 4-D tensor map {dim, seqlen, heads, batch} with a {64, box_rows, 1, 1} box and 128-byte swizzle
// (docs/kernel-design.md §3): one box is one 64-column block of a tile.
CUtensorMap make_tensor_map(const TensorView& t, const TensorShape& s, CUtensorMapDataType type, int box_rows) {
  // A size-1 dimension's stride is never stepped, whatever the caller passed (DLPack producers often give
  // 1 or 0): hand TMA any valid value, the row size rounded up to 16 bytes.
  const auto unused_stride = static_cast<cuuint64_t>((s.dim * 2 + 15) / 16 * 16);
  auto stride_or = [&](int64_t extent, int64_t stride) {
    return extent == 1 ? unused_stride : static_cast<cuuint64_t>(stride * 2);
  };
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(s.dim), static_cast<cuuint64_t>(s.seqlen),
                              static_cast<cuuint64_t>(s.heads), static_cast<cuuint64_t>(s.batch)};
  const cuuint64_t strides[3] = {stride_or(s.seqlen, t.stride_seq), stride_or(s.heads, t.stride_head),
                                 stride_or(s.batch, t.stride_batch)};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  check_cu(driver().cuTensorMapEncodeTiled(&map, type, 4, t.data, dims, strides, box, elem_strides,
                                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           fmt::format("cuTensorMapEncodeTiled for {}", s.name).c_str());
  return map;
}

}  // namespace

struct Runtime::Impl {
  explicit Impl(const RuntimeOptions& o) : cache(o.cache_dir) {}
  CubinCache cache;
  std::mutex mu;
  std::map<std::string, std::shared_ptr<LoadedKernel>> loaded;  // by kernel_name(spec)

  std::shared_ptr<LoadedKernel> load(Runtime& rt, const Spec& spec) {
    const std::string name = kernel_name(spec);
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = loaded.find(name);
      if (it != loaded.end()) return it->second;
    }
    PreparedKernel prepared = rt.prepare(spec);  // compiles outside the lock; the cache compiles once per key
    auto kernel = std::make_shared<LoadedKernel>(prepared.config, prepared.compiled);
    std::lock_guard<std::mutex> lock(mu);
    return loaded.emplace(name, std::move(kernel)).first->second;
  }
};

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>(options)) {}
Runtime::~Runtime() = default;

CubinCache& Runtime::cache() { return impl_->cache; }

PreparedKernel Runtime::prepare(const Spec& spec) {
  PreparedKernel out{make_kernel_config(spec), {}, false, 0.0, nullptr};
  const KernelSource source = emit_kernel(out.config);
  out.key = cache_key(canonical_kernel_string(spec), source.code, default_compile_flags(), nvrtc_version_string(),
                      kTargetArch, kGeneratorVersion);
  CacheLookup lookup = impl_->cache.get_or_compile(out.key, [&] { return compile_kernel(source); });
  if (lookup.kernel->kernel_name != source.kernel_name)
    throw Error(ErrorCode::kCacheError,
                fmt::format("the cache entry for key {:.12} in {} holds kernel {}, not {}; it was not written by this "
                            "fa3jit for this spec: run `fa3jit cache clear`",
                            out.key, impl_->cache.directory(), lookup.kernel->kernel_name, source.kernel_name));
  out.cache_hit = lookup.hit;
  out.ms = lookup.ms;
  out.compiled = lookup.kernel;
  const ResourceReport& r = out.compiled->report;
  if (r.spill_store_bytes > 0 || r.spill_load_bytes > 0)
    log(LogLevel::kWarn, fmt::format("kernel {} spills registers ({} bytes stored, {} loaded): expect it to be slow",
                                     source.kernel_name, r.spill_store_bytes, r.spill_load_bytes));
  return out;
}

Spec default_spec_for(DType dtype, int head_dim, int head_dim_v, bool causal) {
  nlohmann::json doc = {{"dtype", dtype_name(dtype)}, {"head_dim", head_dim}, {"causal", causal}};
  if (head_dim_v != 0) doc["head_dim_v"] = head_dim_v;
  return parse_spec(doc);
}

void Runtime::forward(const ForwardArgs& args, void* stream) {
  if (args.head_dim != 64 && args.head_dim != 128 && args.head_dim != 256)
    bad_argument(fmt::format("argument head_dim = {} is not supported; supported head dims are 64, 128, 256",
                             args.head_dim));
  if (args.dtype == DType::kE4m3) throw Error(ErrorCode::kUnsupported, "argument dtype = e4m3 is not yet supported");
  if (args.head_dim_v != 0 && args.head_dim_v != args.head_dim)
    throw Error(ErrorCode::kUnsupported,
                fmt::format("argument head_dim_v = {} is not supported; head_dim_v must equal head_dim ({}) in this "
                            "release", args.head_dim_v, args.head_dim));
  // With one query row the bottom-right causal mask hides no key (row 0 sees j <= seqlen_k - 1), so a
  // decode step runs the non-causal kernel and gives exactly the non-causal result (FA3 does the same).
  ForwardArgs a = args;
  if (a.causal && a.seqlen_q == 1) a.causal = false;
  forward(default_spec_for(a.dtype, static_cast<int>(a.head_dim), static_cast<int>(a.head_dim_v), a.causal), a,
          stream);
}

void Runtime::forward(const Spec& spec, const ForwardArgs& a, void* stream) {
  const ValidatedArgs v = validate_forward_args(spec, a, stream);
  const Driver& d = driver();
  const int64_t batch = v.batch, seqlen_q = v.seqlen_q, seqlen_k = v.seqlen_k;
  const int64_t num_heads = v.num_heads, num_heads_kv = v.num_heads_kv, head_dim_v = v.head_dim_v;
  const int elem = v.elem_bytes;
  const float scale = v.softmax_scale;
  const TensorShape &q_shape = v.q, &k_shape = v.k, &v_shape = v.v, &o_shape = v.out;

  // ---- kernel, tensor maps, launch ----
  std::shared_ptr<LoadedKernel> kernel = impl_->load(*this, spec);
  const KernelConfig& cfg = kernel->config();
  const CUtensorMapDataType type =
      a.dtype == DType::kBf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  CUtensorMap tm_q = make_tensor_map(a.q, q_shape, type, spec.block_m);
  // With a cluster each CTA loads half of every K/V block and multicasts it (templates/mainloop.cuh).
  CUtensorMap tm_k = make_tensor_map(a.k, k_shape, type, spec.block_n / spec.cluster_m);
  CUtensorMap tm_v = make_tensor_map(a.v, v_shape, type, spec.block_n / spec.cluster_m);
  CUtensorMap tm_o = make_tensor_map(a.out, o_shape, type, 64);
  // With a 2-CTA cluster both CTAs must work on one head: round the row blocks per head up to even (the
  // extra block's rows lie past seqlen_q: TMA zero-fills its Q and drops its O).
  const int64_t num_m_blocks = (seqlen_q + spec.block_m - 1) / spec.block_m;
  const int64_t launch_m_blocks = (num_m_blocks + spec.cluster_m - 1) / spec.cluster_m * spec.cluster_m;
  int64_t num_tiles = 0;
  if (__builtin_mul_overflow(launch_m_blocks, num_heads * batch, &num_tiles) || num_heads * batch > 0x7fffffff ||
      num_tiles > 0x7fffffff)
    bad_argument(fmt::format("arguments batch {} x num_heads {} x seqlen_q {} make more than 2^31 tiles", batch,
                             num_heads, seqlen_q));
  // Causal tile order (templates/scheduler.cuh): as many (head, batch) pairs per section as keep their K and
  // V within ~32 MB of L2 (FA3's section size); query heads of one KV head share it.
  const int64_t kv_bytes_per_head =
      std::max<int64_t>(1, seqlen_k * (a.head_dim + head_dim_v) * elem * num_heads_kv / num_heads);
  const int64_t section_heads = std::clamp<int64_t>((int64_t{32} << 20) / kv_bytes_per_head, 1, num_heads * batch);
  FwdParams params{static_cast<int>(seqlen_q),     static_cast<int>(seqlen_k),
                   static_cast<int>(num_heads),    static_cast<int>(num_heads / num_heads_kv),
                   static_cast<int>(batch),        static_cast<int>(launch_m_blocks),
                   static_cast<int>(section_heads), 0,
                   scale,                          scale * 1.4426950408889634f,
                   a.lse};
  void* kernel_args[] = {&tm_q, &tm_k, &tm_v, &tm_o, &params};

  CUcontext ctx = nullptr;
  check_cu(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  CUlaunchConfig launch{};
  launch.gridDimX = static_cast<unsigned>(num_tiles);
  launch.gridDimY = 1;
  launch.gridDimZ = 1;
  launch.blockDimX = static_cast<unsigned>(cfg.num_threads);
  launch.blockDimY = 1;
  launch.blockDimZ = 1;
  launch.sharedMemBytes = static_cast<unsigned>(cfg.smem_bytes);
  launch.hStream = static_cast<CUstream>(stream);
  CUlaunchAttribute cluster{};
  if (spec.cluster_m > 1) {
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim.x = static_cast<unsigned>(spec.cluster_m);
    cluster.value.clusterDim.y = 1;
    cluster.value.clusterDim.z = 1;
    launch.attrs = &cluster;
    launch.numAttrs = 1;
  }
  check_cu(d.cuLaunchKernelEx(&launch, kernel->function_for(ctx), kernel_args, nullptr), "launching the attention kernel");
}

}  // namespace fa3jit

// FP8 pre-pass launch path (launch.h): argument checks, plan cache, device checks, parameters, three launches.
#include "kernels/quantize_fp8/launch.h"

#include "kernels/attention_fwd/device/fp8_v_layout.h"

#include <algorithm>
#include <map>
#include <memory>
#include <shared_mutex>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "jit/driver.h"
#include "jit/loaded_kernel.h"
#include "kernels/quantize_fp8/emit.h"
#include "kernels/quantize_fp8/geometry.h"
#include "kernels/quantize_fp8/params.h"

namespace fa3jit::quantize_fp8 {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The arguments after the arithmetic checks, and the grid numbers derived from them and the geometry.
struct CallShape {
  int64_t batch, seqlen_q, seqlen_k, num_heads, num_heads_kv;
  int64_t q_blocks, k_blocks, q_num_blocks, k_num_blocks;
  int64_t q_clusters, k_clusters, v_chunks, v_units, v_descale_count;
  unsigned qk_grid, v_grid;  // CTAs of kPassQk (whole clusters) and of each V pass (one per V unit)
};

// v8 as (batch, rows, heads, row elements): (batch, seqlen_k, num_heads_kv, head_dim_v), or with v_layout d_major
// V transposed, (batch, head_dim_v channels, num_heads_kv, d_major_keys(seqlen_k)): stride_seq is then the stride
// between channels (kernels/attention_fwd/launch.h: ForwardArgs::v).
TensorShape v8_shape(const Spec& spec, const CallShape& s) {
  return spec.v_d_major ? TensorShape{"v8", s.batch, spec.head_dim_v, s.num_heads_kv, attention_fwd::d_major_keys(s.seqlen_k),
                                      kDMajorExtents}
                        : TensorShape{"v8", s.batch, s.seqlen_k, s.num_heads_kv, spec.head_dim_v};
}

void check_aligned(const void* ptr, unsigned alignment, const char* name, const char* why) {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  if (addr % alignment != 0)
    bad_argument(fmt::format("argument {} = {:#x} is not {}-byte aligned; {}", name, addr, alignment, why));
}

void check_view_pointer(const TensorView& t, const char* name) {
  if (t.data == nullptr) bad_argument(fmt::format("argument {}.data is null", name));
  check_aligned(t.data, 16, name, "the kernel moves 16 bytes at a time");
}

int64_t checked_count(int64_t a, int64_t b, int64_t c, const char* what) {
  const int64_t n = checked_mul_add(checked_mul_add(a, b, 0, what), c, 0, what);
  if (n > kMaxIndex)
    bad_argument(fmt::format("arguments make {} = {}; at most {} are allowed (the kernel's indices are 32-bit)", what,
                             n, kMaxIndex));
  return n;
}

// Arithmetic checks only: no driver, no allocation, no string on success.
CallShape check_shape(const Spec& spec, const Geometry& g, const QuantizeArgs& a) {
  CallShape s{};
  s.batch = checked_extent(a.batch, "batch", kMaxIndex);
  s.seqlen_q = checked_extent(a.seqlen_q, "seqlen_q", kMaxIndex);
  s.seqlen_k = checked_extent(a.seqlen_k, "seqlen_k", kMaxIndex);
  s.num_heads = checked_extent(a.num_heads, "num_heads", kMaxIndex);
  s.num_heads_kv = checked_extent(a.num_heads_kv, "num_heads_kv", kMaxIndex);
  s.q_blocks = ceil_div(s.seqlen_q, spec.q_block_rows);
  s.k_blocks = ceil_div(s.seqlen_k, spec.k_block_rows);
  s.q_num_blocks = checked_count(s.batch, s.num_heads, s.q_blocks, "batch x num_heads x Q blocks");
  s.k_num_blocks = checked_count(s.batch, s.num_heads_kv, s.k_blocks, "batch x num_heads_kv x K blocks");
  s.q_clusters = ceil_div(s.q_num_blocks, g.q.blocks_per_cluster);
  s.k_clusters = ceil_div(s.k_num_blocks, g.k.blocks_per_cluster);
  const int64_t qk_ctas = (s.q_clusters + s.k_clusters) * g.cluster_size;
  s.v_chunks = ceil_div(s.seqlen_k, g.v_rows_per_cta);
  s.v_units = checked_count(s.batch, s.num_heads_kv, s.v_chunks, "batch x num_heads_kv x V chunks");
  s.v_descale_count = checked_count(s.batch, s.num_heads_kv, spec.head_dim_v, "batch x num_heads_kv x head_dim_v");
  const int64_t v_ctas = s.v_units;  // the V passes run without clusters (launch_checked)
  if (qk_ctas > kMaxIndex || v_ctas > kMaxIndex)
    bad_argument(fmt::format("arguments need {} CTAs; at most {} are allowed", std::max(qk_ctas, v_ctas), kMaxIndex));
  s.qk_grid = static_cast<unsigned>(qk_ctas);
  s.v_grid = static_cast<unsigned>(v_ctas);

  check_view_pointer(a.q, "q");
  check_view_pointer(a.k, "k");
  check_view_pointer(a.v, "v");
  check_view_pointer(a.q8, "q8");
  check_view_pointer(a.k8, "k8");
  check_view_pointer(a.v8, "v8");
  const struct {
    const float* ptr;
    const char* name;
  } descales[] = {{a.q_descale, "q_descale"}, {a.k_descale, "k_descale"}, {a.v_descale, "v_descale"}};
  for (const auto& d : descales) {
    if (d.ptr == nullptr) bad_argument(fmt::format("argument {} is null", d.name));
    check_aligned(d.ptr, 4, d.name, "float32 expected");
  }
  if (spec.rope == Rope::kNone) {
    if (a.rope_cos != nullptr || a.rope_sin != nullptr)
      bad_argument("argument rope_cos / rope_sin is set, but the kernel spec has rope \"none\"; pass null tables or "
                   "choose rope \"neox\" or \"interleaved\"");
  } else {
    if (a.rope_cos == nullptr) bad_argument(fmt::format("argument rope_cos is null; rope \"{}\" needs it", rope_name(spec.rope)));
    if (a.rope_sin == nullptr) bad_argument(fmt::format("argument rope_sin is null; rope \"{}\" needs it", rope_name(spec.rope)));
    check_aligned(a.rope_cos, 16, "rope_cos", "the kernel reads the table 16 bytes at a time");
    check_aligned(a.rope_sin, 16, "rope_sin", "the kernel reads the table 16 bytes at a time");
    const int64_t needed = std::max(s.seqlen_q, s.seqlen_k);
    if (a.rope_max_seqlen < needed)
      bad_argument(fmt::format("argument rope_max_seqlen = {} is shorter than the sequences; the cos/sin tables need "
                               ">= max(seqlen_q, seqlen_k) = {} rows (token s uses row s)",
                               a.rope_max_seqlen, needed));
  }
  check_no_self_overlap(a.q8, TensorShape{"q8", s.batch, s.seqlen_q, s.num_heads, spec.head_dim});
  check_no_self_overlap(a.k8, TensorShape{"k8", s.batch, s.seqlen_k, s.num_heads_kv, spec.head_dim});
  check_no_self_overlap(a.v8, v8_shape(spec, s));
  return s;
}

// Device-side checks: every tensor on q's device, inside its allocation (with its strides), the outputs
// overlapping nothing. Returns the context the call runs in.
CUcontext check_device_tensors(const Spec& spec, const QuantizeArgs& a, const CallShape& s, void* stream) {
  const CallDevice device = call_device(a.q.data, "q.data", "q");
  check_context_and_stream(device, stream);
  const int in_bytes = dtype_size(spec.dtype);
  const ByteRange q = check_tensor(a.q, TensorShape{"q", s.batch, s.seqlen_q, s.num_heads, spec.head_dim}, in_bytes, device);
  const ByteRange k = check_tensor(a.k, TensorShape{"k", s.batch, s.seqlen_k, s.num_heads_kv, spec.head_dim}, in_bytes, device);
  const ByteRange v = check_tensor(a.v, TensorShape{"v", s.batch, s.seqlen_k, s.num_heads_kv, spec.head_dim_v}, in_bytes, device);
  const ByteRange q8 = check_tensor(a.q8, TensorShape{"q8", s.batch, s.seqlen_q, s.num_heads, spec.head_dim}, 1, device);
  const ByteRange k8 = check_tensor(a.k8, TensorShape{"k8", s.batch, s.seqlen_k, s.num_heads_kv, spec.head_dim}, 1, device);
  const ByteRange v8 = check_tensor(a.v8, v8_shape(spec, s), 1, device);
  const TensorShape qd_shape{"q_descale", s.batch, s.num_heads, s.q_blocks, 1};
  const TensorShape kd_shape{"k_descale", s.batch, s.num_heads_kv, s.k_blocks, 1};
  const TensorShape vd_shape{"v_descale", s.batch, s.num_heads_kv, spec.head_dim_v, 1};
  const ByteRange qd = check_allocation(a.q_descale, static_cast<uint64_t>(s.q_num_blocks) * 4, device, "q_descale", &qd_shape, nullptr);
  const ByteRange kd = check_allocation(a.k_descale, static_cast<uint64_t>(s.k_num_blocks) * 4, device, "k_descale", &kd_shape, nullptr);
  const ByteRange vd = check_allocation(a.v_descale, static_cast<uint64_t>(s.v_descale_count) * 4, device, "v_descale", &vd_shape, nullptr);
  struct Named {
    ByteRange range;
    const char* name;
  };
  Named inputs[5] = {{q, "q"}, {k, "k"}, {v, "v"}, {}, {}};
  int num_inputs = 3;
  if (spec.rope != Rope::kNone) {
    const uint64_t table_bytes =
        static_cast<uint64_t>(checked_mul_add(a.rope_max_seqlen, spec.rotary_dim / 2 * 4, 0, "the RoPE tables' size"));
    inputs[num_inputs++] = {check_allocation(a.rope_cos, table_bytes, device, "rope_cos", nullptr, nullptr), "rope_cos"};
    inputs[num_inputs++] = {check_allocation(a.rope_sin, table_bytes, device, "rope_sin", nullptr, nullptr), "rope_sin"};
  }
  const Named outputs[] = {{q8, "q8"}, {k8, "k8"}, {v8, "v8"}, {qd, "q_descale"}, {kd, "k_descale"}, {vd, "v_descale"}};
  for (size_t i = 0; i < std::size(outputs); ++i) {
    for (int j = 0; j < num_inputs; ++j)
      if (outputs[i].range.overlaps(inputs[j].range))
        bad_argument(fmt::format("argument {} overlaps {}; the pre-pass cannot run in place", outputs[i].name,
                                 inputs[j].name));
    for (size_t j = 0; j < i; ++j)
      if (outputs[i].range.overlaps(outputs[j].range))
        bad_argument(fmt::format("argument {} overlaps {}; outputs must be disjoint", outputs[i].name, outputs[j].name));
  }
  return device.ctx;
}

// A size-1 dimension's index is always 0: its stride (whatever the caller passed) is never used.
long long used_stride(int64_t stride, int64_t extent) { return extent == 1 ? 0 : stride; }

Params make_params(const Spec& spec, const QuantizeArgs& a, const CallShape& s) {
  Params p{};
  p.q = a.q.data;
  p.k = a.k.data;
  p.v = a.v.data;
  p.q8 = a.q8.data;
  p.k8 = a.k8.data;
  p.v8 = a.v8.data;
  p.q_descale = a.q_descale;
  p.k_descale = a.k_descale;
  p.v_descale = a.v_descale;
  p.rope_cos = a.rope_cos;
  p.rope_sin = a.rope_sin;
  p.q_stride_batch = used_stride(a.q.stride_batch, s.batch);
  p.q_stride_seq = used_stride(a.q.stride_seq, s.seqlen_q);
  p.q_stride_head = used_stride(a.q.stride_head, s.num_heads);
  p.k_stride_batch = used_stride(a.k.stride_batch, s.batch);
  p.k_stride_seq = used_stride(a.k.stride_seq, s.seqlen_k);
  p.k_stride_head = used_stride(a.k.stride_head, s.num_heads_kv);
  p.v_stride_batch = used_stride(a.v.stride_batch, s.batch);
  p.v_stride_seq = used_stride(a.v.stride_seq, s.seqlen_k);
  p.v_stride_head = used_stride(a.v.stride_head, s.num_heads_kv);
  p.q8_stride_batch = used_stride(a.q8.stride_batch, s.batch);
  p.q8_stride_seq = used_stride(a.q8.stride_seq, s.seqlen_q);
  p.q8_stride_head = used_stride(a.q8.stride_head, s.num_heads);
  p.k8_stride_batch = used_stride(a.k8.stride_batch, s.batch);
  p.k8_stride_seq = used_stride(a.k8.stride_seq, s.seqlen_k);
  p.k8_stride_head = used_stride(a.k8.stride_head, s.num_heads_kv);
  p.v8_stride_batch = used_stride(a.v8.stride_batch, s.batch);
  p.v8_stride_seq = used_stride(a.v8.stride_seq, spec.v_d_major ? static_cast<int64_t>(spec.head_dim_v) : s.seqlen_k);
  p.v8_stride_head = used_stride(a.v8.stride_head, s.num_heads_kv);
  p.seed = a.seed;
  p.batch = static_cast<int>(s.batch);
  p.seqlen_q = static_cast<int>(s.seqlen_q);
  p.seqlen_k = static_cast<int>(s.seqlen_k);
  p.num_heads = static_cast<int>(s.num_heads);
  p.num_heads_kv = static_cast<int>(s.num_heads_kv);
  p.q_blocks = static_cast<int>(s.q_blocks);
  p.k_blocks = static_cast<int>(s.k_blocks);
  p.q_num_blocks = static_cast<int>(s.q_num_blocks);
  p.k_num_blocks = static_cast<int>(s.k_num_blocks);
  p.q_clusters = static_cast<int>(s.q_clusters);
  p.v_chunks = static_cast<int>(s.v_chunks);
  p.v_units = static_cast<int>(s.v_units);
  p.v_descale_count = static_cast<int>(s.v_descale_count);
  return p;
}

// ---- plan cache ---------------------------------------------------------------------------------------

// The runtime's plans: one loaded kernel per spec, kept for the runtime's life. Found by Spec equality (its
// defaulted operator==), so a field added to Spec can never be left out of the key; a process holds a handful.
struct Plans {
  std::shared_mutex mu;
  std::vector<std::pair<Spec, std::shared_ptr<LoadedKernel>>> by_spec;
  LoadedKernel* find(const Spec& spec) const {
    for (const auto& [s, kernel] : by_spec)
      if (s == spec) return kernel.get();
    return nullptr;
  }
};

LoadedKernel& plan_for(Runtime& runtime, const Spec& spec) {
  Plans& plans = runtime.family_state<Plans>();
  {
    std::shared_lock<std::shared_mutex> lock(plans.mu);
    if (LoadedKernel* kernel = plans.find(spec)) return *kernel;
  }
  std::shared_ptr<LoadedKernel> loaded = runtime.load(make_request(spec));  // compiles outside the lock
  std::unique_lock<std::shared_mutex> lock(plans.mu);
  if (LoadedKernel* kernel = plans.find(spec)) return *kernel;  // another thread's, loaded meanwhile
  plans.by_spec.emplace_back(spec, std::move(loaded));
  return *plans.by_spec.back().second;
}

void check_unsupported(const QuantizeArgs& a) {
  if (!supports_dtype(a.dtype))
    throw Error(ErrorCode::kUnsupported, fmt::format("argument dtype = {} is not supported; expected {}",
                                                     dtype_name(a.dtype), allowed_dtypes()));
  if (!supports_head_dim(a.head_dim))
    throw Error(ErrorCode::kUnsupported,
                fmt::format("argument head_dim = {} is not supported; expected {}", a.head_dim, allowed_head_dims()));
  if (!supports_head_dim(a.head_dim_v))
    throw Error(ErrorCode::kUnsupported, fmt::format("argument head_dim_v = {} is not supported; expected {}",
                                                     a.head_dim_v, allowed_head_dims()));
}

void launch_checked(Runtime& runtime, const Spec& spec, const QuantizeArgs& args, void* stream) {
  const Geometry g = derive_geometry(spec);
  const CallShape shape = check_shape(spec, g, args);
  const CUcontext ctx = check_device_tensors(spec, args, shape, stream);
  LoadedKernel& kernel = plan_for(runtime, spec);
  Params params = make_params(spec, args, shape);
  const auto cu_stream = static_cast<CUstream>(stream);
  // v_descale is zeroed by the first launch, merged into by the second and read by the third. The first waits for
  // everything before it on the stream (it writes q8, k8 and the descales an earlier kernel may still read); the
  // V passes are launched with programmatic stream serialization and wait for the pass before them
  // (griddepcontrol.wait) before they touch v_descale or v8, so only their V loads overlap its end. They use no
  // cluster feature (device/quantize.cuh: only kPassQk's blocks span CTAs), so they launch without the Q/K pass's
  // clusters, whose CTAs would have to be co-scheduled on one GPC.
  LaunchInvariants overlapping = kernel.launch();
  overlapping.waits_for_prerequisites = true;
  overlapping.cluster_x = 1;
  // The entries are indexed by Pass (emit.h: entry_name).
  launch_kernel(kernel.function_for(ctx, kPassQk), kernel.launch(), shape.qk_grid, &params, cu_stream,
                "launching the FP8 pre-pass (Q, K)");
  launch_kernel(kernel.function_for(ctx, kPassVAmax), overlapping, shape.v_grid, &params, cu_stream,
                "launching the FP8 pre-pass (V amax)");
  launch_kernel(kernel.function_for(ctx, kPassVQuant), overlapping, shape.v_grid, &params, cu_stream,
                "launching the FP8 pre-pass (V)");
}

}  // namespace

Spec spec_for(const QuantizeArgs& args, const QuantizeOptions& options) {
  check_unsupported(args);
  Spec spec;
  spec.dtype = args.dtype;
  spec.head_dim = static_cast<int>(args.head_dim);
  spec.head_dim_v = static_cast<int>(args.head_dim_v);
  spec.hadamard = options.hadamard;
  spec.rope = options.rope;
  spec.rotary_dim = options.rotary_dim == 0 ? spec.head_dim : options.rotary_dim;
  spec.q_block_rows = options.q_block_rows;
  spec.k_block_rows = options.k_block_rows;
  spec.v_d_major = options.v_d_major;
  validate(spec);
  return spec;
}

DescaleCounts descale_counts(const Spec& spec, const QuantizeArgs& args) {
  return {args.batch * args.num_heads * ceil_div(args.seqlen_q, spec.q_block_rows),
          args.batch * args.num_heads_kv * ceil_div(args.seqlen_k, spec.k_block_rows),
          args.batch * args.num_heads_kv * spec.head_dim_v};
}

void quantize_fp8(Runtime& runtime, const QuantizeOptions& options, const QuantizeArgs& args, void* stream) {
  launch_checked(runtime, spec_for(args, options), args, stream);
}

void quantize_fp8(Runtime& runtime, const Spec& spec, const QuantizeArgs& args, void* stream) {
  validate(spec);
  check_unsupported(args);
  if (args.dtype != spec.dtype)
    bad_argument(fmt::format("argument dtype = {} does not match the kernel spec's dtype {}", dtype_name(args.dtype),
                             dtype_name(spec.dtype)));
  if (args.head_dim != spec.head_dim)
    bad_argument(fmt::format("argument head_dim = {} does not match the kernel spec's head_dim {}", args.head_dim,
                             spec.head_dim));
  if (args.head_dim_v != spec.head_dim_v)
    bad_argument(fmt::format("argument head_dim_v = {} does not match the kernel spec's head_dim_v {}",
                             args.head_dim_v, spec.head_dim_v));
  launch_checked(runtime, spec, args, stream);
}

}  // namespace fa3jit::quantize_fp8

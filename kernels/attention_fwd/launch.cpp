// Attention forward launch path (launch.h): shape checks, plan cache, device checks, parameters, launch.
#include "kernels/attention_fwd/launch.h"

#include <cmath>
#include <cstring>
#include <utility>
#include <tuple>
#include <map>
#include <shared_mutex>

#include <fmt/format.h>

#include "core/error.h"
#include "jit/driver.h"
#include "kernels/attention_fwd/emit.h"
#include "kernels/attention_fwd/scheduler.h"

namespace fa3jit::attention_fwd {

namespace {

constexpr float kLog2e = 1.4426950408889634f;

// The arguments after the shape checks, in the units the launcher needs.
struct CallShape {
  int64_t batch, seqlen_q, seqlen_k, num_heads, num_heads_kv, head_dim, head_dim_v;
  DType out_dtype;
  int elem_bytes, out_elem_bytes;
  float softmax_scale;  // resolved: 1/sqrt(head_dim) when the argument was 0
};

// The output dtype a call asks for: given, or the default of its input dtype.
DType resolved_out_dtype(const ForwardArgs& a) { return a.out_dtype ? *a.out_dtype : default_out_dtype(a.dtype); }

// Arithmetic checks only: no driver, no allocation, no string on success.
CallShape check_shape(const ForwardArgs& a) {
  CallShape s{};
  if (!supports_dtype(a.dtype))
    throw Error(ErrorCode::kUnsupported, fmt::format("argument dtype = {} is not supported; expected {}",
                                                     dtype_name(a.dtype), allowed_dtypes()));
  s.out_dtype = resolved_out_dtype(a);
  const bool fp8 = a.dtype == DType::kE4m3;
  if (!supports_out_dtype(a.dtype, s.out_dtype))
    bad_argument(fmt::format("argument out_dtype = {} is not allowed with dtype {}; expected {}",
                             dtype_name(s.out_dtype), dtype_name(a.dtype), allowed_out_dtypes(a.dtype)));
  if (fp8 ? !(a.quant == Quant::kPerHead || a.quant == Quant::kPerBlock) : a.quant != Quant::kNone)
    bad_argument(fmt::format("argument quant = {} is not allowed with dtype {}; expected {}", quant_name(a.quant),
                             dtype_name(a.dtype), fp8 ? "per_head or per_block" : "none"));
  s.head_dim = a.head_dim;
  s.head_dim_v = a.head_dim_v == 0 ? a.head_dim : a.head_dim_v;
  if (s.head_dim < 1 || s.head_dim > 0x7fffffff || s.head_dim_v < 1 || s.head_dim_v > 0x7fffffff ||
      !supports_head_dims(a.dtype, static_cast<int>(s.head_dim), static_cast<int>(s.head_dim_v))) {
    if (s.head_dim_v != s.head_dim && s.head_dim >= 1 && s.head_dim <= 0x7fffffff &&
        supports_head_dims(a.dtype, static_cast<int>(s.head_dim), static_cast<int>(s.head_dim)))
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("argument head_dim_v = {} is not supported; head_dim_v must equal head_dim ({}) in this "
                              "release",
                              a.head_dim_v, a.head_dim));
    bad_argument(fmt::format("argument head_dim = {} is not supported for dtype {}; supported head dims are {}",
                             a.head_dim, dtype_name(a.dtype), allowed_head_dims(a.dtype)));
  }
  s.batch = checked_extent(a.batch, "batch", 0x7fffffff);
  s.seqlen_q = checked_extent(a.seqlen_q, "seqlen_q", kMaxSeqlen);
  s.seqlen_k = checked_extent(a.seqlen_k, "seqlen_k", kMaxSeqlen);
  s.num_heads = checked_extent(a.num_heads, "num_heads", 0x7fffffff);
  s.num_heads_kv = checked_extent(a.num_heads_kv, "num_heads_kv", 0x7fffffff);
  if (s.num_heads % s.num_heads_kv != 0)
    bad_argument(fmt::format("argument num_heads = {} is not a multiple of num_heads_kv = {}", s.num_heads,
                             s.num_heads_kv));
  s.softmax_scale = a.softmax_scale == 0.0f ? 1.0f / std::sqrt(static_cast<float>(a.head_dim)) : a.softmax_scale;
  // The kernel keeps the running max of the scaled scores, which is right only for a positive scale, and folds
  // scale * log2(e) into one constant that must stay finite.
  if (!(s.softmax_scale > 0.0f) || !std::isfinite(s.softmax_scale * kLog2e))
    bad_argument(fmt::format("argument softmax_scale = {} is not allowed; expected a positive finite number below "
                             "2.3e38 (0 selects 1/sqrt(head_dim))",
                             a.softmax_scale));
  if (a.lse != nullptr && reinterpret_cast<uintptr_t>(a.lse) % 4 != 0)
    bad_argument("argument lse is not 4-byte aligned (float32 expected)");
  if (a.q.data == nullptr) bad_argument("argument q.data is null");
  if (!fp8 && (a.q_descale.data || a.k_descale.data || a.v_descale.data))
    bad_argument(fmt::format("arguments q_descale, k_descale, v_descale must be null with dtype {}: descales belong "
                             "to e4m3 inputs",
                             dtype_name(a.dtype)));
  s.elem_bytes = dtype_size(a.dtype);
  s.out_elem_bytes = dtype_size(s.out_dtype);
  return s;
}

// A forced kernel must describe the same problem as the arguments; otherwise it would read the tensors with
// the wrong element size, head_dim or mask. The one place spec and arguments are compared.
void check_agrees(const Spec& spec, const ForwardArgs& a, const CallShape& s) {
  if (a.dtype != spec.dtype)
    bad_argument(fmt::format("argument dtype = {} does not match the kernel spec's dtype {}", dtype_name(a.dtype),
                             dtype_name(spec.dtype)));
  if (s.head_dim != spec.head_dim || s.head_dim_v != spec.head_dim_v)
    bad_argument(fmt::format("arguments head_dim = {}, head_dim_v = {} do not match the kernel spec ({}, {})",
                             s.head_dim, s.head_dim_v, spec.head_dim, spec.head_dim_v));
  if (s.out_dtype != spec.out_dtype)
    bad_argument(fmt::format("argument out_dtype = {} does not match the kernel spec's out_dtype {}",
                             dtype_name(s.out_dtype), dtype_name(spec.out_dtype)));
  if (a.quant != spec.quant)
    bad_argument(fmt::format("argument quant = {} does not match the kernel spec's quant {}", quant_name(a.quant),
                             quant_name(spec.quant)));
  if (a.causal != spec.causal)
    bad_argument(fmt::format("argument causal = {} does not match the kernel spec's causal {}", a.causal,
                             spec.causal));
}

// 4-D tensor map {dim, seqlen, heads, batch} with a {128 bytes, box_rows, 1, 1} box and 128-byte swizzle
// (docs/kernel-design.md §3): one box is one 128-byte column block of a tile (64 16-bit or 128 e4m3 columns).
TmaDesc make_tensor_map(const TensorView& t, const TensorShape& s, CUtensorMapDataType type, int elem_bytes,
                        int box_rows) {
  // A size-1 dimension's stride is never stepped, whatever the caller passed (DLPack producers often give
  // 1 or 0): hand TMA any valid value, the row size rounded up to 16 bytes.
  const auto unused_stride = static_cast<cuuint64_t>((s.dim * elem_bytes + 15) / 16 * 16);
  auto stride_or = [&](int64_t extent, int64_t stride) {
    return extent == 1 ? unused_stride : static_cast<cuuint64_t>(stride * elem_bytes);
  };
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(s.dim), static_cast<cuuint64_t>(s.seqlen),
                              static_cast<cuuint64_t>(s.heads), static_cast<cuuint64_t>(s.batch)};
  const cuuint64_t strides[3] = {stride_or(s.seqlen, t.stride_seq), stride_or(s.heads, t.stride_head),
                                 stride_or(s.batch, t.stride_batch)};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(128 / elem_bytes), static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  // Encoded into a CUtensorMap (128-byte aligned on the host) and copied into the 64-byte aligned kernel
  // parameter (the alignment a __grid_constant__ tensor map needs, docs/hopper-ptx.md).
  static_assert(sizeof(TmaDesc) == sizeof(CUtensorMap), "hopper/abi.h TmaDesc must hold a CUtensorMap");
  CUtensorMap encoded;
  const CUresult r = driver().cuTensorMapEncodeTiled(&encoded, type, 4, t.data, dims,
                                                     strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) check_cu(r, fmt::format("cuTensorMapEncodeTiled for {}", s.name).c_str());
  TmaDesc map;
  std::memcpy(&map, &encoded, sizeof(map));
  return map;
}

CUtensorMapDataType tensor_map_type(DType dtype) {
  switch (dtype) {
    case DType::kBf16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::kFp16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::kE4m3: return CU_TENSOR_MAP_DATA_TYPE_UINT8;  // TMA copies bytes; wgmma reads them as e4m3
  }
  return CU_TENSOR_MAP_DATA_TYPE_UINT8;
}

// One descale tensor (launch.h: ScaleView): (batch, heads, inner) with inner's stride 1 and free batch/head strides
// (0 allowed: a broadcast scale), in bounds of its allocation, on the call's device, not overlapping an output.
void check_descale(const ScaleView& view, const char* name, int64_t batch, int64_t heads, int64_t inner,
                   const char* shape_text, const CallDevice& device, const ByteRange& out, const ByteRange& lse) {
  if (view.data == nullptr)
    bad_argument(fmt::format("argument {} is null; an e4m3 call needs it, fp32 of shape {}", name, shape_text));
  if (reinterpret_cast<uintptr_t>(view.data) % 4 != 0)
    bad_argument(fmt::format("argument {} is not 4-byte aligned (float32 expected)", name));
  if (view.stride_batch < 0 || view.stride_head < 0 || view.stride_batch > 0x7fffffff || view.stride_head > 0x7fffffff)
    bad_argument(fmt::format("argument {} has strides (batch {}, head {}); expected non-negative element strides "
                             "below 2^31",
                             name, view.stride_batch, view.stride_head));
  // The last element read: (batch-1, heads-1, inner-1).
  const int64_t last = checked_mul_add(batch - 1, view.stride_batch,
                                       checked_mul_add(heads - 1, view.stride_head, inner - 1, name), name);
  if (last > 0x7fffffff)
    bad_argument(fmt::format("argument {} spans {} elements; expected fewer than 2^31", name, last + 1));
  const ByteRange r = check_allocation(view.data, static_cast<uint64_t>(last + 1) * 4, device, name, nullptr, nullptr);
  if (r.overlaps(out) || r.overlaps(lse)) bad_argument(fmt::format("argument {} overlaps out or lse", name));
}

void check_descales(const Spec& spec, const ForwardArgs& a, const CallShape& s, const CallDevice& device,
                    const ByteRange& out, const ByteRange& lse) {
  if (spec.quant == Quant::kPerHead) {
    for (auto [view, name] : {std::pair{&a.q_descale, "q_descale"}, std::pair{&a.k_descale, "k_descale"},
                              std::pair{&a.v_descale, "v_descale"}})
      check_descale(*view, name, s.batch, s.num_heads_kv, 1, "(batch, num_heads_kv)", device, out, lse);
  } else {
    const int64_t m_blocks = (s.seqlen_q + spec.block_m - 1) / spec.block_m;
    const int64_t n_blocks = (s.seqlen_k + spec.block_n - 1) / spec.block_n;
    check_descale(a.q_descale, "q_descale", s.batch, s.num_heads, m_blocks, "(batch, num_heads, ceil(seqlen_q / block_m))",
                  device, out, lse);
    check_descale(a.k_descale, "k_descale", s.batch, s.num_heads_kv, n_blocks,
                  "(batch, num_heads_kv, ceil(seqlen_k / block_n))", device, out, lse);
    check_descale(a.v_descale, "v_descale", s.batch, s.num_heads_kv, s.head_dim_v, "(batch, num_heads_kv, head_dim_v)",
                  device, out, lse);
  }
}

// Device-side checks and parameters: everything a call does once its kernel is known, but the launch.
LaunchPlan build_launch(const KernelConfig& cfg, CUfunction function, const LaunchInvariants& invariants,
                        const CallDevice& device, const ForwardArgs& a, const CallShape& s, void* stream) {
  check_context_and_stream(device, stream);
  const TensorShape q_shape{"q", s.batch, s.seqlen_q, s.num_heads, s.head_dim};
  const TensorShape k_shape{"k", s.batch, s.seqlen_k, s.num_heads_kv, s.head_dim};
  const TensorShape v_shape{"v", s.batch, s.seqlen_k, s.num_heads_kv, s.head_dim_v};
  const TensorShape o_shape{"out", s.batch, s.seqlen_q, s.num_heads, s.head_dim_v};
  const ByteRange q = check_tensor(a.q, q_shape, s.elem_bytes, device);
  const ByteRange k = check_tensor(a.k, k_shape, s.elem_bytes, device);
  const ByteRange v = check_tensor(a.v, v_shape, s.elem_bytes, device);
  const ByteRange out = check_tensor(a.out, o_shape, s.out_elem_bytes, device);
  check_no_self_overlap(a.out, o_shape);
  // In place only when every CTA overwrites exactly the bytes of its own Q tile: same element size too (an e4m3
  // q under a 16-bit out would have out rows land on other CTAs' Q rows).
  const bool in_place = a.out.data == a.q.data && a.out.stride_batch == a.q.stride_batch &&
                        a.out.stride_seq == a.q.stride_seq && a.out.stride_head == a.q.stride_head &&
                        s.head_dim_v == s.head_dim && s.out_elem_bytes == s.elem_bytes;
  if (out.overlaps(k) || out.overlaps(v) || (out.overlaps(q) && !in_place))
    bad_argument("argument out overlaps q, k or v; the output may only alias q exactly (same pointer, strides and "
                 "element size)");
  ByteRange lse{};
  if (a.lse != nullptr) {
    const int64_t lse_rows = checked_mul_add(checked_mul_add(s.batch, s.num_heads, 0, "lse's size"), s.seqlen_q, 0,
                                             "lse's size");
    const int64_t lse_bytes = checked_mul_add(lse_rows, 4, 0, "lse's size");
    const TensorShape lse_shape{"lse", s.batch, s.num_heads, s.seqlen_q, 1};
    lse = check_allocation(a.lse, static_cast<uint64_t>(lse_bytes), device, "lse", &lse_shape, nullptr);
    if (lse.overlaps(q) || lse.overlaps(k) || lse.overlaps(v) || lse.overlaps(out))
      bad_argument("argument lse overlaps q, k, v or out");
  }

  const Spec& spec = cfg.spec;
  const TileSchedule sched = schedule_tiles(cfg, s.batch, s.num_heads, s.num_heads_kv, s.seqlen_q, s.seqlen_k);
  if (s.num_heads * s.batch > 0x7fffffff || sched.num_tiles > 0x7fffffff)
    bad_argument(fmt::format("arguments batch {} x num_heads {} x seqlen_q {} make more than 2^31 tiles", s.batch,
                             s.num_heads, s.seqlen_q));
  if (a.dtype == DType::kE4m3) check_descales(spec, a, s, device, out, lse);
  const CUtensorMapDataType type = tensor_map_type(a.dtype);
  LaunchPlan plan;
  plan.function = function;
  plan.launch = invariants;
  plan.grid = static_cast<unsigned>(sched.num_tiles);
  plan.stream = static_cast<CUstream>(stream);
  Params& p = plan.params;
  p.tm_q = make_tensor_map(a.q, q_shape, type, s.elem_bytes, spec.block_m);
  // With a cluster each CTA loads half of every K/V block and multicasts it (device/mainloop.cuh).
  p.tm_k = make_tensor_map(a.k, k_shape, type, s.elem_bytes, spec.block_n / spec.cluster_m);
  p.tm_v = make_tensor_map(a.v, v_shape, type, s.elem_bytes, spec.block_n / spec.cluster_m);
  p.tm_o = make_tensor_map(a.out, o_shape, tensor_map_type(s.out_dtype), s.out_elem_bytes, 64);
  p.lse = a.lse;
  p.seqlen_q = static_cast<int>(s.seqlen_q);
  p.seqlen_k = static_cast<int>(s.seqlen_k);
  p.num_heads = static_cast<int>(s.num_heads);
  p.head_group = static_cast<int>(s.num_heads / s.num_heads_kv);
  p.batch = static_cast<int>(s.batch);
  p.num_m_blocks = static_cast<int>(sched.num_m_blocks);
  p.section_heads = static_cast<int>(sched.section_heads);
  p.scale_log2 = s.softmax_scale * kLog2e;
  p.q_descale = a.q_descale.data;
  p.k_descale = a.k_descale.data;
  p.v_descale = a.v_descale.data;
  p.q_descale_stride_batch = static_cast<int>(a.q_descale.stride_batch);
  p.q_descale_stride_head = static_cast<int>(a.q_descale.stride_head);
  p.k_descale_stride_batch = static_cast<int>(a.k_descale.stride_batch);
  p.k_descale_stride_head = static_cast<int>(a.k_descale.stride_head);
  p.v_descale_stride_batch = static_cast<int>(a.v_descale.stride_batch);
  p.v_descale_stride_head = static_cast<int>(a.v_descale.stride_head);
  return plan;
}



// ---- plan cache ---------------------------------------------------------------------------------------

// Everything the kernel choice depends on: integers only.
struct ShapeClass {
  int dtype, out_dtype, quant, head_dim, head_dim_v, causal;
  bool operator<(const ShapeClass& o) const {
    return std::tie(dtype, out_dtype, quant, head_dim, head_dim_v, causal) <
           std::tie(o.dtype, o.out_dtype, o.quant, o.head_dim, o.head_dim_v, o.causal);
  }
  bool operator==(const ShapeClass& o) const = default;
};

// The runtime's plans: one loaded kernel per shape class, kept for the runtime's life.
struct Plans {
  std::shared_mutex mu;
  std::map<ShapeClass, std::shared_ptr<const Kernel>> by_class;
};

const Kernel& plan_for(Runtime& runtime, const ShapeClass& key) {
  Plans& plans = runtime.family_state<Plans>();
  {
    std::shared_lock<std::shared_mutex> lock(plans.mu);
    auto it = plans.by_class.find(key);
    if (it != plans.by_class.end()) return *it->second;
  }
  const Spec spec = default_spec(static_cast<DType>(key.dtype), static_cast<DType>(key.out_dtype),
                                 static_cast<Quant>(key.quant), key.head_dim, key.head_dim_v, key.causal != 0);
  std::shared_ptr<const Kernel> kernel = load_kernel(runtime, spec);  // compiles outside the lock
  std::unique_lock<std::shared_mutex> lock(plans.mu);
  return *plans.by_class.emplace(key, std::move(kernel)).first->second;
}

// The last (runtime, shape class, context) this thread launched, with its kernel and function: a warm call
// takes no lock and searches no map. The runtime id is never reused, so a destroyed runtime is never matched.
struct Memo {
  uint64_t runtime_id = 0;
  ShapeClass key{};
  CUcontext ctx = nullptr;
  const Kernel* kernel = nullptr;
  CUfunction function = nullptr;
};
thread_local Memo t_memo;

}  // namespace

Kernel::Kernel(const KernelConfig& config, std::shared_ptr<LoadedKernel> loaded)
    : config_(config), loaded_(std::move(loaded)) {}

std::shared_ptr<const Kernel> load_kernel(Runtime& runtime, const Spec& spec) {
  const KernelConfig config = make_kernel_config(spec);
  return std::make_shared<const Kernel>(config, runtime.load(make_request(config)));
}

LaunchPlan prepare_launch(Runtime& runtime, const ForwardArgs& args, void* stream) {
  const CallShape shape = check_shape(args);
  // With one query row the bottom-right causal mask hides no key (row 0 sees j <= seqlen_k - 1), so a decode
  // step runs the non-causal kernel and gives exactly the non-causal result (FA3 does the same).
  const ShapeClass key{static_cast<int>(args.dtype), static_cast<int>(shape.out_dtype), static_cast<int>(args.quant),
                       static_cast<int>(shape.head_dim),
                       static_cast<int>(shape.head_dim_v), args.causal && shape.seqlen_q > 1 ? 1 : 0};
  const CallDevice device = call_device(args.q.data, "q.data", "q");
  Memo& memo = t_memo;
  if (!(memo.runtime_id == runtime.id() && memo.key == key && memo.ctx == device.ctx)) {
    const Kernel& kernel = plan_for(runtime, key);
    memo = Memo{runtime.id(), key, device.ctx, &kernel, kernel.loaded().function_for(device.ctx)};
  }
  return build_launch(memo.kernel->config(), memo.function, memo.kernel->loaded().launch(), device, args, shape,
                      stream);
}

LaunchPlan prepare_launch(const Kernel& kernel, const ForwardArgs& args, void* stream) {
  const CallShape shape = check_shape(args);
  check_agrees(kernel.spec(), args, shape);
  const CallDevice device = call_device(args.q.data, "q.data", "q");
  return build_launch(kernel.config(), kernel.loaded().function_for(device.ctx), kernel.loaded().launch(), device, args,
                      shape, stream);
}

void forward(Runtime& runtime, const ForwardArgs& args, void* stream) {
  LaunchPlan plan = prepare_launch(runtime, args, stream);
  launch(plan);
}

void forward(const Kernel& kernel, const ForwardArgs& args, void* stream) {
  LaunchPlan plan = prepare_launch(kernel, args, stream);
  launch(plan);
}

void launch(LaunchPlan& plan) {
  launch_kernel(plan.function, plan.launch, plan.grid, &plan.params, plan.stream, "launching the attention kernel");
}

size_t workspace_size(const ForwardArgs&) { return 0; }

}  // namespace fa3jit::attention_fwd

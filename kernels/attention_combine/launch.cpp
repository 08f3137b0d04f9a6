// Split-KV combine launch path (launch.h): argument checks, plan cache, device checks, parameters, launch.
#include "kernels/attention_combine/launch.h"

#include <map>
#include <memory>
#include <shared_mutex>
#include <tuple>

#include <fmt/format.h>

#include "core/error.h"
#include "jit/driver.h"
#include "jit/loaded_kernel.h"
#include "kernels/attention_combine/emit.h"
#include "kernels/attention_combine/params.h"

namespace fa3jit::attention_combine {

namespace {

// The arguments after the arithmetic checks.
struct CallShape {
  int64_t num_splits, batch, seqlen_q, num_heads, head_dim_v, num_rows;
  int64_t out_bytes;  // from out.data to one past its last element
};

void check_aligned(const void* ptr, unsigned alignment, const char* name, const char* why) {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  if (addr % alignment != 0)
    bad_argument(fmt::format("argument {} = {:#x} is not {}-byte aligned; {}", name, addr, alignment, why));
}

// Strides of out: positive multiples of 4 elements where the dimension has more than one element (a size-1
// dimension's stride is never used). Returns the bytes from out.data to one past its last element.
int64_t check_out_strides(const CombineArgs& a, int64_t head_dim_v) {
  const struct {
    const char* field;
    int64_t stride, extent;
  } dims[] = {{"stride_batch", a.out.stride_batch, a.batch},
              {"stride_seq", a.out.stride_seq, a.seqlen_q},
              {"stride_head", a.out.stride_head, a.num_heads}};
  int64_t last = head_dim_v - 1;  // offset of the last element, in elements
  for (const auto& d : dims) {
    if (d.extent == 1) continue;
    if (d.stride <= 0)
      bad_argument(fmt::format("argument out.{} = {} is not allowed; expected a positive stride in elements",
                               d.field, d.stride));
    if (d.stride % 4 != 0)
      bad_argument(fmt::format("argument out.{} = {} elements is not a multiple of 4 elements (8 bytes); the "
                               "combine kernel stores 4 outputs at once",
                               d.field, d.stride));
    last = checked_mul_add(d.extent - 1, d.stride, last, "out's extent");
  }
  return checked_mul_add(last + 1, 2, 0, "out's extent");
}

// Arithmetic checks only: no driver, no allocation, no string on success.
CallShape check_shape(const CombineArgs& a) {
  if (!supports_out_dtype(a.out_dtype))
    throw Error(ErrorCode::kUnsupported, fmt::format("argument out_dtype = {} is not supported; expected {}",
                                                     dtype_name(a.out_dtype), allowed_out_dtypes()));
  if (!supports_head_dim_v(a.head_dim_v))
    throw Error(ErrorCode::kUnsupported, fmt::format("argument head_dim_v = {} is not supported; expected {}",
                                                     a.head_dim_v, allowed_head_dim_v()));
  CallShape s{};
  s.head_dim_v = a.head_dim_v;
  s.num_splits = checked_extent(a.num_splits, "num_splits", capabilities().max_splits_limit);
  s.batch = checked_extent(a.batch, "batch", kMaxRows);
  s.seqlen_q = checked_extent(a.seqlen_q, "seqlen_q", kMaxRows);
  s.num_heads = checked_extent(a.num_heads, "num_heads", kMaxRows);
  s.num_rows = checked_mul_add(checked_mul_add(s.batch, s.num_heads, 0, "the row count"), s.seqlen_q, 0,
                               "the row count");
  if (s.num_rows > kMaxRows)
    bad_argument(fmt::format("arguments batch {} x num_heads {} x seqlen_q {} make {} rows; at most {} are allowed "
                             "(the kernel's row index is 32-bit)",
                             s.batch, s.num_heads, s.seqlen_q, s.num_rows, kMaxRows));
  if (a.out_partial == nullptr) bad_argument("argument out_partial is null");
  if (a.lse_partial == nullptr) bad_argument("argument lse_partial is null");
  if (a.out.data == nullptr) bad_argument("argument out.data is null");
  check_aligned(a.out_partial, 16, "out_partial", "the kernel reads the fp32 partials 16 bytes at a time");
  check_aligned(a.lse_partial, 4, "lse_partial", "float32 expected");
  check_aligned(a.out.data, 8, "out.data", "the combine kernel stores 4 outputs (8 bytes) at once");
  if (a.lse != nullptr) check_aligned(a.lse, 4, "lse", "float32 expected");
  s.out_bytes = check_out_strides(a, s.head_dim_v);
  check_no_self_overlap(a.out, TensorShape{"out", s.batch, s.seqlen_q, s.num_heads, s.head_dim_v});
  return s;
}

// Device-side checks: every tensor on out_partial's device, inside its allocation, out and lse overlapping
// nothing. Returns the context the call runs in.
CUcontext check_device_tensors(const CombineArgs& a, const CallShape& s, void* stream) {
  const CallDevice device = call_device(a.out_partial, "out_partial", "out_partial");
  check_context_and_stream(device, stream);
  // At most 256 splits x 2^31 rows x 512 x 4 bytes, inside 64 bits; checked all the same, so that a larger
  // split limit or head dim can never make the allocation check wrap.
  const int64_t split_rows = checked_mul_add(s.num_splits, s.num_rows, 0, "out_partial's size");
  const int64_t out_partial_bytes =
      checked_mul_add(checked_mul_add(split_rows, s.head_dim_v, 0, "out_partial's size"), 4, 0, "out_partial's size");
  const int64_t lse_partial_bytes = checked_mul_add(split_rows, 4, 0, "lse_partial's size");
  const ByteRange out_partial =
      check_allocation(a.out_partial, static_cast<uint64_t>(out_partial_bytes), device, "out_partial", nullptr, nullptr);
  const ByteRange lse_partial =
      check_allocation(a.lse_partial, static_cast<uint64_t>(lse_partial_bytes), device, "lse_partial", nullptr, nullptr);
  const TensorShape out_shape{"out", s.batch, s.seqlen_q, s.num_heads, s.head_dim_v};
  const ByteRange out =
      check_allocation(a.out.data, static_cast<uint64_t>(s.out_bytes), device, "out.data", &out_shape, &a.out);
  if (out.overlaps(out_partial) || out.overlaps(lse_partial))
    bad_argument("argument out overlaps out_partial or lse_partial; the combine cannot run in place");
  if (a.lse != nullptr) {
    const TensorShape lse_shape{"lse", s.batch, s.num_heads, s.seqlen_q, 1};
    const ByteRange lse =
        check_allocation(a.lse, static_cast<uint64_t>(checked_mul_add(s.num_rows, 4, 0, "lse's size")), device, "lse",
                         &lse_shape, nullptr);
    if (lse.overlaps(out_partial) || lse.overlaps(lse_partial) || lse.overlaps(out))
      bad_argument("argument lse overlaps out_partial, lse_partial or out");
  }
  return device.ctx;
}

Params make_params(const CombineArgs& a, const CallShape& s) {
  Params p{};
  p.out_partial = a.out_partial;
  p.lse_partial = a.lse_partial;
  p.out = a.out.data;
  p.lse = a.lse;
  // A size-1 dimension's index is always 0: its stride (whatever the caller passed) is never used.
  p.out_stride_batch = s.batch == 1 ? 0 : a.out.stride_batch;
  p.out_stride_seq = s.seqlen_q == 1 ? 0 : a.out.stride_seq;
  p.out_stride_head = s.num_heads == 1 ? 0 : a.out.stride_head;
  p.split_stride = s.num_rows * s.head_dim_v;
  p.num_rows = static_cast<int>(s.num_rows);
  p.num_splits = static_cast<int>(s.num_splits);
  p.seqlen_q = static_cast<int>(s.seqlen_q);
  p.num_heads = static_cast<int>(s.num_heads);
  return p;
}

// ---- plan cache ---------------------------------------------------------------------------------------

// The runtime's plans: one loaded kernel per spec, kept for the runtime's life.
struct Plans {
  using Key = std::tuple<int, int, int, int>;  // out_dtype, head_dim_v, max_splits, rows_per_cta
  std::shared_mutex mu;
  std::map<Key, std::shared_ptr<LoadedKernel>> by_spec;
};

LoadedKernel& plan_for(Runtime& runtime, const Spec& spec) {
  Plans& plans = runtime.family_state<Plans>();
  const Plans::Key key{static_cast<int>(spec.out_dtype), spec.head_dim_v, spec.max_splits, spec.rows_per_cta};
  {
    std::shared_lock<std::shared_mutex> lock(plans.mu);
    auto it = plans.by_spec.find(key);
    if (it != plans.by_spec.end()) return *it->second;
  }
  std::shared_ptr<LoadedKernel> loaded = runtime.load(make_request(spec));  // compiles outside the lock
  std::unique_lock<std::shared_mutex> lock(plans.mu);
  return *plans.by_spec.emplace(key, std::move(loaded)).first->second;
}

void launch_checked(Runtime& runtime, const Spec& spec, const CombineArgs& args, const CallShape& shape,
                    void* stream) {
  const CUcontext ctx = check_device_tensors(args, shape, stream);
  LoadedKernel& kernel = plan_for(runtime, spec);
  Params params = make_params(args, shape);
  const unsigned grid = static_cast<unsigned>((shape.num_rows + spec.rows_per_cta - 1) / spec.rows_per_cta);
  launch_kernel(kernel.function_for(ctx), kernel.launch(), grid, &params, static_cast<CUstream>(stream),
                "launching the attention combine kernel");
}

}  // namespace

void combine(Runtime& runtime, const CombineArgs& args, void* stream) {
  const CallShape shape = check_shape(args);
  // The smaller LSE table when it holds num_splits: a smaller CTA footprint for the common case.
  const Capabilities& c = capabilities();
  const int max_splits = shape.num_splits <= c.default_max_splits ? c.default_max_splits : c.max_splits_limit;
  const Spec spec = default_spec(args.out_dtype, static_cast<int>(shape.head_dim_v), max_splits);
  launch_checked(runtime, spec, args, shape, stream);
}

void combine(Runtime& runtime, const Spec& spec, const CombineArgs& args, void* stream) {
  validate(spec);
  const CallShape shape = check_shape(args);
  if (args.out_dtype != spec.out_dtype)
    bad_argument(fmt::format("argument out_dtype = {} does not match the kernel spec's out_dtype {}",
                             dtype_name(args.out_dtype), dtype_name(spec.out_dtype)));
  if (shape.head_dim_v != spec.head_dim_v)
    bad_argument(fmt::format("argument head_dim_v = {} does not match the kernel spec's head_dim_v {}",
                             shape.head_dim_v, spec.head_dim_v));
  if (shape.num_splits > spec.max_splits)
    bad_argument(fmt::format("argument num_splits = {} is too large for the kernel spec; expected <= its max_splits "
                             "{}",
                             shape.num_splits, spec.max_splits));
  launch_checked(runtime, spec, args, shape, stream);
}

LoadedCombine load_combine(Runtime& runtime, DType out_dtype, int head_dim_v, int max_splits) {
  LoadedCombine c{default_spec(out_dtype, head_dim_v, max_splits), nullptr};
  LoadedKernel& loaded = plan_for(runtime, c.spec);
  // The plan map keeps the kernel for the runtime's life; share it without taking ownership twice.
  c.loaded = std::shared_ptr<LoadedKernel>(std::shared_ptr<LoadedKernel>{}, &loaded);
  return c;
}

PreparedLaunch prepare_prechecked(const LoadedCombine& kernel, const CombineArgs& args, CUcontext ctx) {
  const CallShape shape = check_shape(args);
  if (shape.num_splits > kernel.spec.max_splits)
    bad_argument(fmt::format("argument num_splits = {} is too large for the combine kernel; expected <= {}",
                             shape.num_splits, kernel.spec.max_splits));
  PreparedLaunch plan;
  plan.params = make_params(args, shape);
  plan.grid = static_cast<unsigned>((shape.num_rows + kernel.spec.rows_per_cta - 1) / kernel.spec.rows_per_cta);
  plan.function = kernel.loaded->function_for(ctx);
  plan.launch = kernel.loaded->launch();
  return plan;
}

void launch(const PreparedLaunch& plan, CUstream stream) {
  Params params = plan.params;
  launch_kernel(plan.function, plan.launch, plan.grid, &params, stream, "launching the attention combine kernel");
}

}  // namespace fa3jit::attention_combine

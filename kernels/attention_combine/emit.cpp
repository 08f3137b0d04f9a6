// Split-KV combine emission (emit.h).
//
// Order of the unit: header comment with the canonical spec; hopper/types.cuh (integer typedefs, TmaDesc);
// params.h and the layout checks of Params; the generated CombineConfig constants; the device templates
// reached from device/combine.cuh, each inlined once; the extern "C" entry.
#include "kernels/attention_combine/emit.h"

#include <cstddef>
#include <set>

#include <fmt/format.h>

#include "kernels/attention_combine/geometry.h"
#include "kernels/attention_combine/params.h"

namespace fa3jit::attention_combine {

namespace {

std::string emit_config(const Spec& s, const Geometry& g) {
  return fmt::format(
      "// Compile-time configuration of this kernel (kernels/attention_combine/geometry.cpp).\n"
      "namespace fa3jit::attention_combine {{\n"
      "struct CombineConfig {{\n"
      "  static constexpr int kHeadDimV = {};\n"
      "  static constexpr int kMaxSplits = {};\n"
      "  static constexpr int kRowsPerCta = {};\n"
      "  static constexpr int kLanesPerRow = {};\n"
      "  static constexpr int kVecsPerLane = {};\n"
      "  static constexpr int kSplitUnroll = {};\n"
      "  static constexpr int kNumThreads = {};\n"
      "  static constexpr int kLseStride = {};\n"
      "  static constexpr bool kIsBf16 = {};\n"
      "}};\n"
      "}}  // namespace fa3jit::attention_combine\n",
      s.head_dim_v, s.max_splits, s.rows_per_cta, g.lanes_per_row, g.vecs_per_lane, g.split_unroll, g.num_threads,
      g.lse_stride, s.out_dtype == DType::kBf16);
}

KernelRequest request_from_json(const nlohmann::json& doc) { return make_request(parse_spec(doc)); }

nlohmann::json capabilities_json() {
  const Capabilities& c = capabilities();
  std::vector<std::string> dtypes;
  for (DType d : c.out_dtypes) dtypes.emplace_back(dtype_name(d));
  return {{"out_dtypes", dtypes},
          {"partial_dtype", "fp32"},
          {"head_dim_v", {{"min", c.head_dim_v_min}, {"max", c.head_dim_v_max}, {"multiple_of", c.head_dim_v_multiple}}},
          {"max_splits", {{"min", 1}, {"max", c.max_splits_limit}, {"default", c.default_max_splits}}},
          {"features", c.features}};
}

}  // namespace

std::vector<FieldLayout> params_layout() {
  return {FA3JIT_ATTENTION_COMBINE_PARAMS(FA3JIT_FIELD_LAYOUT)};
}

std::string kernel_name(const Spec& spec) {
  return fa3jit::kernel_name(kKind, name_token(spec), canonical_string(spec));
}

KernelSource emit_kernel(const Spec& spec) {
  validate(spec);
  const Geometry g = derive_geometry(spec);
  KernelSource src;
  src.kernel_name = kernel_name(spec);
  std::string& out = src.code;
  out += unit_header(canonical_string(spec));
  std::set<std::string> done;
  inline_template("hopper/types.cuh", done, out);
  inline_template("kernels/attention_combine/params.h", done, out);
  out += layout_asserts("fa3jit::attention_combine::Params", sizeof(Params), alignof(Params), params_layout());
  out += "// ---- generated ----\n";
  out += emit_config(spec, g);
  inline_template("kernels/attention_combine/device/combine.cuh", done, out);
  out += fmt::format(
      "// ---- entry point ----\n"
      "extern \"C\" __global__ void __launch_bounds__({threads}, {min_ctas})\n"
      "{name}(const __grid_constant__ fa3jit::attention_combine::Params params) {{\n"
      "  fa3jit::attention_combine::combine_splits<fa3jit::attention_combine::CombineConfig>(params);\n"
      "}}\n",
      fmt::arg("threads", g.num_threads), fmt::arg("min_ctas", g.min_ctas_per_sm), fmt::arg("name", src.kernel_name));
  return src;
}

KernelRequest make_request(const Spec& spec) {
  KernelRequest r;
  r.source = emit_kernel(spec);  // validates first
  r.kind = std::string(kKind);
  r.canonical = canonical_string(spec);
  r.summary = spec_summary(spec);
  // The LSE table is static shared memory: no dynamic shared memory, no cluster.
  // combine_splits begins with griddepcontrol.wait: it may be launched while the split kernel finishes.
  r.launch = {derive_geometry(spec).num_threads, 0, 1, /*waits_for_prerequisites=*/true};
  return r;
}

FA3JIT_REGISTER_KERNEL_FAMILY(attention_combine, kKind,
                              "split-KV combine: merges partial attention outputs by their log-sum-exp "
                              "(FlashDecoding)",
                              &request_from_json, &capabilities_json);

}  // namespace fa3jit::attention_combine

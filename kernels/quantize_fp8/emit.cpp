// FP8 pre-pass emission (emit.h).
//
// Order of the unit: header comment with the canonical spec; hopper/types.cuh (integer typedefs, TmaDesc);
// params.h and the layout checks of Params; the generated QuantizeConfig constants; the device templates
// reached from device/quantize.cuh, each inlined once; the extern "C" entries, one per pass.
#include "kernels/quantize_fp8/emit.h"

#include <cstddef>
#include <set>

#include <fmt/format.h>

#include "kernels/quantize_fp8/geometry.h"
#include "kernels/quantize_fp8/params.h"

namespace fa3jit::quantize_fp8 {

namespace {

std::string emit_blocks(const char* name, const BlockGeometry& b) {
  return fmt::format(
      "  struct {} {{\n"
      "    static constexpr int kBlockRows = {};\n"
      "    static constexpr int kWarpsPerBlock = {};\n"
      "    static constexpr int kBlocksPerCluster = {};\n"
      "  }};\n",
      name, b.block_rows, b.warps_per_block, b.blocks_per_cluster);
}

std::string emit_config(const Spec& s, const Geometry& g) {
  return fmt::format(
             "// Compile-time configuration of this kernel (kernels/quantize_fp8/geometry.cpp).\n"
             "namespace fa3jit::quantize_fp8 {{\n"
             "struct QuantizeConfig {{\n"
             "  static constexpr bool kIsBf16 = {};\n"
             "  static constexpr int kHeadDim = {};\n"
             "  static constexpr int kHeadDimV = {};\n"
             "  static constexpr bool kHadamard = {};\n"
             "  static constexpr int kRope = {};  // {}\n"
             "  static constexpr int kRotaryDim = {};\n"
             "  static constexpr int kWarps = {};\n"
             "  static constexpr int kClusterSize = {};\n"
             "  static constexpr int kNumThreads = {};\n"
             "  static constexpr int kVSteps = {};\n"
             "  static constexpr int kVRowsPerCta = {};\n"
             "  static constexpr bool kVDMajor = {};\n",
             s.dtype == DType::kBf16, s.head_dim, s.head_dim_v, s.hadamard, static_cast<int>(s.rope),
             rope_name(s.rope), s.rotary_dim, g.warps_per_cta, g.cluster_size, g.num_threads, kVSteps,
             g.v_rows_per_cta, s.v_d_major) +
         emit_blocks("QBlocks", g.q) + emit_blocks("KBlocks", g.k) +
         "};\n"
         "}  // namespace fa3jit::quantize_fp8\n";
}

KernelRequest request_from_json(const nlohmann::json& doc) { return make_request(parse_spec(doc)); }

nlohmann::json capabilities_json() {
  const Capabilities& c = capabilities();
  std::vector<std::string> dtypes;
  for (DType d : c.dtypes) dtypes.emplace_back(dtype_name(d));
  return {{"dtypes", dtypes},
          {"out_dtype", "e4m3"},
          {"descale_dtype", "fp32"},
          {"head_dims", c.head_dims},
          {"block_rows",
           {{"min", c.block_rows_min},
            {"max", c.block_rows_max},
            {"multiple_of", c.block_rows_multiple},
            {"default", c.default_block_rows}}},
          {"ropes", {rope_name(Rope::kNone), rope_name(Rope::kNeox), rope_name(Rope::kInterleaved)}},
          {"features", c.features}};
}

}  // namespace

std::vector<FieldLayout> params_layout() { return {FA3JIT_QUANTIZE_FP8_PARAMS(FA3JIT_FIELD_LAYOUT)}; }

std::string kernel_name(const Spec& spec) {
  return fa3jit::kernel_name(kKind, name_token(spec), canonical_string(spec));
}

namespace {
struct PassEntry {
  Pass pass;
  const char* suffix;
  const char* enumerator;
};
constexpr PassEntry kPassEntries[] = {
    {kPassQk, "_qk", "kPassQk"}, {kPassVAmax, "_v_amax", "kPassVAmax"}, {kPassVQuant, "_v_quant", "kPassVQuant"}};
static_assert(kPassEntries[kPassQk].pass == kPassQk && kPassEntries[kPassVAmax].pass == kPassVAmax &&
                  kPassEntries[kPassVQuant].pass == kPassVQuant,
              "kPassEntries is indexed by Pass");
}  // namespace

std::string entry_name(const Spec& spec, Pass pass) { return kernel_name(spec) + kPassEntries[pass].suffix; }

KernelSource emit_kernel(const Spec& spec) {
  validate(spec);
  const Geometry g = derive_geometry(spec);
  KernelSource src;
  src.kernel_name = kernel_name(spec);
  std::string& out = src.code;
  out += unit_header(canonical_string(spec));
  std::set<std::string> done;
  inline_template("hopper/types.cuh", done, out);
  inline_template("kernels/quantize_fp8/params.h", done, out);
  out += layout_asserts("fa3jit::quantize_fp8::Params", sizeof(Params), alignof(Params), params_layout());
  out += "// ---- generated ----\n";
  out += emit_config(spec, g);
  inline_template("kernels/quantize_fp8/device/quantize.cuh", done, out);
  out += "// ---- entry points, one per pass ----\n";
  for (const PassEntry& e : kPassEntries) {
    src.entries.push_back(entry_name(spec, e.pass));
    out += fmt::format(
        "extern \"C\" __global__ void __launch_bounds__({threads}, {min_ctas})\n"
        "{name}(const __grid_constant__ fa3jit::quantize_fp8::Params params) {{\n"
        "  fa3jit::quantize_fp8::quantize_fp8_pass<fa3jit::quantize_fp8::QuantizeConfig, "
        "fa3jit::quantize_fp8::{pass}>(params);\n"
        "}}\n",
        fmt::arg("threads", g.num_threads), fmt::arg("min_ctas", g.min_ctas_per_sm),
        fmt::arg("name", src.entries.back()), fmt::arg("pass", e.enumerator));
  }
  return src;
}

KernelRequest make_request(const Spec& spec) {
  KernelRequest r;
  r.source = emit_kernel(spec);  // validates first
  r.kind = std::string(kKind);
  r.canonical = canonical_string(spec);
  r.summary = spec_summary(spec);
  const Geometry g = derive_geometry(spec);
  // Static shared memory only; Q/K blocks larger than a CTA span the CTAs of a cluster along x.
  r.launch = {g.num_threads, 0, g.cluster_size};
  return r;
}

FA3JIT_REGISTER_KERNEL_FAMILY(quantize_fp8, kKind,
                              "FP8 pre-pass: RoPE, Hadamard incoherent processing and block quantisation of Q, K, V "
                              "to e4m3 with fp32 descales (FA3 paper §3.3)",
                              &request_from_json, &capabilities_json);

}  // namespace fa3jit::quantize_fp8

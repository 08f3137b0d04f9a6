// Source emission: KernelConfig -> one self-contained CUDA translation unit.
//
// Order of the unit: a header comment with the canonical spec; templates/hopper/types.cuh (our own
// integer typedefs, TmaDesc, FwdParams); the generated KernelConfig constants and the wgmma wrappers for
// the exact shapes of this kernel (their register lists depend on block_n and head_dim_v); the kernel
// templates reached from templates/kernel.cuh, each inlined once in include order; the extern "C" entry.
#include "generator/emit.h"

#include <fmt/format.h>

#include <set>
#include <sstream>

#include "generator/error.h"
#include "generator/templates.h"

namespace fa3jit {
namespace {

// Inlines `path` and, recursively, every `#include "..."` it names, each file once. Templates must not
// include anything else: NVRTC 13 ships no headers.
void inline_template(const std::string& path, std::set<std::string>& done, std::string& out) {
  if (!done.insert(path).second) return;
  std::istringstream in(template_source(path));
  out += fmt::format("// ---- templates/{} ----\n", path);
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find_first_not_of(" \t");
    const std::string trimmed = first == std::string::npos ? "" : line.substr(first);
    if (trimmed.rfind("#pragma once", 0) == 0) continue;
    if (trimmed.rfind("#include", 0) == 0) {
      const auto open = trimmed.find('"');
      const auto close = trimmed.rfind('"');
      if (open == std::string::npos || close == open)
        throw Error(ErrorCode::kInternal, fmt::format("templates/{}: only quoted includes of other templates are "
                                                      "allowed (NVRTC has no headers): {}", path, trimmed));
      inline_template(trimmed.substr(open + 1, close - open - 1), done, out);
      continue;
    }
    out += line;
    out += '\n';
  }
}

std::string register_list(int first, int count) {
  std::string s;
  for (int i = 0; i < count; ++i) s += fmt::format("{}%{}", i ? "," : "", first + i);
  return s;
}

std::string float_operands(int count) {
  std::string s;
  for (int i = 0; i < count; ++i) s += fmt::format("{}\"+f\"(d[{}])", i ? ", " : "", i);
  return s;
}

// S = Q.K^T: m64n{block_n}k16, A and B from shared memory, both K-major (trans-a = trans-b = 0).
std::string emit_wgmma_qk(int n, const char* t) {
  const int regs = n / 2;
  return fmt::format(
      "__device__ __forceinline__ void wgmma_qk(float (&d)[{regs}], uint64_t desc_a, uint64_t desc_b, int scale_d) {{\n"
      "  asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{sd}, 0;\\n\"\n"
      "               \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {{{list}}}, %{da}, %{db}, p, 1, 1, 0, 0;\\n}}\\n\"\n"
      "               : {ops}\n"
      "               : \"l\"(desc_a), \"l\"(desc_b), \"r\"(scale_d));\n"
      "}}\n",
      fmt::arg("regs", regs), fmt::arg("sd", regs + 2), fmt::arg("n", n), fmt::arg("t", t),
      fmt::arg("list", register_list(0, regs)), fmt::arg("da", regs), fmt::arg("db", regs + 1),
      fmt::arg("ops", float_operands(regs)));
}

// O += P.V: m64n{head_dim_v}k16, A (P) from registers, B (V) from shared memory MN-major (trans-b = 1).
std::string emit_wgmma_pv(int n, const char* t) {
  const int regs = n / 2;
  return fmt::format(
      "__device__ __forceinline__ void wgmma_pv(float (&d)[{regs}], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,\n"
      "                                         uint64_t desc_b) {{\n"
      "  asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{sd}, 0;\\n\"\n"
      "               \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {{{list}}}, {{{alist}}}, %{db}, p, 1, 1, 1;\\n}}\\n\"\n"
      "               : {ops}\n"
      "               : \"r\"(a0), \"r\"(a1), \"r\"(a2), \"r\"(a3), \"l\"(desc_b), \"r\"(1));\n"
      "}}\n",
      fmt::arg("regs", regs), fmt::arg("sd", regs + 5), fmt::arg("n", n), fmt::arg("t", t),
      fmt::arg("list", register_list(0, regs)), fmt::arg("alist", register_list(regs, 4)), fmt::arg("db", regs + 4),
      fmt::arg("ops", float_operands(regs)));
}

std::string emit_config(const KernelConfig& c) {
  const Spec& s = c.spec;
  return fmt::format(
      "// Compile-time configuration of this kernel (generator/tile_table.cpp).\n"
      "struct KernelConfig {{\n"
      "  static constexpr int kHeadDim = {};\n"
      "  static constexpr int kHeadDimV = {};\n"
      "  static constexpr int kBlockM = {};\n"
      "  static constexpr int kBlockN = {};\n"
      "  static constexpr int kStages = {};\n"
      "  static constexpr int kConsumerWarpgroups = {};\n"
      "  static constexpr int kNumThreads = {};\n"
      "  static constexpr int kProducerRegisters = {};\n"
      "  static constexpr int kConsumerRegisters = {};\n"
      "  static constexpr int kSmemBytes = {};\n"
      "  static constexpr bool kCausal = {};\n"
      "  static constexpr bool kIsBf16 = {};\n"
      "  static constexpr bool kPingpong = {};\n"
      "  static constexpr bool kIntraWgOverlap = {};\n"
      "  static constexpr int kClusterM = {};\n"
      "}};\n",
      s.head_dim, s.head_dim_v, s.block_m, s.block_n, s.stages, s.consumer_warpgroups, c.num_threads,
      c.producer_registers, c.consumer_registers, c.smem_bytes, s.causal, s.dtype == DType::kBf16, s.pingpong,
      s.intra_wg_overlap, s.cluster_m);
}

}  // namespace

std::string kernel_name(const Spec& s) {
  return fmt::format("fa3jit_fwd_{}_d{}_dv{}_{}_m{}n{}_wg{}_st{}{}{}{}{}", dtype_name(s.dtype), s.head_dim, s.head_dim_v,
                     s.causal ? "causal" : "full", s.block_m, s.block_n, s.consumer_warpgroups, s.stages,
                     s.pingpong ? "_pp" : "", s.intra_wg_overlap ? "_iwo" : "", s.cluster_m > 1 ? "_c2" : "",
                     s.hadamard ? "_had" : "");
}

KernelSource emit_kernel(const KernelConfig& config) {
  const Spec& spec = config.spec;
  if (spec.dtype == DType::kE4m3)
    throw Error(ErrorCode::kUnsupported, "spec field \"dtype\": \"e4m3\" is not yet supported; use fp16 or bf16");
  const char* wgmma_type = spec.dtype == DType::kBf16 ? "bf16" : "f16";

  KernelSource src;
  src.kernel_name = kernel_name(spec);
  std::string& out = src.code;
  out += fmt::format("// Generated by fa3jit ({}); do not edit.\n// Spec: {}\n", kGeneratorVersion,
                     canonical_kernel_string(spec));
  out += "// Self-contained: compiles with NVRTC, or nvcc -arch=sm_90a -cubin, without any include path.\n";
  std::set<std::string> done;
  inline_template("hopper/types.cuh", done, out);
  out += "// ---- generated ----\nnamespace fa3jit {\n";
  out += emit_config(config);
  out += emit_wgmma_qk(spec.block_n, wgmma_type);
  out += emit_wgmma_pv(spec.head_dim_v, wgmma_type);
  out += "}  // namespace fa3jit\n";
  inline_template("kernel.cuh", done, out);
  out += fmt::format(
      "// ---- entry point ----\n"
      "extern \"C\" __global__ void __launch_bounds__({threads}, 1)\n"
      "{name}(const __grid_constant__ fa3jit::TmaDesc tm_q, const __grid_constant__ fa3jit::TmaDesc tm_k,\n"
      "       const __grid_constant__ fa3jit::TmaDesc tm_v, const __grid_constant__ fa3jit::TmaDesc tm_o,\n"
      "       const __grid_constant__ fa3jit::FwdParams params) {{\n"
      "  fa3jit::attention_forward<fa3jit::KernelConfig>(tm_q, tm_k, tm_v, tm_o, params);\n"
      "}}\n",
      fmt::arg("threads", config.num_threads), fmt::arg("name", src.kernel_name));
  return src;
}

}  // namespace fa3jit

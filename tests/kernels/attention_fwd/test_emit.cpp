// Attention forward emission: the unit is self-contained, deterministic, named by its canonical spec, carries
// the layout checks of its parameter struct, and compiles with nvcc as well as NVRTC.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "core/error.h"
#include "jit/compiler.h"
#include "jit/cubin_cache.h"
#include "jit/family.h"
#include "kernels/attention_fwd/emit.h"

using namespace fa3jit;
using namespace fa3jit::attention_fwd;
using Catch::Matchers::Contains;

namespace {
KernelSource emit_json(const std::string& json) { return emit_kernel(make_kernel_config(parse_spec(json))); }
}  // namespace

TEST_CASE("emitted source is self-contained", "[generator]") {
  const KernelSource src = emit_json(R"({"dtype":"bf16","head_dim":128,"causal":true})");
  // No include of any kind survives: NVRTC 13 ships no headers.
  CHECK(src.code.find("#include") == std::string::npos);
  CHECK(src.code.find("#pragma once") == std::string::npos);
  // Its own integer types, tensor-map struct, the generated config and the entry point.
  CHECK(src.code.find("typedef unsigned int uint32_t;") != std::string::npos);
  CHECK(src.code.find("struct alignas(64) TmaDesc") != std::string::npos);
  CHECK(src.code.find("static constexpr int kBlockM = 128;") != std::string::npos);
  CHECK(src.code.find("static constexpr bool kCausal = true;") != std::string::npos);
  CHECK(src.code.find("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16") != std::string::npos);
  CHECK(src.code.find(fmt::format("extern \"C\" __global__ void __launch_bounds__(384, 1)\n{}(", src.kernel_name)) !=
        std::string::npos);
  // One argument: the parameter struct, as a grid constant.
  CHECK(src.code.find("(const __grid_constant__ fa3jit::attention_fwd::Params params)") != std::string::npos);
  // Each template appears once.
  CHECK(std::regex_search(src.code, std::regex("kernels/attention_fwd/device/mainloop.cuh")));
  const auto first = src.code.find("// ---- kernels/attention_fwd/device/softmax.cuh");
  REQUIRE(first != std::string::npos);
  CHECK(src.code.find("// ---- kernels/attention_fwd/device/softmax.cuh", first + 1) == std::string::npos);
  // The shared-memory plan comes from params.h, the one function the host reads too.
  CHECK(src.code.find("smem_plan(") != std::string::npos);
  CHECK(src.code.find("static constexpr int kElemBytes = 2;") != std::string::npos);
}

TEST_CASE("emission is deterministic and the kernel name is unique per spec", "[generator]") {
  const std::string json = R"({"dtype":"fp16","head_dim":64})";
  CHECK(emit_json(json).code == emit_json(json).code);
  // Same kernel when the defaults are spelled out in another key order.
  CHECK(emit_json(R"({"tile":{"block_n":128,"block_m":192},"head_dim":64,"stages":2,"dtype":"fp16"})").code ==
        emit_json(json).code);

  std::set<std::string> names;
  std::set<std::string> codes;
  const char* specs[] = {
      R"({"dtype":"fp16","head_dim":64})",
      R"({"dtype":"bf16","head_dim":64})",
      R"({"dtype":"bf16","head_dim":64,"causal":true})",
      R"({"dtype":"bf16","head_dim":128})",
      R"({"dtype":"bf16","head_dim":128,"tile":{"block_n":112}})",
      R"({"dtype":"bf16","head_dim":128,"causal":true,"stages":3,"tile":{"block_n":128}})",
      R"({"dtype":"bf16","head_dim":128,"tile":{"block_m":64}})",
      R"({"dtype":"bf16","head_dim":256})",
  };
  for (const char* s : specs) {
    const KernelSource src = emit_json(s);
    names.insert(src.kernel_name);
    codes.insert(src.code);
    CHECK(src.kernel_name.rfind("fa3jit_attention_fwd_", 0) == 0);
  }
  CHECK(names.size() == std::size(specs));
  CHECK(codes.size() == std::size(specs));
  // The name is derived: family, a short token and 8 hex digits of SHA-256 over the canonical spec.
  const Spec spec = parse_spec(std::string(R"({"dtype":"bf16","head_dim":128,"causal":true})"));
  CHECK(attention_fwd::kernel_name(spec) ==
        "fa3jit_attention_fwd_bf16_d128_causal_" + sha256_hex(canonical_string(spec)).substr(0, 8));
  CHECK(std::regex_match(attention_fwd::kernel_name(spec), std::regex("fa3jit_attention_fwd_bf16_d128_causal_[0-9a-f]{8}")));
}

TEST_CASE("e4m3 kernels use k32 e4m3 wgmma, K-major V and the producer's transpose", "[generator][fp8]") {
  const KernelSource src = emit_json(R"({"dtype":"e4m3","head_dim":128})");
  CHECK(src.code.find("wgmma.mma_async.sync.aligned.m64n160k32.f32.e4m3.e4m3") != std::string::npos);
  CHECK(src.code.find("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3") != std::string::npos);
  CHECK(src.code.find("k16.f32") == std::string::npos);
  CHECK(src.code.find("static constexpr int kElemBytes = 1;") != std::string::npos);
  CHECK(src.code.find("static constexpr bool kOutIsBf16 = true;") != std::string::npos);
  CHECK(src.code.find("struct TransposeV") != std::string::npos);
}

TEST_CASE("the unit checks Params' layout field by field against the host's", "[generator][params]") {
  const KernelSource src = emit_json(R"({"dtype":"bf16","head_dim":64})");
  const std::vector<FieldLayout> fields = params_layout();
  REQUIRE(fields.size() == 54);
  CHECK(src.code.find(fmt::format("static_assert(sizeof(fa3jit::attention_fwd::Params) == {}", sizeof(Params))) !=
        std::string::npos);
  for (const FieldLayout& f : fields) {
    INFO(f.name);
    CHECK(src.code.find(fmt::format("->{})) == {},", f.name, f.offset)) != std::string::npos);
  }
  // Offsets are increasing and leave no field out: the last one ends inside the struct.
  for (size_t i = 1; i < fields.size(); ++i) CHECK(fields[i].offset > fields[i - 1].offset);
  CHECK(fields.back().offset < sizeof(Params));
}

// The proof that the static_asserts catch drift: reorder two fields of the struct as the device compiler sees
// it (the host keeps its order) and NVRTC must refuse the unit, naming the field.
TEST_CASE("a Params field reordered on one side only fails the compile", "[generator][params][compile]") {
  KernelSource src = emit_json(R"({"dtype":"bf16","head_dim":64})");
  CHECK_NOTHROW(compile_kernel(src));
  const std::string a = "  FIELD(int, seqlen_q)";
  const std::string b = "  FIELD(int, seqlen_k)";
  const auto pa = src.code.find(a);
  const auto pb = src.code.find(b);
  REQUIRE(pa != std::string::npos);
  REQUIRE(pb != std::string::npos);
  REQUIRE(pa < pb);
  std::string swapped = src.code;
  const std::string line_a = swapped.substr(pa, swapped.find('\n', pa) - pa);
  const std::string line_b = swapped.substr(pb, swapped.find('\n', pb) - pb);
  swapped.replace(pb, line_b.size(), line_a);
  swapped.replace(pa, line_a.size(), line_b);
  src.code = swapped;
  try {
    compile_kernel(src);
    FAIL("a unit whose Params differ from the host's compiled");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kCompileFailed);
    CHECK_THAT(std::string(e.what()), Contains("static assertion failed") && Contains("Params::seqlen_q") &&
                                          Contains("offset differs from the host's"));
  }
}

TEST_CASE("the attention family is registered and reached through the generic seam", "[generator][family]") {
  const KernelFamily& f = find_family("attention_fwd");
  CHECK(f.kind == "attention_fwd");
  const nlohmann::json caps = f.capabilities();
  CHECK(caps.at("head_dims") == nlohmann::json::array({64, 96, 128, 192, 256}));
  CHECK(caps.at("head_dim_rule") == nlohmann::json{{"min", 8}, {"max", 256}, {"multiple_of", 8}});
  CHECK(caps.at("fp8_head_dim_rule") == nlohmann::json{{"min", 16}, {"max", 256}, {"multiple_of", 16}});
  CHECK(caps.at("head_dim_v_may_differ") == true);
  // A document without "kind" is an attention forward spec; its "problem" section is no part of the kernel.
  const SpecDocument doc = parse_spec_document(
      R"({"dtype":"bf16","head_dim":128,"causal":true,"problem":{"seqlen_q":8,"seqlen_k":8,"num_heads":2}})");
  CHECK(doc.kind == "attention_fwd");
  REQUIRE(doc.problem.has_value());
  CHECK(doc.problem->at("num_heads") == 2);
  CHECK_FALSE(doc.spec.contains("problem"));
  const KernelRequest r = request_for(doc);
  const KernelConfig cfg = make_kernel_config(parse_spec(std::string(R"({"dtype":"bf16","head_dim":128,"causal":true})")));
  CHECK(r.kind == "attention_fwd");
  CHECK(r.canonical == canonical_string(cfg.spec));
  CHECK(r.source.code == emit_kernel(cfg).code);
  CHECK(r.launch.num_threads == cfg.num_threads);
  CHECK(r.launch.smem_bytes == cfg.smem_bytes);
  CHECK(r.launch.cluster_x == 1);
  CHECK(r.summary == "bf16 d128 causal 128x176 wg2 st2 pingpong overlap mask-free-loop l2-hints persistent");
  try {
    parse_spec_document(R"({"kind":"attention_bwd","dtype":"bf16"})");
    request_for(parse_spec_document(R"({"kind":"attention_bwd","dtype":"bf16"})"));
    FAIL("an unknown kind was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidSpec);
    CHECK_THAT(std::string(e.what()), Contains("\"kind\": \"attention_bwd\" is not a kernel family") &&
                                          Contains("\"attention_fwd\""));
  }
}

TEST_CASE("the host's shared-memory plan is the one the kernel checks", "[generator][params]") {
  for (const char* json : {R"({"dtype":"bf16","head_dim":128})", R"({"dtype":"fp16","head_dim":64})",
                           R"({"dtype":"bf16","head_dim":256,"causal":true})", R"({"dtype":"e4m3","head_dim":128})",
                           R"({"dtype":"e4m3","head_dim":256,"causal":true})",
                           R"({"dtype":"bf16","head_dim":128,"persistent":true})",
                           R"({"dtype":"e4m3","head_dim":64,"v_layout":"d_major","persistent":true})",
                           R"({"dtype":"bf16","head_dim":96,"tile":{"block_m":192,"block_n":128},"p_in_smem":true})",
                           R"({"dtype":"fp16","head_dim":64,"tile":{"block_m":192,"block_n":192},"p_in_smem":true,)"
                           R"("persistent":true})"}) {
    INFO(json);
    const KernelConfig cfg = make_kernel_config(parse_spec(std::string(json)));
    const bool fp8 = cfg.spec.dtype == DType::kE4m3;
    const SmemPlan p = smem_plan(cfg.spec.block_m, cfg.spec.block_n, cfg.spec.head_dim, cfg.spec.head_dim_v,
                                 cfg.spec.stages, fp8 ? 1 : 2, 2, cfg.v_stage, cfg.spec.persistent,
                                 cfg.spec.p_in_smem);
    CHECK(cfg.smem_bytes == p.launch_bytes);
    CHECK(p.launch_bytes == p.q_bytes + cfg.spec.stages * (p.k_stage_bytes + p.v_stage_bytes + p.v_load_stage_bytes) +
                                p.o_tail_bytes + p.p_bytes + 1024 + 256);
    // P (p_in_smem): block_m rows of block_n 16-bit keys in whole 128-byte rows, its own area before the barriers.
    CHECK(p.p_bytes == (cfg.spec.p_in_smem ? cfg.spec.block_m * ((cfg.spec.block_n * 2 + 127) / 128 * 128) : 0));
    CHECK(p.barrier_offset == p.p_offset + p.p_bytes);
    CHECK(p.p_offset % 1024 == 0);
    CHECK(p.o_bytes <= p.o_staging_bytes);
    // One tile per CTA: O over Q (and the V load stages); persistent: over the V stages (and a tail after them), so
    // that the next tile's Q can load while O is stored.
    CHECK(p.o_offset == (cfg.spec.persistent ? p.v_offset : p.q_offset));
    if (cfg.spec.persistent) {
      CHECK(p.o_staging_bytes == cfg.spec.stages * p.v_stage_bytes + p.o_tail_bytes);
      CHECK(p.p_offset == p.v_offset + cfg.spec.stages * p.v_stage_bytes + p.o_tail_bytes);
      // v_tail (no V load stages here), then q_empty, o_empty, the tile slots.
      CHECK(p.num_barriers == 1 + 4 * cfg.spec.stages + 1 + kPersistentBarriers);
    }
    CHECK((p.v_load_stage_bytes != 0) == (cfg.v_stage == kVStageTransposed));
    CHECK(emit_kernel(cfg).code.find(fmt::format("static constexpr int kSmemBytes = {};", p.launch_bytes)) !=
          std::string::npos);
  }
}

TEST_CASE("emitted source compiles with nvcc -arch=sm_90a -cubin", "[generator][nvcc]") {
  const KernelSource src = emit_json(R"({"dtype":"fp16","head_dim":64,"causal":true})");
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("fa3jit_nvcc_{}", ::getpid());
  std::filesystem::create_directories(dir);
  const auto cu = dir / "kernel.cu";
  std::ofstream(cu) << src.code;
  const std::string cmd = fmt::format("\"{}\" -gencode=arch=compute_90a,code=sm_90a -cubin -o \"{}\" \"{}\" 2>&1",
                                      FA3JIT_NVCC, (dir / "kernel.cubin").string(), cu.string());
  INFO(cmd);
  CHECK(std::system(cmd.c_str()) == 0);
  CHECK(std::filesystem::file_size(dir / "kernel.cubin") > 10000);
  std::filesystem::remove_all(dir);
}

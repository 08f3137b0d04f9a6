// Generator: the emitted unit is self-contained, deterministic, named uniquely per spec, and compiles
// with nvcc as well as NVRTC.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "generator/emit.h"
#include "generator/error.h"

using namespace fa3jit;

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
  // Each template appears once.
  CHECK(std::regex_search(src.code, std::regex("templates/mainloop.cuh")));
  const auto first = src.code.find("// ---- templates/softmax.cuh");
  REQUIRE(first != std::string::npos);
  CHECK(src.code.find("// ---- templates/softmax.cuh", first + 1) == std::string::npos);
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
    CHECK(src.kernel_name.rfind("fa3jit_fwd_", 0) == 0);
  }
  CHECK(names.size() == std::size(specs));
  CHECK(codes.size() == std::size(specs));
  CHECK(kernel_name(parse_spec(std::string(R"({"dtype":"bf16","head_dim":128,"causal":true})"))) ==
        "fa3jit_fwd_bf16_d128_dv128_causal_m128n176_wg2_st2_pp_iwo");
}

TEST_CASE("e4m3 is rejected by the generator too", "[generator]") {
  Spec spec = parse_spec(std::string(R"({"dtype":"bf16","head_dim":128})"));
  KernelConfig cfg = make_kernel_config(spec);
  cfg.spec.dtype = DType::kE4m3;
  CHECK_THROWS_AS(emit_kernel(cfg), Error);
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

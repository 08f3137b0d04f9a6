// Every spec in configs/ compiles through NVRTC for sm_90a with zero spill bytes, and its PTX uses the
// Hopper instructions the design depends on (wgmma, TMA, setmaxnreg). Needs no GPU.
#include <catch2/catch.hpp>

#include <filesystem>

#include "jit/compiler.h"
#include "jit/family.h"

using namespace fa3jit;

TEST_CASE("every config compiles with NVRTC, without spills, using wgmma/TMA/setmaxnreg", "[compile][configs]") {
  int compiled = 0;
  for (const auto& entry : std::filesystem::directory_iterator(FA3JIT_SOURCE_DIR "/configs")) {
    if (entry.path().extension() != ".json") continue;
    const SpecDocument document = load_spec_document(entry.path().string());
    if (document.kind != "attention_fwd") continue;
    const CompiledKernel k = compile_kernel(request_for(document).source);
    INFO(entry.path().filename().string() << ": " << k.kernel_name << " registers " << k.report.registers
                                          << " spill stores " << k.report.spill_store_bytes << " loads "
                                          << k.report.spill_load_bytes);
    CHECK(k.report.registers > 0);
    CHECK(k.report.spill_store_bytes == 0);
    CHECK(k.report.spill_load_bytes == 0);
    CHECK(k.report.stack_frame_bytes == 0);
    CHECK(k.ptx.find("wgmma.mma_async") != std::string::npos);
    CHECK(k.ptx.find("cp.async.bulk.tensor") != std::string::npos);
    CHECK(k.ptx.find("setmaxnreg") != std::string::npos);
    CHECK(k.cubin.size() > 10000);
    std::printf("%-28s %-52s regs %3d spill %d/%d  %.0f ms\n", entry.path().filename().c_str(),
                k.kernel_name.c_str(), k.report.registers, k.report.spill_store_bytes, k.report.spill_load_bytes,
                k.compile_ms);
    ++compiled;
  }
  CHECK(compiled >= 12);
}

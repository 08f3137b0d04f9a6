// Tests of runtime/compiler: the ptxas report parser on recorded logs and real NVRTC compiles (no GPU needed).
#include <catch2/catch.hpp>

#include <algorithm>
#include <regex>
#include <string>

#include "core/error.h"
#include "jit/compiler.h"

using namespace fa3jit;

namespace {

// Two entries and a non-inlined device function, in the layout NVRTC 13.0 writes with -Xptxas=-v.
// "fa3jit_fwd" is a prefix of "fa3jit_fwd_d128": the parser must not mix them up.
const char* kTwoKernelLog =
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function 'fa3jit_fwd_d128' for 'sm_90a'\n"
    "ptxas info    : Function properties for fa3jit_fwd_d128\n"
    "ptxas         .     64 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
    "ptxas info    : Used 255 registers, used 2 barriers, 1024 bytes smem, 400 bytes cmem[0]\n"
    "ptxas info    : Compile time = 181.2 ms\n"
    "ptxas info    : Function properties for helper_softmax\n"
    "    32 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Compiling entry function 'fa3jit_fwd' for 'sm_90a'\n"
    "ptxas info    : Function properties for fa3jit_fwd\n"
    "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 168 registers, used 1 barriers, 9216 bytes smem, 400 bytes cmem[0]\n"
    "ptxas info    : Compile time = 92.0 ms\n";

// A dynamically indexed local array that ptxas cannot keep in registers, so the kernel has a stack frame.
const char* kStackKernel = R"(
extern "C" __global__ void fa3jit_test_stack(const float* in, float* out, const int* idx, int n) {
  float a[64];
  for (int i = 0; i < 64; ++i) a[i] = in[i * n + threadIdx.x];
  for (int i = 0; i < n; ++i) a[idx[i] & 63] += 1.0f;
  out[threadIdx.x] = a[idx[threadIdx.x] & 63];
}
)";

}  // namespace

TEST_CASE("parse_ptxas_report picks the named entry out of a multi-kernel log", "[compiler]") {
  const ResourceReport a = parse_ptxas_report(kTwoKernelLog, "fa3jit_fwd");
  CHECK(a.registers == 168);
  CHECK(a.barriers == 1);
  CHECK(a.static_smem_bytes == 9216);
  CHECK(a.stack_frame_bytes == 0);
  CHECK(a.spill_store_bytes == 0);
  CHECK(a.spill_load_bytes == 0);

  const ResourceReport b = parse_ptxas_report(kTwoKernelLog, "fa3jit_fwd_d128");
  CHECK(b.registers == 255);
  CHECK(b.barriers == 2);
  CHECK(b.static_smem_bytes == 1024);
  CHECK(b.stack_frame_bytes == 64);  // not the 32 of helper_softmax that follows
  CHECK(b.spill_store_bytes == 8);
  CHECK(b.spill_load_bytes == 12);
}

TEST_CASE("parse_ptxas_report handles lines without barriers or smem", "[compiler]") {
  const std::string log =
      "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n"
      "ptxas info    : Function properties for k\n"
      "ptxas         .     256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 32 registers, 256 bytes cumulative stack size, 360 bytes cmem[0]\n";
  const ResourceReport r = parse_ptxas_report(log, "k");
  CHECK(r.registers == 32);
  CHECK(r.barriers == 0);           // omitted by ptxas when zero
  CHECK(r.static_smem_bytes == 0);  // "cumulative stack size" and cmem are not smem
  CHECK(r.stack_frame_bytes == 256);
}

TEST_CASE("parse_ptxas_report leaves -1 for a kernel the log does not mention", "[compiler]") {
  for (const std::string& log : {std::string(kTwoKernelLog), std::string(), std::string("garbage\nUsed\n")}) {
    const ResourceReport r = parse_ptxas_report(log, "missing_kernel");
    CHECK(r.registers == -1);
    CHECK(r.barriers == -1);
    CHECK(r.static_smem_bytes == -1);
    CHECK(r.stack_frame_bytes == -1);
    CHECK(r.spill_store_bytes == -1);
    CHECK(r.spill_load_bytes == -1);
  }
}

TEST_CASE("default compile flags and NVRTC version", "[compiler]") {
  const std::vector<std::string>& flags = default_compile_flags();
  CHECK(std::find(flags.begin(), flags.end(), "--gpu-architecture=sm_90a") != flags.end());
  CHECK(std::find(flags.begin(), flags.end(), "-Xptxas=-v") != flags.end());
  CHECK(std::find(flags.begin(), flags.end(), "--use_fast_math") != flags.end());
  CHECK(std::regex_match(nvrtc_version_string(), std::regex(R"(\d+\.\d+)")));
}

TEST_CASE("compile_kernel builds a real sm_90a cubin with a ptxas report", "[compiler][nvrtc]") {
  const CompiledKernel k = compile_kernel(KernelSource{"fa3jit_test_stack", kStackKernel});
  CHECK(k.kernel_name == "fa3jit_test_stack");
  REQUIRE(k.cubin.size() > 4);
  CHECK(k.cubin.compare(0, 4, "\x7f" "ELF") == 0);
  CHECK(k.ptx.find(".entry fa3jit_test_stack(") != std::string::npos);
  CHECK(k.ptx.find(".target sm_90a") != std::string::npos);
  CHECK(k.report.registers > 0);
  CHECK(k.report.stack_frame_bytes >= 256);  // 64 floats of local memory
  CHECK(k.report.spill_store_bytes >= 0);
  CHECK(k.report.barriers == 0);
  CHECK(k.log.find("fa3jit_test_stack") != std::string::npos);
  CHECK(k.compile_ms > 0.0);
}

TEST_CASE("compile_kernel builds every entry of a several-entry source, each with its own report", "[compiler][nvrtc]") {
  // Two functions of different register and shared-memory needs, compiled as separate ptxas functions.
  const std::string code =
      "extern \"C\" __global__ void fa3jit_two_small(float* o) { o[threadIdx.x] = 1.0f; }\n"
      "extern \"C\" __global__ void fa3jit_two_smem(float* o) {\n"
      "  __shared__ float s[1024];\n"
      "  s[threadIdx.x] = o[threadIdx.x];\n"
      "  __syncthreads();\n"
      "  o[threadIdx.x] = s[1023 - threadIdx.x];\n"
      "}\n";
  KernelSource src{"fa3jit_two", code, {"fa3jit_two_small", "fa3jit_two_smem"}};
  CHECK(entry_names(src) == std::vector<std::string>{"fa3jit_two_small", "fa3jit_two_smem"});
  CHECK(entry_names(KernelSource{"one", "", {}}) == std::vector<std::string>{"one"});
  // One entry: the default flags; several: ptxas on one thread per entry, the same on every host.
  CHECK(compile_flags(KernelSource{"one", "", {}}) == default_compile_flags());
  std::vector<std::string> two_flags = default_compile_flags();
  two_flags.push_back("--split-compile=2");
  CHECK(compile_flags(src) == two_flags);

  const CompiledKernel k = compile_kernel(src);
  CHECK(k.kernel_name == "fa3jit_two");
  REQUIRE(k.entries.size() == 2);
  CHECK(k.entries[0].name == "fa3jit_two_small");
  CHECK(k.entries[1].name == "fa3jit_two_smem");
  CHECK(k.entries[0].report.static_smem_bytes == 0);
  CHECK(k.entries[1].report.static_smem_bytes == 4096);
  CHECK(k.entries[0].report.registers > 0);
  CHECK(k.entries[1].report.barriers == 1);
  // The kernel's report is the largest of each field, and -1 where an entry has none.
  CHECK(k.report.static_smem_bytes == 4096);
  CHECK(k.report.registers == std::max(k.entries[0].report.registers, k.entries[1].report.registers));
  CHECK(k.report.barriers == 1);
  std::vector<CompiledEntry> unreported = k.entries;
  unreported[1].report.spill_store_bytes = -1;
  CHECK(unreported[0].report.spill_store_bytes == 0);
  CHECK(combined_report(unreported).spill_store_bytes == -1);
  CHECK(combined_report(unreported).registers == k.report.registers);
  CHECK(combined_report({}).registers == -1);

  src.entries.push_back("fa3jit_two_missing");
  try {
    compile_kernel(src);
    FAIL("a source missing one of its entries was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kCompileFailed);
    CHECK(std::string(e.what()).find("fa3jit_two_missing") != std::string::npos);
  }
}

TEST_CASE("compile_kernel reports a syntax error as kCompileFailed with the NVRTC log", "[compiler][nvrtc]") {
  const KernelSource bad{"fa3jit_test_bad", "extern \"C\" __global__ void fa3jit_test_bad(float* o) { o[0] = 1.0f }"};
  try {
    compile_kernel(bad);
    FAIL("compile_kernel accepted a source with a syntax error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kCompileFailed);
    const std::string msg = e.what();
    CHECK(msg.find("expected a \";\"") != std::string::npos);
    CHECK(msg.find("fa3jit_test_bad") != std::string::npos);
  }
}

TEST_CASE("compile_kernel rejects a source without the named entry and bad flags", "[compiler][nvrtc]") {
  SECTION("entry point missing") {
    const KernelSource src{"fa3jit_not_there", "extern \"C\" __global__ void other(float* o) { o[0] = 1.0f; }"};
    try {
      compile_kernel(src);
      FAIL("a source without the entry point was accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kCompileFailed);
      CHECK(std::string(e.what()).find("fa3jit_not_there") != std::string::npos);
    }
  }
  SECTION("unknown option") {
    const KernelSource src{"k", "extern \"C\" __global__ void k(float* o) { o[0] = 1.0f; }"};
    try {
      compile_kernel(src, {"--gpu-architecture=sm_90a", "--no-such-option"});
      FAIL("an unknown NVRTC option was accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kCompileFailed);
      CHECK(std::string(e.what()).find("--no-such-option") != std::string::npos);
    }
  }
  SECTION("virtual architecture gives no cubin") {
    const KernelSource src{"k", "extern \"C\" __global__ void k(float* o) { o[0] = 1.0f; }"};
    try {
      compile_kernel(src, {"--gpu-architecture=compute_90a"});
      FAIL("flags without a real architecture were accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidArgument);
      CHECK(std::string(e.what()).find("compute_90a") != std::string::npos);
    }
  }
  SECTION("empty kernel name") {
    CHECK_THROWS_AS(compile_kernel(KernelSource{"", "extern \"C\" __global__ void k() {}"}), Error);
  }
}

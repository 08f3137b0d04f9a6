// The e4m3 kernels run the FP8 tensor-core instruction for both GEMMs, checked in the SASS of the cubin NVRTC
// builds (a release of another library once shipped an FP8 path that silently ran 16-bit instructions). The
// disassembler is cuobjdump: $FA3JIT_CUOBJDUMP, else the one on PATH, else the CUDA toolkit's
// (tools/bootstrap.sh installs it when the toolkit lacks it). Needs no GPU.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include <fmt/format.h>

#include "jit/compiler.h"
#include "kernels/attention_fwd/emit.h"
#include "kernels/attention_fwd/spec.h"
#include "kernels/attention_fwd/tile_table.h"

using namespace fa3jit;
namespace af = fa3jit::attention_fwd;

namespace {

std::string find_cuobjdump() {
  if (const char* env = std::getenv("FA3JIT_CUOBJDUMP"); env != nullptr && *env) return env;
  if (std::system("command -v cuobjdump >/dev/null 2>&1") == 0) return "cuobjdump";
  for (const char* dir : {"/usr/local/cuda/bin", "/usr/local/cuda-13.0/bin"}) {
    const std::string path = std::string(dir) + "/cuobjdump";
    if (std::filesystem::exists(path)) return path;
  }
  return "";
}

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  CHECK(::pclose(pipe) == 0);
  return out;
}

// Counts of each tensor-core instruction form in the disassembly, e.g. "QGMMA.64x160x32.F32.E4M3.E4M3". An
// instruction that writes RZ from RZ and the null descriptor is no GEMM: it is how ptxas closes an empty
// wgmma-group (the first key block's step of the overlapped schedule commits one in place of its P.V); those are
// counted under "empty group".
std::map<std::string, int> mma_forms(const std::string& sass) {
  std::map<std::string, int> forms;
  const std::regex re(R"(((QGMMA|HGMMA)\.[0-9A-Zx.]+)\s+([^;]*);)");
  for (auto it = std::sregex_iterator(sass.begin(), sass.end(), re); it != std::sregex_iterator(); ++it) {
    const std::string operands = (*it)[3].str();
    const bool empty_group = operands.rfind("RZ, gdesc[URZ], RZ", 0) == 0;
    ++forms[empty_group ? "empty group" : (*it)[1].str()];
  }
  return forms;
}

std::string disassemble(const std::string& cubin, const std::string& tool) {
  const auto path = std::filesystem::temp_directory_path() / fmt::format("fa3jit_sass_{}.cubin", ::getpid());
  std::ofstream(path, std::ios::binary) << cubin;
  const std::string sass = run_capture(fmt::format("\"{}\" -sass \"{}\" 2>&1", tool, path.string()));
  std::filesystem::remove(path);
  return sass;
}

}  // namespace

TEST_CASE("e4m3 kernels run QGMMA E4M3 for both GEMMs, 16-bit kernels HGMMA", "[compile][fp8][sass]") {
  const std::string tool = find_cuobjdump();
  INFO("cuobjdump not found: set FA3JIT_CUOBJDUMP or run tools/bootstrap.sh test, which installs it");
  REQUIRE_FALSE(tool.empty());
  for (const char* json : {R"({"dtype":"e4m3","head_dim":128})", R"({"dtype":"e4m3","head_dim":256,"causal":true})",
                           R"({"dtype":"e4m3","head_dim":128,"quant":"per_block","out_dtype":"fp16"})",
                           R"({"dtype":"e4m3","head_dim":64})",
                           R"({"dtype":"e4m3","head_dim":128,"v_layout":"d_major"})",
                           R"({"dtype":"e4m3","head_dim":128,"mask_free_loop":false})",
                           R"({"dtype":"bf16","head_dim":128})"}) {
    INFO(json);
    const af::KernelConfig cfg = af::make_kernel_config(af::parse_spec(std::string(json)));
    const CompiledKernel k = compile_kernel(af::emit_kernel(cfg));
    const std::map<std::string, int> forms = mma_forms(disassemble(k.cubin, tool));
    std::string listed;
    for (const auto& [form, count] : forms) listed += fmt::format("{} x{}; ", form, count);
    INFO("tensor-core instructions: " << listed);
    const bool fp8 = cfg.spec.dtype == DType::kE4m3;
    const std::string suffix = fp8 ? "x32.F32.E4M3.E4M3" : "x16.F32.BF16";
    const std::string qk = fmt::format("{}GMMA.64x{}{}", fp8 ? "Q" : "H", cfg.spec.block_n, suffix);
    const std::string pv = fmt::format("{}GMMA.64x{}{}", fp8 ? "Q" : "H", cfg.spec.head_dim_v, suffix);
    CHECK(forms.count(qk) == 1);
    CHECK(forms.count(pv) == 1);
    // No tensor-core instruction of another kind: an e4m3 kernel has no HGMMA GEMM at all. One empty group where
    // the overlapped schedule runs its first block through the one copy of the loop body (mask_free_loop false: the
    // step's placeholder for the P.V it does not issue), none where that block is peeled.
    const bool folded_first = cfg.spec.intra_wg_overlap && !cfg.spec.mask_free_loop;
    const auto empty = forms.find("empty group");
    CHECK((empty == forms.end() ? 0 : empty->second) == (folded_first ? 1 : 0));
    for (const auto& [form, count] : forms)
      if (form != "empty group") CHECK(form.rfind(fp8 ? "QGMMA" : "HGMMA", 0) == 0);
  }
}

TEST_CASE("an e4m3 kernel with V given transposed (d_major) has no V transpose", "[compile][fp8][sass]") {
  // The in-kernel transpose is ldmatrix.trans + stmatrix in the producer (device/transpose_v.cuh); a d_major kernel
  // loads V by TMA straight into the K-major operand, so neither instruction may appear, and its producer takes
  // FA3's 24 registers (one warp issuing TMA) instead of the transpose's 40.
  const std::string tool = find_cuobjdump();
  REQUIRE_FALSE(tool.empty());
  for (const bool d_major : {false, true}) {
    const std::string json = fmt::format(R"({{"dtype":"e4m3","head_dim":128,"v_layout":"{}"}})",
                                         d_major ? "d_major" : "seq_major");
    INFO(json);
    const af::KernelConfig cfg = af::make_kernel_config(af::parse_spec(json));
    const std::string sass = disassemble(compile_kernel(af::emit_kernel(cfg)).cubin, tool);
    const bool transposes = sass.find("LDSM.16.MT88") != std::string::npos && sass.find("STSM") != std::string::npos;
    CHECK(transposes == !d_major);
    CHECK(cfg.v_stage == (d_major ? af::kVStageDMajor : af::kVStageTransposed));
    if (d_major) CHECK(cfg.producer_registers == 24);
  }
}

TEST_CASE("softmax_in_mask_arms: the wait for P.V after the softmax in the one-copy loop", "[compile][sass]") {
  // ptxas starts a wgmma.wait_group from the top of the basic block it falls in (device/mainloop.cuh: softmax_step).
  // With the softmax in both arms of the mask branch, every exponential of a step's softmax (block_n / 2 per thread
  // and arm) comes between the wait for S (DEPBAR.LE gsb0, 0x1) and the wait for P.V (0x0); with the softmax after
  // the join, the wait for P.V is at the join, before most of them.
  const std::string tool = find_cuobjdump();
  REQUIRE_FALSE(tool.empty());
  for (const char* dims : {R"("head_dim":128)", R"("head_dim":256)"}) {
    for (const bool arms : {false, true}) {
      // pin_pv_wait off: the store it adds would keep the wait behind the softmax in either place.
      const std::string json = fmt::format(R"({{"dtype":"bf16",{},"causal":true,"mask_free_loop":false,"softmax_in_mask_arms":{},"pin_pv_wait":false}})", dims, arms);
      INFO(json);
      const af::KernelConfig cfg = af::make_kernel_config(af::parse_spec(json));
      const std::string sass = disassemble(compile_kernel(af::emit_kernel(cfg)).cubin, tool);
      const size_t wait_s = sass.find("WARPGROUP.DEPBAR.LE gsb0, 0x1");
      REQUIRE(wait_s != std::string::npos);
      const size_t wait_pv = sass.find("WARPGROUP.DEPBAR.LE gsb0, 0x0", wait_s);
      REQUIRE(wait_pv != std::string::npos);
      const std::string between = sass.substr(wait_s, wait_pv - wait_s);
      int exps = 0;
      for (size_t at = between.find("MUFU.EX2"); at != std::string::npos; at = between.find("MUFU.EX2", at + 1)) ++exps;
      INFO("MUFU.EX2 between the two waits: " << exps);
      if (arms) {
        CHECK(exps >= cfg.spec.block_n);
      } else {
        // The ptxas behaviour the field works around; a failure here means a ptxas that places the wait later by
        // itself, and the field may no longer be worth its compile time.
        CHECK(exps < cfg.spec.block_n / 2);
      }
    }
  }
}

TEST_CASE("pin_pv_wait: the wait for P.V after the softmax in every overlapped step", "[compile][sass]") {
  // Each overlapped step waits for S (DEPBAR.LE gsb0, 0x1), runs the softmax (block_n / 2 exponentials per thread)
  // and waits for the previous P.V (0x0). With pin_pv_wait every such pair of waits holds at least a quarter of a
  // block's exponentials (ptxas leaves a few after the wait); without it, ptxas moves the second wait up to the first in
  // at least one copy of the loop (device/mainloop.cuh: pin_pv_wait).
  const std::string tool = find_cuobjdump();
  REQUIRE_FALSE(tool.empty());
  for (const char* base : {R"("dtype":"bf16","head_dim":128)", R"("dtype":"bf16","head_dim":128,"causal":true)",
                           R"("dtype":"bf16","head_dim":96)", R"("dtype":"fp16","head_dim":64,"causal":true)",
                           R"("dtype":"bf16","head_dim":192,"head_dim_v":128)", R"("dtype":"e4m3","head_dim":128)"}) {
    for (const bool pin : {false, true}) {
      const std::string json = fmt::format(R"({{{},"pin_pv_wait":{}}})", base, pin);
      INFO(json);
      const af::KernelConfig cfg = af::make_kernel_config(af::parse_spec(json));
      const std::string sass = disassemble(compile_kernel(af::emit_kernel(cfg)).cubin, tool);
      int steps = 0, fewest = 1 << 20;
      for (size_t wait_s = sass.find("WARPGROUP.DEPBAR.LE gsb0, 0x1"); wait_s != std::string::npos;
           wait_s = sass.find("WARPGROUP.DEPBAR.LE gsb0, 0x1", wait_s + 1)) {
        const size_t wait_pv = sass.find("WARPGROUP.DEPBAR.LE gsb0, 0x0", wait_s);
        REQUIRE(wait_pv != std::string::npos);
        const std::string between = sass.substr(wait_s, wait_pv - wait_s);
        int exps = 0;
        for (size_t at = between.find("MUFU.EX2"); at != std::string::npos; at = between.find("MUFU.EX2", at + 1)) ++exps;
        ++steps;
        fewest = std::min(fewest, exps);
      }
      INFO("overlapped steps " << steps << ", fewest MUFU.EX2 between their waits " << fewest);
      REQUIRE(steps >= 2);  // the two copies of the loop
      if (pin) {
        CHECK(fewest >= cfg.spec.block_n / 4);
      } else {
        // The ptxas behaviour the field works around; a failure here means a ptxas that keeps the wait in place by
        // itself, and the field may no longer be needed.
        CHECK(fewest < cfg.spec.block_n / 4);
      }
    }
  }
}

TEST_CASE("lazy_rescale: O's multiplies behind a branch on the warp's vote", "[compile][sass]") {
  // The field's saving is multiplies not issued (device/mainloop.cuh: rescale_o): ptxas must branch over them on the
  // VOTE.ANY of the warp, not predicate them (a predicated FMUL still takes its issue slot). So after the vote a
  // conditional branch jumps forward over at least one multiply per O register (head_dim_v / 2 per thread).
  const std::string tool = find_cuobjdump();
  REQUIRE_FALSE(tool.empty());
  for (const char* dims : {R"("head_dim":64)", R"("head_dim":128,"causal":true)", R"("head_dim":256)",
                           R"("head_dim":256,"causal":true,"mask_free_loop":true)"}) {
    const std::string json = fmt::format(R"({{"dtype":"bf16",{},"lazy_rescale":true}})", dims);
    INFO(json);
    const af::KernelConfig cfg = af::make_kernel_config(af::parse_spec(json));
    const std::string sass = disassemble(compile_kernel(af::emit_kernel(cfg)).cubin, tool);
    // (address, instruction) of every line.
    std::vector<std::pair<long, std::string>> code;
    const std::regex line(R"(/\*([0-9a-f]{4,})\*/\s+([^;]*?)\s*;)");
    for (auto it = std::sregex_iterator(sass.begin(), sass.end(), line); it != std::sregex_iterator(); ++it)
      code.emplace_back(std::stol((*it)[1].str(), nullptr, 16), (*it)[2].str());
    // The vote's predicate, and the first forward branch on it (ptxas schedules the softmax's tail in between).
    const std::regex vote(R"(^VOTE\.ANY (P\d),)");
    int votes = 0, skipped_max = 0;
    for (size_t i = 0; i < code.size(); ++i) {
      std::smatch v;
      if (!std::regex_search(code[i].second, v, vote)) continue;
      ++votes;
      const std::regex branch("^@!?" + v[1].str() + R"( BRA (0x[0-9a-f]+)$)");
      for (size_t j = i + 1; j < code.size(); ++j) {
        std::smatch m;
        if (!std::regex_search(code[j].second, m, branch)) continue;
        const long target = std::stol(m[1].str(), nullptr, 16);
        int fmuls = 0;
        for (size_t k = j + 1; k < code.size() && code[k].first < target; ++k) {
          if (code[k].second.rfind("FMUL", 0) == 0) ++fmuls;
          // The warps of a warpgroup must reach each wgmma at one instruction (synccheck), so none in the skipped part.
          CHECK(code[k].second.find("HGMMA") == std::string::npos);
          CHECK(code[k].second.find("WARPGROUP") == std::string::npos);
        }
        skipped_max = std::max(skipped_max, fmuls);
        break;
      }
    }
    INFO("VOTE.ANY: " << votes << ", most FMUL branched over after one: " << skipped_max);
    CHECK(votes >= 1);
    CHECK(skipped_max >= cfg.spec.head_dim_v / 2);
  }
}

// Every spec in configs/ and configs/models/ compiles through NVRTC for sm_90a with zero spill bytes and every wgmma
// asynchronous, and its PTX uses the Hopper instructions the design depends on (wgmma, TMA, setmaxnreg). Needs no GPU.
#include <catch2/catch.hpp>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "jit/compiler.h"
#include "jit/family.h"
#include "kernels/attention_fwd/emit.h"
#include "kernels/attention_fwd/manifest.h"
#include "kernels/attention_fwd/spec.h"
#include "kernels/attention_fwd/tile_table.h"

using namespace fa3jit;

namespace {

// What every kernel the project builds must show in ptxas's report: no spill, no stack frame, and every wgmma kept
// asynchronous: no "wgmma.mma_async instructions are serialized" (C7514) and no wgmma.fence ptxas had to inject
// (C7519) where the kernel's own are missing.
void check_resources(const CompiledKernel& k) {
  CHECK(k.report.registers > 0);
  CHECK(k.report.spill_store_bytes == 0);
  CHECK(k.report.spill_load_bytes == 0);
  CHECK(k.report.stack_frame_bytes == 0);
  CHECK(k.log.find("C7514") == std::string::npos);
  CHECK(k.log.find("C7519") == std::string::npos);
}

// Every barrier of the kernel's shared-memory plan is initialised: one mbarrier.init per barrier in the PTX (the
// init loops are unrolled), the persistent grid's entry of tile slots aside (params.h: kPersistentBarriers). A
// barrier left out of Mainloop::init_barriers passes every CPU check but the GPU's ("Unknown Error" at its first
// wait, as v_tail's did).
void check_barriers_initialised(const CompiledKernel& k, const attention_fwd::KernelConfig& cfg) {
  int inits = 0;
  for (size_t at = k.ptx.find("mbarrier.init.shared"); at != std::string::npos;
       at = k.ptx.find("mbarrier.init.shared", at + 1))
    ++inits;
  CHECK(inits == cfg.smem.num_barriers - (cfg.spec.persistent ? 1 : 0));
}

}  // namespace

TEST_CASE("every config compiles with NVRTC, without spills, using wgmma/TMA/setmaxnreg", "[compile][configs]") {
  int compiled = 0;
  // configs/ and configs/models/ (the sweep spaces of configs/sweeps/ and the serving manifests of configs/manifests/
  // are no specs).
  for (const auto& entry : std::filesystem::recursive_directory_iterator(FA3JIT_SOURCE_DIR "/configs")) {
    const std::string folder = entry.path().parent_path().filename().string();
    if (entry.path().extension() != ".json" || folder == "sweeps" || folder == "manifests") continue;
    const SpecDocument document = load_spec_document(entry.path().string());
    if (document.kind != "attention_fwd") continue;
    const CompiledKernel k = compile_kernel(request_for(document).source);
    INFO(entry.path().filename().string() << ": " << k.kernel_name << " registers " << k.report.registers
                                          << " spill stores " << k.report.spill_store_bytes << " loads "
                                          << k.report.spill_load_bytes);
    check_resources(k);
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

TEST_CASE("every head dim of the capability rule compiles without spills (16-bit and e4m3, and 192 / 128)",
          "[compile][head_dims]") {
  using namespace fa3jit::attention_fwd;
  struct Dims {
    DType dtype;
    int head_dim, head_dim_v;
  };
  std::vector<Dims> dims;
  for (DType dtype : {DType::kBf16, DType::kE4m3}) {
    const HeadDimRule& rule = head_dim_rule(dtype);
    for (int d = rule.min; d <= rule.max; d += rule.multiple) dims.push_back({dtype, d, d});
    dims.push_back({dtype, 192, 128});
  }
  for (const Dims& d : dims) {
    const Spec spec = default_spec(d.dtype, d.head_dim, d.head_dim_v, d.head_dim % 16 == 0);
    const CompiledKernel k = compile_kernel(make_request(make_kernel_config(spec)).source);
    INFO(spec_summary(spec) << ": registers " << k.report.registers << " spill stores " << k.report.spill_store_bytes
                            << " loads " << k.report.spill_load_bytes);
    check_resources(k);
  }
}

TEST_CASE("l2_evict_hints: every TMA load of K, V and Q carries its L2 priority, none without it", "[compile]") {
  using namespace fa3jit::attention_fwd;
  auto count = [](const std::string& ptx, const std::string& what) {
    int n = 0;
    for (size_t at = ptx.find(what); at != std::string::npos; at = ptx.find(what, at + 1)) ++n;
    return n;
  };
  for (const char* text : {R"({"dtype":"bf16","head_dim":128})",
                           R"({"dtype":"e4m3","head_dim":256,"v_layout":"d_major"})",
                           R"({"dtype":"bf16","head_dim":128,"paged_kv":true,"pack_gqa":true,"split_kv":true})",
                           R"({"dtype":"bf16","head_dim":128,"persistent":false,"cluster_m":2})"}) {
    nlohmann::json doc = nlohmann::json::parse(text);
    doc["l2_evict_hints"] = true;
    const CompiledKernel on = compile_kernel(make_request(make_kernel_config(parse_spec(doc))).source);
    doc["l2_evict_hints"] = false;
    const CompiledKernel off = compile_kernel(make_request(make_kernel_config(parse_spec(doc))).source);
    INFO(text);
    check_resources(on);
    const int loads = count(on.ptx, "cp.async.bulk.tensor.");
    CHECK(loads > 0);
    // Every bulk tensor copy in the kernel is a load (the O store is cp.async.bulk.tensor too: counted apart).
    const int stores = count(on.ptx, "cp.async.bulk.tensor.4d.global.shared");
    CHECK(count(on.ptx, ".L2::cache_hint") == loads - stores);
    CHECK(count(on.ptx, "createpolicy.fractional.L2::evict_last") > 0);
    CHECK(count(on.ptx, "createpolicy.fractional.L2::evict_first") > 0);
    CHECK(count(off.ptx, ".L2::cache_hint") == 0);
    CHECK(count(off.ptx, "createpolicy") == 0);
  }
}

TEST_CASE("the serving kernels of a manifest compile without spills (TMA and gather pages, decode and prefill)",
          "[compile][serving]") {
  // Row-by-row page gathers (page sizes that are not a multiple of 8) change the producer's code and its register
  // split, so their kernels are checked here as the configs are above. Not listed: e4m3 d64 and d96 over gathered
  // pages, whose 3-warpgroup producers (32 registers, the V transpose beside the gather) spill 8-12 bytes.
  using nlohmann::json;
  auto model = [](const char* dtype, int head_dim, json page_sizes) {
    return json{{"name", std::string(dtype) + " d" + std::to_string(head_dim)}, {"dtype", dtype},
                {"head_dim", head_dim}, {"num_heads", 32}, {"num_heads_kv", 8}, {"causal", true},
                {"kv", {"paged"}}, {"page_sizes", page_sizes}, {"decode_queries", {1, 5}}};
  };
  const json manifest = {{"kind", "serving_manifest"},
                         {"models", {model("bf16", 64, {3, 16}), model("bf16", 128, {3, 16}),
                                     model("bf16", 256, {3, 16}), model("e4m3", 128, {3}), model("e4m3", 256, {3})}}};
  int compiled = 0;
  for (const fa3jit::attention_fwd::ManifestKernel& k : fa3jit::attention_fwd::manifest_kernels(manifest)) {
    const CompiledKernel c = compile_kernel(fa3jit::request_for(fa3jit::split_spec_document(k.spec)).source);
    INFO(k.what << ": " << c.kernel_name << " registers " << c.report.registers << " spill stores "
                << c.report.spill_store_bytes << " loads " << c.report.spill_load_bytes);
    check_resources(c);
    ++compiled;
  }
  CHECK(compiled >= 30);
}

TEST_CASE("16-bit softcap kernels over gathered pages compile without spills (the 3-warpgroup tiles narrow)",
          "[compile][serving]") {
  using namespace fa3jit::attention_fwd;
  Layout layout;
  layout.paged_kv = layout.paged_gather = layout.softcap = true;
  for (DType dtype : {DType::kBf16, DType::kFp16})
    for (int head_dim : {64, 96})
      for (bool causal : {false, true})
        for (bool varlen_q : {false, true}) {
          layout.varlen_q = varlen_q;
          const Spec spec = default_spec(dtype, dtype, Quant::kNone, head_dim, head_dim, causal, layout);
          const KernelConfig cfg = make_kernel_config(spec);
          const CompiledKernel k = compile_kernel(make_request(cfg).source);
          INFO(spec_summary(spec) << ": registers " << k.report.registers << " spill stores "
                                  << k.report.spill_store_bytes << " loads " << k.report.spill_load_bytes);
          check_resources(k);
          check_barriers_initialised(k, cfg);
          // d64's table tile is 192 x 128 (spilled here), d96's 192 x 96.
          CHECK(spec.block_n == (head_dim == 64 ? 112 : 96));
        }
}

TEST_CASE("the schedule knobs off the table's defaults compile without spills, every wgmma asynchronous",
          "[compile][knobs]") {
  // A knob moves loads, multiplies or branches around the GEMM issues (spec.h); ptxas serialises every wgmma of a
  // kernel where it cannot prove a register safe between them (C7514) or injects fences (C7519), so kernels with
  // the knobs off the table's values are compiled here, not only the table's.
  using namespace fa3jit::attention_fwd;
  const char* specs[] = {
      R"({"dtype":"bf16","head_dim":128,"causal":true,"mask_free_loop":false,"rescale_o_before_pv":true})",
      R"({"dtype":"bf16","head_dim":256,"load_k_ahead":false,"mask_free_loop":true})",
      R"({"dtype":"fp16","head_dim":64,"load_k_ahead":true,"rescale_o_before_pv":true})",
      R"({"dtype":"e4m3","head_dim":128,"causal":true,"mask_free_loop":false})",
      R"({"dtype":"e4m3","head_dim":256,"v_layout":"d_major","mask_free_loop":false,"load_k_ahead":true})",
      R"({"dtype":"e4m3","head_dim":128,"fp32_two_level_accum":true,"tile":{"block_n":128},"mask_free_loop":false})",
      R"({"dtype":"bf16","head_dim":128,"persistent":false,"cluster_m":2})",
      R"({"dtype":"bf16","head_dim":256,"cluster_m":2})",  // on the persistent grid
      R"({"dtype":"bf16","head_dim":128,"causal":true,"mask_free_loop":false,"softmax_in_mask_arms":true})",
      R"({"dtype":"bf16","head_dim":64,"mask_free_loop":false,"softmax_in_mask_arms":true})",
      R"({"dtype":"bf16","head_dim":256,"softmax_in_mask_arms":false})",
      R"({"dtype":"e4m3","head_dim":128,"causal":true,"mask_free_loop":false,"softmax_in_mask_arms":true})",
      // lazy_rescale: O's multiplies behind a warp-uniform branch after P.V's wait; d256 without it (the table's d256
      // takes it).
      R"({"dtype":"bf16","head_dim":128,"causal":true,"lazy_rescale":true})",
      R"({"dtype":"bf16","head_dim":256,"lazy_rescale":false})",
      R"({"dtype":"fp16","head_dim":64,"lazy_rescale":true,"mask_free_loop":false})",
  };
  for (const char* text : specs) {
    const Spec spec = parse_spec(std::string(text));
    const KernelConfig cfg = make_kernel_config(spec);
    const CompiledKernel k = compile_kernel(make_request(cfg).source);
    INFO(spec_summary(spec) << ": registers " << k.report.registers << " spill stores " << k.report.spill_store_bytes
                            << " loads " << k.report.spill_load_bytes << "\n" << k.log);
    check_resources(k);
    check_barriers_initialised(k, cfg);
  }
}

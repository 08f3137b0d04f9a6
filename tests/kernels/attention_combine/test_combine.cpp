// Split-KV combine family without a GPU: spec parsing, the one validator and canonical form (spec.h,
// geometry.h), emission and NVRTC compilation (emit.h), the generic registry, runtime and C ABI reaching the
// family, and the launch checks that run before any driver call (launch.h).
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fa3jit/fa3jit.h"
#include "jit/compiler.h"
#include "jit/family.h"
#include "kernels/attention_combine/emit.h"
#include "kernels/attention_combine/geometry.h"
#include "kernels/attention_combine/launch.h"
#include "kernels/attention_combine/params.h"
#include "kernels/attention_combine/spec.h"
#include "runtime/runtime.h"

using fa3jit::DType;
using fa3jit::Error;
using fa3jit::ErrorCode;
using fa3jit::attention_combine::Spec;
namespace ac = fa3jit::attention_combine;
using Catch::Matchers::Contains;

namespace {

// parse_spec is overloaded on json and std::string; a string literal would be ambiguous.
Spec parse(const std::string& text) { return ac::parse_spec(text); }

// A cache directory of its own, removed afterwards.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    char tmpl[] = "/tmp/fa3jit-combine-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

struct BadCase {
  const char* name;
  const char* json;
  std::vector<std::string> fragments;  // each must appear in the message: field, value, what is allowed
};

const std::vector<BadCase> kBadSpecs = {
    {"syntax error", R"({"out_dtype": "bf16", "head_dim_v": 128,)", {"not valid JSON"}},
    {"non-object", R"([1, 2])", {"must be a JSON object", "[1,2]"}},
    {"duplicate key", R"({"out_dtype": "bf16", "head_dim_v": 128, "head_dim_v": 64})", {"\"head_dim_v\"", "twice"}},
    {"unknown key", R"({"out_dtype": "bf16", "head_dim_v": 128, "dtype": "bf16"})",
     {"\"dtype\"", "unknown", "kind, out_dtype, head_dim_v, max_splits, rows_per_cta"}},
    {"kind of another family", R"({"kind": "attention_fwd", "out_dtype": "bf16", "head_dim_v": 128})",
     {"\"kind\"", "\"attention_fwd\"", "\"attention_combine\""}},
    {"kind wrong type", R"({"kind": 7, "out_dtype": "bf16", "head_dim_v": 128})", {"\"kind\"", "7", "wrong type"}},
    {"missing out_dtype", R"({"head_dim_v": 128})", {"\"out_dtype\"", "missing", "\"fp16\", \"bf16\""}},
    {"out_dtype wrong type", R"({"out_dtype": 16, "head_dim_v": 128})",
     {"\"out_dtype\"", "16", "wrong type", "\"fp16\", \"bf16\""}},
    {"out_dtype e4m3", R"({"out_dtype": "e4m3", "head_dim_v": 128})",
     {"\"out_dtype\"", "\"e4m3\"", "\"fp16\", \"bf16\""}},
    {"out_dtype fp32", R"({"out_dtype": "fp32", "head_dim_v": 128})",
     {"\"out_dtype\"", "\"fp32\"", "\"fp16\", \"bf16\""}},
    {"missing head_dim_v", R"({"out_dtype": "bf16"})", {"\"head_dim_v\"", "missing", "a multiple of 8 in [8, 512]"}},
    {"head_dim_v 0", R"({"out_dtype": "bf16", "head_dim_v": 0})", {"\"head_dim_v\"", ": 0", "a multiple of 8 in [8, 512]"}},
    {"head_dim_v 4", R"({"out_dtype": "bf16", "head_dim_v": 4})", {"\"head_dim_v\"", ": 4", "a multiple of 8 in [8, 512]"}},
    {"head_dim_v 100", R"({"out_dtype": "bf16", "head_dim_v": 100})",
     {"\"head_dim_v\"", "100", "a multiple of 8 in [8, 512]"}},
    {"head_dim_v 520", R"({"out_dtype": "fp16", "head_dim_v": 520})",
     {"\"head_dim_v\"", "520", "a multiple of 8 in [8, 512]"}},
    {"head_dim_v negative", R"({"out_dtype": "fp16", "head_dim_v": -128})",
     {"\"head_dim_v\"", "-128", "a multiple of 8 in [8, 512]"}},
    {"head_dim_v huge", R"({"out_dtype": "fp16", "head_dim_v": 18446744073709551615})",
     {"\"head_dim_v\"", "18446744073709551615", "a multiple of 8 in [8, 512]"}},
    {"head_dim_v float", R"({"out_dtype": "bf16", "head_dim_v": 128.0})",
     {"\"head_dim_v\"", "128.0", "wrong type", "a multiple of 8 in [8, 512]"}},
    {"head_dim_v string", R"({"out_dtype": "bf16", "head_dim_v": "128"})",
     {"\"head_dim_v\"", "\"128\"", "wrong type"}},
    {"max_splits 0", R"({"out_dtype": "bf16", "head_dim_v": 128, "max_splits": 0})",
     {"\"max_splits\"", ": 0", "an integer in [1, 256]"}},
    {"max_splits 257", R"({"out_dtype": "bf16", "head_dim_v": 128, "max_splits": 257})",
     {"\"max_splits\"", "257", "an integer in [1, 256]"}},
    {"max_splits bool", R"({"out_dtype": "bf16", "head_dim_v": 128, "max_splits": true})",
     {"\"max_splits\"", "true", "wrong type", "an integer in [1, 256]"}},
    {"rows_per_cta 3", R"({"out_dtype": "bf16", "head_dim_v": 128, "rows_per_cta": 3})",
     {"\"rows_per_cta\"", ": 3", "head_dim_v 128 (32 lanes per row)", "one of 1, 2, 4, 8, 16, 32"}},
    {"rows_per_cta too many threads", R"({"out_dtype": "bf16", "head_dim_v": 128, "rows_per_cta": 64})",
     {"\"rows_per_cta\"", ": 64", "one of 1, 2, 4, 8, 16, 32", "32 to 1024 threads"}},
    {"rows_per_cta too few threads", R"({"out_dtype": "bf16", "head_dim_v": 64, "rows_per_cta": 1})",
     {"\"rows_per_cta\"", ": 1", "16 lanes per row", "one of 2, 4, 8, 16, 32, 64"}},
    {"rows_per_cta LSE table too large", R"({"out_dtype": "bf16", "head_dim_v": 8, "max_splits": 256, "rows_per_cta": 64})",
     {"\"rows_per_cta\"", ": 64", "max_splits 256", "one of 16, 32", "49152 bytes"}},
    {"rows_per_cta negative", R"({"out_dtype": "bf16", "head_dim_v": 128, "rows_per_cta": -4})",
     {"\"rows_per_cta\"", "-4", "one of 1, 2, 4, 8, 16, 32"}},
    {"rows_per_cta string", R"({"out_dtype": "bf16", "head_dim_v": 128, "rows_per_cta": "4"})",
     {"\"rows_per_cta\"", "\"4\"", "wrong type"}},
    {"problem is no kernel field", R"({"out_dtype": "bf16", "head_dim_v": 128, "problem": {"num_splits": 3}})",
     {"\"problem\"", "unknown"}},
};

}  // namespace

// ---- spec ------------------------------------------------------------------------------------------------

TEST_CASE("combine spec: a minimal spec resolves every field", "[combine][spec]") {
  const Spec s = parse(R"({"out_dtype": "bf16", "head_dim_v": 128})");
  CHECK(s.out_dtype == DType::kBf16);
  CHECK(s.head_dim_v == 128);
  CHECK(s.max_splits == ac::capabilities().default_max_splits);
  CHECK(s.max_splits == 128);
  CHECK(s.rows_per_cta == ac::default_rows_per_cta(128, 128));
  CHECK(s.rows_per_cta == 4);  // 32 lanes per row, 128 threads

  const Spec t = parse(R"({"kind": "attention_combine", "out_dtype": "fp16", "head_dim_v": 64, "max_splits": 17,
                           "rows_per_cta": 2})");
  CHECK(t.out_dtype == DType::kFp16);
  CHECK(t.head_dim_v == 64);
  CHECK(t.max_splits == 17);
  CHECK(t.rows_per_cta == 2);
}

TEST_CASE("combine spec: every head_dim_v and max_splits has a valid default", "[combine][spec]") {
  for (int d = 8; d <= 512; d += 8) {
    for (int splits : {1, 2, 17, 128, 255, 256}) {
      INFO("head_dim_v " << d << " max_splits " << splits);
      const Spec s = ac::default_spec(DType::kFp16, d, splits);
      const std::vector<int> rows = ac::allowed_rows_per_cta(d, splits);
      REQUIRE_FALSE(rows.empty());
      CHECK(std::find(rows.begin(), rows.end(), s.rows_per_cta) != rows.end());
      const ac::Geometry g = ac::derive_geometry(s);
      CHECK(g.num_threads % 32 == 0);
      CHECK(g.num_threads >= 32);
      CHECK(g.num_threads <= ac::kDefaultThreads);
      CHECK(g.lanes_per_row * g.vecs_per_lane * 4 >= d);
      CHECK(g.lanes_per_row * (g.vecs_per_lane - 1) * 4 < d);  // no lane without work in every vector slot
      CHECK(g.smem_bytes <= ac::kMaxStaticSmemBytes);
      CHECK(g.lse_stride >= splits);
    }
  }
}

TEST_CASE("combine spec: bad specs name the field, the value and what is allowed", "[combine][spec]") {
  for (const BadCase& c : kBadSpecs) {
    INFO(c.name << ": " << c.json);
    try {
      parse(c.json);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidSpec);
      for (const std::string& f : c.fragments) CHECK_THAT(e.what(), Contains(f));
    }
  }
}

TEST_CASE("combine spec: the validator guards specs built in code", "[combine][spec]") {
  Spec s;
  s.head_dim_v = 12;
  CHECK_THROWS_WITH(ac::validate(s), Contains("\"head_dim_v\": 12"));
  s = Spec{};
  s.out_dtype = DType::kE4m3;
  CHECK_THROWS_WITH(ac::validate(s), Contains("\"out_dtype\": \"e4m3\""));
  s = Spec{};
  s.max_splits = 1000;
  CHECK_THROWS_WITH(ac::validate(s), Contains("\"max_splits\": 1000"));
  s = Spec{};
  s.rows_per_cta = 5;
  CHECK_THROWS_WITH(ac::validate(s), Contains("\"rows_per_cta\": 5"));
  CHECK_THROWS_AS(ac::emit_kernel(s), Error);
  CHECK_THROWS_WITH(ac::default_spec(DType::kBf16, 600, 128), Contains("\"head_dim_v\": 600"));
}

TEST_CASE("combine spec: canonical JSON round-trips and names the kind", "[combine][spec]") {
  for (const char* json : {R"({"out_dtype": "bf16", "head_dim_v": 128})",
                           R"({"out_dtype": "fp16", "head_dim_v": 8, "max_splits": 256})",
                           R"({"out_dtype": "fp16", "head_dim_v": 512, "max_splits": 3, "rows_per_cta": 32})"}) {
    INFO(json);
    const Spec s = parse(json);
    const std::string canonical = ac::canonical_string(s);
    CHECK(parse(canonical) == s);
    CHECK(ac::canonical_string(parse(canonical)) == canonical);
    const nlohmann::json doc = nlohmann::json::parse(canonical);
    CHECK(doc.at("kind") == "attention_combine");
    CHECK(doc.size() == 5);  // kind, out_dtype, head_dim_v, max_splits, rows_per_cta
  }
}

TEST_CASE("combine spec: one spec written two ways is one kernel; different specs are different kernels",
          "[combine][spec]") {
  const Spec a = parse(R"({"out_dtype": "bf16", "head_dim_v": 128})");
  const Spec b = parse(
      R"({"rows_per_cta": 4, "max_splits": 128, "head_dim_v": 128, "kind": "attention_combine", "out_dtype": "bf16"})");
  CHECK(a == b);
  CHECK(ac::kernel_name(a) == ac::kernel_name(b));
  CHECK(ac::emit_kernel(a).code == ac::emit_kernel(b).code);
  CHECK(ac::kernel_name(a).rfind("fa3jit_attention_combine_bf16_dv128_s128_", 0) == 0);

  std::set<std::string> names;
  const char* specs[] = {
      R"({"out_dtype": "bf16", "head_dim_v": 128})",
      R"({"out_dtype": "fp16", "head_dim_v": 128})",
      R"({"out_dtype": "bf16", "head_dim_v": 64})",
      R"({"out_dtype": "bf16", "head_dim_v": 128, "max_splits": 256})",
      R"({"out_dtype": "bf16", "head_dim_v": 128, "rows_per_cta": 8})",
  };
  for (const char* s : specs) names.insert(ac::kernel_name(parse(s)));
  CHECK(names.size() == std::size(specs));
}

// ---- emission and NVRTC --------------------------------------------------------------------------------

TEST_CASE("combine emission: the unit is self-contained and checks the Params layout", "[combine][emit]") {
  const Spec spec = parse(R"({"out_dtype": "fp16", "head_dim_v": 256})");
  const fa3jit::KernelSource src = ac::emit_kernel(spec);
  CHECK(src.kernel_name == ac::kernel_name(spec));
  CHECK(src.code.find("#include") == std::string::npos);
  CHECK(src.code.find("#pragma once") == std::string::npos);
  CHECK(src.code.find(ac::canonical_string(spec)) != std::string::npos);
  CHECK(src.code.find("typedef unsigned int uint32_t;") != std::string::npos);
  CHECK(src.code.find("static constexpr int kHeadDimV = 256;") != std::string::npos);
  CHECK(src.code.find("static constexpr bool kIsBf16 = false;") != std::string::npos);
  CHECK(src.code.find("static_assert(sizeof(fa3jit::attention_combine::Params) == " +
                      std::to_string(sizeof(ac::Params))) != std::string::npos);
  const std::vector<fa3jit::FieldLayout> layout = ac::params_layout();
  CHECK(layout.size() == 12);
  for (const fa3jit::FieldLayout& f : layout) {
    INFO(f.name);
    CHECK(src.code.find("fa3jit::attention_combine::Params::" + std::string(f.name) + ": offset differs") !=
          std::string::npos);
  }
  const ac::Geometry g = ac::derive_geometry(spec);
  CHECK(src.code.find("extern \"C\" __global__ void __launch_bounds__(" + std::to_string(g.num_threads) + ", " +
                      std::to_string(g.min_ctas_per_sm) + ")\n" + src.kernel_name +
                      "(const __grid_constant__ fa3jit::attention_combine::Params params)") != std::string::npos);
  // Each device file once.
  const auto first = src.code.find("// ---- kernels/attention_combine/device/combine.cuh");
  REQUIRE(first != std::string::npos);
  CHECK(src.code.find("// ---- kernels/attention_combine/device/combine.cuh", first + 1) == std::string::npos);
}

TEST_CASE("combine emission: compiles with NVRTC without spills", "[combine][emit][nvrtc]") {
  std::vector<Spec> specs;
  for (DType dtype : {DType::kBf16, DType::kFp16})
    for (int d : {64, 128, 256}) specs.push_back(ac::default_spec(dtype, d, 128));
  specs.push_back(ac::default_spec(DType::kBf16, 8, 256));
  specs.push_back(ac::default_spec(DType::kFp16, 72, 17));
  specs.push_back(ac::default_spec(DType::kBf16, 512, 256));
  Spec wide = ac::default_spec(DType::kBf16, 128, 256);
  wide.rows_per_cta = 32;  // 1024 threads
  specs.push_back(wide);
  for (const Spec& spec : specs) {
    INFO(ac::spec_summary(spec));
    const fa3jit::KernelSource src = ac::emit_kernel(spec);
    const fa3jit::CompiledKernel compiled = fa3jit::compile_kernel(src);
    CHECK(compiled.kernel_name == src.kernel_name);
    CHECK_FALSE(compiled.cubin.empty());
    CHECK(compiled.report.registers > 0);
    CHECK(compiled.report.registers <= ac::kRegisterBudget);
    CHECK(compiled.report.spill_store_bytes == 0);
    CHECK(compiled.report.spill_load_bytes == 0);
    CHECK(compiled.report.static_smem_bytes == ac::derive_geometry(spec).smem_bytes);
  }
}

TEST_CASE("combine emission: a unit whose Params drifted from the host's does not compile", "[combine][emit][nvrtc]") {
  fa3jit::KernelSource src = ac::emit_kernel(parse(R"({"out_dtype": "bf16", "head_dim_v": 128})"));
  const std::string field = "FIELD(int, num_splits)";
  const auto at = src.code.find(field);
  REQUIRE(at != std::string::npos);
  src.code.replace(at, field.size(), "FIELD(long long, num_splits)");
  try {
    fa3jit::compile_kernel(src);
    FAIL("compiled");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kCompileFailed);
    CHECK_THAT(e.what(), Contains("differs from the host's"));
  }
}

// ---- the generic layers reach the family -----------------------------------------------------------------

TEST_CASE("combine family: the registry, spec documents and capabilities find it", "[combine][family]") {
  const fa3jit::KernelFamily& family = fa3jit::find_family("attention_combine");
  CHECK(family.kind == "attention_combine");
  CHECK_FALSE(family.description.empty());
  bool listed = false;
  for (const fa3jit::KernelFamily& f : fa3jit::families()) listed = listed || f.kind == "attention_combine";
  CHECK(listed);

  const nlohmann::json caps = family.capabilities();
  CHECK(caps.at("out_dtypes") == nlohmann::json{"fp16", "bf16"});
  CHECK(caps.at("head_dim_v").at("multiple_of") == 8);
  CHECK(caps.at("max_splits").at("max") == 256);

  const std::string json =
      R"({"kind": "attention_combine", "out_dtype": "bf16", "head_dim_v": 64, "problem": {"num_splits": 3}})";
  const fa3jit::SpecDocument doc = fa3jit::parse_spec_document(json);
  CHECK(doc.kind == "attention_combine");
  const fa3jit::KernelRequest request = fa3jit::request_for(doc);
  const Spec spec = parse(R"({"out_dtype": "bf16", "head_dim_v": 64})");
  CHECK(request.kind == "attention_combine");
  CHECK(request.canonical == ac::canonical_string(spec));
  CHECK(request.source.kernel_name == ac::kernel_name(spec));
  CHECK(request.launch.num_threads == ac::derive_geometry(spec).num_threads);
  CHECK(request.launch.smem_bytes == 0);
  CHECK(request.launch.cluster_x == 1);
  CHECK_THAT(request.summary, Contains("combine bf16 dv64"));

  // A family's errors come through the generic path unchanged.
  CHECK_THROWS_WITH(fa3jit::request_for(fa3jit::parse_spec_document(
                        R"({"kind": "attention_combine", "out_dtype": "bf16", "head_dim_v": 100})")),
                    Contains("\"head_dim_v\": 100"));
}

TEST_CASE("combine family: Runtime::prepare and the C ABI compile and cache it", "[combine][family][nvrtc]") {
  ScratchDir dir;
  const std::string json = R"({"kind": "attention_combine", "out_dtype": "fp16", "head_dim_v": 128})";
  {
    fa3jit::Runtime rt(fa3jit::RuntimeOptions{dir.path});
    const fa3jit::PreparedKernel first = rt.prepare(json);
    CHECK_FALSE(first.cache_hit);
    CHECK(first.request.kind == "attention_combine");
    CHECK(first.compiled->report.spill_store_bytes == 0);
    const fa3jit::PreparedKernel again = rt.prepare(json);
    CHECK(again.cache_hit);
    CHECK(again.key == first.key);
  }
  fa3jit_runtime_options options{};
  options.struct_size = sizeof(options);
  options.cache_dir = dir.path.c_str();
  fa3jit_runtime* rt = nullptr;
  REQUIRE(fa3jit_runtime_create(&options, &rt) == FA3JIT_OK);
  fa3jit_kernel_info info{};
  info.struct_size = sizeof(info);
  CHECK(fa3jit_compile_spec(rt, json.c_str(), &info) == FA3JIT_OK);
  CHECK(std::string(info.kind) == "attention_combine");
  CHECK(info.cache_hit == 1);  // on disk from the runtime above
  CHECK(std::string(info.kernel_name) == ac::kernel_name(parse(json)));
  CHECK(info.spill_store_bytes == 0);
  CHECK(info.num_threads == 128);
  CHECK(fa3jit_compile_spec(rt, R"({"kind": "attention_combine", "out_dtype": "bf16", "head_dim_v": 7})", &info) ==
        FA3JIT_ERROR_INVALID_SPEC);
  fa3jit_runtime_destroy(rt);
}

// ---- launch checks that need no driver -------------------------------------------------------------------

namespace {

// Plausible but never dereferenced pointers: every check below fails before the first driver call.
ac::CombineArgs valid_looking_args() {
  ac::CombineArgs a;
  a.out_dtype = DType::kBf16;
  a.num_splits = 3;
  a.batch = 2;
  a.seqlen_q = 1;
  a.num_heads = 8;
  a.head_dim_v = 128;
  a.out_partial = reinterpret_cast<const float*>(uintptr_t{0x10000});
  a.lse_partial = reinterpret_cast<const float*>(uintptr_t{0x20000});
  a.out.data = reinterpret_cast<void*>(uintptr_t{0x30000});
  a.out.stride_head = 128;
  a.out.stride_seq = 8 * 128;
  a.out.stride_batch = 8 * 128;
  return a;
}

void expect_rejected(fa3jit::Runtime& rt, const ac::CombineArgs& a, ErrorCode code,
                     const std::vector<std::string>& fragments) {
  try {
    ac::combine(rt, a, nullptr);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == code);
    for (const std::string& f : fragments) CHECK_THAT(e.what(), Contains(f));
  }
}

}  // namespace

TEST_CASE("combine launch: arguments are checked before any driver call", "[combine][launch]") {
  ScratchDir dir;
  fa3jit::Runtime rt(fa3jit::RuntimeOptions{dir.path});
  ac::CombineArgs a = valid_looking_args();

  a.out_dtype = DType::kE4m3;
  expect_rejected(rt, a, ErrorCode::kUnsupported, {"out_dtype", "e4m3", "\"fp16\", \"bf16\""});
  a = valid_looking_args();
  a.head_dim_v = 100;
  expect_rejected(rt, a, ErrorCode::kUnsupported, {"head_dim_v", "100", "a multiple of 8 in [8, 512]"});
  a = valid_looking_args();
  a.num_splits = 0;
  expect_rejected(rt, a, ErrorCode::kInvalidArgument, {"num_splits", "0", ">= 1"});
  a.num_splits = 257;
  expect_rejected(rt, a, ErrorCode::kInvalidArgument, {"num_splits", "257", "<= 256"});
  a = valid_looking_args();
  a.batch = 0;
  expect_rejected(rt, a, ErrorCode::kInvalidArgument, {"batch", "0", ">= 1"});
  a = valid_looking_args();
  a.seqlen_q = -3;
  expect_rejected(rt, a, ErrorCode::kInvalidArgument, {"seqlen_q", "-3", ">= 1"});
  a = valid_looking_args();
  a.batch = 65536;
  a.num_heads = 65536;
  expect_rejected(rt, a, ErrorCode::kInvalidArgument, {"batch 65536", "num_heads 65536", "32-bit"});
  a = valid_looking_args();
  a.out_partial = nullptr;
  expect_rejected(rt, a, ErrorCode::kInvalidArgument, {"out_partial", "null"});
  a = valid_looking_args();
  a.lse_partial = nullptr;
  expect_rejected(rt, a, ErrorCode::kInvalidArgument, {"lse_partial", "null"});
  a = valid_looking_args();
  a.out.data = nullptr;
  expect_rejected(rt, a, ErrorCode::kInvalidArgument, {"out.data", "null"});
  a = valid_looking_args();
  a.out_partial = reinterpret_cast<const float*>(uintptr_t{0x10008});
  expect_rejected(rt, a, ErrorCode::kInvalidArgument, {"out_partial", "0x10008", "16-byte aligned"});
  a = valid_looking_args();
  a.lse_partial = reinterpret_cast<const float*>(uintptr_t{0x20002});
  expect_rejected(rt, a, ErrorCode::kInvalidArgument, {"lse_partial", "0x20002", "4-byte aligned"});
  a = valid_looking_args();
  a.out.data = reinterpret_cast<void*>(uintptr_t{0x30004});
  expect_rejected(rt, a, ErrorCode::kInvalidArgument, {"out.data", "0x30004", "8-byte aligned"});
  a = valid_looking_args();
  a.lse = reinterpret_cast<float*>(uintptr_t{0x40001});
  expect_rejected(rt, a, ErrorCode::kInvalidArgument, {"lse", "0x40001", "4-byte aligned"});
  a = valid_looking_args();
  a.out.stride_head = 130;
  expect_rejected(rt, a, ErrorCode::kInvalidArgument, {"out.stride_head", "130", "multiple of 4 elements"});
  a = valid_looking_args();
  a.out.stride_batch = -1024;
  expect_rejected(rt, a, ErrorCode::kInvalidArgument, {"out.stride_batch", "-1024", "positive"});
  a = valid_looking_args();
  a.out.stride_head = 64;  // heads 64 elements apart, 128 wide: they overlap
  expect_rejected(rt, a, ErrorCode::kInvalidArgument, {"out", "overlap itself"});

  // An explicit spec must agree with the arguments.
  a = valid_looking_args();
  const Spec spec = parse(R"({"out_dtype": "bf16", "head_dim_v": 128, "max_splits": 2})");
  try {
    ac::combine(rt, spec, a, nullptr);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(e.what(), Contains("num_splits = 3") && Contains("max_splits 2"));
  }
  a.out_dtype = DType::kFp16;
  CHECK_THROWS_WITH(ac::combine(rt, spec, a, nullptr), Contains("out_dtype = fp16") && Contains("bf16"));
  a = valid_looking_args();
  a.head_dim_v = 64;
  a.out.stride_head = 64;
  CHECK_THROWS_WITH(ac::combine(rt, spec, a, nullptr), Contains("head_dim_v = 64") && Contains("128"));
}

// Spec parsing, validation, canonical form and tile table (generator/spec.h, generator/tile_table.h).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "generator/error.h"
#include "generator/spec.h"
#include "generator/tile_table.h"

using fa3jit::DType;
using fa3jit::Error;
using fa3jit::ErrorCode;
using fa3jit::Spec;
using Catch::Matchers::Contains;

namespace {

// parse_spec is overloaded on json and std::string; a string literal would be ambiguous.
Spec parse(const std::string& text) { return fa3jit::parse_spec(text); }

struct BadCase {
  const char* name;
  const char* json;
  ErrorCode code;
  std::vector<std::string> fragments;  // each must appear in the message: field, value, what is allowed
};

const std::vector<BadCase> kBadCases = {
    {"syntax error", R"({"dtype": "bf16", "head_dim": 128,)", ErrorCode::kInvalidSpec,
     {"not valid JSON", "parse error", "line 1"}},
    {"non-object", R"([1, 2])", ErrorCode::kInvalidSpec, {"must be a JSON object", "[1,2]"}},
    {"non-object scalar", R"(42)", ErrorCode::kInvalidSpec, {"must be a JSON object", "42"}},
    {"duplicate key", R"({"dtype": "bf16", "head_dim": 128, "head_dim": 64})", ErrorCode::kInvalidSpec,
     {"\"head_dim\"", "twice"}},
    {"unknown top-level key", R"({"dtype": "bf16", "head_dim": 128, "blockm": 64})", ErrorCode::kInvalidSpec,
     {"\"blockm\"", "unknown", "dtype, head_dim, head_dim_v, causal", "tile", "problem"}},
    {"unknown tile key", R"({"dtype": "bf16", "head_dim": 128, "tile": {"block_k": 64}})",
     ErrorCode::kInvalidSpec, {"\"tile.block_k\"", "unknown", "block_m, block_n"}},
    {"unknown problem key",
     R"({"dtype": "bf16", "head_dim": 128, "problem": {"seqlen": 10, "seqlen_q": 1, "seqlen_k": 1, "num_heads": 1}})",
     ErrorCode::kInvalidSpec, {"\"problem.seqlen\"", "unknown", "seqlen_q", "num_heads_kv"}},
    {"missing dtype", R"({"head_dim": 128})", ErrorCode::kInvalidSpec, {"\"dtype\"", "missing", "\"fp16\", \"bf16\""}},
    {"missing head_dim", R"({"dtype": "fp16"})", ErrorCode::kInvalidSpec,
     {"\"head_dim\"", "missing", "64, 128, 256"}},
    {"dtype wrong type", R"({"dtype": 16, "head_dim": 128})", ErrorCode::kInvalidSpec,
     {"\"dtype\"", "16", "wrong type", "\"fp16\", \"bf16\""}},
    {"dtype fp32", R"({"dtype": "fp32", "head_dim": 128})", ErrorCode::kInvalidSpec,
     {"\"dtype\"", "\"fp32\"", "\"fp16\", \"bf16\""}},
    {"dtype e4m3", R"({"dtype": "e4m3", "head_dim": 128})", ErrorCode::kUnsupported,
     {"\"dtype\"", "\"e4m3\"", "not yet supported", "\"fp16\", \"bf16\""}},
    {"head_dim 80 (B5)", R"({"dtype": "bf16", "head_dim": 80})", ErrorCode::kInvalidSpec,
     {"\"head_dim\"", "80", "64, 128, 256"}},
    {"head_dim negative", R"({"dtype": "bf16", "head_dim": -128})", ErrorCode::kInvalidSpec,
     {"\"head_dim\"", "-128", "64, 128, 256"}},
    {"head_dim float", R"({"dtype": "bf16", "head_dim": 128.5})", ErrorCode::kInvalidSpec,
     {"\"head_dim\"", "128.5", "wrong type", "integer", "64, 128, 256"}},
    {"head_dim string", R"({"dtype": "bf16", "head_dim": "128"})", ErrorCode::kInvalidSpec,
     {"\"head_dim\"", "\"128\"", "wrong type"}},
    {"head_dim_v differs", R"({"dtype": "bf16", "head_dim": 128, "head_dim_v": 64})", ErrorCode::kUnsupported,
     {"\"head_dim_v\"", "64", "must equal head_dim (128)", "in this release"}},
    {"causal string", R"({"dtype": "bf16", "head_dim": 128, "causal": "yes"})", ErrorCode::kInvalidSpec,
     {"\"causal\"", "\"yes\"", "wrong type", "true or false"}},
    {"hadamard with bf16", R"({"dtype": "bf16", "head_dim": 128, "hadamard": true})", ErrorCode::kInvalidSpec,
     {"\"hadamard\"", "true", "\"bf16\"", "e4m3 only"}},
    {"tile not object", R"({"dtype": "bf16", "head_dim": 128, "tile": [128, 128]})", ErrorCode::kInvalidSpec,
     {"\"tile\"", "[128,128]", "object"}},
    {"block_m 96", R"({"dtype": "bf16", "head_dim": 128, "tile": {"block_m": 96}})", ErrorCode::kInvalidSpec,
     {"\"tile.block_m\"", "96", "64, 128, 192"}},
    {"block_n not multiple of 16", R"({"dtype": "bf16", "head_dim": 128, "tile": {"block_n": 100}})",
     ErrorCode::kInvalidSpec, {"\"tile.block_n\"", "100", "a multiple of 16 in [16, 256]"}},
    {"block_n too large", R"({"dtype": "bf16", "head_dim": 64, "tile": {"block_n": 272}})",
     ErrorCode::kInvalidSpec, {"\"tile.block_n\"", "272", "a multiple of 16 in [16, 256]"}},
    {"block_n zero", R"({"dtype": "bf16", "head_dim": 64, "tile": {"block_n": 0}})", ErrorCode::kInvalidSpec,
     {"\"tile.block_n\"", "0", "a multiple of 16 in [16, 256]"}},
    {"consumer_warpgroups 4", R"({"dtype": "bf16", "head_dim": 128, "consumer_warpgroups": 4})",
     ErrorCode::kInvalidSpec, {"\"consumer_warpgroups\"", "4", "[1, 3]"}},
    {"block_m / consumer_warpgroups mismatch",
     R"({"dtype": "bf16", "head_dim": 128, "tile": {"block_m": 128}, "consumer_warpgroups": 3})",
     ErrorCode::kInvalidSpec, {"\"tile.block_m\" (128)", "\"consumer_warpgroups\" (3)", "block_m / 64 = 2"}},
    {"stages 1", R"({"dtype": "bf16", "head_dim": 128, "stages": 1})", ErrorCode::kInvalidSpec,
     {"\"stages\"", "1", "[2, 4]"}},
    {"stages 5", R"({"dtype": "bf16", "head_dim": 128, "stages": 5})", ErrorCode::kInvalidSpec,
     {"\"stages\"", "5", "[2, 4]"}},
    // 32768 + 4 * (32768 + 32768) + 1280 bytes.
    {"smem overflow d128 stages 4", R"({"dtype": "bf16", "head_dim": 128, "stages": 4})", ErrorCode::kInvalidSpec,
     {"\"stages\" (4)", "\"tile\" (128x128)", "\"head_dim\" (128)", "296192 bytes", "232448"}},
    // 65536 + 3 * (32768 + 32768) + 1280 bytes.
    {"smem overflow d256 stages 3", R"({"dtype": "fp16", "head_dim": 256, "tile": {"block_n": 64}, "stages": 3})",
     ErrorCode::kInvalidSpec, {"\"stages\" (3)", "\"head_dim\" (256)", "263424 bytes", "232448"}},
    // Registers 128/2 + 128/2 + 128/4 + 32 = 256 > 240 and smem 65536 + 2 * 131072 + 1280: both reported.
    {"smem and registers d256 block_n 128", R"({"dtype": "bf16", "head_dim": 256, "tile": {"block_n": 128}})",
     ErrorCode::kInvalidSpec, {"328960 bytes", "232448", "estimated 256 registers", "budget of 240"}},
    // 32 + 72 + 36 + 32 = 172 registers > 160 for 3 consumer warpgroups; shared memory fits.
    {"register overflow d64 block_n 144", R"({"dtype": "bf16", "head_dim": 64, "tile": {"block_n": 144}})",
     ErrorCode::kInvalidSpec,
     {"\"tile.block_n\" (144)", "\"head_dim\" (64)", "\"consumer_warpgroups\" (3)", "estimated 172", "budget of 160"}},
    // 64 + 128 + 64 + 32 = 288 registers > 240.
    {"register overflow d128 block_n 256", R"({"dtype": "bf16", "head_dim": 128, "tile": {"block_n": 256}})",
     ErrorCode::kInvalidSpec, {"\"tile.block_n\" (256)", "\"head_dim\" (128)", "estimated 288", "budget of 240"}},
    {"pingpong not implemented", R"({"dtype": "bf16", "head_dim": 128, "pingpong": true})", ErrorCode::kUnsupported,
     {"\"pingpong\"", "true", "not yet implemented", "expected false"}},
    {"intra_wg_overlap not implemented", R"({"dtype": "bf16", "head_dim": 128, "intra_wg_overlap": true})",
     ErrorCode::kUnsupported, {"\"intra_wg_overlap\"", "true", "not yet implemented"}},
    {"pingpong wrong type", R"({"dtype": "bf16", "head_dim": 128, "pingpong": 1})", ErrorCode::kInvalidSpec,
     {"\"pingpong\"", "1", "wrong type", "true or false"}},
    {"problem null", R"({"dtype": "bf16", "head_dim": 128, "problem": null})", ErrorCode::kInvalidSpec,
     {"\"problem\"", "null", "object"}},
    {"problem missing seqlen_q",
     R"({"dtype": "bf16", "head_dim": 128, "problem": {"seqlen_k": 8, "num_heads": 8}})", ErrorCode::kInvalidSpec,
     {"\"problem.seqlen_q\"", "missing", "[1, 2147483647]"}},
    {"problem negative batch",
     R"({"dtype": "bf16", "head_dim": 128, "problem": {"batch": -1, "seqlen_q": 8, "seqlen_k": 8, "num_heads": 8}})",
     ErrorCode::kInvalidSpec, {"\"problem.batch\"", "-1", "[1, 2147483647]"}},
    {"problem seqlen over 2^31-1",
     R"({"dtype": "bf16", "head_dim": 128, "problem": {"seqlen_q": 2147483648, "seqlen_k": 8, "num_heads": 8}})",
     ErrorCode::kInvalidSpec, {"\"problem.seqlen_q\"", "2147483648", "[1, 2147483647]"}},
    {"problem seqlen over uint64",
     R"({"dtype": "bf16", "head_dim": 128, "problem": {"seqlen_q": 8, "seqlen_k": 18446744073709551615, "num_heads": 8}})",
     ErrorCode::kInvalidSpec, {"\"problem.seqlen_k\"", "18446744073709551615", "[1, 2147483647]"}},
    {"problem seqlen float",
     R"({"dtype": "bf16", "head_dim": 128, "problem": {"seqlen_q": 8.0, "seqlen_k": 8, "num_heads": 8}})",
     ErrorCode::kInvalidSpec, {"\"problem.seqlen_q\"", "8.0", "wrong type"}},
    {"num_heads_kv zero",
     R"({"dtype": "bf16", "head_dim": 128, "problem": {"seqlen_q": 8, "seqlen_k": 8, "num_heads": 8, "num_heads_kv": 0}})",
     ErrorCode::kInvalidSpec, {"\"problem.num_heads_kv\"", "0", "[1, 2147483647]"}},
    {"num_heads not a multiple of num_heads_kv",
     R"({"dtype": "bf16", "head_dim": 128, "problem": {"seqlen_q": 8, "seqlen_k": 8, "num_heads": 32, "num_heads_kv": 5}})",
     ErrorCode::kInvalidSpec, {"\"problem.num_heads\" (32)", "\"problem.num_heads_kv\" (5)", "multiple"}},
};

struct GoodCase {
  const char* name;
  const char* json;
  DType dtype;
  int head_dim, block_m, block_n, consumer_warpgroups, stages;
  bool causal;
};

const std::vector<GoodCase> kGoodCases = {
    {"bf16 d128 defaults", R"({"dtype": "bf16", "head_dim": 128})", DType::kBf16, 128, 128, 128, 2, 2, false},
    {"fp16 d64 causal defaults", R"({"dtype": "fp16", "head_dim": 64, "causal": true})", DType::kFp16, 64, 192, 128,
     3, 2, true},
    {"bf16 d256 defaults", R"({"dtype": "bf16", "head_dim": 256})", DType::kBf16, 256, 128, 80, 2, 2, false},
    {"block_m alone sets consumer_warpgroups", R"({"dtype": "bf16", "head_dim": 128, "tile": {"block_m": 64}})",
     DType::kBf16, 128, 64, 128, 1, 2, false},
    {"consumer_warpgroups alone sets block_m", R"({"dtype": "bf16", "head_dim": 64, "consumer_warpgroups": 2})",
     DType::kBf16, 64, 128, 128, 2, 2, false},
    {"block_m and consumer_warpgroups agree",
     R"({"dtype": "bf16", "head_dim": 64, "tile": {"block_m": 192, "block_n": 64}, "consumer_warpgroups": 3})",
     DType::kBf16, 64, 192, 64, 3, 2, false},
    // FA3's non-causal hdim-128 tile: 64 + 88 + 44 + 32 = 228 registers, 214272 bytes of smem.
    {"d128 128x176", R"({"dtype": "bf16", "head_dim": 128, "tile": {"block_n": 176}})", DType::kBf16, 128, 128, 176,
     2, 2, false},
    {"d128 stages 3 fits", R"({"dtype": "fp16", "head_dim": 128, "stages": 3})", DType::kFp16, 128, 128, 128, 2, 3,
     false},
    {"d64 stages 4 fits", R"({"dtype": "fp16", "head_dim": 64, "tile": {"block_m": 128}, "stages": 4})", DType::kFp16,
     64, 128, 128, 2, 4, false},
    {"explicit false knobs and head_dim_v",
     R"({"dtype": "bf16", "head_dim": 256, "head_dim_v": 256, "hadamard": false, "pingpong": false, "intra_wg_overlap": false})",
     DType::kBf16, 256, 128, 80, 2, 2, false},
};

}  // namespace

TEST_CASE("bad specs are rejected with a code and a message naming field, value and allowed values", "[spec]") {
  for (const BadCase& c : kBadCases) {
    INFO("case: " << c.name << "\nspec: " << c.json);
    try {
      parse(c.json);
      FAIL_CHECK("accepted a bad spec");
    } catch (const Error& e) {
      INFO("message: " << e.what());
      CHECK(fa3jit::error_code_name(e.code()) == std::string(fa3jit::error_code_name(c.code)));
      for (const std::string& fragment : c.fragments) CHECK_THAT(std::string(e.what()), Contains(fragment));
    }
  }
}

TEST_CASE("good specs resolve every field", "[spec]") {
  for (const GoodCase& c : kGoodCases) {
    INFO("case: " << c.name << "\nspec: " << c.json);
    const Spec spec = parse(c.json);
    CHECK(spec.dtype == c.dtype);
    CHECK(spec.head_dim == c.head_dim);
    CHECK(spec.head_dim_v == c.head_dim);
    CHECK(spec.causal == c.causal);
    CHECK(spec.block_m == c.block_m);
    CHECK(spec.block_n == c.block_n);
    CHECK(spec.consumer_warpgroups == c.consumer_warpgroups);
    CHECK(spec.stages == c.stages);
    CHECK_FALSE(spec.hadamard);
    CHECK_FALSE(spec.pingpong);
    CHECK_FALSE(spec.intra_wg_overlap);
    CHECK_FALSE(spec.problem.has_value());
    // The canonical JSON is itself a spec that resolves to the same Spec.
    CHECK(fa3jit::parse_spec(fa3jit::canonical_kernel_json(spec)) == spec);
  }
}

TEST_CASE("problem defaults and limits", "[spec]") {
  const Spec spec = parse(R"({"dtype": "bf16", "head_dim": 128,
      "problem": {"seqlen_q": 2147483647, "seqlen_k": 77, "num_heads": 12}})");
  REQUIRE(spec.problem.has_value());
  CHECK(spec.problem->batch == 1);
  CHECK(spec.problem->seqlen_q == 2147483647);
  CHECK(spec.problem->seqlen_k == 77);
  CHECK(spec.problem->num_heads == 12);
  CHECK(spec.problem->num_heads_kv == 12);

  const Spec gqa = parse(R"({"dtype": "bf16", "head_dim": 128,
      "problem": {"batch": 3, "seqlen_q": 1, "seqlen_k": 9, "num_heads": 12, "num_heads_kv": 4}})");
  CHECK(gqa.problem == fa3jit::Problem{3, 1, 9, 12, 4});
  // spec_to_json round-trips the problem too.
  CHECK(fa3jit::parse_spec(fa3jit::spec_to_json(gqa)) == gqa);
}

TEST_CASE("canonical kernel string ignores key order, spelled-out defaults and the problem (B10)", "[spec]") {
  const Spec a = parse(R"({"dtype": "bf16", "head_dim": 128, "causal": true})");
  const Spec b = parse(R"({"causal": true, "head_dim": 128, "dtype": "bf16"})");
  const Spec c = parse(R"({"stages": 2, "pingpong": false, "intra_wg_overlap": false, "hadamard": false,
      "consumer_warpgroups": 2, "tile": {"block_n": 128, "block_m": 128}, "head_dim_v": 128,
      "causal": true, "head_dim": 128, "dtype": "bf16"})");
  const Spec d = parse(R"({"dtype": "bf16", "head_dim": 128, "causal": true,
      "problem": {"batch": 2, "seqlen_q": 4096, "seqlen_k": 4096, "num_heads": 32, "num_heads_kv": 8}})");
  const std::string key = fa3jit::canonical_kernel_string(a);
  CHECK(key ==
        R"({"causal":true,"consumer_warpgroups":2,"dtype":"bf16","hadamard":false,"head_dim":128,)"
        R"("head_dim_v":128,"intra_wg_overlap":false,"pingpong":false,"stages":2,"tile":{"block_m":128,"block_n":128}})");
  CHECK(fa3jit::canonical_kernel_string(b) == key);
  CHECK(fa3jit::canonical_kernel_string(c) == key);
  CHECK(fa3jit::canonical_kernel_string(d) == key);
  CHECK(a == c);

  // Either half of the block_m / consumer_warpgroups pair names the same kernel.
  CHECK(fa3jit::canonical_kernel_string(parse(R"({"dtype": "fp16", "head_dim": 64, "tile": {"block_m": 128}})")) ==
        fa3jit::canonical_kernel_string(parse(R"({"dtype": "fp16", "head_dim": 64, "consumer_warpgroups": 2})")));

  // Any kernel field that differs gives a different key.
  const std::vector<std::string> others = {
      R"({"dtype": "bf16", "head_dim": 128, "causal": false})",
      R"({"dtype": "fp16", "head_dim": 128, "causal": true})",
      R"({"dtype": "bf16", "head_dim": 64, "causal": true})",
      R"({"dtype": "bf16", "head_dim": 128, "causal": true, "tile": {"block_n": 64}})",
      R"({"dtype": "bf16", "head_dim": 128, "causal": true, "tile": {"block_m": 64}})",
      R"({"dtype": "bf16", "head_dim": 128, "causal": true, "stages": 3})",
  };
  for (const std::string& other : others) {
    INFO(other);
    CHECK(fa3jit::canonical_kernel_string(parse(other)) != key);
  }
}

TEST_CASE("spec_to_json and spec_summary", "[spec]") {
  const Spec spec = parse(R"({"dtype": "bf16", "head_dim": 128, "causal": true,
      "problem": {"seqlen_q": 100, "seqlen_k": 200, "num_heads": 16, "num_heads_kv": 2}})");
  const nlohmann::json doc = fa3jit::spec_to_json(spec);
  CHECK(doc.at("problem").at("seqlen_k") == 200);
  CHECK(doc.at("problem").at("batch") == 1);
  CHECK(doc.at("tile").at("block_n") == 128);
  CHECK_FALSE(fa3jit::canonical_kernel_json(spec).contains("problem"));
  CHECK(fa3jit::spec_summary(spec) == "bf16 d128 causal 128x128 wg2 st2");
  CHECK(fa3jit::spec_summary(parse(R"({"dtype": "fp16", "head_dim": 64})")) == "fp16 d64 192x128 wg3 st2");
}

TEST_CASE("spec files: every config parses, names match contents, default.json is Llama-3.1-8B prefill",
          "[spec]") {
  namespace fs = std::filesystem;
  int count = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(FA3JIT_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() != ".json") continue;
    INFO(entry.path().string());
    const Spec spec = fa3jit::load_spec_file(entry.path().string());
    CHECK(spec.problem.has_value());
    ++count;
    const std::string stem = entry.path().stem().string();
    if (stem != "default") {
      const std::string expected = std::string(fa3jit::dtype_name(spec.dtype)) + "_d" +
                                   std::to_string(spec.head_dim) + (spec.causal ? "_causal" : "");
      CHECK(stem == expected);
    }
  }
  CHECK(count >= 13);

  const Spec def = fa3jit::load_spec_file(std::string(FA3JIT_SOURCE_DIR) + "/configs/default.json");
  CHECK(def.dtype == DType::kBf16);
  CHECK(def.head_dim == 128);
  CHECK(def.causal);
  REQUIRE(def.problem.has_value());
  CHECK(*def.problem == fa3jit::Problem{2, 4096, 4096, 32, 8});
}

TEST_CASE("load_spec_file reports unreadable and bad files with the path", "[spec]") {
  const std::string missing = "/nonexistent-dir/fa3jit-spec.json";
  try {
    fa3jit::load_spec_file(missing);
    FAIL("read a missing file");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kIoError);
    CHECK_THAT(std::string(e.what()), Contains(missing));
  }

  const std::string bad = (std::filesystem::temp_directory_path() / "fa3jit_test_bad_spec.json").string();
  { std::ofstream(bad) << R"({"dtype": "bf16", "head_dim": 80})"; }
  try {
    fa3jit::load_spec_file(bad);
    FAIL("accepted head_dim 80");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidSpec);
    CHECK_THAT(std::string(e.what()), Contains(bad) && Contains("\"head_dim\": 80"));
  }
  std::filesystem::remove(bad);
}

TEST_CASE("tile table defaults and kernel configs", "[spec]") {
  const auto d64 = fa3jit::default_tile(DType::kBf16, 64, false);
  CHECK((d64.block_m == 192 && d64.block_n == 128 && d64.consumer_warpgroups == 3 && d64.stages == 2));
  const auto d256 = fa3jit::default_tile(DType::kFp16, 256, true);
  CHECK((d256.block_m == 128 && d256.block_n == 80 && d256.consumer_warpgroups == 2));
  try {
    fa3jit::default_tile(DType::kBf16, 96, false);
    FAIL("default_tile accepted head_dim 96");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidSpec);
    CHECK_THAT(std::string(e.what()), Contains("96") && Contains("64, 128, 256"));
  }

  const auto c128 = fa3jit::make_kernel_config(parse(R"({"dtype": "bf16", "head_dim": 128})"));
  CHECK(c128.num_threads == 384);
  CHECK(c128.producer_registers == 24);
  CHECK(c128.consumer_registers == 240);
  CHECK(c128.smem_q_bytes == 32768);
  CHECK(c128.smem_k_stage_bytes == 32768);
  CHECK(c128.smem_v_stage_bytes == 32768);
  CHECK(c128.smem_bytes == 32768 + 2 * 65536 + 1280);
  CHECK(c128.estimated_consumer_registers == 64 + 64 + 32 + 32);

  const auto c64 = fa3jit::make_kernel_config(parse(R"({"dtype": "fp16", "head_dim": 64})"));
  CHECK(c64.num_threads == 512);
  CHECK(c64.producer_registers == 32);
  CHECK(c64.consumer_registers == 160);
  CHECK(c64.estimated_consumer_registers == 160);

  const auto c256 = fa3jit::make_kernel_config(parse(R"({"dtype": "bf16", "head_dim": 256})"));
  CHECK(c256.smem_bytes == 230656);
  CHECK(c256.estimated_consumer_registers == 220);

  const auto c1 = fa3jit::make_kernel_config(parse(R"({"dtype": "bf16", "head_dim": 128, "consumer_warpgroups": 1})"));
  CHECK(c1.num_threads == 256);
  CHECK(c1.producer_registers == 56);
  CHECK(c1.consumer_registers == 240);
  CHECK(c1.smem_q_bytes == 64 * 128 * 2);

  // A Spec built in code with nonsense values gets an Error, not an out-of-bounds read.
  Spec broken;
  broken.consumer_warpgroups = 0;
  CHECK_THROWS_AS(fa3jit::make_kernel_config(broken), Error);
  broken.consumer_warpgroups = 4;
  CHECK_THROWS_AS(fa3jit::make_kernel_config(broken), Error);
  broken = Spec{};
  broken.block_n = -16;
  CHECK_THROWS_AS(fa3jit::make_kernel_config(broken), Error);
}

TEST_CASE("error code and dtype names", "[spec]") {
  CHECK(std::string(fa3jit::error_code_name(ErrorCode::kOk)) == "ok");
  CHECK(std::string(fa3jit::error_code_name(ErrorCode::kInvalidSpec)) == "invalid_spec");
  CHECK(std::string(fa3jit::error_code_name(ErrorCode::kInvalidArgument)) == "invalid_argument");
  CHECK(std::string(fa3jit::error_code_name(ErrorCode::kUnsupported)) == "unsupported");
  CHECK(std::string(fa3jit::error_code_name(ErrorCode::kCompileFailed)) == "compile_failed");
  CHECK(std::string(fa3jit::error_code_name(ErrorCode::kNoDriver)) == "no_driver");
  CHECK(std::string(fa3jit::error_code_name(ErrorCode::kDriverError)) == "driver_error");
  CHECK(std::string(fa3jit::error_code_name(ErrorCode::kCacheError)) == "cache_error");
  CHECK(std::string(fa3jit::error_code_name(ErrorCode::kIoError)) == "io_error");
  CHECK(std::string(fa3jit::error_code_name(ErrorCode::kInternal)) == "internal");
  CHECK(std::string(fa3jit::dtype_name(DType::kFp16)) == "fp16");
  CHECK(std::string(fa3jit::dtype_name(DType::kBf16)) == "bf16");
  CHECK(std::string(fa3jit::dtype_name(DType::kE4m3)) == "e4m3");
  CHECK(fa3jit::dtype_size(DType::kBf16) == 2);
  CHECK(fa3jit::dtype_size(DType::kE4m3) == 1);
}

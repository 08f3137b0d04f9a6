// Attention forward spec: parsing, the one validator, canonical form, capabilities and tile table
// (kernels/attention_fwd/spec.h, tile_table.h).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "jit/family.h"
#include "kernels/attention_fwd/emit.h"
#include "kernels/attention_fwd/spec.h"
#include "kernels/attention_fwd/tile_table.h"
#include "testing/problem.h"

using fa3jit::DType;
using fa3jit::Error;
using fa3jit::ErrorCode;
using fa3jit::attention_fwd::Spec;
namespace af = fa3jit::attention_fwd;
using Catch::Matchers::Contains;

namespace {

// parse_spec is overloaded on json and std::string; a string literal would be ambiguous.
Spec parse(const std::string& text) { return af::parse_spec(text); }

// A spec that leaves every kernel field to the tile table.
std::string table_default_spec(DType dtype, int head_dim, bool causal) {
  return nlohmann::json{{"dtype", fa3jit::dtype_name(dtype)}, {"head_dim", head_dim}, {"causal", causal}}.dump();
}

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
    {"unknown tile key", R"({"dtype": "bf16", "head_dim": 128, "tile": {"block_k": 64}})",
     ErrorCode::kInvalidSpec, {"\"tile.block_k\"", "unknown", "block_m, block_n"}},
    {"missing dtype", R"({"head_dim": 128})", ErrorCode::kInvalidSpec, {"\"dtype\"", "missing", "\"fp16\", \"bf16\""}},
    {"missing head_dim", R"({"dtype": "fp16"})", ErrorCode::kInvalidSpec,
     {"\"head_dim\"", "missing", "a multiple of 8 in [8, 256]"}},
    {"dtype wrong type", R"({"dtype": 16, "head_dim": 128})", ErrorCode::kInvalidSpec,
     {"\"dtype\"", "16", "wrong type", "\"fp16\", \"bf16\""}},
    {"dtype fp32", R"({"dtype": "fp32", "head_dim": 128})", ErrorCode::kInvalidSpec,
     {"\"dtype\"", "\"fp32\"", "\"fp16\", \"bf16\""}},
    {"e4m3 head_dim 72", R"({"dtype": "e4m3", "head_dim": 72})", ErrorCode::kInvalidSpec,
     {"\"head_dim\"", "72", "\"e4m3\"", "a multiple of 16 in [16, 256]"}},
    {"e4m3 out_dtype e4m3", R"({"dtype": "e4m3", "head_dim": 128, "out_dtype": "e4m3"})", ErrorCode::kInvalidSpec,
     {"\"out_dtype\"", "\"e4m3\"", "\"bf16\", \"fp16\""}},
    {"bf16 out_dtype fp16", R"({"dtype": "bf16", "head_dim": 128, "out_dtype": "fp16"})", ErrorCode::kInvalidSpec,
     {"\"out_dtype\"", "\"fp16\"", "\"bf16\" (the input dtype)"}},
    {"bf16 quant per_head", R"({"dtype": "bf16", "head_dim": 128, "quant": "per_head"})", ErrorCode::kInvalidSpec,
     {"\"quant\"", "\"per_head\"", "\"none\""}},
    {"e4m3 quant none", R"({"dtype": "e4m3", "head_dim": 128, "quant": "none"})", ErrorCode::kInvalidSpec,
     {"\"quant\"", "\"none\"", "\"per_head\" or \"per_block\""}},
    {"e4m3 quant unknown", R"({"dtype": "e4m3", "head_dim": 128, "quant": "per_tensor"})", ErrorCode::kInvalidSpec,
     {"\"quant\"", "\"per_tensor\"", "\"per_head\" or \"per_block\""}},
    {"bf16 two-level", R"({"dtype": "bf16", "head_dim": 128, "fp32_two_level_accum": true})",
     ErrorCode::kInvalidSpec, {"\"fp32_two_level_accum\"", "e4m3 only"}},
    {"e4m3 block_n 80", R"({"dtype": "e4m3", "head_dim": 256, "tile": {"block_n": 80}})", ErrorCode::kInvalidSpec,
     {"\"tile.block_n\"", "80", "multiple of 32"}},
    {"e4m3 cluster", R"({"dtype": "e4m3", "head_dim": 128, "cluster_m": 2})", ErrorCode::kInvalidSpec,
     {"\"cluster_m\"", "2", "expected 1"}},
    {"e4m3 two-level d128 n224 overlap", R"({"dtype": "e4m3", "head_dim": 128, "fp32_two_level_accum": true,
        "tile": {"block_m": 128, "block_n": 224}})",
     ErrorCode::kInvalidSpec, {"registers", "tile.block_n"}},
    {"head_dim 84 (B5)", R"({"dtype": "bf16", "head_dim": 84})", ErrorCode::kInvalidSpec,
     {"\"head_dim\"", "84", "a multiple of 8 in [8, 256]"}},
    {"head_dim 264", R"({"dtype": "bf16", "head_dim": 264})", ErrorCode::kInvalidSpec,
     {"\"head_dim\"", "264", "a multiple of 8 in [8, 256]"}},
    {"head_dim negative", R"({"dtype": "bf16", "head_dim": -128})", ErrorCode::kInvalidSpec,
     {"\"head_dim\"", "-128", "a multiple of 8 in [8, 256]"}},
    {"head_dim float", R"({"dtype": "bf16", "head_dim": 128.5})", ErrorCode::kInvalidSpec,
     {"\"head_dim\"", "128.5", "wrong type", "integer", "a multiple of 8 in [8, 256]"}},
    {"head_dim string", R"({"dtype": "bf16", "head_dim": "128"})", ErrorCode::kInvalidSpec,
     {"\"head_dim\"", "\"128\"", "wrong type"}},
    {"head_dim_v 100", R"({"dtype": "bf16", "head_dim": 128, "head_dim_v": 100})", ErrorCode::kInvalidSpec,
     {"\"head_dim_v\"", "100", "a multiple of 8 in [8, 256]"}},
    {"head_dim 64 / head_dim_v 256 has no tile", R"({"dtype": "bf16", "head_dim": 64, "head_dim_v": 256})",
     ErrorCode::kUnsupported, {"\"head_dim\" (64)", "\"head_dim_v\" (256)", "no bf16 tile fits", "stage the output"}},
    {"causal string", R"({"dtype": "bf16", "head_dim": 128, "causal": "yes"})", ErrorCode::kInvalidSpec,
     {"\"causal\"", "\"yes\"", "wrong type", "true or false"}},
    // A rotation of Q and K cancels in Q.K^T: Hadamard belongs to the FP8 pre-pass, not this kernel.
    {"hadamard", R"({"dtype": "bf16", "head_dim": 128, "hadamard": false})", ErrorCode::kInvalidSpec,
     {"\"hadamard\"", "not a field of the attention kernel", "pre-pass"}},
    {"problem is no kernel field", R"({"dtype": "bf16", "head_dim": 128, "problem": {"seqlen_q": 1}})",
     ErrorCode::kInvalidSpec, {"\"problem\"", "unknown"}},
    {"kind of another family", R"({"kind": "attention_combine", "dtype": "bf16", "head_dim": 128})",
     ErrorCode::kInvalidSpec, {"\"kind\"", "\"attention_combine\"", "\"attention_fwd\""}},
    {"kind wrong type", R"({"kind": 3, "dtype": "bf16", "head_dim": 128})", ErrorCode::kInvalidSpec,
     {"\"kind\"", "3", "wrong type"}},
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
    // The d128 default tile 128x176 (both masks) is at the shared-memory limit with 2 stages:
    // 32768 + 3 * (45056 + 45056) + 1280 bytes.
    {"smem overflow d128 non-causal stages 3", R"({"dtype": "bf16", "head_dim": 128, "stages": 3})",
     ErrorCode::kInvalidSpec, {"\"stages\" (3)", "\"tile\" (128x176)", "\"head_dim\" (128)", "304384 bytes", "232448"}},
    // 32768 + 4 * (45056 + 45056) + 1280 bytes.
    {"smem overflow d128 non-causal stages 4", R"({"dtype": "bf16", "head_dim": 128, "stages": 4})",
     ErrorCode::kInvalidSpec, {"\"stages\" (4)", "\"tile\" (128x176)", "\"head_dim\" (128)", "394496 bytes", "232448"}},
    // The causal default is the same 128x176 tile: 32768 + 3 * 90112 + 1280 and 32768 + 4 * 90112 + 1280 bytes.
    {"smem overflow d128 causal stages 3", R"({"dtype": "fp16", "head_dim": 128, "causal": true, "stages": 3})",
     ErrorCode::kInvalidSpec, {"\"stages\" (3)", "\"tile\" (128x176)", "\"head_dim\" (128)", "304384 bytes", "232448"}},
    {"smem overflow d128 causal stages 4", R"({"dtype": "bf16", "head_dim": 128, "causal": true, "stages": 4})",
     ErrorCode::kInvalidSpec, {"\"stages\" (4)", "\"tile\" (128x176)", "\"head_dim\" (128)", "394496 bytes", "232448"}},
    // The 128x128 causal tile, asked for explicitly: 32768 + 4 * (32768 + 32768) + 1280 bytes (3 stages fit).
    {"smem overflow d128 causal block_n 128 stages 4",
     R"({"dtype": "bf16", "head_dim": 128, "causal": true, "tile": {"block_n": 128}, "stages": 4})",
     ErrorCode::kInvalidSpec, {"\"stages\" (4)", "\"tile\" (128x128)", "\"head_dim\" (128)", "296192 bytes", "232448"}},
    // The d256 default 128x80: 65536 + 3 * (40960 + 40960) + 1280 bytes.
    {"smem overflow d256 default tile stages 3", R"({"dtype": "bf16", "head_dim": 256, "causal": true, "stages": 3})",
     ErrorCode::kInvalidSpec, {"\"stages\" (3)", "\"tile\" (128x80)", "\"head_dim\" (256)", "312576 bytes", "232448"}},
    // 65536 + 3 * (32768 + 32768) + 1280 bytes.
    {"smem overflow d256 stages 3", R"({"dtype": "fp16", "head_dim": 256, "tile": {"block_n": 64}, "stages": 3})",
     ErrorCode::kInvalidSpec, {"\"stages\" (3)", "\"head_dim\" (256)", "263424 bytes", "232448"}},
    // Registers 128/2 + 128/2 + 128/4 + 28 = 252 > 240 and smem 65536 + 2 * 131072 + 1280: both reported.
    {"smem and registers d256 block_n 128", R"({"dtype": "bf16", "head_dim": 256, "tile": {"block_n": 128}})",
     ErrorCode::kInvalidSpec,
     {"328960 bytes", "232448", "estimated 252 registers", "(with intra_wg_overlap)", "budget of 240", "; also "}},
    // Registers 64 + 128 + 64 + 28 = 284 > 240 and smem 32768 + 2 * 131072 + 1280 = 296192.
    {"smem and registers d128 block_n 256", R"({"dtype": "bf16", "head_dim": 128, "tile": {"block_n": 256}})",
     ErrorCode::kInvalidSpec,
     {"\"tile.block_n\" (256)", "\"head_dim\" (128)", "estimated 284", "budget of 240", "296192 bytes"}},
    // d256 128x112 sits exactly at the register budget (128 + 56 + 28 + 28 = 240) but needs
    // 65536 + 2 * (57344 + 57344) + 1280 = 296192 bytes: only shared memory is reported.
    {"smem overflow d256 block_n 112 at the register budget",
     R"({"dtype": "bf16", "head_dim": 256, "tile": {"block_n": 112}})", ErrorCode::kInvalidSpec,
     {"\"tile\" (128x112)", "\"head_dim\" (256)", "296192 bytes", "232448"}},
    // 3 consumer warpgroups, budget 160: 32 + 72 + 36 + 28 = 168 (block_n 128 gives 156 and fits).
    {"register overflow d64 wg3 block_n 144", R"({"dtype": "bf16", "head_dim": 64, "tile": {"block_n": 144}})",
     ErrorCode::kInvalidSpec,
     {"\"tile.block_n\" (144)", "\"head_dim\" (64)", "\"consumer_warpgroups\" (3)", "estimated 168",
      "budget of 160 for 3 consumer warpgroups"}},
    // 64 + 56 + 28 + 28 = 176 > 160.
    {"register overflow d128 wg3 block_n 112",
     R"({"dtype": "bf16", "head_dim": 128, "consumer_warpgroups": 3, "tile": {"block_n": 112}})", ErrorCode::kInvalidSpec,
     {"\"tile.block_n\" (112)", "\"head_dim\" (128)", "\"consumer_warpgroups\" (3)", "estimated 176", "budget of 160"}},
    // 64 + 48 + 24 + 28 = 164 > 160: the tile that spilled 48 bytes in ptxas when the estimate said 160
    // (block_n 80 gives 152 and fits).
    {"register overflow d128 wg3 block_n 96",
     R"({"dtype": "bf16", "head_dim": 128, "tile": {"block_m": 192, "block_n": 96}})", ErrorCode::kInvalidSpec,
     {"\"tile.block_n\" (96)", "\"head_dim\" (128)", "\"consumer_warpgroups\" (3)", "estimated 164",
      "budget of 160 for 3 consumer warpgroups"}},
    // 2 consumer warpgroups, budget 240: 32 + 128 + 64 + 28 = 252; smem 16384 + 2 * 65536 + 1280 fits.
    {"register overflow d64 wg2 block_n 256", R"({"dtype": "bf16", "head_dim": 64, "tile": {"block_m": 128, "block_n": 256}})",
     ErrorCode::kInvalidSpec,
     {"\"tile.block_n\" (256)", "\"head_dim\" (64)", "\"consumer_warpgroups\" (2)", "estimated 252",
      "budget of 240 for 2 consumer warpgroups"}},
    // 1 consumer warpgroup, budget 240: the same 252; the estimate does not depend on intra_wg_overlap.
    {"register overflow d64 wg1 block_n 256 without overlap",
     R"({"dtype": "bf16", "head_dim": 64, "tile": {"block_m": 64, "block_n": 256}, "intra_wg_overlap": false})",
     ErrorCode::kInvalidSpec,
     {"\"tile.block_n\" (256)", "\"consumer_warpgroups\" (1)", "estimated 252", "budget of 240 for 1 consumer warpgroup;"}},
    // Pingpong hands GEMM turns round robin between two or three warpgroups of the overlapped mainloop.
    {"pingpong without intra_wg_overlap",
     R"({"dtype": "bf16", "head_dim": 128, "pingpong": true, "intra_wg_overlap": false})", ErrorCode::kInvalidSpec,
     {"spec field \"pingpong\": true is not allowed", "intra_wg_overlap false and consumer_warpgroups 2;",
      "pingpong needs intra_wg_overlap true and consumer_warpgroups 2 or 3"}},
    {"pingpong with 3 warpgroups without intra_wg_overlap",
     R"({"dtype": "fp16", "head_dim": 64, "pingpong": true, "intra_wg_overlap": false})", ErrorCode::kInvalidSpec,
     {"\"pingpong\"", "intra_wg_overlap false and consumer_warpgroups 3;",
      "pingpong needs intra_wg_overlap true and consumer_warpgroups 2 or 3"}},
    {"pingpong with 1 warpgroup", R"({"dtype": "bf16", "head_dim": 128, "tile": {"block_m": 64}, "pingpong": true})",
     ErrorCode::kInvalidSpec,
     {"\"pingpong\"", "intra_wg_overlap true and consumer_warpgroups 1;",
      "pingpong needs intra_wg_overlap true and consumer_warpgroups 2 or 3"}},
    {"pingpong with 1 warpgroup and no overlap",
     R"({"dtype": "bf16", "head_dim": 256, "consumer_warpgroups": 1, "intra_wg_overlap": false, "pingpong": true})",
     ErrorCode::kInvalidSpec,
     {"\"pingpong\"", "intra_wg_overlap false and consumer_warpgroups 1;", "consumer_warpgroups 2 or 3"}},
    {"pingpong wrong type", R"({"dtype": "bf16", "head_dim": 128, "pingpong": 1})", ErrorCode::kInvalidSpec,
     {"\"pingpong\"", "1", "wrong type", "true or false"}},
    {"cluster_m out of range", R"({"dtype": "bf16", "head_dim": 128, "cluster_m": 4})", ErrorCode::kInvalidSpec,
     {"\"cluster_m\"", "4", "1 or 2"}},
    {"cluster_m wrong type", R"({"dtype": "bf16", "head_dim": 128, "cluster_m": "2"})", ErrorCode::kInvalidSpec,
     {"\"cluster_m\"", "\"2\""}},
    {"cluster_m 2 with a causal mask", R"({"dtype": "bf16", "head_dim": 128, "causal": true, "cluster_m": 2})",
     ErrorCode::kInvalidSpec, {"\"cluster_m\"", "2", "causal true", "expected 1"}},
    {"intra_wg_overlap wrong type", R"({"dtype": "bf16", "head_dim": 128, "intra_wg_overlap": "true"})",
     ErrorCode::kInvalidSpec, {"\"intra_wg_overlap\"", "\"true\"", "wrong type", "true or false"}},
    {"v_layout d_major with a 16-bit dtype", R"({"dtype": "bf16", "head_dim": 128, "v_layout": "d_major"})",
     ErrorCode::kInvalidSpec, {"\"v_layout\"", "\"d_major\"", "\"bf16\"", "\"seq_major\""}},
    {"v_layout d_major with packed k/v", R"({"dtype": "e4m3", "head_dim": 128, "v_layout": "d_major", "varlen_k": true})",
     ErrorCode::kInvalidSpec, {"\"v_layout\"", "varlen_k true", "\"seq_major\""}},
    {"v_layout d_major with a paged cache", R"({"dtype": "e4m3", "head_dim": 128, "v_layout": "d_major", "paged_kv": true})",
     ErrorCode::kInvalidSpec, {"\"v_layout\"", "paged_kv true"}},
    {"v_layout unknown", R"({"dtype": "e4m3", "head_dim": 128, "v_layout": "transposed"})", ErrorCode::kInvalidSpec,
     {"\"v_layout\"", "\"transposed\"", "\"seq_major\" or \"d_major\""}},
};

struct GoodCase {
  const char* name;
  const char* json;
  DType dtype;
  int head_dim, block_m, block_n, consumer_warpgroups, stages;
  bool causal, pingpong, intra_wg_overlap;
};

const std::vector<GoodCase> kGoodCases = {
    // Tile table defaults: d128 128x176 for both masks, d256 128x80, both with overlap and pingpong;
    // d64 192x128 with 3 warpgroups, overlap and round-robin pingpong.
    {"bf16 d128 defaults", R"({"dtype": "bf16", "head_dim": 128})", DType::kBf16, 128, 128, 176, 2, 2, false, true,
     true},
    {"bf16 d128 causal defaults", R"({"dtype": "bf16", "head_dim": 128, "causal": true})", DType::kBf16, 128, 128, 176,
     2, 2, true, true, true},
    {"fp16 d64 defaults", R"({"dtype": "fp16", "head_dim": 64})", DType::kFp16, 64, 192, 128, 3, 2, false, true, true},
    {"fp16 d64 causal defaults", R"({"dtype": "fp16", "head_dim": 64, "causal": true})", DType::kFp16, 64, 192, 128,
     3, 2, true, true, true},
    {"bf16 d256 defaults", R"({"dtype": "bf16", "head_dim": 256})", DType::kBf16, 256, 128, 80, 2, 2, false, true,
     true},
    {"fp16 d256 causal defaults", R"({"dtype": "fp16", "head_dim": 256, "causal": true})", DType::kFp16, 256, 128, 80,
     2, 2, true, true, true},
    // One warpgroup: the table's pingpong does not apply and is dropped without an error.
    {"block_m alone sets consumer_warpgroups", R"({"dtype": "bf16", "head_dim": 128, "tile": {"block_m": 64}})",
     DType::kBf16, 128, 64, 176, 1, 2, false, false, true},
    {"block_m 64 causal", R"({"dtype": "bf16", "head_dim": 128, "causal": true, "tile": {"block_m": 64}})",
     DType::kBf16, 128, 64, 176, 1, 2, true, false, true},
    // 128 + 40 + 20 + 28 = 216 registers, 32768 + 2 * 81920 + 1280 = 197888 bytes.
    {"block_m 64 at d256 drops the pingpong default", R"({"dtype": "fp16", "head_dim": 256, "tile": {"block_m": 64}})",
     DType::kFp16, 256, 64, 80, 1, 2, false, false, true},
    {"consumer_warpgroups alone sets block_m", R"({"dtype": "bf16", "head_dim": 64, "consumer_warpgroups": 2})",
     DType::kBf16, 64, 128, 128, 2, 2, false, true, true},
    {"block_m and consumer_warpgroups agree",
     R"({"dtype": "bf16", "head_dim": 64, "tile": {"block_m": 192, "block_n": 64}, "consumer_warpgroups": 3})",
     DType::kBf16, 64, 192, 64, 3, 2, false, true, true},
    // Three warpgroups at d128: 64 + 40 + 20 + 28 = 152 registers, the largest block_n under the budget of
    // 160 (block_n 96 gives 164). Pingpong now runs with 3 warpgroups, so the d128 table default applies.
    {"d128 wg3 block_n 80 keeps the pingpong default",
     R"({"dtype": "bf16", "head_dim": 128, "consumer_warpgroups": 3, "tile": {"block_n": 80}})", DType::kBf16, 128, 192,
     80, 3, 2, false, true, true},
    {"d128 wg3 pingpong opt-out", R"({"dtype": "bf16", "head_dim": 128, "tile": {"block_m": 192, "block_n": 64}, "pingpong": false})",
     DType::kBf16, 128, 192, 64, 3, 2, false, false, true},
    // Pingpong round robin over 3 warpgroups: 156 registers at the d64 default tile, 140 at d128 192x64.
    {"pingpong spelled out at the d64 default (3 warpgroups)", R"({"dtype": "fp16", "head_dim": 64, "pingpong": true})",
     DType::kFp16, 64, 192, 128, 3, 2, false, true, true},
    {"pingpong opt-in at d64 causal (3 warpgroups)",
     R"({"dtype": "bf16", "head_dim": 64, "causal": true, "consumer_warpgroups": 3, "pingpong": true})", DType::kBf16,
     64, 192, 128, 3, 2, true, true, true},
    {"pingpong with 3 warpgroups at d128 block_m 192",
     R"({"dtype": "bf16", "head_dim": 128, "tile": {"block_m": 192, "block_n": 64}, "pingpong": true})", DType::kBf16,
     128, 192, 64, 3, 2, false, true, true},
    // Exactly at the 240 budget of 2 warpgroups: 32 + 120 + 60 + 28 = 240 registers,
    // 16384 + 2 * (30720 + 30720) + 1280 = 140544 bytes.
    {"d64 128x240 at the register budget", R"({"dtype": "bf16", "head_dim": 64, "tile": {"block_m": 128, "block_n": 240}})",
     DType::kBf16, 64, 128, 240, 2, 2, false, true, true},
    {"pingpong opt-out at the d64 default", R"({"dtype": "bf16", "head_dim": 64, "pingpong": false})", DType::kBf16, 64,
     192, 128, 3, 2, false, false, true},
    // The 128x128 causal tile (whole diagonal blocks) on request: 64 + 64 + 32 + 28 = 188 registers,
    // 32768 + 2 * 65536 + 1280 = 165120 bytes of smem; the table's pingpong and overlap still apply.
    {"d128 causal 128x128 explicit", R"({"dtype": "bf16", "head_dim": 128, "causal": true, "tile": {"block_n": 128}})",
     DType::kBf16, 128, 128, 128, 2, 2, true, true, true},
    // 64 + 96 + 48 + 28 = 236 registers, 32768 + 2 * 98304 + 1280 = 229376 bytes: the largest d128 block_n.
    {"d128 128x192 fits", R"({"dtype": "bf16", "head_dim": 128, "tile": {"block_n": 192}})", DType::kBf16, 128, 128,
     192, 2, 2, false, true, true},
    // 32768 + 3 * 65536 + 1280 = 230656 bytes; the default block_n 176 would not fit 3 stages.
    {"d128 causal block_n 128 stages 3 fits",
     R"({"dtype": "fp16", "head_dim": 128, "causal": true, "tile": {"block_n": 128}, "stages": 3})", DType::kFp16, 128,
     128, 128, 2, 3, true, true, true},
    {"d128 block_n 128 stages 3 fits", R"({"dtype": "fp16", "head_dim": 128, "tile": {"block_n": 128}, "stages": 3})",
     DType::kFp16, 128, 128, 128, 2, 3, false, true, true},
    {"d64 stages 4 fits", R"({"dtype": "fp16", "head_dim": 64, "tile": {"block_m": 128}, "stages": 4})", DType::kFp16,
     64, 128, 128, 2, 4, false, true, true},
    {"explicit false knobs and head_dim_v",
     R"({"dtype": "bf16", "head_dim": 256, "head_dim_v": 256, "pingpong": false, "intra_wg_overlap": false})",
     DType::kBf16, 256, 128, 80, 2, 2, false, false, false},
    // Without intra_wg_overlap the table's pingpong does not apply and is dropped without an error.
    {"intra_wg_overlap false drops the pingpong default", R"({"dtype": "bf16", "head_dim": 128, "intra_wg_overlap": false})",
     DType::kBf16, 128, 128, 176, 2, 2, false, false, false},
    {"pingpong false keeps the overlap default", R"({"dtype": "bf16", "head_dim": 128, "causal": true, "pingpong": false})",
     DType::kBf16, 128, 128, 176, 2, 2, true, false, true},
    {"both knobs spelled out true", R"({"dtype": "fp16", "head_dim": 128, "pingpong": true, "intra_wg_overlap": true})",
     DType::kFp16, 128, 128, 176, 2, 2, false, true, true},
    {"pingpong spelled out at d256 is the default", R"({"dtype": "bf16", "head_dim": 256, "pingpong": true})", DType::kBf16,
     256, 128, 80, 2, 2, false, true, true},
    {"pingpong opt-out at d256", R"({"dtype": "bf16", "head_dim": 256, "causal": true, "pingpong": false})", DType::kBf16,
     256, 128, 80, 2, 2, true, false, true},
    {"intra_wg_overlap false at d256 drops the pingpong default",
     R"({"dtype": "fp16", "head_dim": 256, "intra_wg_overlap": false})", DType::kFp16, 256, 128, 80, 2, 2, false, false,
     false},
    {"pingpong opt-in at d64 with 2 warpgroups",
     R"({"dtype": "fp16", "head_dim": 64, "consumer_warpgroups": 2, "pingpong": true})", DType::kFp16, 64, 128, 128, 2,
     2, false, true, true},
    {"d64 wg3 without overlap", R"({"dtype": "bf16", "head_dim": 64, "intra_wg_overlap": false})", DType::kBf16, 64,
     192, 128, 3, 2, false, false, false},
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
    CHECK(spec.pingpong == c.pingpong);
    CHECK(spec.intra_wg_overlap == c.intra_wg_overlap);
    // The canonical JSON is itself a spec that resolves to the same Spec.
    CHECK(af::parse_spec(af::canonical_json(spec)) == spec);
  }
}

TEST_CASE("canonical kernel string ignores key order, spelled-out defaults and the problem (B10)", "[spec]") {
  const Spec a = parse(R"({"dtype": "bf16", "head_dim": 128, "causal": true})");
  const Spec b = parse(R"({"causal": true, "head_dim": 128, "dtype": "bf16"})");
  const Spec c = parse(R"({"stages": 2, "pingpong": true, "intra_wg_overlap": true, "kind": "attention_fwd",
      "consumer_warpgroups": 2, "tile": {"block_n": 176, "block_m": 128}, "head_dim_v": 128,
      "causal": true, "head_dim": 128, "dtype": "bf16"})");
  const Spec d = fa3jit::testing::attention_case_from_json(nlohmann::json::parse(R"({"dtype": "bf16", "head_dim": 128,
      "causal": true, "problem": {"batch": 2, "seqlen_q": 4096, "seqlen_k": 4096, "num_heads": 32, "num_heads_kv": 8}})"))
                     .spec;
  const std::string key = af::canonical_string(a);
  CHECK(key ==
        R"({"causal":true,"cluster_m":1,"consumer_warpgroups":2,"dtype":"bf16","fp32_two_level_accum":false,"head_dim":128,)"
        R"("head_dim_v":128,"intra_wg_overlap":true,"kind":"attention_fwd","l2_evict_hints":true,"lazy_rescale":false,"load_k_ahead":false,"local":false,"mask_free_loop":true,"out_dtype":"bf16","p_in_smem":false,"pack_gqa":false,"paged_gather":false,"paged_kv":false,"persistent":true,"pin_pv_wait":false,"pingpong":true,"quant":"none","rescale_o_before_pv":false,"sinks":false,"softcap":false,"softmax_in_mask_arms":false,"split_kv":false,"stages":2,)"
        R"("tile":{"block_m":128,"block_n":176},"v_layout":"seq_major","varlen_k":false,"varlen_q":false})");
  CHECK(af::canonical_string(b) == key);
  CHECK(af::canonical_string(c) == key);
  CHECK(af::canonical_string(d) == key);
  CHECK(a == c);

  // The non-causal d128 and the d64 defaults, spelled out in full.
  CHECK(af::canonical_string(parse(R"({"dtype": "fp16", "head_dim": 128})")) ==
        R"({"causal":false,"cluster_m":1,"consumer_warpgroups":2,"dtype":"fp16","fp32_two_level_accum":false,"head_dim":128,)"
        R"("head_dim_v":128,"intra_wg_overlap":true,"kind":"attention_fwd","l2_evict_hints":true,"lazy_rescale":false,"load_k_ahead":false,"local":false,"mask_free_loop":true,"out_dtype":"fp16","p_in_smem":false,"pack_gqa":false,"paged_gather":false,"paged_kv":false,"persistent":true,"pin_pv_wait":false,"pingpong":true,"quant":"none","rescale_o_before_pv":false,"sinks":false,"softcap":false,"softmax_in_mask_arms":false,"split_kv":false,"stages":2,)"
        R"("tile":{"block_m":128,"block_n":176},"v_layout":"seq_major","varlen_k":false,"varlen_q":false})");
  CHECK(af::canonical_string(parse(R"({"dtype": "bf16", "head_dim": 64})")) ==
        R"({"causal":false,"cluster_m":1,"consumer_warpgroups":3,"dtype":"bf16","fp32_two_level_accum":false,"head_dim":64,)"
        R"("head_dim_v":64,"intra_wg_overlap":true,"kind":"attention_fwd","l2_evict_hints":true,"lazy_rescale":false,"load_k_ahead":false,"local":false,"mask_free_loop":true,"out_dtype":"bf16","p_in_smem":false,"pack_gqa":false,"paged_gather":false,"paged_kv":false,"persistent":true,"pin_pv_wait":false,"pingpong":true,"quant":"none","rescale_o_before_pv":false,"sinks":false,"softcap":false,"softmax_in_mask_arms":false,"split_kv":false,"stages":2,)"
        R"("tile":{"block_m":192,"block_n":128},"v_layout":"seq_major","varlen_k":false,"varlen_q":false})");

  // Either half of the block_m / consumer_warpgroups pair names the same kernel.
  CHECK(af::canonical_string(parse(R"({"dtype": "fp16", "head_dim": 64, "tile": {"block_m": 128}})")) ==
        af::canonical_string(parse(R"({"dtype": "fp16", "head_dim": 64, "consumer_warpgroups": 2})")));
  // Where the table's pingpong cannot apply, leaving it out and writing false name the same kernel.
  CHECK(af::canonical_string(parse(R"({"dtype": "bf16", "head_dim": 128, "tile": {"block_m": 64}})")) ==
        af::canonical_string(
            parse(R"({"dtype": "bf16", "head_dim": 128, "tile": {"block_m": 64}, "pingpong": false})")));
  CHECK(af::canonical_string(parse(R"({"dtype": "bf16", "head_dim": 128, "intra_wg_overlap": false})")) ==
        af::canonical_string(
            parse(R"({"dtype": "bf16", "head_dim": 128, "intra_wg_overlap": false, "pingpong": false})")));
  // With 3 warpgroups the d128 table's pingpong applies: leaving it out names the pingpong kernel.
  const std::string wg3 = R"({"dtype": "bf16", "head_dim": 128, "consumer_warpgroups": 3, "tile": {"block_n": 64})";
  CHECK(af::canonical_string(parse(wg3 + "}")) ==
        af::canonical_string(parse(wg3 + R"(, "pingpong": true})")));
  CHECK(af::canonical_string(parse(wg3 + "}")) !=
        af::canonical_string(parse(wg3 + R"(, "pingpong": false})")));

  // Any kernel field that differs gives a different key.
  const std::vector<std::string> others = {
      R"({"dtype": "bf16", "head_dim": 128, "causal": false})",
      R"({"dtype": "fp16", "head_dim": 128, "causal": true})",
      R"({"dtype": "bf16", "head_dim": 64, "causal": true})",
      R"({"dtype": "bf16", "head_dim": 128, "causal": true, "tile": {"block_n": 64}})",
      R"({"dtype": "bf16", "head_dim": 128, "causal": true, "tile": {"block_n": 128}})",
      R"({"dtype": "bf16", "head_dim": 128, "causal": true, "tile": {"block_m": 64}})",
      // 3 stages fit only the smaller tile; this differs from the block_n 128 variant in stages alone.
      R"({"dtype": "bf16", "head_dim": 128, "causal": true, "tile": {"block_n": 128}, "stages": 3})",
      R"({"dtype": "bf16", "head_dim": 128, "causal": true, "pingpong": false})",
      R"({"dtype": "bf16", "head_dim": 128, "causal": true, "intra_wg_overlap": false})",
  };
  std::set<std::string> keys = {key};
  for (const std::string& other : others) {
    INFO(other);
    const std::string other_key = af::canonical_string(parse(other));
    CHECK(other_key != key);
    keys.insert(other_key);
  }
  // ... and the variants differ from each other as well.
  CHECK(keys.size() == others.size() + 1);
}

TEST_CASE("canonical JSON and spec_summary", "[spec]") {
  const Spec spec = parse(R"({"dtype": "bf16", "head_dim": 128, "causal": true})");
  const nlohmann::json doc = af::canonical_json(spec);
  CHECK(doc.at("kind") == "attention_fwd");
  CHECK(doc.at("tile").at("block_n") == 176);
  CHECK(doc.at("pingpong") == true);
  CHECK(doc.at("intra_wg_overlap") == true);
  CHECK_FALSE(doc.contains("problem"));
  CHECK_FALSE(doc.contains("hadamard"));
  CHECK(af::spec_summary(spec) == "bf16 d128 causal 128x176 wg2 st2 pingpong overlap mask-free-loop l2-hints persistent");
  CHECK(af::spec_summary(parse(R"({"dtype": "bf16", "head_dim": 128, "causal": true, "tile": {"block_n": 128}})")) ==
        "bf16 d128 causal 128x128 wg2 st2 pingpong overlap mask-free-loop l2-hints persistent");
  CHECK(af::spec_summary(parse(R"({"dtype": "fp16", "head_dim": 256})")) ==
        "fp16 d256 128x80 wg2 st2 pingpong overlap k-ahead softmax-in-arms lazy-rescale l2-hints persistent");
  CHECK(af::spec_summary(parse(R"({"dtype": "fp16", "head_dim": 64})")) == "fp16 d64 192x128 wg3 st2 pingpong overlap mask-free-loop l2-hints persistent");
  CHECK(af::spec_summary(parse(R"({"dtype": "bf16", "head_dim": 256, "intra_wg_overlap": false})")) ==
        "bf16 d256 128x80 wg2 st2 k-ahead lazy-rescale l2-hints persistent");
  CHECK(af::name_token(spec) == "bf16_d128_causal");
  CHECK(af::name_token(parse(R"({"dtype": "fp16", "head_dim": 64})")) == "fp16_d64_full");
}

TEST_CASE("the capability table is the one statement of dtypes and head dims", "[spec]") {
  const af::Capabilities& caps = af::capabilities();
  CHECK(caps.head_dims.min == 8);
  CHECK(caps.head_dims.max == 256);
  CHECK(caps.head_dims.multiple == 8);
  CHECK(caps.fp8_head_dims.min == 16);
  CHECK(caps.fp8_head_dims.multiple == 16);
  CHECK(caps.tuned_head_dims == std::vector<int>{64, 96, 128, 192, 256});
  CHECK(caps.head_dim_v_may_differ);
  CHECK(caps.dtypes == std::vector<DType>{DType::kFp16, DType::kBf16, DType::kE4m3});
  CHECK(af::allowed_head_dims(DType::kBf16) == "a multiple of 8 in [8, 256]");
  CHECK(af::allowed_head_dims(DType::kE4m3) == "a multiple of 16 in [16, 256]");
  CHECK(af::allowed_dtypes() == "one of \"fp16\", \"bf16\", \"e4m3\"");
  // Every head dim of the rule and dtype has a tile, and parse, default_spec and the validator agree on it.
  for (DType t : caps.dtypes) {
    const af::HeadDimRule& rule = t == DType::kE4m3 ? caps.fp8_head_dims : caps.head_dims;
    for (int d = rule.min; d <= rule.max; d += rule.multiple) {
      for (bool causal : {false, true}) {
        INFO("d" << d << " " << fa3jit::dtype_name(t) << " causal " << causal);
        const Spec from_table = af::default_spec(t, d, d, causal);
        CHECK(from_table == parse(table_default_spec(t, d, causal)));
        CHECK_NOTHROW(af::validate(from_table));
      }
    }
  }
  // Pairs of different dims: DeepSeek's MLA prefill and others that fit; 64 / 256 does not (its output does not
  // fit the Q tile it is staged over).
  for (DType t : caps.dtypes) {
    INFO(fa3jit::dtype_name(t));
    const Spec mla = af::default_spec(t, 192, 128, true);
    CHECK(mla.head_dim_v == 128);
    CHECK(mla.block_m == 128);
    CHECK(mla.block_n == (t == DType::kE4m3 ? 160 : 128));
    CHECK_NOTHROW(af::default_spec(t, 128, 64, false));
    CHECK_NOTHROW(af::default_spec(t, 256, 128, false));
    if (t == DType::kE4m3) {  // the output is staged over Q and the V load stages
      CHECK_NOTHROW(af::default_spec(t, 64, 256, false));
      continue;
    }
    try {
      af::default_spec(t, 64, 256, false);
      FAIL_CHECK("default_spec accepted head_dim 64 with head_dim_v 256");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kUnsupported);
      CHECK_THAT(std::string(e.what()), Contains("\"head_dim\" (64)") && Contains("\"head_dim_v\" (256)") &&
                                            Contains("no " + std::string(fa3jit::dtype_name(t)) + " tile fits") &&
                                            Contains("stage the output"));
    }
  }
  CHECK(af::supports_head_dims(DType::kBf16, 96, 96));
  CHECK(af::supports_head_dims(DType::kBf16, 192, 128));
  CHECK(af::supports_head_dims(DType::kBf16, 8, 8));
  CHECK_FALSE(af::supports_head_dims(DType::kBf16, 84, 84));
  CHECK_FALSE(af::supports_head_dims(DType::kBf16, 264, 264));
  CHECK_FALSE(af::supports_head_dims(DType::kBf16, 0, 0));
  CHECK_FALSE(af::supports_head_dims(DType::kE4m3, 72, 72));
  CHECK(af::supports_head_dims(DType::kE4m3, 80, 80));
  CHECK(af::supports_head_dims(DType::kE4m3, 256, 256));
  CHECK(af::supports_dtype(DType::kE4m3));
  for (const auto& [dtype, d, dv, field] :
       {std::tuple{DType::kBf16, 84, 84, "head_dim"}, std::tuple{DType::kBf16, 128, 260, "head_dim_v"},
        std::tuple{DType::kE4m3, 72, 72, "head_dim"}}) {
    try {
      af::default_spec(dtype, d, dv, false);
      FAIL_CHECK("default_spec accepted head_dim " << d << " / " << dv);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidSpec);
      CHECK_THAT(std::string(e.what()), Contains(fmt::format("\"{}\": {}", field, field == std::string("head_dim")
                                                                                     ? d : dv)) &&
                                            Contains(af::allowed_head_dims(dtype)));
    }
  }
  const Spec fp8 = af::default_spec(DType::kE4m3, 128, 128, false);
  CHECK(fp8.out_dtype == DType::kBf16);
  CHECK(fp8.quant == af::Quant::kPerHead);
  CHECK(af::default_spec(DType::kBf16, 128, 128, false).quant == af::Quant::kNone);
}

TEST_CASE("spec files: every config parses, names match contents, default.json is Llama-3.1-8B prefill",
          "[spec]") {
  namespace fs = std::filesystem;
  int count = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(FA3JIT_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() != ".json") continue;
    INFO(entry.path().string());
    // Other families' specs (quantize_fp8_*.json) are tested with their family.
    if (fa3jit::load_spec_document(entry.path().string()).kind != "attention_fwd") continue;
    const fa3jit::testing::AttentionCase c = fa3jit::testing::load_attention_case(entry.path().string());
    const Spec& spec = c.spec;
    CHECK(c.problem.has_value());
    ++count;
    const std::string stem = entry.path().stem().string();
    if (stem != "default") {
      const std::string expected = std::string(fa3jit::dtype_name(spec.dtype)) + "_d" +
                                   std::to_string(spec.head_dim) +
                                   (spec.head_dim_v != spec.head_dim ? "v" + std::to_string(spec.head_dim_v) : "") +
                                   (spec.causal ? "_causal" : "") +
                                   (spec.quant == af::Quant::kPerBlock ? "_per_block" : "") +
                                   (c.problem->hadamard ? "_hadamard" : "") +
                                   (spec.v_layout == af::VLayout::kDMajor ? "_vt" : "");
      CHECK(stem == expected);
    }
  }
  CHECK(count >= 13);
  // configs/models: the attention shapes of released models (tests/data/model_shapes.json), bf16 causal prefill.
  const nlohmann::json models =
      nlohmann::json::parse(std::ifstream(std::string(FA3JIT_SOURCE_DIR) + "/tests/data/model_shapes.json"));
  int model_specs = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(FA3JIT_SOURCE_DIR) / "configs" / "models")) {
    INFO(entry.path().string());
    const fa3jit::testing::AttentionCase c = fa3jit::testing::load_attention_case(entry.path().string());
    REQUIRE(c.problem.has_value());
    CHECK(c.spec.dtype == DType::kBf16);
    bool matched = false;
    for (const auto& m : models.at("models"))
      matched = matched || (m.at("num_heads") == c.problem->num_heads && m.at("num_heads_kv") ==
                            c.problem->num_heads_kv && m.at("head_dim") == c.spec.head_dim &&
                            m.value("head_dim_v", m.at("head_dim").get<int>()) == c.spec.head_dim_v);
    CHECK(matched);
    ++model_specs;
  }
  CHECK(model_specs == static_cast<int>(models.at("models").size()));

  const fa3jit::testing::AttentionCase def =
      fa3jit::testing::load_attention_case(std::string(FA3JIT_SOURCE_DIR) + "/configs/default.json");
  CHECK(def.spec.dtype == DType::kBf16);
  CHECK(def.spec.head_dim == 128);
  CHECK(def.spec.causal);
  REQUIRE(def.problem.has_value());
  CHECK(*def.problem == fa3jit::testing::Problem{2, 4096, 4096, 32, 8});
}

TEST_CASE("spec files report unreadable and bad files with the path", "[spec]") {
  const std::string missing = "/nonexistent-dir/fa3jit-spec.json";
  try {
    fa3jit::testing::load_attention_case(missing);
    FAIL("read a missing file");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kIoError);
    CHECK_THAT(std::string(e.what()), Contains(missing));
  }

  const std::string bad = (std::filesystem::temp_directory_path() / "fa3jit_test_bad_spec.json").string();
  { std::ofstream(bad) << R"({"dtype": "bf16", "head_dim": 84})"; }
  try {
    fa3jit::testing::load_attention_case(bad);
    FAIL("accepted head_dim 84");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidSpec);
    CHECK_THAT(std::string(e.what()), Contains(bad) && Contains("\"head_dim\": 84"));
  }
  std::filesystem::remove(bad);
}

TEST_CASE("tile table defaults and kernel configs", "[spec]") {
  struct Row {
    int head_dim;
    bool causal;
    af::TileDefaults expected;
    bool persistent;    // the persistent grid (the rows measured slower there run one CTA per tile)
    bool load_k_ahead;  // K one block ahead of V (the rows measured faster that way)
  };
  // {block_m, block_n, consumer_warpgroups, stages, pingpong, intra_wg_overlap}, persistent, load_k_ahead
  const std::vector<Row> rows = {
      {64, false, {192, 128, 3, 2, true, true}, true, false},  {64, true, {192, 128, 3, 2, true, true}, true, false},
      {96, false, {192, 96, 3, 2, false, true}, false, false}, {96, true, {192, 96, 3, 2, true, true}, false, false},
      {128, false, {128, 176, 2, 2, true, true}, true, false}, {128, true, {128, 176, 2, 2, true, true}, true, false},
      {192, false, {128, 112, 2, 2, true, true}, false, false}, {192, true, {128, 112, 2, 2, true, true}, true, true},
      {256, false, {128, 80, 2, 2, true, true}, true, true},   {256, true, {128, 80, 2, 2, true, true}, true, true},
      // sizes between the rows take the row above: 72 the 96 row, 200 the 256 row
      {72, false, {192, 96, 3, 2, false, true}, false, false}, {200, true, {128, 80, 2, 2, true, true}, true, true},
  };
  for (const Row& row : rows) {
    for (const DType dtype : {DType::kFp16, DType::kBf16}) {
      INFO("head_dim " << row.head_dim << " causal " << row.causal << " dtype " << fa3jit::dtype_name(dtype));
      const af::TileDefaults t = af::default_tile(dtype, row.head_dim, row.head_dim, row.causal);
      CHECK(t.block_m == row.expected.block_m);
      CHECK(t.block_n == row.expected.block_n);
      CHECK(t.consumer_warpgroups == row.expected.consumer_warpgroups);
      CHECK(t.stages == row.expected.stages);
      CHECK(t.pingpong == row.expected.pingpong);
      CHECK(t.persistent == row.persistent);
      CHECK(t.load_k_ahead == row.load_k_ahead);
      CHECK(t.intra_wg_overlap == row.expected.intra_wg_overlap);
      // A spec that leaves the kernel fields out resolves to exactly the table row.
      const Spec spec = parse(table_default_spec(dtype, row.head_dim, row.causal));
      CHECK(spec.block_m == t.block_m);
      CHECK(spec.block_n == t.block_n);
      CHECK(spec.consumer_warpgroups == t.consumer_warpgroups);
      CHECK(spec.stages == t.stages);
      CHECK(spec.pingpong == t.pingpong);
      CHECK(spec.intra_wg_overlap == t.intra_wg_overlap);
      CHECK(spec.persistent == t.persistent);
      CHECK(spec.load_k_ahead == t.load_k_ahead);
    }
  }
  // A pair of different dims takes the tile of its larger dim's row, grid included; 192 / 128 has a row of its own.
  CHECK_FALSE(af::default_tile(DType::kBf16, 96, 64, false).persistent);
  CHECK_FALSE(af::default_tile(DType::kBf16, 96, 80, true).persistent);
  CHECK_FALSE(af::default_tile(DType::kBf16, 192, 96, false).persistent);
  CHECK(af::default_tile(DType::kBf16, 192, 96, true).persistent);
  CHECK(af::default_tile(DType::kBf16, 192, 128, false).persistent);
  CHECK(af::default_tile(DType::kE4m3, 96, 96, false).persistent);
  CHECK(af::default_tile(DType::kBf16, 192, 128, true).load_k_ahead);
  CHECK_FALSE(af::default_tile(DType::kBf16, 192, 128, false).load_k_ahead);
  CHECK(af::default_tile(DType::kBf16, 256, 128, false).load_k_ahead);
  CHECK_FALSE(af::default_tile(DType::kE4m3, 256, 256, false).load_k_ahead);
  try {
    af::default_tile(DType::kBf16, 100, 100, false);
    FAIL("default_tile accepted head_dim 100");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidSpec);
    CHECK_THAT(std::string(e.what()), Contains("100") && Contains("a multiple of 8 in [8, 256]"));
  }

  // Registers per consumer thread: head_dim_v/2 + block_n/2 + block_n/4 + 28.
  const auto c128 = af::make_kernel_config(parse(R"({"dtype": "bf16", "head_dim": 128})"));
  CHECK(c128.num_threads == 384);
  CHECK(c128.producer_registers == 24);
  CHECK(c128.consumer_registers == 240);
  CHECK(c128.smem.q_bytes == 32768);
  CHECK(c128.smem.k_stage_bytes == 176 * 128 * 2);
  CHECK(c128.smem.v_stage_bytes == 176 * 128 * 2);
  CHECK(c128.smem_bytes == 214272);
  CHECK(c128.estimated_consumer_registers == 64 + 88 + 44 + 28);
  CHECK(c128.estimated_consumer_registers == 224);

  // The causal default is the same 128x176 kernel; the 128x128 causal tile has to be asked for.
  const auto c128c = af::make_kernel_config(parse(R"({"dtype": "bf16", "head_dim": 128, "causal": true})"));
  CHECK(c128c.spec.block_n == 176);
  CHECK(c128c.spec.pingpong);
  CHECK(c128c.smem.k_stage_bytes == 45056);
  CHECK(c128c.smem_bytes == 214272);
  CHECK(c128c.estimated_consumer_registers == 224);

  const auto c128c128 = af::make_kernel_config(
      parse(R"({"dtype": "bf16", "head_dim": 128, "causal": true, "tile": {"block_n": 128}})"));
  CHECK(c128c128.num_threads == 384);
  CHECK(c128c128.spec.pingpong);
  CHECK(c128c128.smem.k_stage_bytes == 32768);
  CHECK(c128c128.smem.v_stage_bytes == 32768);
  CHECK(c128c128.smem_bytes == 32768 + 2 * 65536 + 1280);
  CHECK(c128c128.smem_bytes == 165120);
  CHECK(c128c128.estimated_consumer_registers == 64 + 64 + 32 + 28);
  CHECK(c128c128.estimated_consumer_registers == 188);

  const auto c64 = af::make_kernel_config(parse(R"({"dtype": "fp16", "head_dim": 64})"));
  CHECK(c64.num_threads == 512);
  CHECK(c64.producer_registers == 32);
  CHECK(c64.consumer_registers == 160);
  CHECK(c64.smem_bytes == 24576 + 2 * 32768 + 1280);
  CHECK(c64.estimated_consumer_registers == 156);
  CHECK(c64.spec.pingpong);

  // Pingpong with 3 consumer warpgroups: the same thread count, split and estimate as the d64 default.
  const auto c64pp = af::make_kernel_config(parse(R"({"dtype": "fp16", "head_dim": 64, "pingpong": true})"));
  CHECK(c64pp.spec.pingpong);
  CHECK(c64pp.spec.consumer_warpgroups == 3);
  CHECK(c64pp.num_threads == 512);
  CHECK(c64pp.producer_registers == 32);
  CHECK(c64pp.consumer_registers == 160);
  CHECK(c64pp.estimated_consumer_registers == 156);

  // Exactly at the budget of 2 warpgroups is accepted: 32 + 120 + 60 + 28 = 240.
  const auto c64n240 =
      af::make_kernel_config(parse(R"({"dtype": "bf16", "head_dim": 64, "tile": {"block_m": 128, "block_n": 240}})"));
  CHECK(c64n240.estimated_consumer_registers == 240);
  CHECK(c64n240.estimated_consumer_registers == c64n240.consumer_registers);
  CHECK(c64n240.smem_bytes == 16384 + 2 * (30720 + 30720) + 1280);

  // d128 with 3 warpgroups: block_n 80 gives 152 and fits; block_n 96 gives 164, over the 160 budget.
  const auto c128wg3 = af::make_kernel_config(
      parse(R"({"dtype": "bf16", "head_dim": 128, "consumer_warpgroups": 3, "tile": {"block_n": 80}})"));
  CHECK(c128wg3.estimated_consumer_registers == 152);
  CHECK(c128wg3.consumer_registers == 160);
  CHECK(c128wg3.spec.pingpong);
  try {
    parse(R"({"dtype": "bf16", "head_dim": 128, "consumer_warpgroups": 3, "tile": {"block_n": 96}})");
    FAIL_CHECK("accepted d128 192x96, estimated 164 registers over 160");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidSpec);
    CHECK_THAT(std::string(e.what()), Contains("estimated 164") && Contains("budget of 160"));
  }
  // d256 128x112 is exactly at the register budget (240) and over only in shared memory.
  try {
    parse(R"({"dtype": "bf16", "head_dim": 256, "tile": {"block_n": 112}})");
    FAIL_CHECK("accepted d256 128x112 with 296192 bytes of shared memory");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidSpec);
    CHECK_THAT(std::string(e.what()), Contains("296192 bytes"));
    CHECK_THAT(std::string(e.what()), !Contains("registers"));
  }

  const auto c256 = af::make_kernel_config(parse(R"({"dtype": "bf16", "head_dim": 256})"));
  CHECK(c256.num_threads == 384);
  CHECK(c256.spec.pingpong);
  CHECK(c256.spec.intra_wg_overlap);
  CHECK(c256.smem.k_stage_bytes == 80 * 256 * 2);
  CHECK(c256.smem_bytes == 65536 + 2 * 81920 + 1280);
  CHECK(c256.smem_bytes == 230656);
  CHECK(c256.estimated_consumer_registers == 128 + 40 + 20 + 28);
  CHECK(c256.estimated_consumer_registers == 216);

  const auto c1 = af::make_kernel_config(parse(R"({"dtype": "bf16", "head_dim": 128, "consumer_warpgroups": 1})"));
  CHECK(c1.num_threads == 256);
  CHECK(c1.producer_registers == 56);
  CHECK(c1.consumer_registers == 240);
  CHECK(c1.smem.q_bytes == 64 * 128 * 2);
  CHECK_FALSE(c1.spec.pingpong);

  // The estimate is the same with and without intra-warpgroup overlap.
  const auto sequential = af::make_kernel_config(
      parse(R"({"dtype": "bf16", "head_dim": 128, "intra_wg_overlap": false})"));
  CHECK(sequential.estimated_consumer_registers == c128.estimated_consumer_registers);

  // A Spec built in code with nonsense values gets an Error, not an out-of-bounds read.
  Spec broken;
  broken.consumer_warpgroups = 0;
  CHECK_THROWS_AS(af::make_kernel_config(broken), Error);
  broken.consumer_warpgroups = 4;
  CHECK_THROWS_AS(af::make_kernel_config(broken), Error);
  broken = Spec{};
  broken.block_n = -16;
  CHECK_THROWS_AS(af::make_kernel_config(broken), Error);
}

TEST_CASE("make_kernel_config rejects pingpong that parse_spec would reject, for Specs built in code", "[spec]") {
  // A Spec built in code reaches the generator through make_kernel_config; a pingpong kernel with one consumer warpgroup would wait
  // forever for a GEMM turn that no other warpgroup hands over. Two or three warpgroups take turns round
  // robin, but only in the overlapped mainloop.
  const Spec base = parse(R"({"dtype": "bf16", "head_dim": 128, "causal": true})");
  REQUIRE(base.pingpong);
  CHECK_NOTHROW(af::make_kernel_config(base));
  struct Variant {
    const char* name;
    int block_m, consumer_warpgroups;
    bool intra_wg_overlap;
    const char* fragment;
  };
  const std::vector<Variant> variants = {
      {"1 warpgroup", 64, 1, true, "intra_wg_overlap true and consumer_warpgroups 1;"},
      {"1 warpgroup, no overlap", 64, 1, false, "intra_wg_overlap false and consumer_warpgroups 1;"},
      {"2 warpgroups, no overlap", 128, 2, false, "intra_wg_overlap false and consumer_warpgroups 2;"},
      {"3 warpgroups, no overlap", 192, 3, false, "intra_wg_overlap false and consumer_warpgroups 3;"},
  };
  for (const Variant& v : variants) {
    INFO(v.name);
    Spec spec = base;
    spec.block_m = v.block_m;
    spec.consumer_warpgroups = v.consumer_warpgroups;
    spec.intra_wg_overlap = v.intra_wg_overlap;
    spec.block_n = 64;  // fits the register budget of every warpgroup count
    try {
      af::make_kernel_config(spec);
      FAIL_CHECK("accepted pingpong with " << v.name);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidSpec);
      CHECK_THAT(std::string(e.what()), Contains("\"pingpong\"") && Contains(v.fragment) &&
                                            Contains("consumer_warpgroups 2 or 3"));
    }
    spec.pingpong = false;
    CHECK_NOTHROW(af::make_kernel_config(spec));
  }

  // With overlap, 2 and 3 consumer warpgroups both take pingpong.
  for (const int wg : {2, 3}) {
    INFO("consumer_warpgroups " << wg);
    Spec spec = base;
    spec.block_m = 64 * wg;
    spec.consumer_warpgroups = wg;
    spec.block_n = 64;
    REQUIRE(spec.pingpong);
    REQUIRE(spec.intra_wg_overlap);
    const af::KernelConfig config = af::make_kernel_config(spec);
    CHECK(config.spec.pingpong);
    CHECK(config.num_threads == 128 * (wg + 1));
    CHECK(config.consumer_registers == (wg == 3 ? 160 : 240));
    CHECK(config.estimated_consumer_registers == 64 + 32 + 16 + 28);
  }
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

TEST_CASE("cluster_m: default 1, 2 names another kernel, spelled-out 1 is the default", "[spec]") {
  const Spec plain = parse(R"({"dtype": "bf16", "head_dim": 128})");
  const Spec one = parse(R"({"dtype": "bf16", "head_dim": 128, "cluster_m": 1})");
  const Spec two = parse(R"({"dtype": "bf16", "head_dim": 128, "cluster_m": 2})");
  CHECK(plain.cluster_m == 1);
  CHECK(two.cluster_m == 2);
  CHECK(af::canonical_string(plain) == af::canonical_string(one));
  CHECK(af::canonical_string(two) != af::canonical_string(plain));
  CHECK(af::canonical_json(two).at("cluster_m") == 2);
  CHECK(af::spec_summary(two) == "bf16 d128 128x176 wg2 st2 pingpong overlap mask-free-loop l2-hints cluster2 persistent");
  // The multicast producer gets 40 registers, the consumers 232: the same pool of 3 x 168.
  const auto cfg = af::make_kernel_config(two);
  CHECK(cfg.producer_registers == 40);
  CHECK(cfg.consumer_registers == 232);
  CHECK(cfg.producer_registers + 2 * cfg.consumer_registers == 3 * 168);
  // A Spec built in code with a causal cluster is rejected before any kernel is generated.
  Spec bad = two;
  bad.causal = true;
  CHECK_THROWS_AS(af::make_kernel_config(bad), fa3jit::Error);
  // The round trip keeps the knob.
  CHECK(af::parse_spec(af::canonical_json(two)) == two);
}

// A boolean schedule knob names its own kernel: `on` has it and `off` does not, the two canonical strings differ, both
// survive the JSON round trip, the summary shows `token` with it, and the generated Cfg carries it as `constant`.
static void check_knob_kernel(const Spec& on, const Spec& off, bool Spec::*knob, const char* token,
                              const std::string& constant) {
  CHECK(on.*knob);
  CHECK_FALSE(off.*knob);
  CHECK(af::canonical_string(on) != af::canonical_string(off));
  CHECK(af::parse_spec(af::canonical_json(on)) == on);
  CHECK(af::parse_spec(af::canonical_json(off)) == off);
  CHECK_THAT(af::spec_summary(on), Contains(token));
  CHECK_THAT(af::spec_summary(off), !Contains(token));
  const std::string line = "static constexpr bool " + constant + " = ";
  CHECK(af::emit_kernel(af::make_kernel_config(on)).code.find(line + "true;") != std::string::npos);
  CHECK(af::emit_kernel(af::make_kernel_config(off)).code.find(line + "false;") != std::string::npos);
}

TEST_CASE("rescale_o_before_pv: its own kernel, and the schedules it refuses", "[spec]") {
  const Spec off = parse(R"({"dtype": "bf16", "head_dim": 256, "rescale_o_before_pv": false})");
  const Spec on = parse(R"({"dtype": "bf16", "head_dim": 256, "rescale_o_before_pv": true})");
  check_knob_kernel(on, off, &Spec::rescale_o_before_pv, "rescale-early", "kRescaleOBeforePv");
  // It moves a step of the intra_wg_overlap schedule: without that schedule, or with two-level accumulation (which
  // rescales O as it adds the fresh accumulator), it is refused by name.
  CHECK_THROWS_WITH(
      parse(R"({"dtype": "bf16", "head_dim": 128, "intra_wg_overlap": false, "pingpong": false, "rescale_o_before_pv": true})"),
      Contains("\"rescale_o_before_pv\": true is not allowed with intra_wg_overlap false"));
  CHECK_THROWS_WITH(parse(R"({"dtype": "e4m3", "head_dim": 128, "fp32_two_level_accum": true, "rescale_o_before_pv": true})"),
                    Contains("fp32_two_level_accum true"));
  // A spec built in code is judged by the same rule.
  af::Spec built = af::default_spec(DType::kBf16, 256, 256, false);
  built.intra_wg_overlap = built.pingpong = false;
  built.rescale_o_before_pv = true;
  CHECK_THROWS_WITH(af::make_kernel_config(built), Contains("rescale_o_before_pv"));
}

TEST_CASE("l2_evict_hints: its own kernel, a bool, on in the table but for decode", "[spec]") {
  const Spec on = parse(R"({"dtype": "bf16", "head_dim": 128})");
  const Spec off = parse(R"({"dtype": "bf16", "head_dim": 128, "l2_evict_hints": false})");
  check_knob_kernel(on, off, &Spec::l2_evict_hints, "l2-hints", "kL2EvictHints");
  // Any dtype and layout takes it (cp.async gather copies carry no hint; TMA boxes do).
  CHECK(parse(R"({"dtype": "e4m3", "head_dim": 256, "v_layout": "d_major", "l2_evict_hints": true})").l2_evict_hints);
  CHECK(parse(R"({"dtype": "bf16", "head_dim": 128, "paged_kv": true, "l2_evict_hints": true})").l2_evict_hints);
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "l2_evict_hints": 1})"), Contains("l2_evict_hints"));
  CHECK(af::default_spec(DType::kBf16, 128, 128, false).l2_evict_hints);
  // The runtime's kernels: prefill layouts take them (gather pages too: their Q boxes), decode-shaped ones none.
  af::Layout gather;
  gather.varlen_q = gather.paged_kv = gather.paged_gather = true;
  CHECK(af::default_spec(DType::kBf16, DType::kBf16, af::Quant::kNone, 128, 128, true, gather).l2_evict_hints);
  af::Layout split = gather;
  split.split_kv = true;
  CHECK_FALSE(af::default_spec(DType::kBf16, DType::kBf16, af::Quant::kNone, 128, 128, true, split).l2_evict_hints);
  CHECK_FALSE(parse(R"({"dtype": "bf16", "head_dim": 128, "split_kv": true})").l2_evict_hints);
  CHECK(parse(R"({"dtype": "bf16", "head_dim": 128, "split_kv": true, "l2_evict_hints": true})").l2_evict_hints);
  CHECK(af::default_tile(DType::kE4m3, 256, 256, true).l2_evict_hints);
  CHECK_FALSE(af::decode_tile(DType::kBf16, 128, 128).l2_evict_hints);
}

TEST_CASE("pin_pv_wait: its own kernel, a knob of the overlapped step, off in the table until measured", "[spec]") {
  const Spec on = parse(R"({"dtype": "bf16", "head_dim": 128, "pin_pv_wait": true})");
  const Spec off = parse(R"({"dtype": "bf16", "head_dim": 128})");
  check_knob_kernel(on, off, &Spec::pin_pv_wait, "pv-pin", "kPinPvWait");
  CHECK(parse(R"({"dtype": "e4m3", "head_dim": 128, "pin_pv_wait": true})").pin_pv_wait);
  CHECK(parse(R"({"dtype": "bf16", "head_dim": 256, "pin_pv_wait": true})").pin_pv_wait);
  CHECK(parse(R"({"dtype": "bf16", "head_dim": 128, "split_kv": true, "tile": {"block_m": 64, "block_n": 128},)"
              R"( "consumer_warpgroups": 1, "pin_pv_wait": true})").pin_pv_wait);
  for (const int d : {64, 96, 128, 192, 256}) {
    CHECK_FALSE(af::default_tile(DType::kBf16, d, d, false).pin_pv_wait);
    CHECK_FALSE(af::default_tile(DType::kE4m3, d, d, true).pin_pv_wait);
  }
  CHECK_FALSE(af::decode_tile(DType::kBf16, 128, 128).pin_pv_wait);
  // Where it spills, a table's "on" would yield (P in shared memory wider than 128 keys); asked for, it is taken.
  CHECK(af::pin_pv_wait_spills(parse(R"({"dtype": "bf16", "head_dim": 64, "p_in_smem": true, "tile": {"block_n": 192}})")));
  CHECK_FALSE(af::pin_pv_wait_spills(parse(R"({"dtype": "bf16", "head_dim": 64, "p_in_smem": true})")));
  CHECK_FALSE(af::pin_pv_wait_spills(parse(R"({"dtype": "bf16", "head_dim": 128})")));
  CHECK(parse(R"({"dtype": "bf16", "head_dim": 64, "p_in_smem": true, "tile": {"block_n": 192}, "pin_pv_wait": true})")
            .pin_pv_wait);
  // Without the overlapped step it is refused by name.
  CHECK_THROWS_WITH(
      parse(R"({"dtype": "bf16", "head_dim": 128, "intra_wg_overlap": false, "pingpong": false, "pin_pv_wait": true})"),
      Contains("\"pin_pv_wait\": true is not allowed with intra_wg_overlap false"));
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "pin_pv_wait": 1})"), Contains("pin_pv_wait"));
}

TEST_CASE("p_in_smem: its own kernel, 16-bit only, off in the table, and the tiles it lets fit", "[spec]") {
  const Spec on = parse(R"({"dtype": "bf16", "head_dim": 64, "p_in_smem": true})");
  const Spec off = parse(R"({"dtype": "bf16", "head_dim": 64})");
  check_knob_kernel(on, off, &Spec::p_in_smem, "p-smem", "kPInSmem");
  // P.V reads A by descriptor: the generated wgmma takes two descriptors instead of four A registers.
  const std::string code = af::emit_kernel(af::make_kernel_config(on)).code;
  CHECK(code.find("void wgmma_pv(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d)") != std::string::npos);
  CHECK(af::emit_kernel(af::make_kernel_config(off)).code.find("void wgmma_pv(float (&d)[32], uint32_t a0") !=
        std::string::npos);
  // Its registers and shared memory: block_n / 4 registers fewer per consumer thread, block_m x block_n x 2 bytes.
  const af::KernelConfig c_on = af::make_kernel_config(on), c_off = af::make_kernel_config(off);
  CHECK(c_off.estimated_consumer_registers - c_on.estimated_consumer_registers == on.block_n / 4);
  CHECK(c_on.smem_bytes - c_off.smem_bytes == on.block_m * on.block_n * 2);
  // The tiles P in registers does not fit: d64 192x192 and d96 192x128 (160 registers per consumer of 3).
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 64, "tile": {"block_n": 192}})"),
                    Contains("registers per consumer thread"));
  CHECK(parse(R"({"dtype": "bf16", "head_dim": 64, "tile": {"block_n": 192}, "p_in_smem": true})").p_in_smem);
  CHECK_THROWS_WITH(parse(R"({"dtype": "fp16", "head_dim": 96, "tile": {"block_n": 128}})"),
                    Contains("registers per consumer thread"));
  CHECK(parse(R"({"dtype": "fp16", "head_dim": 96, "tile": {"block_n": 128}, "p_in_smem": true})").p_in_smem);
  // Its shared memory counts: d96 192x144 (rows padded to 256 bytes) does not fit even so.
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 96, "tile": {"block_n": 144}, "p_in_smem": true})"),
                    Contains("bytes of shared memory"));
  // e4m3 is refused by name; no table row takes it (measured slower: bench/NOTES.md, 2026-12-07).
  CHECK_THROWS_WITH(parse(R"({"dtype": "e4m3", "head_dim": 128, "p_in_smem": true})"),
                    Contains("\"p_in_smem\": true is not allowed with dtype \"e4m3\""));
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "p_in_smem": "yes"})"), Contains("p_in_smem"));
  for (int d : {64, 96, 128, 192, 256})
    for (bool causal : {false, true}) CHECK_FALSE(af::default_tile(DType::kBf16, d, d, causal).p_in_smem);
  af::Spec built = af::default_spec(DType::kE4m3, 128, 128, false);
  built.p_in_smem = true;
  CHECK_THROWS_WITH(af::make_kernel_config(built), Contains("p_in_smem"));
}

TEST_CASE("softmax_in_mask_arms: its own kernel, the table's rows and the loops it refuses", "[spec]") {
  const Spec on = parse(R"({"dtype": "bf16", "head_dim": 128, "mask_free_loop": false, "softmax_in_mask_arms": true})");
  const Spec off = parse(R"({"dtype": "bf16", "head_dim": 128, "mask_free_loop": false})");
  check_knob_kernel(on, off, &Spec::softmax_in_mask_arms, "softmax-in-arms", "kSoftmaxInMaskArms");
  // The table: 16-bit d256 (both masks), nothing else; e4m3 runs two copies of the loop, where it does not apply.
  CHECK(parse(R"({"dtype": "fp16", "head_dim": 256, "causal": true})").softmax_in_mask_arms);
  CHECK(parse(R"({"dtype": "bf16", "head_dim": 256})").softmax_in_mask_arms);
  CHECK_FALSE(parse(R"({"dtype": "bf16", "head_dim": 64})").softmax_in_mask_arms);
  CHECK_FALSE(parse(R"({"dtype": "e4m3", "head_dim": 256})").softmax_in_mask_arms);
  // Asked for where the table runs two copies (d128), the table's copies yield: one copy, the arms.
  const Spec asked = parse(R"({"dtype": "bf16", "head_dim": 128, "softmax_in_mask_arms": true})");
  CHECK(asked.softmax_in_mask_arms);
  CHECK_FALSE(asked.mask_free_loop);
  const Spec asked8 = parse(R"({"dtype": "e4m3", "head_dim": 128, "softmax_in_mask_arms": true})");
  CHECK(asked8.softmax_in_mask_arms);
  CHECK_FALSE(asked8.mask_free_loop);
  // The table's value only where the loop takes it; asked for elsewhere, refused by name.
  CHECK_FALSE(parse(R"({"dtype": "bf16", "head_dim": 256, "mask_free_loop": true})").softmax_in_mask_arms);
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "mask_free_loop": true, "softmax_in_mask_arms": true})"),
                    Contains("\"softmax_in_mask_arms\": true is not allowed with intra_wg_overlap true, mask_free_loop true"));
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "intra_wg_overlap": false, "pingpong": false, )"
                          R"("softmax_in_mask_arms": true})"),
                    Contains("intra_wg_overlap false"));
  CHECK_THROWS_WITH(parse(R"({"dtype": "e4m3", "head_dim": 128, "fp32_two_level_accum": true, "mask_free_loop": false, )"
                          R"("tile": {"block_n": 128}, "softmax_in_mask_arms": true})"),
                    Contains("fp32_two_level_accum true"));
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "softmax_in_mask_arms": 1})"),
                    Contains("softmax_in_mask_arms"));
  // A spec built in code is judged by the same rule.
  af::Spec built = af::default_spec(DType::kBf16, 128, 128, false);
  built.mask_free_loop = true;
  built.softmax_in_mask_arms = true;
  CHECK_THROWS_WITH(af::make_kernel_config(built), Contains("softmax_in_mask_arms"));
  // The table's row through default_spec.
  CHECK(af::default_spec(DType::kBf16, 256, 256, true).softmax_in_mask_arms);
  CHECK_FALSE(af::default_spec(DType::kBf16, 128, 128, true).softmax_in_mask_arms);
}

TEST_CASE("lazy_rescale: its own kernel, the 16-bit dtypes only", "[spec]") {
  const Spec on = parse(R"({"dtype": "bf16", "head_dim": 128, "lazy_rescale": true})");
  const Spec off = parse(R"({"dtype": "bf16", "head_dim": 128, "lazy_rescale": false})");
  check_knob_kernel(on, off, &Spec::lazy_rescale, "lazy-rescale", "kLazyRescale");
  CHECK(parse(R"({"dtype": "fp16", "head_dim": 64, "causal": true, "lazy_rescale": true})").lazy_rescale);
  // e4m3: never from the table, refused by name when asked for.
  CHECK_FALSE(parse(R"({"dtype": "e4m3", "head_dim": 128})").lazy_rescale);
  CHECK_THROWS_WITH(parse(R"({"dtype": "e4m3", "head_dim": 128, "lazy_rescale": true})"),
                    Contains("\"lazy_rescale\": true is not allowed with dtype \"e4m3\""));
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "lazy_rescale": "yes"})"), Contains("lazy_rescale"));
  // Not with O rescaled before P.V (the skip would branch between a warpgroup's GEMM issues): refused by name, and the
  // table's value yields to it.
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 256, "rescale_o_before_pv": true, "lazy_rescale": true})"),
                    Contains("rescale_o_before_pv true"));
  CHECK_FALSE(parse(R"({"dtype": "bf16", "head_dim": 256, "rescale_o_before_pv": true})").lazy_rescale);
  // The table: 16-bit d256 (both masks), nothing else.
  CHECK(parse(R"({"dtype": "bf16", "head_dim": 256})").lazy_rescale);
  CHECK(parse(R"({"dtype": "fp16", "head_dim": 256, "causal": true})").lazy_rescale);
  CHECK_FALSE(parse(R"({"dtype": "bf16", "head_dim": 128})").lazy_rescale);
  CHECK_FALSE(parse(R"({"dtype": "bf16", "head_dim": 64, "causal": true})").lazy_rescale);
  CHECK_FALSE(parse(R"({"dtype": "e4m3", "head_dim": 256})").lazy_rescale);
  CHECK(af::default_spec(DType::kBf16, 256, 256, false).lazy_rescale);
  // A spec built in code is judged by the same rule.
  af::Spec built = af::default_spec(DType::kE4m3, 128, 128, false);
  built.lazy_rescale = true;
  CHECK_THROWS_WITH(af::make_kernel_config(built), Contains("lazy_rescale"));
}

TEST_CASE("load_k_ahead: its own kernel, and the producer it refuses", "[spec]") {
  const Spec off = parse(R"({"dtype": "bf16", "head_dim": 256, "load_k_ahead": false})");
  const Spec on = parse(R"({"dtype": "bf16", "head_dim": 128, "load_k_ahead": true})");
  CHECK(on.load_k_ahead);
  CHECK_FALSE(off.load_k_ahead);
  CHECK(af::canonical_string(off) != af::canonical_string(parse(R"({"dtype": "bf16", "head_dim": 256})")));
  CHECK(af::parse_spec(af::canonical_json(on)) == on);
  CHECK(af::parse_spec(af::canonical_json(off)) == off);
  CHECK_THAT(af::spec_summary(on), Contains("k-ahead"));
  CHECK_THAT(af::spec_summary(off), !Contains("k-ahead"));
  CHECK(af::emit_kernel(af::make_kernel_config(on)).code.find("static constexpr bool kLoadKAhead = true;") !=
        std::string::npos);
  CHECK(af::emit_kernel(af::make_kernel_config(off)).code.find("static constexpr bool kLoadKAhead = false;") !=
        std::string::npos);
  // e4m3 with V in the tensor's layout: its producer warpgroup transposes V as it lands, in K-and-V order.
  CHECK_THROWS_WITH(parse(R"({"dtype": "e4m3", "head_dim": 128, "load_k_ahead": true})"),
                    Contains("\"load_k_ahead\": true is not allowed with dtype \"e4m3\" and v_layout \"seq_major\""));
  CHECK(parse(R"({"dtype": "e4m3", "head_dim": 128, "v_layout": "d_major", "load_k_ahead": true})").load_k_ahead);
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "load_k_ahead": 1})"), Contains("load_k_ahead"));
  // A spec built in code is judged by the same rule.
  af::Spec built = af::default_spec(DType::kE4m3, 128, 128, false);
  built.load_k_ahead = true;
  CHECK_THROWS_WITH(af::make_kernel_config(built), Contains("load_k_ahead"));
}

TEST_CASE("mask_free_loop: its own kernel and the loop it emits", "[spec]") {
  const Spec two = parse(R"({"dtype": "bf16", "head_dim": 128, "causal": true, "mask_free_loop": true})");
  const Spec one = parse(R"({"dtype": "bf16", "head_dim": 128, "causal": true, "mask_free_loop": false})");
  CHECK(two.mask_free_loop);
  CHECK_FALSE(one.mask_free_loop);
  CHECK(af::canonical_string(one) != af::canonical_string(two));
  CHECK(af::parse_spec(af::canonical_json(one)) == one);
  CHECK_THAT(af::spec_summary(two), Contains("mask-free-loop"));
  CHECK_THAT(af::spec_summary(one), !Contains("mask-free-loop"));
  // The table's 16-bit kernels run two copies but d256's (its one-copy loop takes softmax_in_mask_arms and
  // lazy_rescale), the serving layouts' too (the gather kernels' register split included); 16-bit decode one copy.
  CHECK(af::default_tile(DType::kBf16, 128, 128, true).mask_free_loop);
  CHECK(af::default_tile(DType::kFp16, 192, 128, false).mask_free_loop);
  CHECK(af::default_tile(DType::kBf16, 96, 96, false).mask_free_loop);
  CHECK_FALSE(af::default_tile(DType::kBf16, 256, 256, false).mask_free_loop);
  CHECK_FALSE(af::default_tile(DType::kFp16, 256, 256, true).mask_free_loop);
  af::Layout gather;
  gather.varlen_q = gather.varlen_k = gather.paged_kv = gather.paged_gather = true;
  CHECK(af::variant_tile(DType::kBf16, 64, 64, true, af::Quant::kNone, gather).mask_free_loop);
  CHECK(af::variant_tile(DType::kBf16, 64, 64, true, af::Quant::kNone, af::Layout{}).mask_free_loop);
  CHECK_FALSE(af::decode_tile(DType::kFp16, 128, 128).mask_free_loop);
  // e4m3 keeps the mask-free copy (tile_table.cpp: mask_free_loop_row).
  CHECK(af::default_tile(DType::kE4m3, 128, 128, false).mask_free_loop);
  CHECK(af::default_tile(DType::kE4m3, 256, 256, true).mask_free_loop);
  CHECK(af::decode_tile(DType::kE4m3, 128, 128).mask_free_loop);
  af::Layout d_major;
  d_major.v_d_major = true;
  CHECK(af::variant_tile(DType::kE4m3, 128, 128, true, af::Quant::kPerHead, d_major).mask_free_loop);
  CHECK(parse(R"({"dtype": "e4m3", "head_dim": 128})").mask_free_loop);
  CHECK(parse(R"({"dtype": "bf16", "head_dim": 128})").mask_free_loop);
  CHECK_FALSE(parse(R"({"dtype": "bf16", "head_dim": 256})").mask_free_loop);
  CHECK(af::emit_kernel(af::make_kernel_config(one)).code.find("static constexpr bool kMaskFreeLoop = false;") !=
        std::string::npos);
  CHECK(af::emit_kernel(af::make_kernel_config(two)).code.find("static constexpr bool kMaskFreeLoop = true;") !=
        std::string::npos);
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "mask_free_loop": "no"})"), Contains("mask_free_loop"));
}

TEST_CASE("persistent: its own kernel, its O staging over V, and the layouts it refuses", "[spec]") {
  const Spec grid = parse(R"({"dtype": "bf16", "head_dim": 128, "persistent": false})");
  const Spec p = parse(R"({"dtype": "bf16", "head_dim": 128, "persistent": true})");
  CHECK(p.persistent);
  CHECK_FALSE(grid.persistent);
  CHECK(af::canonical_string(p) != af::canonical_string(grid));
  CHECK(af::canonical_json(p).at("persistent") == true);
  CHECK_THAT(af::spec_summary(p), Contains(" persistent"));
  CHECK(af::parse_spec(af::canonical_json(p)) == p);
  CHECK(af::persistent_conflict(p).empty());
  // O moves from over Q to over the V stages: the same bytes for a tile whose V stages hold O, two more barriers.
  const auto gc = af::make_kernel_config(grid), pc = af::make_kernel_config(p);
  CHECK(pc.smem.o_offset == pc.smem.v_offset);
  CHECK(gc.smem.o_offset == gc.smem.q_offset);
  CHECK(pc.smem_bytes == gc.smem_bytes);
  CHECK(pc.smem.num_barriers == gc.smem.num_barriers + af::kPersistentBarriers);
  CHECK(af::emit_kernel(pc).code.find("static constexpr bool kPersistent = true;") != std::string::npos);
  CHECK(af::emit_kernel(gc).code.find("static constexpr bool kPersistent = false;") != std::string::npos);
  // e4m3 d_major d64 (192x160): O (24 KB of bf16) is larger than the two V stages (20 KB): a tail after them.
  const auto e = af::make_kernel_config(
      parse(R"({"dtype": "e4m3", "head_dim": 64, "v_layout": "d_major", "persistent": true})"));
  CHECK(e.smem.o_tail_bytes == 4096);
  CHECK(e.smem.barrier_offset == e.smem.v_offset + 2 * e.smem.v_stage_bytes + 4096);
  // Each layout it does not run names itself, its value and why.
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "persistent": true, "varlen_q": true})"),
                    Contains("\"persistent\": true is not allowed with varlen_q true"));
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "persistent": true, "paged_kv": true})"),
                    Contains("with paged_kv true"));
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "persistent": true, "split_kv": true})"),
                    Contains("with split_kv true"));
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "persistent": true, "pack_gqa": true})"),
                    Contains("with pack_gqa true"));
  // 2-CTA clusters run on the persistent grid too (non-causal, as clusters are).
  CHECK(parse(R"({"dtype": "bf16", "head_dim": 128, "persistent": true, "cluster_m": 2})").persistent);
  CHECK(parse(R"({"dtype": "bf16", "head_dim": 128, "cluster_m": 2})").persistent);  // the table's grid
  CHECK_THROWS_WITH(parse(R"({"dtype": "e4m3", "head_dim": 128, "persistent": true})"),
                    Contains("with v_layout \"seq_major\": the producer warpgroup's V transpose"));
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "persistent": 1})"), Contains("persistent"));
  // A Spec built in code is judged the same way.
  Spec bad = p;
  bad.varlen_k = true;
  CHECK_THROWS_AS(af::make_kernel_config(bad), fa3jit::Error);
  // The tile table's choice never lands on a layout that refuses it.
  af::Layout serving;
  serving.varlen_q = serving.varlen_k = true;
  CHECK_FALSE(af::default_spec(DType::kBf16, DType::kBf16, af::Quant::kNone, 128, 128, true, serving).persistent);
  af::Layout decode;
  decode.pack_gqa = decode.split_kv = decode.short_q = true;
  CHECK_FALSE(af::default_spec(DType::kBf16, DType::kBf16, af::Quant::kNone, 128, 128, false, decode).persistent);
  CHECK_FALSE(af::default_spec(DType::kE4m3, 128, 128, false).persistent);
}

TEST_CASE("serving layout fields: defaults, combinations and their messages", "[spec]") {
  const Spec d = parse(R"({"dtype": "bf16", "head_dim": 128, "varlen_q": true, "paged_kv": true, "pack_gqa": true,
      "split_kv": true})");
  CHECK(d.varlen_q);
  CHECK(d.paged_kv);
  CHECK(d.pack_gqa);
  CHECK(d.split_kv);
  CHECK_FALSE(d.varlen_k);
  CHECK(d.cluster_m == 1);
  CHECK(af::name_token(d) == "bf16_d128_full_varlen_paged_packgqa_split");
  CHECK_THAT(af::spec_summary(d), Contains("paged pack_gqa split"));
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "varlen_k": true, "paged_kv": true})"),
                    Contains("\"paged_kv\" and \"varlen_k\" are both true"));
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "split_kv": true, "cluster_m": 2})"),
                    Contains("\"cluster_m\": 2 is not allowed with varlen_q"));
  CHECK_THROWS_WITH(parse(R"({"dtype": "e4m3", "head_dim": 128, "quant": "per_block", "pack_gqa": true})"),
                    Contains("\"pack_gqa\": true is not allowed with quant \"per_block\""));
  CHECK_THROWS_WITH(parse(R"({"dtype": "e4m3", "head_dim": 128, "quant": "per_block", "varlen_q": true})"),
                    Contains("\"per_block\" is not allowed with varlen_q"));
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "split_kv": 1})"), Contains("split_kv"));
  // paged_gather: how pages are loaded, so only with paged_kv; its own kernel name and summary.
  const Spec g = parse(R"({"dtype": "bf16", "head_dim": 128, "paged_kv": true, "paged_gather": true})");
  CHECK(g.paged_gather);
  CHECK_FALSE(d.paged_gather);
  CHECK(af::name_token(g) == "bf16_d128_full_pagedgather");
  CHECK_THAT(af::spec_summary(g), Contains("paged(gather)"));
  CHECK(af::canonical_string(g) != af::canonical_string(parse(R"({"dtype": "bf16", "head_dim": 128, "paged_kv": true})")));
  CHECK_THROWS_WITH(parse(R"({"dtype": "bf16", "head_dim": 128, "paged_gather": true})"),
                    Contains("\"paged_gather\": true needs \"paged_kv\": true"));
  // A gather spec that leaves the tile out gets the tile the runtime picks for such a call (variant_tile with the
  // layout): d64 with softcap narrows 192 x 128 to 192 x 112 there (tile_table.cpp).
  af::Layout gather;
  gather.paged_kv = gather.paged_gather = gather.softcap = true;
  const Spec gs = parse(R"({"dtype": "fp16", "head_dim": 64, "causal": true, "paged_kv": true, "paged_gather": true,
      "softcap": true})");
  CHECK(gs.block_n == 112);
  CHECK(gs.block_n == af::default_spec(DType::kFp16, DType::kFp16, af::Quant::kNone, 64, 64, true, gather).block_n);
  CHECK(parse(R"({"dtype": "fp16", "head_dim": 64, "causal": true, "softcap": true})").block_n == 128);
  // The gather producer gets 40 registers beside two consumer warpgroups (24 spilled), from the same pool.
  const af::KernelConfig gc = af::make_kernel_config(parse(R"({"dtype": "bf16", "head_dim": 128, "varlen_q": true,
      "paged_kv": true, "paged_gather": true})"));
  REQUIRE(gc.spec.consumer_warpgroups == 2);
  CHECK(gc.producer_registers == 40);
  CHECK(gc.consumer_registers == 232);
  // e4m3 beside two consumer warpgroups: 40 + 2 x 232 where the consumers fit 232 (the V transpose's fast loop),
  // FA3's 24 + 2 x 240 (and the lean loop) where they do not.
  const af::KernelConfig e128 = af::make_kernel_config(parse(R"({"dtype": "e4m3", "head_dim": 128})"));
  REQUIRE(e128.spec.consumer_warpgroups == 2);
  CHECK(e128.spec.block_n == 160);
  CHECK(e128.estimated_consumer_registers == 64 + 80 + 20 + 28);
  CHECK(e128.producer_registers == 40);
  CHECK(e128.consumer_registers == 232);
  const af::KernelConfig e256 = af::make_kernel_config(parse(R"({"dtype": "e4m3", "head_dim": 256})"));
  REQUIRE(e256.spec.consumer_warpgroups == 2);
  CHECK(e256.spec.block_n == 96);
  CHECK(e256.estimated_consumer_registers == 128 + 48 + 12 + 28);
  CHECK(e256.producer_registers == 40);
  CHECK(e256.consumer_registers == 232);
  const af::KernelConfig e256n128 = af::make_kernel_config(
      parse(R"({"dtype": "e4m3", "head_dim": 256, "tile": {"block_m": 128, "block_n": 128}})"));
  CHECK(e256n128.estimated_consumer_registers == 236);
  CHECK(e256n128.producer_registers == 24);
  CHECK(e256n128.consumer_registers == 240);
  // The decode tile: one consumer warpgroup of 64 rows.
  af::Layout decode;
  decode.pack_gqa = decode.split_kv = decode.short_q = true;
  const Spec t = af::default_spec(DType::kBf16, DType::kBf16, af::Quant::kNone, 128, 128, false, decode);
  CHECK(t.block_m == 64);
  CHECK(t.consumer_warpgroups == 1);
  CHECK_FALSE(t.pingpong);
  CHECK(t.pack_gqa);
  CHECK(t.split_kv);
}

TEST_CASE("v_layout d_major: its own tile rows, FA3's register split, no load stages, the O tail", "[spec][fp8]") {
  const auto config = [](const char* json) { return af::make_kernel_config(parse(json)); };
  const af::KernelConfig d128 = config(R"({"dtype": "e4m3", "head_dim": 128, "v_layout": "d_major", "persistent": false})");
  CHECK(d128.spec.v_layout == af::VLayout::kDMajor);
  CHECK((d128.spec.block_m == 128 && d128.spec.block_n == 192 && !d128.spec.pingpong));
  CHECK((d128.producer_registers == 24 && d128.consumer_registers == 240));
  CHECK(d128.v_stage == af::kVStageDMajor);
  CHECK(d128.smem.v_load_stage_bytes == 0);
  CHECK(d128.smem.v_stage_bytes == 192 * 128);  // block_n / 32 boxes of 128 channels x 32 keys
  CHECK(d128.smem.o_tail_bytes == 128 * 256 - 128 * 128);  // bf16 O of 128 x 128 past an e4m3 Q of 128 x 128
  CHECK(d128.smem.o_staging_bytes >= d128.smem.o_bytes);
  // On the persistent grid (the table's choice) O is staged over the V stages instead, which hold it: no tail.
  CHECK(config(R"({"dtype": "e4m3", "head_dim": 128, "v_layout": "d_major"})").smem.o_tail_bytes == 0);
  const af::KernelConfig d256 = config(R"({"dtype": "e4m3", "head_dim": 256, "causal": true, "v_layout": "d_major"})");
  CHECK((d256.spec.block_n == 128 && d256.spec.pingpong));
  // The transposing kernel of the same class keeps its tile, its 40-register producer and its load stages.
  const af::KernelConfig seq = config(R"({"dtype": "e4m3", "head_dim": 128})");
  CHECK((seq.spec.block_n == 160 && seq.producer_registers == 40 && seq.v_stage == af::kVStageTransposed));
  CHECK(seq.smem.o_tail_bytes == 0);
  CHECK(seq.smem.v_load_stage_bytes == 160 * 128);
  // Rows without a measured d_major tile, and softcap, keep the transposing kernel's tile.
  CHECK(config(R"({"dtype": "e4m3", "head_dim": 96, "v_layout": "d_major"})").spec.block_n ==
        config(R"({"dtype": "e4m3", "head_dim": 96})").spec.block_n);
  CHECK(config(R"({"dtype": "e4m3", "head_dim": 128, "softcap": true, "v_layout": "d_major"})").spec.block_n == 160);
  CHECK(af::name_token(d128.spec) == "e4m3_per_head_d128_vt_full");
  CHECK(af::canonical_json(d128.spec).at("v_layout") == "d_major");
  // per_block: a written-out spec takes the d_major rows (its caller reads the descale rows from the kernel); the
  // tile table's call keeps the transposing kernel's tile, whose rows fa3jit_attention_quant_blocks(head_dim) gives.
  CHECK(config(R"({"dtype": "e4m3", "head_dim": 128, "quant": "per_block", "v_layout": "d_major"})").spec.block_n ==
        192);
  CHECK(config(R"({"dtype": "e4m3", "head_dim": 256, "quant": "per_block", "v_layout": "d_major"})").spec.block_n ==
        128);
  af::Layout table_call;
  table_call.v_d_major = true;
  const af::Spec table = af::default_spec(DType::kE4m3, DType::kBf16, af::Quant::kPerBlock, 128, 128, false, table_call);
  CHECK(table.block_n == seq.spec.block_n);
  CHECK(table.v_layout == af::VLayout::kDMajor);
}

TEST_CASE("two-level accumulation chunks stay a multiple of 8 that divides head_dim_v", "[spec][fp8]") {
  for (int dv = 16; dv <= 256; dv += 16) {
    const std::string json = fmt::format(R"({{"dtype": "e4m3", "head_dim": {}, "fp32_two_level_accum": true,
        "intra_wg_overlap": false, "pingpong": false, "tile": {{"block_m": 128, "block_n": 64}}}})", dv);
    INFO(json);
    try {
      const af::KernelConfig c = af::make_kernel_config(parse(json));
      CHECK(c.pv_chunk_n % 8 == 0);
      CHECK(dv % c.pv_chunk_n == 0);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidSpec);  // a register budget problem, never a kernel that cannot compile
    }
  }
}

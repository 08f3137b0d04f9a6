// Serving manifests (kernels/attention_fwd/manifest.h): a model's calls resolve to the kernels forward would pick
// (call_spec, the launch path's own choice), split variants bring their combine kernel, bad manifests are errors
// naming the field, and warm_manifest compiles them into the cache. No GPU needed.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <thread>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "jit/compiler.h"
#include "jit/emit_util.h"
#include "jit/family.h"
#include "jit/tune_db.h"
#include "kernels/attention_fwd/launch.h"
#include "kernels/attention_fwd/manifest.h"
#include "kernels/attention_fwd/tuned.h"
#include "runtime/runtime.h"

using namespace fa3jit;
using namespace fa3jit::attention_fwd;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

json llama(json model_fields = json::object()) {
  json model = {{"name", "Llama-3.1-8B"}, {"dtype", "bf16"},       {"head_dim", 128},
                {"num_heads", 32},        {"num_heads_kv", 8},     {"causal", true},
                {"kv", {"paged"}},        {"page_sizes", {16}},    {"decode_queries", {1}}};
  for (auto& [key, value] : model_fields.items()) model[key] = value;
  return {{"kind", "serving_manifest"}, {"models", {model}}};
}

std::set<std::string> attention_specs(const std::vector<ManifestKernel>& kernels) {
  std::set<std::string> out;
  for (const ManifestKernel& k : kernels)
    if (k.spec.at("kind") == "attention_fwd") out.insert(k.spec.dump());
  return out;
}

// A call of the C++ API, shapes only (no pointer is read by call_spec).
const int32_t kIndex[1] = {0};

// A decode step of Llama-3.1-8B's heads (32/8, d128, bf16) over a paged cache of `page_size` keys per page, as
// flash_attn_with_kvcache makes it: dense q of 1 row, `keys` keys of capacity per sequence.
ForwardArgs paged_decode(int64_t batch, int64_t page_size, int64_t keys) {
  ForwardArgs decode;
  decode.dtype = DType::kBf16;
  decode.batch = batch;
  decode.seqlen_q = 1;
  decode.num_heads = 32;
  decode.num_heads_kv = 8;
  decode.head_dim = 128;
  decode.causal = true;
  decode.page_table = kIndex;
  decode.seqused_k = kIndex;
  decode.page_size = page_size;
  decode.max_pages = (keys + page_size - 1) / page_size;
  decode.page_table_stride = decode.max_pages;
  decode.num_pages = 20000;
  return decode;
}

}  // namespace

TEST_CASE("a manifest lists the kernels its calls run, as call_spec picks them", "[manifest]") {
  const std::vector<ManifestKernel> kernels = manifest_kernels(llama());
  REQUIRE(!kernels.empty());
  std::set<std::string> distinct;
  bool combine = false;
  for (const ManifestKernel& k : kernels) {
    INFO(k.what << ": " << k.spec.dump());
    CHECK(distinct.insert(k.spec.dump()).second);  // listed once
    CHECK_THAT(k.what, Contains("Llama-3.1-8B"));
    combine = combine || k.spec.at("kind") == "attention_combine";
    CHECK_NOTHROW(request_for(split_spec_document(k.spec)));  // a valid spec of its family
  }
  CHECK(combine);

  // A decode step over a paged cache of 16-key pages (300 pages per sequence).
  ForwardArgs decode = paged_decode(64, 16, 4800);
  decode.num_splits = 0;
  const std::set<std::string> listed = attention_specs(kernels);
  for (int splits : {1, 2}) {
    const Spec spec = call_spec(decode, splits);
    INFO(canonical_json(spec).dump());
    CHECK(listed.count(canonical_json(spec).dump()) == 1);
    CHECK_FALSE(spec.causal);  // one query row sees every key: the decode step runs the non-causal kernel
    CHECK(spec.paged_kv);
    CHECK(spec.split_kv == (splits > 1));
  }
  // A chunked prefill over the same cache: packed q of 300 rows per sequence.
  ForwardArgs chunk = decode;
  chunk.cu_seqlens_q = kIndex;
  chunk.seqlen_q = 1200;
  chunk.max_seqlen_q = 300;
  const Spec prefill = call_spec(chunk, 1);
  CHECK(prefill.causal);
  CHECK(prefill.varlen_q);
  CHECK_FALSE(prefill.paged_gather);  // 16 keys per page load as TMA boxes
  CHECK(listed.count(canonical_json(prefill).dump()) == 1);
}

TEST_CASE("page sizes that are not a multiple of 8 run the gather kernels, and the manifest lists them",
          "[manifest]") {
  for (int64_t page_size : {1, 3, 12, 100}) {
    INFO("page_size " << page_size);
    const std::set<std::string> listed = attention_specs(manifest_kernels(llama({{"page_sizes", {page_size}}})));
    const ForwardArgs decode = paged_decode(4, page_size, 4096);
    for (int splits : {1, 2}) {
      const Spec spec = call_spec(decode, splits);
      CHECK(spec.paged_kv);
      CHECK(spec.paged_gather == (page_size % 8 != 0));
      CHECK(listed.count(canonical_json(spec).dump()) == 1);
    }
  }
}

TEST_CASE("a manifest's variants and head dims reach the kernels", "[manifest]") {
  const json gpt_oss = llama({{"head_dim", 64}, {"num_heads", 64}, {"window_size", {127, 0}}, {"sinks", true}});
  int local = 0, short_context = 0, packed = 0;
  for (const ManifestKernel& k : manifest_kernels(gpt_oss)) {
    if (k.spec.at("kind") != "attention_fwd") continue;
    INFO(k.what);
    CHECK(k.spec.at("sinks") == true);
    CHECK(k.spec.at("head_dim") == 64);
    local += k.spec.at("local") == true;
    // Fewer keys than the window: the runtime drops the window, so the kernel without one is warmed too.
    short_context += k.spec.at("local") == false;
    packed += k.spec.at("pack_gqa") == true && k.spec.at("varlen_q") == true;  // the short prefill's packed tile
  }
  CHECK(local > 0);
  CHECK(short_context > 0);
  CHECK(packed > 0);
  const json mla = llama({{"head_dim", 192}, {"head_dim_v", 128}, {"num_heads", 128}, {"num_heads_kv", 128},
                          {"kv", {"packed"}}, {"page_sizes", nullptr}});
  json mla_manifest = mla;
  mla_manifest["models"][0].erase("page_sizes");
  for (const ManifestKernel& k : manifest_kernels(mla_manifest)) {
    INFO(k.what);
    CHECK(k.spec.at("head_dim_v") == 128);
  }
}

TEST_CASE("bad manifests are errors naming the field", "[manifest]") {
  const auto error_of = [](const json& manifest) -> std::string {
    try {
      manifest_kernels(manifest);
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  json unknown = llama();
  unknown["models"][0]["page_size"] = 16;
  CHECK_THAT(error_of(unknown), Contains("models[0].page_size") && Contains("unknown"));
  CHECK_THAT(error_of(llama({{"page_sizes", {16, 0}}})), Contains("models[0].page_sizes") && Contains("0"));
  CHECK_THAT(error_of(llama({{"head_dim", 84}})), Contains("models[0].head_dim") || Contains("head_dim = 84"));
  CHECK_THAT(error_of(llama({{"num_heads_kv", 5}})), Contains("num_heads"));
  try {  // an argument error of a model's calls is the manifest's invalid_spec, naming the model
    manifest_kernels(llama({{"head_dim", 100}}));
    FAIL("accepted head_dim 100");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidSpec);
    CHECK_THAT(std::string(e.what()), Contains("models[0]") && Contains("head_dim = 100"));
  }
  CHECK_THAT(error_of(llama({{"kv", {"paged", "pages"}}})), Contains("models[0].kv[1]") && Contains("\"pages\""));
  CHECK_THAT(error_of(llama({{"window_size", {5}}})), Contains("models[0].window_size"));
  CHECK_THAT(error_of(llama({{"decode_queries", json::array()}})), Contains("models[0].decode_queries"));
  json no_pages = llama();
  no_pages["models"][0].erase("page_sizes");
  CHECK_THAT(error_of(no_pages), Contains("models[0].page_sizes") && Contains("missing"));
  CHECK_THAT(error_of({{"kind", "serving_manifest"}, {"models", json::array()}}), Contains("models"));
  CHECK_THAT(error_of({{"kind", "attention_fwd"}, {"models", {1}}}), Contains("kind"));
}

TEST_CASE("with a runtime, a manifest also lists the tuned tiles of its prefill classes for this build",
          "[manifest][tune_db]") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "fa3jit-test-manifest-tuned";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string db_path = (dir / "tune-db.json").string();
  const json manifest = llama();
  const std::vector<ManifestKernel> builtin = manifest_kernels(manifest);
  // The prefill over the paged cache, not split: the class a tuned tile may replace.
  const auto prefill = std::find_if(builtin.begin(), builtin.end(), [](const ManifestKernel& k) {
    return k.what == "Llama-3.1-8B prefill (paged 16)";
  });
  REQUIRE(prefill != builtin.end());
  const Spec prefill_spec = parse_spec(split_spec_document(prefill->spec).spec);
  REQUIRE_FALSE(prefill_spec.split_kv);
  const std::string token = tune_class(prefill_spec);
  const int builtin_n = prefill_spec.block_n;
  const int tuned_n = builtin_n == 96 ? 112 : 96, other_device_n = builtin_n == 80 ? 64 : 80;
  auto record = [&](int block_n, const std::string& device, const std::string& generator, bool applied,
                    const std::string& nvrtc = nvrtc_version_string()) {
    TuneRecord r;
    r.kind = kTuneKind;
    r.kernel_class = token;
    r.device = TuneIdentity{device, 132, 13000, nvrtc, generator};
    r.problem = {{"seqlen_q", 4096}};
    r.choice = {{"tile", {{"block_m", prefill_spec.block_m}, {"block_n", block_n}}}};
    r.label = "tile.block_n=" + std::to_string(block_n);
    r.applied = applied;
    return r;
  };
  // The records left out carry tiles that hold for the class, so only the filters keep them out.
  for (int n : {tuned_n, other_device_n, 64, 48, 32}) {
    INFO("block_n " << n);
    CHECK(n != builtin_n);
    CHECK_NOTHROW(apply_choice(prefill_spec, json{{"tile", {{"block_n", n}}}}));
  }
  TuneDb::update(db_path, [&](TuneDb& db) {
    db.add(record(tuned_n, "NVIDIA H200", kGeneratorVersion, true), true);
    db.add(record(other_device_n, "NVIDIA H100 80GB HBM3", kGeneratorVersion, true), true);
    db.add(record(64, "NVIDIA H20", "fa3jit-gen-0", true), true);  // another generator: its cubin is not ours
    db.add(record(32, "NVIDIA H800", kGeneratorVersion, true, "12.4"), true);  // another NVRTC
    TuneRecord unapplied = record(48, "NVIDIA GH200", kGeneratorVersion, false);
    unapplied.problem = {{"seqlen_q", 512}};
    db.add(unapplied, false);
  });

  Runtime runtime(RuntimeOptions{(dir / "cache").string(), db_path});
  const std::vector<ManifestKernel> with_tuned = manifest_kernels(manifest, &runtime);
  std::vector<int> tuned_block_n;
  for (const ManifestKernel& k : with_tuned) {
    if (k.what.find("(tuned tile)") == std::string::npos) continue;
    const Spec s = parse_spec(split_spec_document(k.spec).spec);
    CHECK(k.what == "Llama-3.1-8B prefill (paged 16) (tuned tile)");
    CHECK(tune_class(s) == token);
    CHECK_FALSE(s.split_kv);
    tuned_block_n.push_back(s.block_n);
  }
  CHECK(tuned_block_n == std::vector<int>{tuned_n, other_device_n});
  CHECK(with_tuned.size() == builtin.size() + 2);
  CHECK(attention_specs(with_tuned).size() == attention_specs(builtin).size() + 2);

  Runtime off(RuntimeOptions{(dir / "cache").string(), "off"});
  CHECK(attention_specs(manifest_kernels(manifest, &off)) == attention_specs(builtin));
  std::filesystem::remove_all(dir);
}

TEST_CASE("warm_manifest compiles a manifest's kernels into the cache once", "[manifest][compile]") {
  const std::string dir = (std::filesystem::temp_directory_path() / "fa3jit-test-manifest-cache").string();
  std::filesystem::remove_all(dir);
  Runtime runtime(RuntimeOptions{dir, "off"});  // the built-in kernels only, whatever FA3JIT_TUNE_DB says
  const json small = llama({{"head_dim", 64}, {"num_heads", 8}, {"num_heads_kv", 8}});
  const size_t kernels = manifest_kernels(small).size();
  CHECK(warm_manifest(runtime, small, 2) == kernels);  // two compile threads
  CHECK(warm_manifest(runtime, small) == 0);  // all in the cache now
  CHECK(runtime.cache().list().size() == kernels);
  CHECK_THROWS_WITH(warm_manifest(runtime, {{"kind", "serving_manifest"}, {"models", {1}}}, 3), Contains("models"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("warm_manifest takes a kernel another process is compiling last, after the others", "[manifest][compile]") {
  const std::string dir = (std::filesystem::temp_directory_path() / "fa3jit-test-manifest-busy").string();
  std::filesystem::remove_all(dir);
  Runtime runtime(RuntimeOptions{dir, "off"});
  runtime.cache().set_compile_lock_wait(std::chrono::seconds(30));
  const json small = llama({{"head_dim", 64}, {"num_heads", 8}, {"num_heads_kv", 8}, {"dtype", "fp16"}});
  const std::vector<ManifestKernel> kernels = manifest_kernels(small);
  REQUIRE(kernels.size() >= 3);
  // "Another process" compiling the first kernel: its lock file held through a descriptor of our own (flock locks
  // belong to open file descriptions, so the runtime's own open contends with it).
  const KernelRequest busy = request_for(split_spec_document(kernels[0].spec));
  const std::string key = Runtime::kernel_key(busy);
  const int fd = ::open((dir + "/.lock-" + key).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  CHECK(runtime.compiling_elsewhere(busy));
  std::future<size_t> warmed = std::async(std::launch::async, [&] { return warm_manifest(runtime, small, 1); });
  // One worker: every other kernel is compiled while the first is left for the second pass.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  auto others_stored = [&] {
    for (size_t i = 1; i < kernels.size(); ++i)
      if (!runtime.cache().stored(Runtime::kernel_key(request_for(split_spec_document(kernels[i].spec))))) return false;
    return true;
  };
  while (!others_stored() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(others_stored());
  CHECK_FALSE(runtime.cache().stored(key));
  CHECK(warmed.wait_for(std::chrono::milliseconds(0)) == std::future_status::timeout);  // waiting on the first
  ::close(fd);  // the other process is gone without publishing: this one compiles it
  // (No compiling_elsewhere check here: the warm-up's own compile of the key takes the lock at once, and a probe
  // from this thread sees that lock as held just as it saw the other process's.)
  CHECK(warmed.get() == kernels.size());
  CHECK(runtime.cache().stored(key));
  CHECK_FALSE(runtime.compiling_elsewhere(busy));  // the warm-up released the lock with its entry published
  std::filesystem::remove_all(dir);
}

TEST_CASE("the manifests in configs/manifests expand", "[manifest]") {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(FA3JIT_SOURCE_DIR "/configs/manifests")) {
    INFO(entry.path().string());
    const SpecDocument doc = load_spec_document(entry.path().string());
    CHECK(doc.kind == kManifestKind);
    CHECK_FALSE(manifest_kernels(doc.spec).empty());
    ++files;
  }
  CHECK(files >= 2);
}

TEST_CASE("every kernel a manifest lists is a valid spec, for each dtype, head dim pair and page size",
          "[manifest]") {
  // The serving layouts change the register split (the gather producer's 40 registers) and so which tiles fit:
  // a listed kernel the spec checks refuse would fail the server's warm-up, or its first call.
  const std::pair<int, int> head_dims[] = {{64, 64}, {96, 96}, {128, 128}, {192, 128}, {192, 192}, {256, 256}};
  for (const char* dtype : {"bf16", "e4m3"})
    for (auto [head_dim, head_dim_v] : head_dims)
      for (int64_t page_size : {1, 3, 16}) {
        const json manifest = llama(
            {{"dtype", dtype}, {"head_dim", head_dim}, {"head_dim_v", head_dim_v}, {"page_sizes", {page_size}}});
        INFO(dtype << " d" << head_dim << "/" << head_dim_v << " page_size " << page_size);
        std::vector<ManifestKernel> kernels;
        REQUIRE_NOTHROW(kernels = manifest_kernels(manifest));
        for (const ManifestKernel& k : kernels) {
          INFO(k.spec.dump());
          CHECK_NOTHROW(request_for(split_spec_document(k.spec)));
        }
      }
}

TEST_CASE("short causal calls take the short-causal tile; longer, packed, paged and e4m3 calls the row's", "[manifest][spec]") {
  const auto dense = [](int64_t head_dim, int64_t seqlen_q, int64_t seqlen_k, bool causal) {
    ForwardArgs a;
    a.dtype = DType::kBf16;
    a.batch = 2;
    a.seqlen_q = seqlen_q;
    a.seqlen_k = seqlen_k;
    a.num_heads = a.num_heads_kv = 16;
    a.head_dim = head_dim;
    a.causal = causal;
    return a;
  };
  const Spec row128 = default_spec(DType::kBf16, 128, 128, true), row64 = default_spec(DType::kBf16, 64, 64, true);
  REQUIRE(short_causal_max_seqlen_k(DType::kBf16, 128, 128) == 2048);
  REQUIRE(short_causal_max_seqlen_k(DType::kBf16, 64, 64) == 1024);
  for (int64_t keys : {113, 1024, 2048}) {
    const Spec s = call_spec(dense(128, keys, keys, true), 1);
    INFO(keys << ": " << spec_summary(s));
    CHECK(s.block_m == 128);
    CHECK(s.block_n == 128);
    CHECK(s.pingpong == row128.pingpong);
    CHECK(s.persistent == row128.persistent);
  }
  // The bound is on the keys: a 2049-key call, or 100 queries over 4096 keys, takes the row's tile.
  CHECK(call_spec(dense(128, 2049, 2049, true), 1).block_n == row128.block_n);
  CHECK(call_spec(dense(128, 100, 4096, true), 1).block_n == row128.block_n);
  CHECK(row128.block_n != 128);
  // d64: 128 x 128 with two warpgroups up to 1024 keys, the row's 192-row tile beyond.
  const Spec d64 = call_spec(dense(64, 1024, 1024, true), 1);
  CHECK(d64.block_m == 128);
  CHECK(d64.consumer_warpgroups == 2);
  CHECK(d64.block_n == 128);
  CHECK(call_spec(dense(64, 1025, 1025, true), 1).block_m == row64.block_m);
  // Not causal, or not dense, or a row without a measured short tile: the row's tile.
  CHECK(call_spec(dense(128, 1024, 1024, false), 1).block_n == default_spec(DType::kBf16, 128, 128, false).block_n);
  ForwardArgs packed = dense(128, 2048, 2048, true);
  packed.cu_seqlens_q = packed.cu_seqlens_k = kIndex;
  packed.batch = 2;
  packed.max_seqlen_q = packed.max_seqlen_k = 1024;
  CHECK(call_spec(packed, 1).block_n == row128.block_n);
  CHECK(call_spec(dense(256, 1024, 1024, true), 1).block_n == default_spec(DType::kBf16, 256, 256, true).block_n);
  ForwardArgs fp8 = dense(128, 1024, 1024, true);
  fp8.dtype = DType::kE4m3;
  fp8.quant = Quant::kPerHead;
  CHECK(call_spec(fp8, 1).block_n == default_spec(DType::kE4m3, 128, 128, true).block_n);
}

TEST_CASE("a manifest with dense K/V lists the short-causal kernel of its short calls", "[manifest]") {
  const json manifest = json::parse(R"({"kind": "serving_manifest", "models": [{"name": "m", "dtype": "bf16",
      "head_dim": 128, "num_heads": 16, "num_heads_kv": 16, "kv": ["dense"], "decode_queries": [128]}]})");
  const std::set<std::string> listed = attention_specs(manifest_kernels(manifest));
  // 128 dense queries over 1000 dense keys (a verification step over a short context): the short-causal tile.
  ForwardArgs a;
  a.dtype = DType::kBf16;
  a.batch = 4;
  a.seqlen_q = 128;
  a.seqlen_k = 1000;
  a.num_heads = a.num_heads_kv = 16;
  a.head_dim = 128;
  a.causal = true;
  for (int splits : {1, 2}) {
    const Spec spec = call_spec(a, splits);
    INFO(spec_summary(spec));
    CHECK(spec.block_n == 128);
    CHECK(listed.count(canonical_json(spec).dump()) == 1);
  }
}

// The tuning database (jit/tune_db.h) and the attention family's reading of it (kernels/attention_fwd/tuned.h): records
// round-trip through the file, a re-measurement replaces its record, at most one record per class and device is
// applied, malformed files are refused naming the field, FA3JIT_TUNE_DB picks or disables the file, concurrent
// writers lose no record, and a choice is validated by the spec rules (and keeps per_block's descale blocks).
#include <catch2/catch.hpp>

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "jit/tune_db.h"
#include "kernels/attention_fwd/spec.h"
#include "kernels/attention_fwd/tuned.h"
#include "runtime/runtime.h"
#include "tests/jit/temp_dir.h"

using namespace fa3jit;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace af = fa3jit::attention_fwd;

namespace {

TuneIdentity h200() { return {"NVIDIA H200", 132, 13000, "13.0", "fa3jit-gen-2"}; }

TuneRecord record(const std::string& kernel_class, int block_n, double tflops, int seqlen = 8192) {
  TuneRecord r;
  r.kind = "attention_fwd";
  r.kernel_class = kernel_class;
  r.device = h200();
  r.problem = {{"batch", 2}, {"seqlen_q", seqlen}, {"seqlen_k", seqlen}, {"num_heads", 16}, {"num_heads_kv", 16}};
  r.choice = {{"tile", {{"block_m", 128}, {"block_n", block_n}}}};
  r.label = "tile.block_n=" + std::to_string(block_n);
  r.tflops = tflops;
  r.builtin_tflops = 600.0;
  r.created = "2026-12-02T07:00:00Z";
  r.candidates = json::array({{{"label", r.label}, {"tflops", tflops}}});
  return r;
}

Error error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no error");
  return Error(ErrorCode::kInternal, "");
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

struct EnvGuard {
  std::string name;
  std::optional<std::string> old;
  EnvGuard(const char* n, const char* value) : name(n) {
    if (const char* v = std::getenv(n)) old = v;
    if (value) ::setenv(n, value, 1); else ::unsetenv(n);
  }
  ~EnvGuard() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1); else ::unsetenv(name.c_str());
  }
};

}  // namespace

TEST_CASE("tune db: records round-trip, replace by key, one applied per class and device", "[tune_db]") {
  test::TempDir dir;
  const std::string path = dir.path + "/sub/tune-db.json";
  CHECK(TuneDb::load(path).records().empty());  // a missing file is an empty database
  TuneDb::update(path, [](TuneDb& db) { db.add(record("bf16 d128", 128, 650.0), true); });
  TuneDb db = TuneDb::load(path);
  REQUIRE(db.records().size() == 1);
  const TuneRecord& r = db.records()[0];
  CHECK(r.kernel_class == "bf16 d128");
  CHECK(r.device == h200());
  CHECK(r.applied);
  CHECK(r.tflops == 650.0);
  CHECK(r.choice == json{{"tile", {{"block_m", 128}, {"block_n", 128}}}});
  CHECK(db.applied("attention_fwd", "bf16 d128", h200()) == &db.records()[0]);
  TuneIdentity other = h200();
  other.sm_count = 114;
  CHECK(db.applied("attention_fwd", "bf16 d128", other) == nullptr);  // another kind of device
  other = h200();
  other.generator_version = "fa3jit-gen-1";
  CHECK(db.applied("attention_fwd", "bf16 d128", other) == nullptr);  // another generator
  CHECK(db.applied("attention_fwd", "bf16 d64", h200()) == nullptr);

  // Same key (class, device, problem): replaced. A re-measurement without --apply that picks another winner is
  // recorded but no longer applied; one that picks the same stays applied.
  TuneDb::update(path, [](TuneDb& db) { db.add(record("bf16 d128", 176, 660.0), false); });
  db = TuneDb::load(path);
  REQUIRE(db.records().size() == 1);
  CHECK_FALSE(db.records()[0].applied);
  TuneDb::update(path, [](TuneDb& db) {
    db.add(record("bf16 d128", 176, 661.0), true);
    db.add(record("bf16 d128", 176, 662.0), false);
  });
  db = TuneDb::load(path);
  REQUIRE(db.records().size() == 1);
  CHECK(db.records()[0].applied);
  CHECK(db.records()[0].tflops == 662.0);

  // Another problem of the class is a second record; applying it un-applies the first.
  TuneDb::update(path, [](TuneDb& db) { db.add(record("bf16 d128", 128, 500.0, 1024), true); });
  db = TuneDb::load(path);
  REQUIRE(db.records().size() == 2);
  int applied = 0;
  for (const TuneRecord& x : db.records()) applied += x.applied;
  CHECK(applied == 1);
  CHECK(db.applied("attention_fwd", "bf16 d128", h200())->problem.at("seqlen_q") == 1024);
}

TEST_CASE("tune db: a malformed file is refused naming the path and the field", "[tune_db][hostile]") {
  test::TempDir dir;
  const std::string path = dir.path + "/tune-db.json";
  const auto message = [&](const std::string& text) {
    write(path, text);
    const Error e = error_of([&] { (void)TuneDb::load(path); });
    CHECK(e.code() == ErrorCode::kInvalidSpec);
    CHECK_THAT(e.what(), Contains(path));
    return std::string(e.what());
  };
  CHECK_THAT(message("{"), Contains("tuning database"));
  CHECK_THAT(message(R"({"format": "other", "version": 1})"), Contains("\"format\" must be \"fa3jit-tune-db\""));
  CHECK_THAT(message(R"({"format": "fa3jit-tune-db", "version": 7})"), Contains("\"version\" must be 1"));
  CHECK_THAT(message(R"({"format": "fa3jit-tune-db", "version": 1, "records": {}})"), Contains("\"records\" must be a list"));
  json doc = TuneDb().to_json();
  json rec = json::parse(R"({"kind": "attention_fwd", "class": "c", "choice": {}, "device": {"name": "x",
      "sm_count": 0, "driver": 1, "nvrtc": "13.0", "generator": "g"}})");
  doc["records"] = json::array({rec});
  CHECK_THAT(message(doc.dump()), Contains("records[0].device.sm_count"));
  rec["device"]["sm_count"] = 132;
  rec["tflops"] = "fast";
  doc["records"] = json::array({rec});
  CHECK_THAT(message(doc.dump()), Contains("records[0].tflops must be a number"));
  rec.erase("tflops");
  rec["extra"] = 1;
  doc["records"] = json::array({rec});
  CHECK_THAT(message(doc.dump()), Contains("extra"));
  rec.erase("extra");
  doc["records"] = json::array({rec});
  write(path, doc.dump());
  CHECK(TuneDb::load(path).records().size() == 1);
  // A directory where the file should be: an I/O error, not a crash.
  const Error e = error_of([&] { (void)TuneDb::load(dir.path); });
  CHECK(e.code() == ErrorCode::kIoError);
}

TEST_CASE("tune db: FA3JIT_TUNE_DB picks the file or turns the lookup off", "[tune_db]") {
  {
    EnvGuard env("FA3JIT_TUNE_DB", nullptr);
    CHECK(tune_db_path("/c") == std::optional<std::string>("/c/tune-db.json"));
    CHECK_FALSE(tune_db_path("").has_value());
  }
  {
    EnvGuard env("FA3JIT_TUNE_DB", "/elsewhere/db.json");
    CHECK(tune_db_path("/c") == std::optional<std::string>("/elsewhere/db.json"));
  }
  {
    EnvGuard env("FA3JIT_TUNE_DB", "off");
    CHECK_FALSE(tune_db_path("/c").has_value());
    Runtime rt(RuntimeOptions{"/tmp/fa3jit-test-unused-cache"});
    CHECK(rt.tune_db_path().empty());
  }
  Runtime off(RuntimeOptions{"/tmp/fa3jit-test-unused-cache", "off"});
  CHECK(off.tune_db_path().empty());
  CHECK_FALSE(off.tuned_choice("attention_fwd", "bf16", 0).has_value());
}

TEST_CASE("tune db: writers in several processes lose no record", "[tune_db]") {
  test::TempDir dir;
  const std::string path = dir.path + "/tune-db.json";
  constexpr int kProcs = 4, kEach = 10;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int rc = 0;
      try {
        for (int i = 0; i < kEach; ++i)
          TuneDb::update(path, [&](TuneDb& db) { db.add(record(fmt::format("class {} {}", p, i), 128, 1.0), false); });
      } catch (...) {
        rc = 1;
      }
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  CHECK(TuneDb::load(path).records().size() == static_cast<size_t>(kProcs * kEach));
}

TEST_CASE("tuned choices: class tokens, the choice fields, and validation by the spec rules", "[tune_db][spec]") {
  const af::Spec causal = af::default_spec(DType::kBf16, 128, 128, true);
  CHECK(af::tune_class(causal) == "bf16 out=bf16 d=128/128 causal");
  af::Layout serving;
  serving.varlen_q = serving.paged_kv = true;
  const af::Spec paged = af::default_spec(DType::kE4m3, DType::kFp16, af::Quant::kPerHead, 128, 128, false, serving);
  CHECK(af::tune_class(paged) == "e4m3/per_head out=fp16 d=128/128 full varlen_q+paged_kv");
  // split_kv is no part of the class.
  af::Layout split = serving;
  split.split_kv = true;
  CHECK(af::tune_class(af::default_spec(DType::kE4m3, DType::kFp16, af::Quant::kPerHead, 128, 128, false, split)) ==
        af::tune_class(paged));
  const af::Spec e4m3 = af::default_spec(DType::kE4m3, DType::kFp16, af::Quant::kPerBlock, 128, 128, false);
  CHECK(af::tune_class(e4m3) == "e4m3/per_block out=fp16 d=128/128 full");

  const json choice = af::tune_choice(causal);
  CHECK(choice.at("tile") == json{{"block_m", causal.block_m}, {"block_n", causal.block_n}});
  CHECK(choice.size() == 16);
  CHECK(af::canonical_string(af::apply_choice(causal, choice)) == af::canonical_string(causal));
  const af::Spec narrow = af::apply_choice(causal, json{{"tile", {{"block_n", 128}}}, {"stages", 2}});
  CHECK(narrow.block_n == 128);
  CHECK(narrow.causal);
  CHECK(af::builtin_spec(narrow).block_n == causal.block_n);
  // A record written before softmax_in_mask_arms existed: the table's value where the record's loop takes it (d256),
  // none where its choice makes it not fit.
  const af::Spec d256 = af::default_spec(DType::kBf16, 256, 256, false);
  CHECK(af::apply_choice(d256, json{{"stages", 2}}).softmax_in_mask_arms);
  CHECK_FALSE(af::apply_choice(d256, json{{"mask_free_loop", true}}).softmax_in_mask_arms);
  // lazy_rescale: a choice field of its own; a record without it takes the table's value (where the dtype allows it).
  CHECK(choice.contains("lazy_rescale"));
  CHECK(af::apply_choice(causal, json{{"lazy_rescale", true}}).lazy_rescale);
  CHECK(af::apply_choice(causal, json{{"stages", 2}}).lazy_rescale == causal.lazy_rescale);
  // l2_evict_hints likewise.
  CHECK(choice.contains("l2_evict_hints"));
  CHECK(causal.l2_evict_hints);  // the table's value
  CHECK_FALSE(af::apply_choice(causal, json{{"l2_evict_hints", false}}).l2_evict_hints);
  // A record without it takes the table's value even from a base without the hints.
  af::Spec no_hints = causal;
  no_hints.l2_evict_hints = false;
  CHECK(af::apply_choice(no_hints, json{{"stages", 2}}).l2_evict_hints);
  // p_in_smem likewise: a tuned record may take it, a record without it takes the table's value (off).
  CHECK(choice.contains("p_in_smem"));
  CHECK(af::apply_choice(causal, json{{"p_in_smem", true}, {"tile", {{"block_n", 128}}}}).p_in_smem);
  // pin_pv_wait likewise: a choice field a tuned record may take; a record without it takes the table's value (off).
  CHECK(choice.contains("pin_pv_wait"));
  CHECK_FALSE(causal.pin_pv_wait);
  CHECK(af::apply_choice(causal, json{{"pin_pv_wait", true}}).pin_pv_wait);
  af::Spec pinned = causal;
  pinned.pin_pv_wait = true;
  CHECK_FALSE(af::apply_choice(pinned, json{{"stages", 2}}).pin_pv_wait);
  // Its shared memory is the spec's: the table's d128 128x176 has no room for P.
  CHECK_THROWS_WITH(af::apply_choice(causal, json{{"p_in_smem", true}}), Contains("bytes of shared memory"));
  af::Spec p_smem = af::apply_choice(causal, json{{"p_in_smem", true}, {"tile", {{"block_n", 128}}}});
  CHECK_FALSE(af::apply_choice(p_smem, json{{"stages", 2}}).p_in_smem);

  const auto refused = [](const af::Spec& base, const json& c) {
    const Error e = error_of([&] { (void)af::apply_choice(base, c); });
    CHECK(e.code() == ErrorCode::kInvalidSpec);
    return std::string(e.what());
  };
  CHECK_THAT(refused(causal, json{{"head_dim", 64}}), Contains("head_dim"));  // not a choice field
  CHECK_THAT(refused(causal, json{{"tile", {{"block_n", 1000}}}}), Contains("tile.block_n"));
  CHECK_THAT(refused(causal, json::array()), Contains("choice"));
  // per_block: the descales are laid out by the built-in tile.
  CHECK_THAT(refused(e4m3, json{{"tile", {{"block_m", e4m3.block_m}, {"block_n", e4m3.block_n - 32}}}}),
             Contains("per_block"));
  CHECK_NOTHROW(af::apply_choice(e4m3, json{{"stages", 2}}));
}

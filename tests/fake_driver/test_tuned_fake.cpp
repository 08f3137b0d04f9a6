// The runtime's kernel choice reads the tuning database (kernels/attention_fwd/tuned.h), against the fake CUDA driver:
// an applied record for a class on this kind of device makes a call of that class launch the record's kernel; a
// runtime with the database off, a call that splits KV (decode), or another kind of device (FAKE_CUDA_DEVICES=2: device
// 1 has fewer SMs) launch the built-in one; an applied record whose choice the spec rules reject is reported once and
// ignored. Kernels compile for real with NVRTC; only the driver is fake.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "core/log.h"
#include "fake_cuda.h"
#include "fake_support.h"
#include "jit/tune_db.h"
#include "kernels/attention_fwd/emit.h"
#include "kernels/attention_fwd/launch.h"
#include "kernels/attention_fwd/tuned.h"

using namespace fa3jit;
using namespace fa3jit::attention_fwd;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

TensorView tensor_on(int device, int64_t batch, int64_t seqlen, int64_t heads, int64_t dim) {
  void* data = reinterpret_cast<void*>(
      fake_support::fake_driver().alloc_on(device, static_cast<uint64_t>(batch * seqlen * heads * dim * 2)));
  REQUIRE(data != nullptr);
  return {data, seqlen * heads * dim, heads * dim, dim};
}

// bf16, d128, causal: a prefill (seqlen 3000, no split, past the short-causal tile's 2048 keys) or a decode step over
// 8192 keys (the heuristic splits).
ForwardArgs call_on(int device, bool decode) {
  ForwardArgs a;
  a.dtype = DType::kBf16;
  a.batch = 1, a.num_heads = 16, a.num_heads_kv = decode ? 2 : 16, a.head_dim = 128;
  a.seqlen_q = decode ? 1 : 3000, a.seqlen_k = decode ? 8192 : 3000;
  a.causal = true;
  a.q = tensor_on(device, 1, a.seqlen_q, a.num_heads, 128);
  a.k = tensor_on(device, 1, a.seqlen_k, a.num_heads_kv, 128);
  a.v = tensor_on(device, 1, a.seqlen_k, a.num_heads_kv, 128);
  a.out = tensor_on(device, 1, a.seqlen_q, a.num_heads, 128);
  if (decode) {
    a.num_splits = 0;
    a.workspace_bytes = workspace_size(a);
    REQUIRE(a.workspace_bytes > 0);
    a.workspace = reinterpret_cast<void*>(fake_support::fake_driver().alloc_on(device, a.workspace_bytes));
  }
  return a;
}

std::string kernel_name_of(const Spec& spec) { return make_request(make_kernel_config(spec)).source.kernel_name; }

std::string launched(Runtime& rt, const ForwardArgs& a, int device) {
  REQUIRE(fake_support::fake_driver().make_current(device) == 1);
  forward(rt, a, nullptr);
  return fake_support::last_launch().kernel_name;
}

// A database at `path` with one applied record for the bf16 d128 causal class on device 0's kind of device.
void write_db(const std::string& path, const json& choice) {
  const Spec base = default_spec(DType::kBf16, 128, 128, true);
  TuneRecord r;
  r.kind = kTuneKind;
  r.kernel_class = tune_class(base);
  r.device = tune_identity(0);
  r.choice = choice;
  r.label = "test";
  r.tflops = 1.0;
  TuneDb::update(path, [&](TuneDb& db) { db.add(r, true); });
}

}  // namespace

TEST_CASE("tuning database: an applied record picks its class's kernel; off, splits and other devices do not",
          "[fake_driver][tune][multi_device]") {
  fake_support::TempDir dir("fa3jit-fake-tuned");
  REQUIRE(!dir.path.empty());
  const std::string db = dir.path + "/tune-db.json";
  const Spec builtin = default_spec(DType::kBf16, 128, 128, true);
  const Spec tuned = apply_choice(builtin, json{{"tile", {{"block_n", 128}}}});
  REQUIRE(tuned.block_n != builtin.block_n);
  write_db(db, tune_choice(tuned));

  Runtime rt(RuntimeOptions{dir.path + "/cache", db});
  Runtime off(RuntimeOptions{dir.path + "/cache", "off"});
  CHECK(rt.tune_db_path() == db);
  CHECK(launched(rt, call_on(0, false), 0) == kernel_name_of(tuned));
  CHECK(launched(off, call_on(0, false), 0) == kernel_name_of(builtin));
  // The same call again (the per-thread memo) and after another class in between.
  CHECK(launched(rt, call_on(0, false), 0) == kernel_name_of(tuned));
  const std::string decode = launched(rt, call_on(0, true), 0);
  CHECK(decode == launched(off, call_on(0, true), 0));  // the decode tile and its splits are never tuned
  CHECK(decode != kernel_name_of(tuned));
  CHECK(launched(rt, call_on(0, false), 0) == kernel_name_of(tuned));
  // What `cache warm` lists for the class (tuned_specs) is the kernel the call launched; nothing for the decode step.
  const std::vector<Spec> warmed = tuned_specs(rt, call_spec(call_on(0, false), 1));
  REQUIRE(warmed.size() == 1);
  CHECK(kernel_name_of(warmed[0]) == kernel_name_of(tuned));
  CHECK(canonical_string(warmed[0]) == canonical_string(tuned));
  CHECK(tuned_specs(off, call_spec(call_on(0, false), 1)).empty());
  {
    // A record for the decode step's own class: the launch keeps the decode tile, and warm lists nothing for it.
    const std::string decode_db = dir.path + "/decode-db.json";
    const Spec decode_spec = call_spec(call_on(0, true), 1);
    TuneRecord r;
    r.kind = kTuneKind;
    r.kernel_class = tune_class(decode_spec);
    r.device = tune_identity(0);
    r.choice = tune_choice(apply_choice(builtin_spec(decode_spec), json{{"tile", {{"block_n", 128}}}}));
    r.label = "test";
    TuneDb::update(decode_db, [&](TuneDb& db) { db.add(r, true); });
    Runtime decode_rt(RuntimeOptions{dir.path + "/cache", decode_db});
    REQUIRE(decode_rt.applied_choices(kTuneKind, tune_class(decode_spec)).size() == 1);
    CHECK(tuned_specs(decode_rt, decode_spec).empty());
    CHECK(tuned_specs(decode_rt, call_spec(call_on(0, true), 2)).empty());
    CHECK(launched(decode_rt, call_on(0, true), 0) == decode);
  }
  // plan_info (what workspace sizes are read from) is the built-in choice for every runtime.
  CHECK(kernel_name_of(plan_info(call_on(0, false)).spec) == kernel_name_of(builtin));

  if (fake_support::fake_driver().device_count() >= 2) {
    // Device 1 has 114 SMs: another kind of device, so the record does not apply there.
    CHECK(tune_identity(1).sm_count != tune_identity(0).sm_count);
    CHECK(launched(rt, call_on(1, false), 1) == kernel_name_of(builtin));
    CHECK(launched(rt, call_on(0, false), 0) == kernel_name_of(tuned));
  }
}

TEST_CASE("tuning database: an applied choice the spec rules reject is reported once and the built-in kernel runs",
          "[fake_driver][tune]") {
  fake_support::TempDir dir("fa3jit-fake-tuned-bad");
  REQUIRE(!dir.path.empty());
  const std::string db = dir.path + "/tune-db.json";
  write_db(db, json{{"tile", {{"block_n", 1000}}}});
  std::vector<std::string> lines;
  const LogSink previous = set_log_sink([&](LogLevel, const std::string& line) { lines.push_back(line); });
  Runtime rt(RuntimeOptions{dir.path + "/cache", db});
  const std::string first = launched(rt, call_on(0, false), 0);
  const std::string second = launched(rt, call_on(0, false), 0);
  set_log_sink(previous);
  CHECK(first == kernel_name_of(default_spec(DType::kBf16, 128, 128, true)));
  CHECK(second == first);
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Contains("tile.block_n") && Contains("built-in tile is used") && Contains(db));
}

TEST_CASE("tuning database: an unreadable database is reported once and the built-in kernels run",
          "[fake_driver][tune]") {
  fake_support::TempDir dir("fa3jit-fake-tuned-torn");
  REQUIRE(!dir.path.empty());
  const std::string db = dir.path + "/tune-db.json";
  { std::ofstream(db) << R"({"format": "fa3jit-tune-db", "version": 1, "records": [)"; }  // torn by hand
  std::vector<std::string> lines;
  const LogSink previous = set_log_sink([&](LogLevel, const std::string& line) { lines.push_back(line); });
  Runtime rt(RuntimeOptions{dir.path + "/cache", db});
  const std::string name = launched(rt, call_on(0, false), 0);
  (void)launched(rt, call_on(0, false), 0);
  set_log_sink(previous);
  CHECK(name == kernel_name_of(default_spec(DType::kBf16, 128, 128, true)));
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Contains(db) && Contains("built-in tile table"));
}

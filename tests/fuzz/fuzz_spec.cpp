// Harness: JSON spec text -> parse_spec_document -> request_for (validate, KernelConfig, emit) for the
// document's own kind and for every other registered family. Stops before NVRTC: a compile takes about a
// second, the emitted source is what the generator is responsible for.
//
// Promises checked (docs/reliability.md): every input is either an fa3jit::Error or a request; a request's
// canonical spec is a fixed point (parsing it again gives the same canonical spec, kernel name and source,
// which is what makes equal specs share a cache key); launch invariants are in range.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "fuzz_util.h"
#include "jit/family.h"
#include "testing/problem.h"

using namespace fa3jit;

namespace {

void check_request(const KernelRequest& r, std::string_view kind) {
  FUZZ_REQUIRE(r.kind == kind, "request of kind %s for a spec of kind %s", r.kind.c_str(), std::string(kind).c_str());
  FUZZ_REQUIRE(!r.canonical.empty() && !r.source.code.empty() && !r.source.kernel_name.empty(), "empty request");
  FUZZ_REQUIRE(r.source.code.find(r.source.kernel_name) != std::string::npos, "source lacks its entry point %s",
               r.source.kernel_name.c_str());
  FUZZ_REQUIRE(r.launch.num_threads >= 32 && r.launch.num_threads <= 1024 && r.launch.num_threads % 32 == 0,
               "num_threads %d", r.launch.num_threads);
  FUZZ_REQUIRE(r.launch.smem_bytes >= 0 && r.launch.smem_bytes <= 232448, "smem_bytes %d", r.launch.smem_bytes);
  FUZZ_REQUIRE(r.launch.cluster_x >= 1 && r.launch.cluster_x <= 8, "cluster_x %d", r.launch.cluster_x);

  // The canonical spec is the kernel's identity: it must parse back to itself and to the same kernel.
  KernelRequest again;
  try {
    again = request_for(parse_spec_document(r.canonical));
  } catch (const Error& e) {
    FUZZ_REQUIRE(false, "canonical spec %s is rejected: %s", r.canonical.c_str(), e.what());
  }
  FUZZ_REQUIRE(again.canonical == r.canonical, "canonical spec not a fixed point:\n  %s\n  %s", r.canonical.c_str(),
               again.canonical.c_str());
  FUZZ_REQUIRE(again.source.kernel_name == r.source.kernel_name && again.source.code == r.source.code,
               "same canonical spec, different kernel (%s vs %s)", r.source.kernel_name.c_str(),
               again.source.kernel_name.c_str());
}

// The request of `spec` as family `kind`, or nothing when the spec is rejected.
void try_family(const nlohmann::json& spec, std::string_view kind) {
  SpecDocument doc;
  doc.kind = std::string(kind);
  doc.spec = spec;
  doc.spec["kind"] = doc.kind;
  try {
    check_request(request_for(doc), kind);
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  set_log_level(LogLevel::kQuiet);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::as_text(data, size));
  SpecDocument doc;
  try {
    doc = parse_spec_document(text);
  } catch (const Error&) {
    return 0;
  }
  try {
    check_request(request_for(doc), doc.kind);
  } catch (const Error&) {
  }
  // The problem section as run/bench/tune read it (attention_fwd only).
  try {
    nlohmann::json whole = doc.spec;
    if (doc.problem) whole["problem"] = *doc.problem;
    (void)testing::attention_case_from_json(whole);
  } catch (const Error&) {
  }
  // The same fields offered to every other family: their validators see each other's spellings.
  if (doc.spec.is_object()) {
    for (const KernelFamily& family : families()) {
      if (family.kind != doc.kind) try_family(doc.spec, family.kind);
    }
  }
  return 0;
}

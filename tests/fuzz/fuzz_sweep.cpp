// Harness: the sweep-file reader of `fa3jit tune` (tools/cli/sweep.h) on arbitrary file contents, then each
// candidate the CLI would build, up to the emitted source (no NVRTC).
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "fuzz_util.h"
#include "kernels/attention_fwd/emit.h"
#include "testing/attention_problem.h"
#include "tools/cli/sweep.h"

namespace {

// Candidates built per input: enough to reach every axis, few enough to keep thousands of inputs a second.
constexpr size_t kCandidatesPerInput = 8;

fa3jit::fuzz::ScratchDir& scratch() {
  static fa3jit::fuzz::ScratchDir dir;
  return dir;
}

void build_candidate(const nlohmann::json& base, const std::vector<fa3jit::cli::Axis>& axes,
                     const std::vector<size_t>& index) {
  using namespace fa3jit;
  nlohmann::json spec_doc = base;
  try {
    for (size_t a = 0; a < axes.size(); ++a) cli::set_field(spec_doc, axes[a].key, axes[a].values[index[a]]);
  } catch (const Error&) {
    return;  // tune stops with this error
  }
  try {
    const testing::AttentionCase tcase = testing::attention_case_from_json(spec_doc);
    const KernelRequest r = attention_fwd::make_request(attention_fwd::make_kernel_config(tcase.spec));
    FUZZ_REQUIRE(!r.source.code.empty(), "empty source for %s", spec_doc.dump().c_str());
  } catch (const Error&) {
    // skipped or failed: listed by tune, not fatal
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fa3jit::set_log_level(fa3jit::LogLevel::kQuiet);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fa3jit;
  const std::string path = scratch().path() + "/sweep.json";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    FUZZ_REQUIRE(out.good(), "cannot write %s", path.c_str());
  }
  nlohmann::json doc;
  std::vector<cli::Axis> axes;
  try {
    doc = cli::read_sweep(path);
    axes = cli::sweep_axes(doc["sweep"]);
  } catch (const Error&) {
    return 0;
  }
  size_t total = 1;
  for (const cli::Axis& a : axes) {
    FUZZ_REQUIRE(!a.values.empty(), "axis %s has no values", a.key.c_str());
    total *= a.values.size();
  }
  FUZZ_REQUIRE(total <= cli::kMaxCandidates, "%zu candidates passed the limit", total);

  // The cartesian product in tune's order (last axis fastest), the first few candidates only.
  std::vector<size_t> index(axes.size(), 0);
  for (size_t n = 0; n < std::min(total, kCandidatesPerInput); ++n) {
    build_candidate(doc["base"], axes, index);
    for (size_t a = axes.size(); a-- > 0;) {
      if (++index[a] < axes[a].values.size()) break;
      index[a] = 0;
    }
  }
  return 0;
}

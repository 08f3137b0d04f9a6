// `fa3jit tune SWEEP.json`: compile (and on a GPU check and time) every point of a sweep space.
//
// Sweep file:
//   {
//     "base":  { ...a spec, with "problem" when timing on a GPU... },
//     "sweep": { "tile.block_n": [64, 128, 176], "stages": [2, 3], "pingpong": [false, true] }
//   }
// Each key of "sweep" is a spec field, dotted for nested ones ("tile.block_m"); the candidates are the
// cartesian product of the lists, each applied on top of "base". A candidate the spec validation or the
// resource budget rejects is listed as skipped with the reason; one NVRTC rejects as failed.
#include <algorithm>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"
#include "kernels/attention_fwd/emit.h"
#include "testing/attention_problem.h"
#include "tools/cli/commands.h"

namespace fa3jit::cli {
namespace {

constexpr size_t kMaxCandidates = 4096;

struct Axis {
  std::string key;
  std::vector<nlohmann::json> values;
};

struct Candidate {
  std::string label;          // "tile.block_n=64 stages=3"
  std::string skipped;        // reason when the spec is invalid or infeasible
  std::string failed;         // reason when compiling, launching or checking failed
  std::optional<PreparedKernel> kernel;
  std::optional<testing::Timing> timing;
  std::optional<bool> check_passed;
};

nlohmann::json read_sweep(const std::string& path) {
  const std::string text = json_fields::read_file(path);
  nlohmann::json doc;
  try {
    doc = json_fields::parse_text(text);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", path, e.what()));
  }
  if (!doc.is_object()) throw Error(ErrorCode::kInvalidSpec, fmt::format("{}: must be a JSON object", path));
  for (const auto& [key, value] : doc.items()) {
    if (key != "base" && key != "sweep") {
      throw Error(ErrorCode::kInvalidSpec,
                  fmt::format("{}: unknown key \"{}\"; allowed: \"base\", \"sweep\"", path, key));
    }
  }
  if (!doc.contains("base") || !doc["base"].is_object()) {
    throw Error(ErrorCode::kInvalidSpec, fmt::format("{}: \"base\" must be a spec object", path));
  }
  if (!doc.contains("sweep") || !doc["sweep"].is_object()) {
    throw Error(ErrorCode::kInvalidSpec,
                fmt::format("{}: \"sweep\" must be an object of field -> list of values", path));
  }
  return doc;
}

std::vector<Axis> sweep_axes(const nlohmann::json& sweep) {
  std::vector<Axis> axes;
  size_t total = 1;
  for (const auto& [key, values] : sweep.items()) {
    if (!values.is_array() || values.empty()) {
      throw Error(ErrorCode::kInvalidSpec,
                  fmt::format("sweep.{} must be a non-empty list of values, got {}", key, values.dump()));
    }
    total *= values.size();
    if (total > kMaxCandidates) {
      throw Error(ErrorCode::kInvalidSpec,
                  fmt::format("the sweep has more than {} candidates; narrow the lists", kMaxCandidates));
    }
    axes.push_back({key, std::vector<nlohmann::json>(values.begin(), values.end())});
  }
  return axes;
}

// Sets a dotted field ("tile.block_n") in a spec document.
void set_field(nlohmann::json& doc, const std::string& dotted, const nlohmann::json& value) {
  nlohmann::json* node = &doc;
  size_t start = 0;
  for (size_t dot = dotted.find('.'); dot != std::string::npos; dot = dotted.find('.', start)) {
    nlohmann::json& child = (*node)[dotted.substr(start, dot - start)];
    if (child.is_null()) child = nlohmann::json::object();
    if (!child.is_object()) {
      throw Error(ErrorCode::kInvalidSpec,
                  fmt::format("sweep.{}: \"{}\" in base is not an object", dotted, dotted.substr(0, dot)));
    }
    node = &child;
    start = dot + 1;
  }
  (*node)[dotted.substr(start)] = value;
}

void print_table(const std::vector<Candidate>& candidates, bool timed) {
  fmt::print("\n{:<4} {:<40} {:>5} {:>11} {:>8} {:>10} {:>9} {:>7}  {}\n", "rank", "candidate", "regs", "spill st/ld",
             "smem", "median ms", "TFLOPS", "check", "kernel");
  int rank = 0;
  for (const Candidate& c : candidates) {
    if (!c.kernel || !c.failed.empty()) continue;
    const ResourceReport& r = c.kernel->compiled->report;
    const std::string spill = reported(r.spill_store_bytes) + "/" + reported(r.spill_load_bytes);
    fmt::print("{:<4} {:<40} {:>5} {:>11} {:>8} {:>10} {:>9} {:>7}  {}\n", ++rank, c.label, reported(r.registers),
               spill, c.kernel->request.launch.smem_bytes, timed && c.timing ? fmt::format("{:.4f}", c.timing->median_ms) : "-",
               timed && c.timing ? fmt::format("{:.1f}", c.timing->tflops) : "-",
               c.check_passed ? (*c.check_passed ? "PASS" : "FAIL") : "-", c.kernel->compiled->kernel_name);
  }
  for (const Candidate& c : candidates) {
    if (!c.failed.empty()) fmt::print("failed   {}: {}\n", c.label, c.failed);
  }
  for (const Candidate& c : candidates) {
    if (!c.skipped.empty()) fmt::print("skipped  {}: {}\n", c.label, c.skipped);
  }
}

}  // namespace

int cmd_tune(const GlobalOptions& global, const TuneOptions& options) {
  const nlohmann::json doc = read_sweep(options.sweep_path);
  const std::vector<Axis> axes = sweep_axes(doc["sweep"]);
  const bool gpu = testing::open_gpu(options.device);
  if (gpu && !doc["base"].contains("problem")) {
    throw Error(ErrorCode::kInvalidSpec,
                fmt::format("{}: base spec has no \"problem\" section; on a GPU every candidate is timed on it",
                            options.sweep_path));
  }
  Runtime runtime(RuntimeOptions{global.cache_dir});

  std::vector<Candidate> candidates;
  std::optional<testing::AttentionProblem> problem;
  std::vector<size_t> index(axes.size(), 0);
  for (bool more = true; more;) {
    Candidate c;
    nlohmann::json spec_doc = doc["base"];
    for (size_t a = 0; a < axes.size(); ++a) {
      set_field(spec_doc, axes[a].key, axes[a].values[index[a]]);
      c.label += fmt::format("{}{}={}", a ? " " : "", axes[a].key, axes[a].values[index[a]].dump());
    }
    if (c.label.empty()) c.label = "base";
    // Next index of the cartesian product (last axis fastest).
    more = false;
    for (size_t a = axes.size(); a-- > 0;) {
      if (++index[a] < axes[a].values.size()) {
        more = true;
        break;
      }
      index[a] = 0;
    }

    std::optional<testing::AttentionCase> tcase;
    try {
      tcase = testing::attention_case_from_json(spec_doc);
    } catch (const Error& e) {
      c.skipped = e.what();
      fmt::print("skip     {}: {}\n", c.label, c.skipped);
      candidates.push_back(std::move(c));
      continue;
    }
    try {
      const attention_fwd::Spec& spec = tcase->spec;
      c.kernel = runtime.prepare(attention_fwd::make_request(attention_fwd::make_kernel_config(spec)));
      const ResourceReport& r = c.kernel->compiled->report;
      fmt::print("compiled {}: {} regs, spill {}/{} B, stack {} B, smem {} B, {} threads ({} {:.0f} ms)\n",
                 c.label, reported(r.registers), reported(r.spill_store_bytes), reported(r.spill_load_bytes),
                 reported(r.stack_frame_bytes), c.kernel->request.launch.smem_bytes,
                 c.kernel->request.launch.num_threads,
                 c.kernel->cache_hit ? "hit" : "miss", c.kernel->ms);
      if (gpu) {
        const testing::ProblemShape shape = testing::shape_of(*tcase);
        const auto same = [&](const testing::ProblemShape& a) {
          return a.dtype == shape.dtype && a.batch == shape.batch && a.seqlen_q == shape.seqlen_q &&
                 a.seqlen_k == shape.seqlen_k && a.num_heads == shape.num_heads &&
                 a.num_heads_kv == shape.num_heads_kv && a.head_dim == shape.head_dim &&
                 a.head_dim_v == shape.head_dim_v && a.causal == shape.causal;
        };
        if (!problem || !same(problem->shape)) {
          problem.reset();  // free the old device buffers before allocating new ones
          problem.emplace(shape, options.seed);
        }
        const auto loaded = attention_fwd::load_kernel(runtime, spec);
        problem->run(runtime, loaded.get());
        const CheckResult check = problem->check_sampled(spec.block_m, options.check_rows, options.seed);
        c.check_passed = check.passed;
        c.timing = problem->time(runtime, loaded.get(), options.warmup, options.iters);
        fmt::print("timed    {}: {:.4f} ms, {:.1f} TFLOPS, check {}\n", c.label, c.timing->median_ms,
                   c.timing->tflops, check.passed ? "PASS" : "FAIL: " + check.failure);
      }
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kNoDriver) throw;
      c.failed = fmt::format("{}: {}", error_code_name(e.code()), e.what());
      fmt::print("failed   {}: {}\n", c.label, c.failed);
    }
    candidates.push_back(std::move(c));
  }

  // A wrong kernel must never rank first: failed checks go below every passing candidate.
  auto key = [gpu](const Candidate& c) {
    if (gpu) {
      const bool ok = c.check_passed.value_or(false);
      return std::make_tuple(ok ? 0 : 1, c.timing ? -c.timing->tflops : 0.0, 0.0);
    }
    const ResourceReport& r = c.kernel->compiled->report;
    const double regs = r.registers < 0 ? std::numeric_limits<double>::max() : r.registers;
    return std::make_tuple(0, regs, static_cast<double>(std::max(0, r.spill_store_bytes) + std::max(0, r.spill_load_bytes)));
  };
  std::stable_sort(candidates.begin(), candidates.end(), [&](const Candidate& a, const Candidate& b) {
    const bool ra = a.kernel && a.failed.empty(), rb = b.kernel && b.failed.empty();
    if (ra != rb) return ra;
    if (!ra) return false;
    return key(a) < key(b);
  });
  if (!gpu) fmt::print("\nno GPU found: candidates compiled only, sorted by registers\n");
  print_table(candidates, gpu);
  const bool any = std::any_of(candidates.begin(), candidates.end(),
                               [](const Candidate& c) { return c.kernel && c.failed.empty(); });
  if (!any) throw Error(ErrorCode::kInvalidSpec, fmt::format("no candidate of {} could be built", options.sweep_path));
  return 0;
}

}  // namespace fa3jit::cli

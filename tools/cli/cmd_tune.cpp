// `fa3jit tune SWEEP.json`: compile every point of a sweep space on a pool of NVRTC workers, time and check each on
// the GPUs, rank them, record the run in the tuning database (jit/tune_db.h) with a PNG heat map, and with --apply
// make each class's winner the kernel the runtime picks on this kind of device. `fa3jit tune show` lists the records.
//
// The sweep file: sweep.h. A candidate the spec validation or the resource budget rejects is listed as skipped with
// the reason, before anything compiles; one NVRTC rejects as failed. The built-in choice of each class (tuned.h: builtin_spec) is timed beside the sweep when the sweep does not
// contain it, so every record says how much its winner gains over the tile table.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"
#include "core/workers.h"
#include "jit/driver.h"
#include "jit/tune_db.h"
#include "kernels/attention_fwd/emit.h"
#include "kernels/attention_fwd/tuned.h"
#include "testing/attention_problem.h"
#include "tools/cli/commands.h"
#include "tools/cli/heatmap.h"
#include "tools/cli/sweep.h"

namespace fa3jit::cli {
namespace {

namespace af = attention_fwd;
using nlohmann::json;

// Peak host memory of one NVRTC compile of an attention kernel is a few hundred MB (ptxas dominates); a worker is
// given 1 GiB so a sweep on a small machine never swaps.
constexpr int64_t kCompileWorkerBytes = int64_t{1} << 30;

struct Candidate {
  std::string label;            // "tile.block_n=64 stages=3"
  std::vector<size_t> index;    // the value index on each axis; empty for an added built-in candidate
  std::string skipped;          // reason when the spec is invalid or infeasible
  std::string failed;           // reason when compiling, launching or checking failed
  std::optional<testing::AttentionCase> tcase;
  std::string kernel_class;     // tuned.h token
  bool builtin = false;         // the class's built-in choice
  std::optional<PreparedKernel> kernel;
  std::optional<testing::Timing> timing;
  std::optional<bool> check_passed;
  std::string check_failure;
  int device = -1;              // where it was timed
};

// A progress line: "[ 12/48  25%  eta 0:42]", from the mean time of the steps done so far; on a terminal also a bar
// on stderr that redraws in place.
class Progress {
 public:
  Progress(std::string stage, size_t total) : stage_(std::move(stage)), total_(total), start_(Clock::now()) {}
  std::string step() {
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const double eta = done_ == 0 ? 0.0 : elapsed / static_cast<double>(done_) * static_cast<double>(total_ - done_);
    const int pct = total_ == 0 ? 100 : static_cast<int>(100 * done_ / total_);
    const std::string line = fmt::format("[{:>{}}/{} {:>3}% eta {}:{:02}]", done_, digits(total_), total_, pct,
                                         static_cast<int>(eta) / 60, static_cast<int>(eta) % 60);
    if (::isatty(STDERR_FILENO)) {
      constexpr int kBar = 30;
      const int filled = total_ == 0 ? kBar : static_cast<int>(kBar * done_ / total_);
      fmt::print(stderr, "\r{} [{}{}] {}{}", stage_, std::string(filled, '#'), std::string(kBar - filled, '.'), line,
                 done_ == total_ ? "\n" : "");
      std::fflush(stderr);
    }
    return line;
  }

 private:
  using Clock = std::chrono::steady_clock;
  static int digits(size_t n) { return static_cast<int>(std::to_string(n).size()); }
  std::mutex mu_;
  std::string stage_;
  size_t total_, done_ = 0;
  Clock::time_point start_;
};

// One step of a candidate on a worker thread: `work` runs, any exception becomes the candidate's failure (a throw out
// of a worker would terminate the process), then the progress line and `describe`'s report (or the failure) print.
template <class Work, class Describe>
void run_step(Candidate& c, Progress& progress, std::mutex& print_mu, Work work, Describe describe) noexcept {
  try {
    work();
  } catch (const Error& e) {
    c.failed = fmt::format("{}: {}", error_code_name(e.code()), e.what());
  } catch (const std::exception& e) {
    c.failed = fmt::format("internal: {}", e.what());
  }
  const std::string line = progress.step();
  std::lock_guard<std::mutex> lock(print_mu);
  if (!c.failed.empty()) {
    fmt::print("{} failed   {}: {}\n", line, c.label, c.failed);
  } else {
    describe(line);
  }
  std::fflush(stdout);
}

// Compile workers: the hardware threads, at most one per kCompileWorkerBytes of available memory.
size_t compile_jobs(int requested, size_t candidates) {
  size_t jobs = requested > 0 ? static_cast<size_t>(requested) : std::max(1u, std::thread::hardware_concurrency());
  if (requested <= 0) {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    int64_t kb = 0;
    std::string unit;
    while (meminfo >> key >> kb >> unit) {
      if (key == "MemAvailable:") {
        jobs = std::min<size_t>(jobs, std::max<int64_t>(1, kb * 1024 / kCompileWorkerBytes));
        break;
      }
    }
  }
  return std::clamp<size_t>(jobs, 1, std::max<size_t>(1, candidates));
}

// The GPUs to time on: --gpus, else every visible one; all must be one kind (the records are per kind of device).
std::vector<int> timing_devices(const TuneOptions& options) {
  std::vector<int> devices = options.gpus;
  if (devices.empty()) {
    int count = 0;
    check_cu(driver().cuDeviceGetCount(&count), "cuDeviceGetCount");
    for (int d = 0; d < count; ++d) devices.push_back(d);
  }
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  for (int d : devices) (void)testing::open_gpu(d);  // range check, with the message naming the device
  const TuneIdentity first = tune_identity(devices.front());
  for (int d : devices) {
    const TuneIdentity id = tune_identity(d);
    if (id.device_name != first.device_name || id.sm_count != first.sm_count)
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("--gpus: device {} is a {} with {} SMs and device {} a {} with {}; a sweep times on one "
                              "kind of device (pass --gpus with devices of one kind)",
                              devices.front(), first.device_name, first.sm_count, d, id.device_name, id.sm_count));
  }
  return devices;
}

bool same_shape(const testing::ProblemShape& a, const testing::ProblemShape& b) {
  return a.dtype == b.dtype && a.batch == b.batch && a.seqlen_q == b.seqlen_q && a.seqlen_k == b.seqlen_k &&
         a.num_heads == b.num_heads && a.num_heads_kv == b.num_heads_kv && a.head_dim == b.head_dim &&
         a.head_dim_v == b.head_dim_v && a.causal == b.causal && a.out_dtype == b.out_dtype && a.quant == b.quant &&
         a.quant_block_m == b.quant_block_m && a.quant_block_n == b.quant_block_n && a.v_d_major == b.v_d_major;
}

// Times the compiled candidates, one worker thread per device, each with its own context and problem buffers.
void time_candidates(Runtime& runtime, std::vector<Candidate>& candidates, const std::vector<int>& devices,
                     const TuneOptions& options) {
  std::vector<size_t> todo;
  for (size_t i = 0; i < candidates.size(); ++i)
    if (candidates[i].kernel && candidates[i].failed.empty()) todo.push_back(i);
  Progress progress("timing", todo.size());
  std::atomic<size_t> next{0}, worker_index{0};
  std::mutex print_mu;
  std::exception_ptr fatal;
  const auto worker = [&]() noexcept {
    const int device = devices[worker_index++ % devices.size()];
    try {
      ensure_context(device);
    } catch (...) {
      std::lock_guard<std::mutex> lock(print_mu);
      if (!fatal) fatal = std::current_exception();
      return;
    }
    std::optional<testing::AttentionProblem> problem;
    for (size_t n = next++; n < todo.size(); n = next++) {
      Candidate& c = candidates[todo[n]];
      c.device = device;
      run_step(
          c, progress, print_mu,
          [&] {
            const testing::ProblemShape shape = testing::shape_of(*c.tcase);
            if (!problem || !same_shape(problem->shape, shape)) {
              problem.reset();  // free the old device buffers before allocating new ones
              problem.emplace(shape, options.seed);
            }
            const auto loaded = af::load_kernel(runtime, c.tcase->spec);
            problem->run(runtime, loaded.get());
            const CheckResult check =
                problem->check_sampled(c.tcase->spec.block_m, options.check_rows, options.seed);
            c.check_passed = check.passed;
            c.check_failure = check.failure;
            c.timing = problem->time(runtime, loaded.get(), options.warmup, options.iters);
          },
          [&](const std::string& line) {
            fmt::print("{} timed    {}: {:.4f} ms, {:.1f} TFLOPS, check {} (GPU {})\n", line, c.label,
                       c.timing->median_ms, c.timing->tflops, *c.check_passed ? "PASS" : "FAIL: " + c.check_failure,
                       device);
          });
    }
  };
  run_workers(devices.size(), worker);
  if (fatal) std::rethrow_exception(fatal);
}

void compile_candidates(Runtime& runtime, std::vector<Candidate>& candidates, int jobs) {
  std::vector<size_t> todo;
  for (size_t i = 0; i < candidates.size(); ++i)
    if (candidates[i].tcase) todo.push_back(i);
  const size_t workers = compile_jobs(jobs, todo.size());
  fmt::print("compiling {} candidates on {} NVRTC worker{}\n", todo.size(), workers, workers == 1 ? "" : "s");
  Progress progress("compiling", todo.size());
  std::atomic<size_t> next{0};
  std::mutex print_mu;
  run_workers(workers, [&]() noexcept {
    for (size_t n = next++; n < todo.size(); n = next++) {
      Candidate& c = candidates[todo[n]];
      run_step(
          c, progress, print_mu,
          [&] { c.kernel = runtime.prepare(af::make_request(af::make_kernel_config(c.tcase->spec))); },
          [&](const std::string& line) {
            const ResourceReport& r = c.kernel->compiled->report;
            fmt::print("{} compiled {}: {} regs, spill {}/{} B, stack {} B, smem {} B, {} threads ({} {:.0f} ms)\n",
                       line, c.label, reported(r.registers), reported(r.spill_store_bytes),
                       reported(r.spill_load_bytes), reported(r.stack_frame_bytes),
                       c.kernel->request.launch.smem_bytes, c.kernel->request.launch.num_threads,
                       c.kernel->cache_hit ? "hit" : "miss", c.kernel->ms);
          });
    }
  });
}

bool ranked(const Candidate& c) { return c.kernel && c.failed.empty(); }

void print_table(const std::vector<Candidate>& candidates, bool timed) {
  fmt::print("\n{:<4} {:<40} {:>5} {:>11} {:>8} {:>10} {:>9} {:>7}  {}\n", "rank", "candidate", "regs", "spill st/ld",
             "smem", "median ms", "TFLOPS", "check", "kernel");
  int rank = 0;
  for (const Candidate& c : candidates) {
    if (!ranked(c)) continue;
    const ResourceReport& r = c.kernel->compiled->report;
    const std::string spill = reported(r.spill_store_bytes) + "/" + reported(r.spill_load_bytes);
    fmt::print("{:<4} {:<40} {:>5} {:>11} {:>8} {:>10} {:>9} {:>7}  {}\n", ++rank,
               c.builtin && !c.index.empty() ? c.label + " (built-in)" : c.label, reported(r.registers),
               spill, c.kernel->request.launch.smem_bytes,
               timed && c.timing ? fmt::format("{:.4f}", c.timing->median_ms) : "-",
               timed && c.timing ? fmt::format("{:.1f}", c.timing->tflops) : "-",
               c.check_passed ? (*c.check_passed ? "PASS" : "FAIL") : "-", c.kernel->compiled->kernel_name);
  }
  for (const Candidate& c : candidates)
    if (!c.failed.empty()) fmt::print("failed   {}: {}\n", c.label, c.failed);
  for (const Candidate& c : candidates)
    if (!c.skipped.empty()) fmt::print("skipped  {}: {}\n", c.label, c.skipped);
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A file name from a class token: letters, digits and '-', the rest '_'.
std::string slug(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' ? c : '_';
  return out;
}

// The axes --heatmap-axes names, as indices into `axes`; checked right after the sweep is read, so that a typo
// costs no compile and no timing.
std::vector<size_t> heatmap_axes(const std::vector<Axis>& axes, const std::vector<std::string>& wanted) {
  std::vector<std::string> allowed;
  for (const Axis& a : axes) allowed.push_back(json_fields::show(json(a.key)));
  std::vector<size_t> shown;
  for (const std::string& name : wanted) {
    const auto it = std::find_if(axes.begin(), axes.end(), [&](const Axis& a) { return a.key == name; });
    if (it == axes.end())
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("--heatmap-axes: {} is not a key of the sweep; allowed: {}", json_fields::show(json(name)),
                              allowed.empty() ? std::string("none (the sweep has no keys)")
                                              : fmt::format("{}", fmt::join(allowed, ", "))));
    const size_t index = static_cast<size_t>(it - axes.begin());
    if (std::find(shown.begin(), shown.end(), index) != shown.end())
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("--heatmap-axes: {} is given twice; name two different keys of the sweep",
                              json_fields::show(json(name))));
    shown.push_back(index);
  }
  return shown;
}

// The heat map of one class: the axes `wanted` (heatmap_axes), else the two with the most values, each cell the best
// passing candidate over the remaining axes.
std::optional<HeatMap> class_heat_map(const std::vector<Axis>& axes, const std::vector<Candidate>& candidates,
                                      const std::string& kernel_class, const std::vector<size_t>& wanted,
                                      const std::string& subtitle) {
  std::vector<size_t> shown = wanted;
  if (shown.empty()) {
    // The two axes with the most values (block_n x stages, say), ties in key order.
    std::vector<size_t> order;
    for (size_t a = 0; a < axes.size(); ++a)
      if (axes[a].values.size() > 1) order.push_back(a);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return axes[a].values.size() > axes[b].values.size(); });
    shown.assign(order.begin(), order.begin() + std::min<size_t>(2, order.size()));
  }
  if (shown.empty()) return std::nullopt;
  const Axis& ax = axes[shown[0]];
  const Axis* ay = shown.size() > 1 ? &axes[shown[1]] : nullptr;
  HeatMap m;
  m.title = fmt::format("fa3jit tune: {}", kernel_class);
  m.subtitle = subtitle;
  m.x_name = ax.key;
  m.y_name = ay ? ay->key : "";
  for (const json& v : ax.values) m.x_labels.push_back(v.dump());
  if (ay) {
    for (const json& v : ay->values) m.y_labels.push_back(v.dump());
  } else {
    m.y_labels.push_back("");
  }
  const size_t nx = m.x_labels.size(), ny = m.y_labels.size();
  m.values.assign(nx * ny, std::nullopt);
  m.notes.assign(nx * ny, "skip");
  for (const Candidate& c : candidates) {
    if (c.index.empty() || c.kernel_class != kernel_class) continue;
    const size_t i = (ay ? c.index[shown[1]] * nx : 0) + c.index[shown[0]];
    if (!c.failed.empty() && m.notes[i] == "skip") m.notes[i] = "fail";
    if (c.timing && c.check_passed && !*c.check_passed && !m.values[i]) m.notes[i] = "wrong";
    if (c.timing && c.check_passed.value_or(false) && (!m.values[i] || c.timing->tflops > *m.values[i]))
      m.values[i] = c.timing->tflops;
  }
  m.legend = axes.size() > shown.size() ? "tflops; each cell the best over the other axes of the sweep" : "tflops";
  return m;
}

std::string problem_text(const json& problem) {
  std::vector<std::string> parts;
  for (const char* key : {"batch", "seqlen_q", "seqlen_k", "num_heads", "num_heads_kv"})
    if (problem.contains(key)) parts.push_back(fmt::format("{} {}", key, problem.at(key).dump()));
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

int cmd_tune(const GlobalOptions& global, const TuneOptions& options) {
  const json doc = read_sweep(options.sweep_path);
  const std::vector<Axis> axes = sweep_axes(doc["sweep"]);
  const std::vector<size_t> shown_axes = heatmap_axes(axes, options.heatmap_axes);
  const bool gpu = testing::open_gpu(options.gpus.empty() ? 0 : options.gpus.front());
  if (gpu && !doc["base"].contains("problem")) {
    throw Error(ErrorCode::kInvalidSpec,
                fmt::format("{}: base spec has no \"problem\" section; on a GPU every candidate is timed on it",
                            options.sweep_path));
  }
  if (options.apply && !gpu)
    throw Error(ErrorCode::kUnsupported, "--apply needs a GPU: a choice is applied from its measured times");
  // The sweep's own timings must not be steered by an earlier run's choices: each candidate names its kernel.
  Runtime runtime(RuntimeOptions{global.cache_dir, "off"});

  // Every point of the sweep, pruned by the spec validation and the resource budget before anything compiles.
  std::vector<Candidate> candidates;
  std::vector<size_t> index(axes.size(), 0);
  for (bool more = true; more;) {
    Candidate c;
    c.index = index;
    json spec_doc = doc["base"];
    for (size_t a = 0; a < axes.size(); ++a) {
      set_field(spec_doc, axes[a].key, axes[a].values[index[a]]);
      c.label += fmt::format("{}{}={}", a ? " " : "", axes[a].key, axes[a].values[index[a]].dump());
    }
    if (c.label.empty()) c.label = "base";
    more = false;  // next index of the cartesian product (last axis fastest)
    for (size_t a = axes.size(); a-- > 0;) {
      if (++index[a] < axes[a].values.size()) {
        more = true;
        break;
      }
      index[a] = 0;
    }
    try {
      c.tcase = testing::attention_case_from_json(spec_doc);
      c.kernel_class = af::tune_class(c.tcase->spec);
    } catch (const Error& e) {
      c.skipped = e.what();
      fmt::print("skip     {}: {}\n", c.label, c.skipped);
    }
    candidates.push_back(std::move(c));
  }
  // The built-in choice of each class, beside the sweep when the sweep does not contain it.
  std::map<std::string, size_t> first_of_class;
  for (size_t i = 0; i < candidates.size(); ++i)
    if (candidates[i].tcase) first_of_class.emplace(candidates[i].kernel_class, i);
  for (const auto& [kernel_class, first] : first_of_class) {
    const af::Spec builtin = af::builtin_spec(candidates[first].tcase->spec);
    bool found = false;
    for (Candidate& c : candidates)
      if (c.tcase && c.kernel_class == kernel_class && af::canonical_string(c.tcase->spec) == af::canonical_string(builtin))
        c.builtin = found = true;
    if (found) continue;
    Candidate c;
    c.label = "built-in (" + af::spec_summary(builtin) + ")";
    c.tcase = candidates[first].tcase;
    c.tcase->spec = builtin;
    c.kernel_class = kernel_class;
    c.builtin = true;
    candidates.push_back(std::move(c));
  }

  compile_candidates(runtime, candidates, options.jobs);
  std::vector<int> devices;
  if (gpu) {
    devices = timing_devices(options);
    fmt::print("timing on {} GPU{} ({})\n", devices.size(), devices.size() == 1 ? "" : "s", fmt::join(devices, ", "));
    time_candidates(runtime, candidates, devices, options);
  }

  // A wrong kernel must never rank first: failed checks go below every passing candidate.
  auto key = [gpu](const Candidate& c) {
    if (gpu) {
      const bool ok = c.check_passed.value_or(false);
      return std::make_tuple(ok ? 0 : 1, c.timing ? -c.timing->tflops : 0.0, 0.0);
    }
    const ResourceReport& r = c.kernel->compiled->report;
    const double regs = r.registers < 0 ? std::numeric_limits<double>::max() : r.registers;
    return std::make_tuple(0, regs,
                           static_cast<double>(std::max(0, r.spill_store_bytes) + std::max(0, r.spill_load_bytes)));
  };
  std::stable_sort(candidates.begin(), candidates.end(), [&](const Candidate& a, const Candidate& b) {
    if (ranked(a) != ranked(b)) return ranked(a);
    if (!ranked(a)) return false;
    return key(a) < key(b);
  });
  if (!gpu) fmt::print("\nno GPU found: candidates compiled only, sorted by registers\n");
  print_table(candidates, gpu);
  if (std::none_of(candidates.begin(), candidates.end(), ranked))
    throw Error(ErrorCode::kInvalidSpec, fmt::format("no candidate of {} could be built", options.sweep_path));
  if (!gpu) return 0;

  // One record per class: every candidate, the winner (the best passing one) and the built-in choice's time.
  const std::optional<std::string> db_path =
      options.db.empty() ? tune_db_path(runtime.cache().directory()) : std::optional<std::string>(options.db);
  if (!db_path) {
    fmt::print("\nno tuning database (FA3JIT_TUNE_DB=off and no --db): nothing recorded\n");
    return 0;
  }
  const TuneIdentity identity = tune_identity(devices.front());
  std::vector<TuneRecord> records;
  for (const auto& entry : first_of_class) {
    const std::string& kernel_class = entry.first;
    TuneRecord r;
    r.kind = af::kTuneKind;
    r.kernel_class = kernel_class;
    r.device = identity;
    r.created = utc_now();
    const Candidate* winner = nullptr;
    for (const Candidate& c : candidates) {
      if (c.kernel_class != kernel_class) continue;
      json entry{{"label", c.label}, {"builtin", c.builtin}};
      if (c.tcase) entry["choice"] = af::tune_choice(c.tcase->spec);
      if (!c.skipped.empty()) entry["skipped"] = c.skipped;
      if (!c.failed.empty()) entry["failed"] = c.failed;
      if (c.timing) {
        entry["median_ms"] = c.timing->median_ms;
        entry["tflops"] = c.timing->tflops;
        entry["check"] = c.check_passed.value_or(false) ? "pass" : "fail: " + c.check_failure;
        entry["gpu"] = c.device;
      }
      if (c.kernel) entry["registers"] = c.kernel->compiled->report.registers;
      r.candidates.push_back(std::move(entry));
      if (c.builtin && c.timing && c.check_passed.value_or(false)) r.builtin_tflops = c.timing->tflops;
      if (!winner && ranked(c) && c.timing && c.check_passed.value_or(false)) winner = &c;  // sorted: the first
    }
    if (!winner) {
      fmt::print("\n{}: no candidate passed its check; nothing recorded\n", kernel_class);
      continue;
    }
    r.problem = doc["base"].value("problem", json::object());
    for (size_t a = 0; a < axes.size(); ++a)
      if (axes[a].key.rfind("problem.", 0) == 0 && !winner->index.empty())
        set_field(r.problem, axes[a].key.substr(8), axes[a].values[winner->index[a]]);
    r.choice = af::tune_choice(winner->tcase->spec);
    r.label = winner->label;
    r.tflops = winner->timing->tflops;
    records.push_back(std::move(r));
  }
  TuneDb::update(*db_path, [&](TuneDb& db) {
    for (const TuneRecord& r : records) db.add(r, options.apply);
  });
  fmt::print("\nrecorded in {} ({} {} SMs, driver {}, NVRTC {}, generator {}):\n", *db_path, identity.device_name,
             identity.sm_count, identity.driver_version, identity.nvrtc_version, identity.generator_version);
  for (const TuneRecord& r : records) {
    const std::string gain =
        r.builtin_tflops > 0 ? fmt::format(", {:.3f}x the built-in {:.1f}", r.tflops / r.builtin_tflops, r.builtin_tflops)
                             : "";
    fmt::print("  {}: {} at {:.1f} TFLOPS{}{}\n", r.kernel_class, r.label, r.tflops, gain,
               options.apply ? " -- applied: the runtime now picks it on this kind of device" : "");
  }
  if (!options.apply && !records.empty())
    fmt::print("run again with --apply to make these the runtime's choices\n");

  // The heat maps, beside the database.
  const std::filesystem::path dir = std::filesystem::path(*db_path).parent_path() / "heatmaps";
  for (const TuneRecord& r : records) {
    const std::string subtitle = fmt::format("{} | {} ({} sms)", problem_text(r.problem), identity.device_name,
                                             identity.sm_count);
    const std::optional<HeatMap> map = class_heat_map(axes, candidates, r.kernel_class, shown_axes, subtitle);
    if (!map) continue;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::string name = slug(fmt::format("{}__{}", r.kernel_class, problem_text(r.problem)));
    const std::string png = (dir / (name + ".png")).string();
    write_heat_map_png(*map, png);
    fmt::print("heat map: {}\n", png);
  }
  return 0;
}

int cmd_tune_show(const GlobalOptions& global, const TuneShowOptions& options) {
  std::string path = options.db;
  if (path.empty()) {
    const std::optional<std::string> p =
        tune_db_path(global.cache_dir.empty() ? default_cache_dir() : global.cache_dir);
    if (!p) throw Error(ErrorCode::kInvalidArgument, "no tuning database: FA3JIT_TUNE_DB=off and no --db given");
    path = *p;
  }
  const TuneDb db = TuneDb::load(path);
  if (options.json) {
    fmt::print("{}\n", db.to_json().dump(1));
    return 0;
  }
  fmt::print("{}: {} record{}\n", path, db.records().size(), db.records().size() == 1 ? "" : "s");
  for (const TuneRecord& r : db.records()) {
    const bool stale = r.device.generator_version != kGeneratorVersion || r.device.nvrtc_version != nvrtc_version_string();
    fmt::print("\n{} {}\n", r.applied ? (stale ? "[applied, stale]" : "[applied]") : (stale ? "[stale]" : "[recorded]"),
               r.kernel_class);
    fmt::print("  device   {} ({} SMs), driver {}, NVRTC {}, generator {}\n", r.device.device_name, r.device.sm_count,
               r.device.driver_version, r.device.nvrtc_version, r.device.generator_version);
    fmt::print("  problem  {}\n", problem_text(r.problem));
    fmt::print("  winner   {}: {:.1f} TFLOPS", r.label, r.tflops);
    if (r.builtin_tflops > 0) fmt::print(" ({:.3f}x the built-in {:.1f})", r.tflops / r.builtin_tflops, r.builtin_tflops);
    fmt::print("\n  choice   {}\n  measured {} ({} candidates)\n", r.choice.dump(), r.created, r.candidates.size());
  }
  if (std::any_of(db.records().begin(), db.records().end(), [](const TuneRecord& r) {
        return r.device.generator_version != kGeneratorVersion;
      }))
    fmt::print("\nstale: measured with another generator or NVRTC than this build's ({}, NVRTC {}); the runtime "
               "ignores those records\n",
               kGeneratorVersion, nvrtc_version_string());
  return 0;
}

}  // namespace fa3jit::cli

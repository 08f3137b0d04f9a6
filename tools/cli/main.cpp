// fa3jit command-line tool: emit, compile, run, bench and tune attention kernels, and manage the cubin cache.
//
// Exit codes: 0 success; 1 a correctness check failed (`run`); 2 any error (bad spec or argument, compile or
// driver failure, I/O, including a failed write to stdout), printed as "fa3jit: error: <message>" on stderr.
// The tool never aborts.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "fa3jit/fa3jit.h"
#include "jit/emit_util.h"
#include "core/error.h"
#include "jit/compiler.h"
#include "core/log.h"
#include "tools/cli/commands.h"

namespace {

using namespace fa3jit::cli;

std::string version_string() {
  std::string nvrtc;
  try {
    nvrtc = fa3jit::nvrtc_version_string();
  } catch (const std::exception&) {
    nvrtc = "unavailable";
  }
  return fmt::format("fa3jit {} (generator {}, NVRTC {}, target {})", fa3jit_version(), fa3jit::kGeneratorVersion,
                     nvrtc, fa3jit::kTargetArch);
}

void add_cache_dir(CLI::App* app, GlobalOptions& global) {
  app->add_option("--cache-dir", global.cache_dir,
                  "cubin cache directory (default: $FA3JIT_CACHE_DIR, else $XDG_CACHE_HOME/fa3jit, else "
                  "~/.cache/fa3jit)");
}

void add_gpu_options(CLI::App* app, int& iters, int& warmup, uint64_t& seed, int& device) {
  app->add_option("--iters", iters, "timed runs; the median is reported (>= 30)")->capture_default_str()
      ->check(CLI::Range(30, 1000000));
  app->add_option("--warmup", warmup, "untimed runs before timing")->capture_default_str()->check(CLI::Range(0, 1000000));
  // CLI11 reads an unsigned option with strtoull, which wraps "-5" to 2^64 - 5: a sign is refused first.
  const CLI::Validator unsigned_integer(
      [](std::string& value) {
        const size_t first = value.find_first_not_of(" \t");
        return first != std::string::npos && (value[first] == '-' || value[first] == '+')
                   ? "\"" + value + "\" is not allowed; expected an integer in [0, 2^64 - 1] without a sign"
                   : std::string();
      },
      "UINT64");
  app->add_option("--seed", seed, "seed of the random inputs (FA3 Table 3 distribution), >= 0")->capture_default_str()
      ->check(unsigned_integer);
  app->add_option("--device", device, "CUDA device ordinal")->capture_default_str()->check(CLI::NonNegativeNumber);
}

// stdout is buffered, so a write to a full disk, /dev/full or a broken pipe usually fails only when it is
// flushed: without this check the output would be lost and the exit status still 0.
bool stdout_failed() { return std::fflush(stdout) != 0 || std::ferror(stdout) != 0; }

int stdout_error() {
  const int err = errno;
  fmt::print(stderr, "fa3jit: error: cannot write to standard output{}\n",
             err != 0 ? fmt::format(": {}", std::strerror(err)) : std::string());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"JIT generator of FlashAttention-3-class attention kernels for NVIDIA Hopper (sm_90a).\n"
               "Exit codes: 0 ok, 1 correctness check failed, 2 error.",
               "fa3jit"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::function<std::string()>(version_string));
  GlobalOptions global;
  bool verbose = false;
  add_cache_dir(&app, global);
  app.add_flag("-v,--verbose", verbose, "log cold compiles and cache activity (same as FA3JIT_LOG=info)");

  EmitOptions emit_opts;
  CLI::App* emit = app.add_subcommand("emit", "write the generated CUDA source of a spec");
  emit->add_option("spec", emit_opts.spec_path, "spec JSON file")->required();
  emit->add_option("-o,--output", emit_opts.output_path, "output file (default: stdout)");

  CompileOptions compile_opts;
  CLI::App* compile = app.add_subcommand("compile", "compile a spec (or load it from the cache) and print its resources");
  compile->add_option("spec", compile_opts.spec_path, "spec JSON file")->required();
  compile->add_option("--ptx", compile_opts.ptx_path, "also write the PTX to this file");
  add_cache_dir(compile, global);

  RunOptions run_opts;
  CLI::App* run = app.add_subcommand(
      "run", "emit, compile, run on the GPU, check against the CPU reference and time (needs \"problem\")");
  run->add_option("spec", run_opts.spec_path, "spec JSON file")->required();
  run->add_option("--rows", run_opts.check_rows,
                  "random rows checked, besides the first and last m-block of one head")->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{100000000}));
  add_gpu_options(run, run_opts.iters, run_opts.warmup, run_opts.seed, run_opts.device);
  add_cache_dir(run, global);

  RunOptions bench_opts;
  CLI::App* bench = app.add_subcommand("bench", "time a spec's problem on the GPU, one line (or --json)");
  bench->add_option("spec", bench_opts.spec_path, "spec JSON file")->required();
  bench->add_flag("--json", bench_opts.json, "print the result as one JSON object");
  add_gpu_options(bench, bench_opts.iters, bench_opts.warmup, bench_opts.seed, bench_opts.device);
  add_cache_dir(bench, global);

  TuneOptions tune_opts;
  CLI::App* tune = app.add_subcommand(
      "tune",
      "compile every point of a sweep space on parallel NVRTC workers, time and check it on the GPUs, rank it, and "
      "record the run (with a PNG heat map) in the tuning database; --apply makes each class's winner the kernel "
      "the runtime picks on this kind of device.\n"
      "SWEEP.json: {\"base\": {spec}, \"sweep\": {\"tile.block_n\": [64, 128], \"stages\": [2, 3]}}\n"
      "Database: --db, else FA3JIT_TUNE_DB, else <cache dir>/tune-db.json; `fa3jit tune show` lists it.");
  tune->add_option("sweep", tune_opts.sweep_path, "sweep JSON file");
  tune->add_option("--rows", tune_opts.check_rows, "random rows checked per candidate")->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{100000000}));
  add_gpu_options(tune, tune_opts.iters, tune_opts.warmup, tune_opts.seed, tune_opts.device);
  tune->add_option("--gpus", tune_opts.gpus, "GPUs to time on, one worker each (default: every visible GPU)")
      ->delimiter(',')->check(CLI::Range(0, 63));
  tune->add_option("-j,--jobs", tune_opts.jobs, "parallel NVRTC compiles (default: hardware threads, 1 GiB each)")
      ->check(CLI::Range(0, 256));
  tune->add_flag("--apply", tune_opts.apply, "make each class's winner the runtime's choice on this kind of device");
  tune->add_option("--db", tune_opts.db, "tuning database file");
  tune->add_option("--heatmap-axes", tune_opts.heatmap_axes, "sweep keys of the heat map's x and y axes")
      ->delimiter(',')->expected(1, 2);
  add_cache_dir(tune, global);
  TuneShowOptions tune_show_opts;
  CLI::App* tune_show = tune->add_subcommand("show", "list the tuning database's records");
  tune_show->add_option("--db", tune_show_opts.db, "tuning database file");
  tune_show->add_flag("--json", tune_show_opts.json, "print the database as JSON");
  add_cache_dir(tune_show, global);

  CLI::App* cache = app.add_subcommand("cache", "inspect or clear the cubin cache");
  cache->require_subcommand(1);
  CLI::App* cache_list = cache->add_subcommand("list", "list cache entries");
  CLI::App* cache_clear = cache->add_subcommand("clear", "remove every cache entry");
  WarmOptions warm_opts;
  CLI::App* cache_warm = cache->add_subcommand(
      "warm",
      "compile specs into the on-disk cache ahead of time (SPEC.json files or directories; a serving manifest, "
      "kind \"serving_manifest\", stands for every kernel its models' calls run, tuned tiles included).\n"
      "Exit 0 when every spec's kernel is on disk; 2 when any spec fails, or when the cache directory is not "
      "usable and the kernels could only be kept in memory (they are lost when the command exits).");
  cache_warm->add_option("paths", warm_opts.paths, "spec or manifest files, or directories of *.json files")
      ->required();
  cache_warm->add_option("-j,--jobs", warm_opts.jobs, "parallel compiles (default: hardware threads)")
      ->check(CLI::Range(0, 256));
  cache_warm->add_option("--db", warm_opts.db,
                         "tuning database whose tuned tiles a manifest's calls also get; one named here must exist "
                         "and be valid (default: FA3JIT_TUNE_DB, else <cache dir>/tune-db.json; \"off\": none)");
  add_cache_dir(cache_warm, global);
  add_cache_dir(cache, global);
  add_cache_dir(cache_list, global);
  add_cache_dir(cache_clear, global);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help, version or the usage error
    return rc == 0 ? 0 : 2;
  }

  try {
    if (verbose) fa3jit::set_log_level(fa3jit::LogLevel::kInfo);
    int rc = -1;
    if (*emit) rc = cmd_emit(global, emit_opts);
    else if (*compile) rc = cmd_compile(global, compile_opts);
    else if (*run) rc = cmd_run(global, run_opts);
    else if (*bench) rc = cmd_bench(global, bench_opts);
    else if (*tune_show) rc = cmd_tune_show(global, tune_show_opts);
    else if (*tune) {
      if (tune_opts.sweep_path.empty()) {
        fmt::print(stderr, "fa3jit: error: tune needs a SWEEP.json file (or `tune show`); see fa3jit tune --help\n");
        return 2;
      }
      // --device (the option every GPU command has) is the one timing GPU unless --gpus names them.
      if (tune_opts.gpus.empty() && tune->get_option("--device")->count() > 0) tune_opts.gpus = {tune_opts.device};
      rc = cmd_tune(global, tune_opts);
    }
    else if (*cache_list) rc = cmd_cache_list(global);
    else if (*cache_clear) rc = cmd_cache_clear(global);
    else if (*cache_warm) rc = cmd_cache_warm(global, warm_opts);
    if (rc < 0) {
      fmt::print(stderr, "fa3jit: error: no command given; see fa3jit --help\n");
      return 2;
    }
    errno = 0;
    return stdout_failed() ? stdout_error() : rc;
  } catch (const fa3jit::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "fa3jit: error: {}\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    fmt::print(stderr, "fa3jit: error: out of host memory (is the problem too large?)\n");
    return 2;
  } catch (const std::exception& e) {
    // fmt::print throws when a write to stdout fails: that is an I/O error, not a bug.
    if (stdout_failed()) return stdout_error();
    fmt::print(stderr, "fa3jit: error: internal: {}\n", e.what());
    return 2;
  }
}

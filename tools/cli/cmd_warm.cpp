// `fa3jit cache warm`: compile specs into the cubin cache ahead of time, several at once.
// NVRTC compiles independent programs concurrently, and the cache compiles each key once even when two
// specs resolve to the same kernel (cubin_cache.h).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "jit/cubin_cache.h"
#include "jit/family.h"
#include "tools/cli/commands.h"

namespace fa3jit::cli {
namespace {

std::vector<std::string> expand(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      std::vector<std::string> found;
      for (const auto& entry : std::filesystem::directory_iterator(path, ec))
        if (entry.is_regular_file() && entry.path().extension() == ".json") found.push_back(entry.path().string());
      if (ec) throw Error(ErrorCode::kIoError, fmt::format("cannot list directory {}: {}", path, ec.message()));
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(path);
    }
  }
  return files;
}

// The result line of one spec. Every exception a compile can raise (not only fa3jit::Error: std::bad_alloc,
// an exception from a library) becomes this spec's error line: one thrown out of a worker thread would
// terminate the process.
struct Outcome {
  bool ok = false;
  std::string line;
};

Outcome warm_one(Runtime& runtime, const std::string& file) {
  Outcome out;
  try {
    const SpecDocument document = load_spec_document(file);  // its errors name the file
    PreparedKernel k;
    try {
      k = runtime.prepare(request_for(document));
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("{}: {}", file, e.what()));
    }
    const CubinCache& cache = runtime.cache();
    if (!cache.persistent()) {
      out.line = fmt::format("error {}: compiled, but into memory only (no usable cache directory)", file);
    } else if (!cache.stored(k.key)) {
      out.line = fmt::format("error {}: compiled, but its entry could not be written to {} (see the warning above)",
                             file, cache.directory());
    } else {
      out.ok = true;
      out.line = fmt::format("{:<5} {:>8.1f} ms  {}  {}", k.cache_hit ? "hit" : "built", k.ms,
                             k.compiled->kernel_name, file);
    }
  } catch (const Error& e) {
    out.line = fmt::format("error {}", e.what());
  } catch (const std::bad_alloc&) {
    out.line = fmt::format("error {}: out of host memory", file);
  } catch (const std::exception& e) {
    out.line = fmt::format("error {}: internal: {}", file, e.what());
  } catch (...) {
    out.line = fmt::format("error {}: internal: an exception of unknown type", file);
  }
  return out;
}

}  // namespace

int cmd_cache_warm(const GlobalOptions& global, const WarmOptions& options) {
  const std::vector<std::string> files = expand(options.paths);
  if (files.empty()) throw Error(ErrorCode::kIoError, "cache warm: no spec files found in the given paths");
  Runtime runtime(RuntimeOptions{global.cache_dir});
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  const size_t jobs = std::min<size_t>(files.size(), options.jobs > 0 ? options.jobs : hardware);
  std::atomic<size_t> next{0};
  std::atomic<size_t> failures{0};
  std::mutex print_mu;
  auto worker = [&]() noexcept {
    for (size_t i = next++; i < files.size(); i = next++) {
      Outcome outcome;
      try {
        outcome = warm_one(runtime, files[i]);
      } catch (...) {  // only when even the error line could not be built (host memory exhausted)
        outcome = Outcome{};
      }
      if (!outcome.ok) ++failures;
      try {
        std::lock_guard<std::mutex> lock(print_mu);
        if (outcome.line.empty()) {
          std::fputs("error (a spec failed; out of host memory for its message)\n", stdout);
        } else {
          fmt::print("{}\n", outcome.line);
        }
      } catch (...) {
        // A failed write to stdout sets its error flag; main() reports it and exits 2.
      }
    }
  };
  // The calling thread is one of the workers. A thread that cannot be started (a process or memory limit)
  // means fewer workers, never an abort: threads already running are joined below either way.
  std::vector<std::thread> threads;
  threads.reserve(jobs);
  for (size_t t = 1; t < jobs; ++t) {
    try {
      threads.emplace_back(worker);
    } catch (const std::exception& e) {
      fmt::print(stderr, "fa3jit: warning: could start only {} of {} worker threads ({}); compiling with {}\n",
                 threads.size() + 1, jobs, e.what(), threads.size() + 1);
      break;
    }
  }
  worker();
  for (std::thread& t : threads) t.join();
  const CubinCache& cache = runtime.cache();
  const size_t warmed = files.size() - failures;
  fmt::print("{} spec{} warmed into {}, {} failed\n", warmed, warmed == 1 ? "" : "s",
             cache.persistent() ? cache.directory() : std::string("memory only"), failures.load());
  if (!cache.persistent()) {
    fmt::print("nothing was written to disk: the cache directory{} is not usable (see the warning above), so "
               "the compiled kernels are lost when this command exits\n",
               cache.directory().empty() ? "" : " " + cache.directory());
  }
  return failures ? 2 : 0;
}

}  // namespace fa3jit::cli

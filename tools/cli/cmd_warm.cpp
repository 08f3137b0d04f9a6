// `fa3jit cache warm`: compile specs into the cubin cache ahead of time, several at once.
// NVRTC compiles independent programs concurrently, and the cache compiles each key once even when two
// specs resolve to the same kernel (cubin_cache.h).
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
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

}  // namespace

int cmd_cache_warm(const GlobalOptions& global, const WarmOptions& options) {
  const std::vector<std::string> files = expand(options.paths);
  if (files.empty()) throw Error(ErrorCode::kIoError, "cache warm: no spec files found in the given paths");
  Runtime runtime(RuntimeOptions{global.cache_dir});
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  const size_t jobs = std::min<size_t>(files.size(), options.jobs > 0 ? options.jobs : hardware);
  std::atomic<size_t> next{0};
  std::atomic<int> failures{0};
  std::mutex print_mu;
  auto worker = [&] {
    for (size_t i = next++; i < files.size(); i = next++) {
      std::string line;
      try {
        const SpecDocument document = load_spec_document(files[i]);
        const PreparedKernel k = runtime.prepare(request_for(document));
        line = fmt::format("{:<5} {:>8.1f} ms  {}  {}", k.cache_hit ? "hit" : "built", k.ms,
                           k.compiled->kernel_name, files[i]);
      } catch (const Error& e) {
        ++failures;
        line = fmt::format("error {}", e.what());
      }
      std::lock_guard<std::mutex> lock(print_mu);
      fmt::print("{}\n", line);
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 0; t < jobs; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  fmt::print("{} spec{} warmed into {}, {} failed\n", files.size() - failures, files.size() == 1 ? "" : "s",
             runtime.cache().persistent() ? runtime.cache().directory() : std::string("memory only"),
             failures.load());
  return failures ? 2 : 0;
}

}  // namespace fa3jit::cli

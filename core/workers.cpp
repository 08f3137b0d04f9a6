#include "core/workers.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace fa3jit {

size_t run_workers(size_t jobs, const std::function<void()>& worker) noexcept {
  std::vector<std::thread> threads;
  try {
    threads.reserve(jobs > 1 ? jobs - 1 : 0);
    for (size_t t = 1; t < jobs; ++t) threads.emplace_back(worker);
  } catch (...) {
    // std::system_error (no thread) or bad_alloc: go on with the threads that started.
  }
  worker();
  for (std::thread& t : threads) t.join();
  return threads.size() + 1;
}

size_t run_deferring(size_t count, size_t jobs, const std::function<bool(size_t)>& busy,
                     const std::function<void(size_t)>& work, const std::function<bool()>& stop) noexcept {
  std::mutex mu;
  std::vector<size_t> deferred;
  size_t missing = 0;
  // One pass over order[0, n): items taken from a shared counter; the first pass defers the busy ones.
  auto pass = [&](const size_t* order, size_t n, bool defer_busy) {
    if (n == 0) return;
    std::atomic<size_t> next{0};
    const size_t asked = std::clamp<size_t>(jobs, 1, n);
    const size_t ran = run_workers(asked, [&]() noexcept {
      for (size_t k = next++; k < n && !stop(); k = next++) {
        const size_t i = order == nullptr ? k : order[k];
        if (defer_busy && busy(i)) {
          try {
            std::lock_guard<std::mutex> lock(mu);
            deferred.push_back(i);
            continue;
          } catch (...) {
            // No memory to remember it: run it now instead (waiting on the other process's compile).
          }
        }
        work(i);
      }
    });
    missing = std::max(missing, asked - std::min(asked, ran));
  };
  pass(nullptr, count, true);
  const std::vector<size_t> second = std::move(deferred);
  pass(second.data(), second.size(), false);
  return missing;
}

size_t background_compile_jobs() noexcept {
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  return std::clamp<size_t>(hardware / 2, 1, 8);
}

}  // namespace fa3jit

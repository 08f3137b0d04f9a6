#include "core/workers.h"

#include <algorithm>
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

size_t background_compile_jobs() noexcept {
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  return std::clamp<size_t>(hardware / 2, 1, 8);
}

}  // namespace fa3jit

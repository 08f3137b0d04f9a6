// core/workers.h: the bounded thread pool the kernel warm-ups compile on.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/workers.h"

using namespace fa3jit;

TEST_CASE("run_workers runs its workers at the same time, the caller among them, and joins them", "[workers]") {
  for (size_t jobs : {1, 2, 5}) {
    INFO("jobs " << jobs);
    std::atomic<size_t> arrived{0};
    std::atomic<size_t> saw_all{0};
    std::atomic<int> on_caller{0};
    const std::thread::id caller = std::this_thread::get_id();
    const size_t ran = run_workers(jobs, [&]() noexcept {
      if (std::this_thread::get_id() == caller) ++on_caller;
      ++arrived;
      // Each worker waits for all of them: only workers that run concurrently get past this.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (arrived < jobs && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      if (arrived == jobs) ++saw_all;
    });
    CHECK(ran == jobs);
    CHECK(arrived == jobs);  // all joined before run_workers returned
    CHECK(saw_all == jobs);
    CHECK(on_caller == 1);
  }
  CHECK(run_workers(0, [] {}) == 1);  // the caller always works
}

TEST_CASE("background_compile_jobs leaves half the hardware threads to the server, 1 to 8", "[workers]") {
  const size_t jobs = background_compile_jobs();
  CHECK(jobs >= 1);
  CHECK(jobs <= 8);
  const unsigned hardware = std::thread::hardware_concurrency();
  if (hardware >= 2) CHECK(jobs <= hardware / 2);
}

TEST_CASE("run_deferring runs every item once, the busy ones after all the others", "[workers]") {
  for (size_t jobs : {1, 3}) {
    INFO("jobs " << jobs);
    constexpr size_t kCount = 10;
    std::atomic<int> runs[kCount] = {};
    std::atomic<size_t> done{0};
    std::atomic<size_t> others_done_when_busy_ran{kCount};
    auto busy = [](size_t i) noexcept { return i == 0 || i == 7; };
    const size_t missing = run_deferring(
        kCount, jobs, busy,
        [&](size_t i) noexcept {
          ++runs[i];
          if (busy(i)) {
            const size_t seen = done.load();
            size_t low = others_done_when_busy_ran.load();
            while (seen < low && !others_done_when_busy_ran.compare_exchange_weak(low, seen)) {}
          }
          ++done;
        },
        []() noexcept { return false; });
    CHECK(missing == 0);  // threads start here
    for (size_t i = 0; i < kCount; ++i) CHECK(runs[i] == 1);
    // The second pass starts once the first has joined: every non-busy item was done before any busy one ran.
    CHECK(others_done_when_busy_ran == kCount - 2);
  }
  // stop(): no item is taken once it is true (here after the third).
  std::atomic<size_t> ran{0};
  run_deferring(
      100, 1, [](size_t i) noexcept { return i % 2 == 0; }, [&](size_t) noexcept { ++ran; },
      [&]() noexcept { return ran >= 3; });
  CHECK(ran == 3);
  CHECK(run_deferring(0, 4, [](size_t) noexcept { return false; }, [](size_t) noexcept {}, []() noexcept {
          return false;
        }) == 0);
}

// Runs a function on a thread with a small stack (256 KiB, as a serving process's worker threads may have), so
// that a test of input that could recurse without bound fails by crashing instead of passing on the main
// thread's 8 MiB.
#pragma once

#include <pthread.h>

#include <cstddef>
#include <exception>
#include <functional>
#include <stdexcept>

namespace fa3jit::test {

inline constexpr size_t kSmallStackBytes = 256 * 1024;

/// Runs `body` on a new thread with a `stack_bytes` stack and waits for it; an exception it throws is rethrown
/// here.
inline void run_on_small_stack(const std::function<void()>& body, size_t stack_bytes = kSmallStackBytes) {
  struct Job {
    const std::function<void()>* body;
    std::exception_ptr error;
  } job{&body, nullptr};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, stack_bytes);
  pthread_t thread;
  const int rc = pthread_create(
      &thread, &attr,
      [](void* arg) -> void* {
        auto* j = static_cast<Job*>(arg);
        try {
          (*j->body)();
        } catch (...) {
          j->error = std::current_exception();
        }
        return nullptr;
      },
      &job);
  pthread_attr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("pthread_create failed");
  pthread_join(thread, nullptr);
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace fa3jit::test

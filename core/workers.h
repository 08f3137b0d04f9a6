// A bounded pool of threads for CPU-bound work items (kernel compiles), the calling thread among them.
#pragma once

#include <cstddef>
#include <functional>

namespace fa3jit {

/// Runs `worker` on `jobs` threads (at least 1), the calling thread included, and joins them. A thread that cannot
/// be started (a process or memory limit) means fewer workers, never an abort or an exception: returns how many
/// ran. `worker` must not throw; it usually takes items from a shared atomic counter until none are left.
size_t run_workers(size_t jobs, const std::function<void()>& worker) noexcept;

/// Compile workers for warming kernels inside a process that also serves: half the hardware threads, 1 to 8, so a
/// background warm-up leaves the serving threads CPU to run on.
size_t background_compile_jobs() noexcept;

}  // namespace fa3jit

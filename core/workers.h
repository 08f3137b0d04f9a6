// A bounded pool of threads for CPU-bound work items (kernel compiles), the calling thread among them.
#pragma once

#include <cstddef>
#include <functional>

namespace fa3jit {

/// Runs `worker` on `jobs` threads (at least 1), the calling thread included, and joins them. A thread that cannot
/// be started (a process or memory limit) means fewer workers, never an abort or an exception: returns how many
/// ran. `worker` must not throw; it usually takes items from a shared atomic counter until none are left.
size_t run_workers(size_t jobs, const std::function<void()>& worker) noexcept;

/// Runs work(i) for every i in [0, count) on up to `jobs` workers (run_workers), in two passes: the first leaves
/// every i for which busy(i) is true (its kernel is being compiled by another process sharing the cache directory)
/// for the second, which runs them after all the others, by then mostly published by that process. So processes
/// warming the same kernels split them instead of waiting on each other. Each i runs exactly once. Once stop()
/// is true no further item is taken. busy and work must not throw. Returns the worker threads that could not be started
/// in the pass that lacked the most (a pass asks for min(jobs, its items), at least 1): 0 when every pass had them all.
size_t run_deferring(size_t count, size_t jobs, const std::function<bool(size_t)>& busy,
                     const std::function<void(size_t)>& work, const std::function<bool()>& stop) noexcept;

/// Compile workers for warming kernels inside a process that also serves: half the hardware threads, 1 to 8, so a
/// background warm-up leaves the serving threads CPU to run on.
size_t background_compile_jobs() noexcept;

}  // namespace fa3jit

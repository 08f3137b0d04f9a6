// fa3jit logging (see log.h).
#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include <fmt/format.h>

namespace fa3jit {
namespace {

// -1 = not decided yet; otherwise the LogLevel value.
std::atomic<int> g_level{-1};
std::mutex g_mu;  // guards g_sink and serialises writes so lines never interleave
LogSink g_sink;

LogLevel level_from_env() {
  const char* env = std::getenv("FA3JIT_LOG");
  if (env == nullptr || *env == '\0') return LogLevel::kWarn;
  const std::string_view v(env);
  if (v == "quiet") return LogLevel::kQuiet;
  if (v == "warn") return LogLevel::kWarn;
  if (v == "info") return LogLevel::kInfo;
  if (v == "debug") return LogLevel::kDebug;
  // A typo must not silently hide messages nor abort the host process: say so once and use the default.
  std::fputs(fmt::format("[fa3jit] FA3JIT_LOG='{}' is not one of quiet|warn|info|debug; using warn\n", v).c_str(),
             stderr);
  return LogLevel::kWarn;
}

}  // namespace

LogLevel log_level() {
  int lv = g_level.load(std::memory_order_acquire);
  if (lv < 0) {
    // Several threads may race here; they all compute the same value, the first store wins.
    int expected = -1;
    const int fresh = static_cast<int>(level_from_env());
    g_level.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel);
    lv = g_level.load(std::memory_order_acquire);
  }
  return static_cast<LogLevel>(lv);
}

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level), std::memory_order_release); }

bool log_enabled(LogLevel level) {
  return level != LogLevel::kQuiet && static_cast<int>(level) <= static_cast<int>(log_level());
}

void log(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_sink) {
    g_sink(level, message);
    return;
  }
  // One fputs per line: stderr is unbuffered, so a single call keeps the line whole.
  const std::string line = fmt::format("[fa3jit] {}\n", message);
  std::fputs(line.c_str(), stderr);
}

LogSink set_log_sink(LogSink sink) {
  std::lock_guard<std::mutex> lock(g_mu);
  LogSink previous = std::move(g_sink);
  g_sink = std::move(sink);
  return previous;
}

}  // namespace fa3jit

// fa3jit logging: the project's one logger. Quiet by default (warnings only), lines go to stderr.
//
// Level from the environment variable FA3JIT_LOG = quiet | warn | info | debug (default warn), read once
// on first use. Every line is prefixed "[fa3jit] ". Callers format with fmt and should test
// log_enabled() first when the message is costly to build.
#pragma once

#include <functional>
#include <string>

namespace fa3jit {

enum class LogLevel { kQuiet, kWarn, kInfo, kDebug };

/// Current level: set_log_level() if called, else FA3JIT_LOG, else kWarn. An unknown FA3JIT_LOG value
/// falls back to kWarn and says so once on stderr.
LogLevel log_level();

/// Overrides FA3JIT_LOG for the rest of the process (tests, the CLI's --verbose).
void set_log_level(LogLevel level);

/// True when a message at `level` would be emitted (kQuiet is never emitted).
bool log_enabled(LogLevel level);

/// Emits `message` as one line "[fa3jit] <message>" when `level` is enabled. Thread-safe: lines from
/// concurrent threads never interleave.
void log(LogLevel level, const std::string& message);

/// Receives every emitted line (without prefix) instead of stderr; an empty function restores stderr.
/// Returns the previous sink. Meant for tests and for embedding hosts with their own logger. The sink is
/// called under the logger's lock, one line at a time, and must not call log() itself.
using LogSink = std::function<void(LogLevel, const std::string&)>;
LogSink set_log_sink(LogSink sink);

}  // namespace fa3jit

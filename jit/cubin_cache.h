// fa3jit cubin cache: content-addressed, atomic, verified, on disk with an in-memory fallback.
//
// Key = SHA-256 over the canonical inputs only: canonical kernel spec, generated source, compile flags,
// NVRTC version, target arch, generator version. No paths, no mtimes (docs: jit-and-cache-lessons).
// Location: FA3JIT_CACHE_DIR, else $XDG_CACHE_HOME/fa3jit, else ~/.cache/fa3jit.
// Entry file: <dir>/<key>.cubin-entry, written to a unique temp file (<dir>/.tmp-<key>-<pid>-<16 hex>),
// fsynced, renamed into place; temp files left by writers that died are removed by the next publish. It
// carries a magic, a format version, a SHA-256 of its payload and the key itself, all verified on read.
// A torn, truncated, corrupted or foreign entry (another key, an older entry format) is treated as a miss and
// rebuilt, with one warning per cache object. An entry of another generator, NVRTC or entry-format version has
// another key and is never looked up.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "jit/compiler.h"

namespace fa3jit {

/// Hex SHA-256 of `data`.
std::string sha256_hex(const std::string& data);

/// Cache key over the canonical inputs (each field length-prefixed, so no two inputs collide by concatenation) and
/// the entry format version. `flags` are every NVRTC option of the compile (compile_flags(source)).
std::string cache_key(const std::string& canonical_spec, const std::string& source,
                      const std::vector<std::string>& flags, const std::string& nvrtc_version,
                      const std::string& target_arch, const std::string& generator_version);

/// Default cache directory from the environment (see above).
std::string default_cache_dir();

/// Writes `bytes` to a fresh temp file in `dir` (named from `tag`, the process id and random hex), fsyncs it and
/// renames it to `final_path` (in `dir`): readers see no file, the old file or the whole new one, never a torn one.
/// False with `why` set when a step fails (the temp file is removed).
bool publish_file(const std::string& dir, const std::string& tag, const std::string& final_path,
                  std::string_view bytes, std::string* why);

struct CacheLookup {
  std::shared_ptr<const CompiledKernel> kernel;
  std::string key;
  bool hit = false;      // true when served from memory or disk without compiling
  bool from_disk = false;
  double ms = 0.0;       // time spent in get_or_compile
};

struct CacheEntryInfo {
  std::string key;
  std::string kernel_name;
  int64_t bytes = 0;
};

/// How a cache opens its directory: writers create it; inspection (list, clear) never creates anything.
enum class CacheOpen { kCreate, kExisting };

class CubinCache {
 public:
  /// `dir` empty = default_cache_dir(). kCreate: if the directory cannot be created or written, the cache
  /// works from memory only and warns once on stderr (never fails). kExisting: a missing directory is left
  /// missing (exists() is false, nothing to list or clear) and no file is written to test it.
  explicit CubinCache(std::string dir = {}, CacheOpen open = CacheOpen::kCreate);

  /// Returns the kernel for `key`: memory, then disk (verified), else calls `compile` once per key in this
  /// process even when many threads ask at once, and publishes the result atomically. Processes sharing the
  /// directory compile a key once between them: the compiling one holds an flock on <dir>/.lock-<key>, the others
  /// wait for it (at most compile_lock_wait(), then compile themselves) and read its entry.
  CacheLookup get_or_compile(const std::string& key, const std::function<CompiledKernel()>& compile);

  /// Whether another process holds `key`'s compile lock now (it is compiling the kernel): a probe that never waits,
  /// so a warm-up can take other kernels first. False for a memory-only cache or a key never locked.
  bool compiling_elsewhere(const std::string& key) const;

  /// How long get_or_compile waits for another process compiling the same key (default 60 s, far above a
  /// compile: only a stopped or hung process makes it matter).
  std::chrono::milliseconds compile_lock_wait() const { return std::chrono::milliseconds(compile_lock_wait_ms_); }
  void set_compile_lock_wait(std::chrono::milliseconds wait) { compile_lock_wait_ms_ = wait.count(); }

  std::vector<CacheEntryInfo> list() const;
  /// Removes every entry file (and stale temp files and unheld lock files of this cache's own naming; no other
  /// file); returns how many entries were removed.
  size_t clear();
  /// Whether `key`'s entry file is on disk now (a writer that could not publish keeps the kernel in memory).
  bool stored(const std::string& key) const;

  /// The directory in use; empty when there is none or it is not trusted (see memory_only_why()).
  const std::string& directory() const { return dir_; }
  bool persistent() const { return persistent_; }
  /// Why the cache works from memory only, naming the directory ("cache directory D is not writable (...)"): what
  /// the constructor warned. Empty when persistent, or when a kExisting directory does not exist.
  const std::string& memory_only_why() const { return memory_only_why_; }
  /// False when the directory did not exist and was not created (CacheOpen::kExisting), or could not be.
  bool exists() const { return exists_; }

 private:
  struct Slot;
  std::string dir_;
  bool persistent_ = false;
  bool exists_ = false;
  std::string memory_only_why_;
  void memory_only(std::string why);  // records why (memory_only_why) and warns once
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Slot>> slots_;
  std::atomic<int64_t> compile_lock_wait_ms_{60000};  // read by get_or_compile on any thread
  std::atomic<bool> warned_rejected_{false};  // a rejected entry warns once per cache, then logs at info
};

}  // namespace fa3jit

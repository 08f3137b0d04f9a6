// fa3jit runtime: what every kernel family shares at run time. It turns a KernelRequest into a loaded
// kernel (generate -> NVRTC or disk cache -> driver), once per kernel identity and process, and keeps each
// family's per-runtime state (its plan cache). It knows no family: the typed launch paths live in
// kernels/<kind>/launch.h and take a Runtime&.
//
//   fa3jit::Runtime rt;                                  // cache dir from the environment
//   fa3jit::attention_fwd::forward(rt, args, stream);    // kernels/attention_fwd/launch.h
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "jit/cubin_cache.h"
#include "jit/family.h"
#include "jit/loaded_kernel.h"
#include "jit/tune_db.h"

namespace fa3jit {

struct RuntimeOptions {
  std::string cache_dir;  // empty = default_cache_dir()
  /// The tuning database (jit/tune_db.h) whose applied records choose kernels: empty = tune_db_path(cache dir)
  /// (FA3JIT_TUNE_DB, else <cache dir>/tune-db.json); "off" = the built-in tile table only.
  std::string tune_db = {};
};

/// Result of preparing a kernel (what `fa3jit compile` prints).
struct PreparedKernel {
  KernelRequest request;
  std::string key;        // cache key (hex SHA-256)
  bool cache_hit = false;
  double ms = 0.0;
  std::shared_ptr<const CompiledKernel> compiled;
};

class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// Compiles (or fetches from the cache) the kernel of `request`. Needs no GPU. Error(kCompileFailed) with
  /// the NVRTC log; Error(kCacheError) when the cache holds a foreign entry under the key.
  PreparedKernel prepare(const KernelRequest& request);
  /// The same for a JSON spec document of any family ("kind", default attention_fwd; a "problem" section
  /// is ignored). Error(kInvalidSpec / kUnsupported) for a bad spec.
  PreparedKernel prepare(const std::string& spec_json);

  /// The kernel of `request`, loaded into the driver: compiled and loaded once per kernel identity
  /// (canonical spec) for the life of the runtime, even when many threads ask at once.
  std::shared_ptr<LoadedKernel> load(const KernelRequest& request);

  CubinCache& cache();

  /// The cubin cache key of `request`'s kernel (cache_key over its canonical spec, source, flags, NVRTC, arch and
  /// generator versions): what prepare() looks up.
  static std::string kernel_key(const KernelRequest& request);
  /// Whether another process sharing the cache directory is compiling `request`'s kernel now (CubinCache::
  /// compiling_elsewhere on its key); never waits.
  bool compiling_elsewhere(const KernelRequest& request);

  /// The applied choice of the tuning database for (kind, kernel_class) on device `ordinal` (its TuneRecord::choice),
  /// or none. The database is read once, on the first call; one that cannot be read is reported once (a warning) and
  /// treated as empty: a serving process keeps the built-in choices. Needs the driver when the database has records.
  /// Not for the hot path (takes a lock): families memoise what they derive from it per class.
  std::optional<nlohmann::json> tuned_choice(const std::string& kind, const std::string& kernel_class, int ordinal);
  /// Every applied choice for (kind, kernel_class) recorded with this build's NVRTC and generator, on any device
  /// (a cubin does not depend on the device that runs it): what `cache warm` compiles besides the built-in kernels,
  /// so a serving process that tuned on its GPUs finds its tuned kernels on disk. Read as tuned_choice reads the
  /// database; needs no driver.
  std::vector<nlohmann::json> applied_choices(const std::string& kind, const std::string& kernel_class);
  /// Where the database is read from (empty: none).
  std::string tune_db_path() const;

  /// Unique per Runtime object in this process, never reused: keys per-thread memos of launch paths.
  uint64_t id() const { return id_; }

  /// Per-runtime state of one family (e.g. its plan cache), default-constructed on first use; the same
  /// object for the life of the runtime. Thread-safe; takes a lock, so launch paths memoise the result.
  template <class State>
  State& family_state() {
    static const int index = next_state_index();
    return *static_cast<State*>(state_slot(index, [] { return std::shared_ptr<void>(std::make_shared<State>()); }));
  }

 private:
  // The tuning database, read on first use (empty when there is none or it cannot be read: reported once).
  const TuneDb& tune_db();
  static int next_state_index();
  void* state_slot(int index, std::shared_ptr<void> (*make)());
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint64_t id_;
};

}  // namespace fa3jit

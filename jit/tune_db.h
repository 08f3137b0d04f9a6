// The tuning database: what `fa3jit tune` measured, and which choice the runtime takes for a kernel class on a
// device. Family-agnostic: a family names its classes (a string token) and gives meaning to a record's "choice"
// (the spec fields a sweep varied); this file only stores, matches and publishes records.
//
// Where it lives: FA3JIT_TUNE_DB (a file path; "off" disables the lookup), else <cache dir>/tune-db.json. The file:
//   {"format": "fa3jit-tune-db", "version": 1, "records": [record, ...]}
// record:
//   {"kind": "attention_fwd", "class": "<family token>",
//    "device": {"name": "NVIDIA H200", "sm_count": 132, "driver": 13000, "nvrtc": "13.0", "generator": "..."},
//    "problem": {...the sweep's problem...}, "choice": {...the winner's fields...}, "label": "tile.block_n=128",
//    "tflops": 612.5, "builtin_tflops": 598.1, "applied": true, "created": "2026-12-02T07:00:00Z",
//    "candidates": [{"label": ..., "choice": {...}, "median_ms": ..., "tflops": ..., "check": "pass"}, ...]}
// A record is keyed by (kind, class, device identity, problem): a new measurement of the same key replaces it. At
// most one record per (kind, class, device identity) is applied; that is the one the runtime uses, and only on a
// device whose identity (name, SM count, driver, NVRTC and generator versions) equals the record's.
// Writers hold an exclusive flock on <path>.lock around read-modify-write and publish atomically (publish_file).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fa3jit {

/// What a measurement depends on besides the kernel class: the device and the toolchain that built and timed it.
struct TuneIdentity {
  std::string device_name;  // cuDeviceGetName
  int sm_count = 0;         // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
  int driver_version = 0;   // cuDriverGetVersion, e.g. 13000
  std::string nvrtc_version;
  std::string generator_version;
  bool operator==(const TuneIdentity&) const = default;
};

/// The identity of device `ordinal` with this build's NVRTC and generator. Needs the driver; cached per ordinal.
/// Error(kInvalidArgument) for an ordinal out of range, Error(kNoDriver / kDriverError) from the driver.
TuneIdentity tune_identity(int ordinal);

struct TuneRecord {
  std::string kind;          // the family ("attention_fwd")
  std::string kernel_class;  // the family's class token
  TuneIdentity device;
  nlohmann::json problem = nlohmann::json::object();
  nlohmann::json choice = nlohmann::json::object();  // the winner's fields, the family's to read
  std::string label;                                  // the winner's candidate label
  double tflops = 0.0;                                // the winner's
  double builtin_tflops = 0.0;                        // the built-in choice's in the same run; 0: not timed
  bool applied = false;
  std::string created;                                // UTC, ISO 8601
  nlohmann::json candidates = nlohmann::json::array();
};

class TuneDb {
 public:
  /// The records of `path`; a missing file is an empty database. Error(kInvalidSpec) naming the path and the field
  /// for a file that is not a database of this format.
  static TuneDb load(const std::string& path);

  /// Adds `record`, replacing the one with the same (kind, class, device, problem). With `apply` it also becomes the
  /// applied record of its (kind, class, device), and any other one of them is no longer applied; without, it is
  /// applied only when it replaces an applied record with the same choice.
  void add(TuneRecord record, bool apply);

  /// The applied record of (kind, class) for `device`; nullptr when there is none.
  const TuneRecord* applied(const std::string& kind, const std::string& kernel_class, const TuneIdentity& device) const;

  const std::vector<TuneRecord>& records() const { return records_; }
  nlohmann::json to_json() const;

  /// Read-modify-write of the file at `path` under its lock: loads it, calls `change`, publishes the result
  /// atomically (creating the directory). Error(kIoError) naming the path when it cannot be written.
  template <class Change>
  static void update(const std::string& path, Change change) {
    const Lock lock(path);
    TuneDb db = load(path);
    change(db);
    db.publish(path);
  }

 private:
  // The exclusive flock on <path>.lock, held for the object's life.
  struct Lock {
    explicit Lock(const std::string& path);
    ~Lock();
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;
    int fd;
  };
  void publish(const std::string& path) const;
  std::vector<TuneRecord> records_;
};

/// The database path for a cache directory: FA3JIT_TUNE_DB when set (empty optional for "off"), else
/// <cache_dir>/tune-db.json (empty optional when cache_dir is empty: no cache, no database).
std::optional<std::string> tune_db_path(const std::string& cache_dir);

}  // namespace fa3jit

// The tuning database (tune_db.h).
#include "jit/tune_db.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_fields.h"
#include "jit/compiler.h"
#include "jit/cubin_cache.h"
#include "jit/driver.h"
#include "jit/emit_util.h"

namespace fa3jit {

namespace {

using nlohmann::json;
namespace jf = json_fields;

constexpr const char* kFormat = "fa3jit-tune-db";
constexpr int kVersion = 1;
// A database holds every candidate of every sweep it recorded: allow more than a spec file's 1 MiB.
constexpr int64_t kMaxDbBytes = int64_t{64} << 20;

json identity_json(const TuneIdentity& d) {
  return json{{"name", d.device_name},
              {"sm_count", d.sm_count},
              {"driver", d.driver_version},
              {"nvrtc", d.nvrtc_version},
              {"generator", d.generator_version}};
}

TuneIdentity read_identity(const json& v, const std::string& path) {
  jf::require_object(v, path);
  jf::reject_unknown_keys(v, path, {"name", "sm_count", "driver", "nvrtc", "generator"});
  const auto field = [&](const char* key) -> const json& {
    if (!v.contains(key)) jf::fail(fmt::format("{} has no \"{}\"", path, key));
    return v.at(key);
  };
  TuneIdentity d;
  d.device_name = jf::read_string(field("name"), jf::join_path(path, "name"), "a device name");
  d.sm_count = static_cast<int>(jf::read_int(field("sm_count"), jf::join_path(path, "sm_count"), 1, 100000,
                                             "a multiprocessor count"));
  d.driver_version = static_cast<int>(jf::read_int(field("driver"), jf::join_path(path, "driver"), 0, 1 << 30,
                                                   "a cuDriverGetVersion number"));
  d.nvrtc_version = jf::read_string(field("nvrtc"), jf::join_path(path, "nvrtc"), "an NVRTC version");
  d.generator_version = jf::read_string(field("generator"), jf::join_path(path, "generator"), "a generator version");
  return d;
}

double read_number(const json& v, const std::string& path) {
  if (!v.is_number()) jf::fail(fmt::format("{} must be a number, got {}", path, jf::show(v)));
  return v.get<double>();
}

TuneRecord read_record(const json& v, const std::string& path) {
  jf::require_object(v, path);
  jf::reject_unknown_keys(v, path,
                          {"kind", "class", "device", "problem", "choice", "label", "tflops", "builtin_tflops",
                           "applied", "created", "candidates"});
  for (const char* key : {"kind", "class", "device", "choice"})
    if (!v.contains(key)) jf::fail(fmt::format("{} has no \"{}\"", path, key));
  TuneRecord r;
  r.kind = jf::read_string(v.at("kind"), jf::join_path(path, "kind"), "a kernel family name");
  r.kernel_class = jf::read_string(v.at("class"), jf::join_path(path, "class"), "a kernel class token");
  r.device = read_identity(v.at("device"), jf::join_path(path, "device"));
  if (v.contains("problem")) {
    jf::require_object(v.at("problem"), jf::join_path(path, "problem"));
    r.problem = v.at("problem");
  }
  jf::require_object(v.at("choice"), jf::join_path(path, "choice"));
  r.choice = v.at("choice");
  if (v.contains("label")) r.label = jf::read_string(v.at("label"), jf::join_path(path, "label"), "a label");
  if (v.contains("tflops")) r.tflops = read_number(v.at("tflops"), jf::join_path(path, "tflops"));
  if (v.contains("builtin_tflops"))
    r.builtin_tflops = read_number(v.at("builtin_tflops"), jf::join_path(path, "builtin_tflops"));
  if (v.contains("applied")) r.applied = jf::read_bool(v.at("applied"), jf::join_path(path, "applied"));
  if (v.contains("created")) r.created = jf::read_string(v.at("created"), jf::join_path(path, "created"), "a time");
  if (v.contains("candidates")) {
    if (!v.at("candidates").is_array())
      jf::fail(fmt::format("{} must be a list, got {}", jf::join_path(path, "candidates"), jf::show(v.at("candidates"))));
    r.candidates = v.at("candidates");
  }
  return r;
}

json record_json(const TuneRecord& r) {
  return json{{"kind", r.kind},
              {"class", r.kernel_class},
              {"device", identity_json(r.device)},
              {"problem", r.problem},
              {"choice", r.choice},
              {"label", r.label},
              {"tflops", r.tflops},
              {"builtin_tflops", r.builtin_tflops},
              {"applied", r.applied},
              {"created", r.created},
              {"candidates", r.candidates}};
}

bool same_class(const TuneRecord& a, const TuneRecord& b) {
  return a.kind == b.kind && a.kernel_class == b.kernel_class && a.device == b.device;
}

std::string lock_path(const std::string& path) { return path + ".lock"; }

}  // namespace

TuneIdentity tune_identity(int ordinal) {
  static std::mutex mu;
  static std::array<std::optional<TuneIdentity>, 64> known;
  if (ordinal < 0 || ordinal >= static_cast<int>(known.size()))
    throw Error(ErrorCode::kInvalidArgument, fmt::format("device {} is out of range", ordinal));
  std::lock_guard<std::mutex> lock(mu);
  if (!known[ordinal]) {
    const Driver& d = driver();
    CUdevice dev = 0;
    check_cu(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    char name[256] = {};
    check_cu(d.cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName");
    int version = 0;
    check_cu(d.cuDriverGetVersion(&version), "cuDriverGetVersion");
    known[ordinal] = TuneIdentity{name, multiprocessor_count(ordinal), version, nvrtc_version_string(),
                                  kGeneratorVersion};
  }
  return *known[ordinal];
}

TuneDb TuneDb::load(const std::string& path) {
  TuneDb db;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return db;
  const std::string text = jf::read_file(path, "tuning database", kMaxDbBytes);
  try {
    const json doc = jf::parse_text(text);
    jf::require_object(doc, "");
    jf::reject_unknown_keys(doc, "", {"format", "version", "records"});
    if (!doc.contains("format") || doc.at("format") != kFormat)
      jf::fail(fmt::format("\"format\" must be \"{}\"", kFormat));
    if (!doc.contains("version") || doc.at("version") != kVersion)
      jf::fail(fmt::format("\"version\" must be {} (this build's format), got {}", kVersion,
                           doc.contains("version") ? jf::show(doc.at("version")) : "none"));
    if (doc.contains("records")) {
      const json& records = doc.at("records");
      if (!records.is_array()) jf::fail(fmt::format("\"records\" must be a list, got {}", jf::show(records)));
      for (size_t i = 0; i < records.size(); ++i)
        db.records_.push_back(read_record(records[i], fmt::format("records[{}]", i)));
    }
  } catch (const Error& e) {
    throw Error(ErrorCode::kInvalidSpec, fmt::format("tuning database \"{}\": {}", path, e.what()));
  }
  return db;
}

void TuneDb::add(TuneRecord record, bool apply) {
  for (auto it = records_.begin(); it != records_.end();) {
    if (same_class(*it, record) && it->problem == record.problem) {
      // A re-measurement that picks the same winner stays applied; one that picks another waits for --apply.
      if (!apply && it->applied && it->choice == record.choice) record.applied = true;
      it = records_.erase(it);
    } else {
      ++it;
    }
  }
  if (apply) {
    for (TuneRecord& r : records_)
      if (same_class(r, record)) r.applied = false;
    record.applied = true;
  }
  records_.push_back(std::move(record));
}

const TuneRecord* TuneDb::applied(const std::string& kind, const std::string& kernel_class,
                                  const TuneIdentity& device) const {
  for (const TuneRecord& r : records_)
    if (r.applied && r.kind == kind && r.kernel_class == kernel_class && r.device == device) return &r;
  return nullptr;
}

json TuneDb::to_json() const {
  json records = json::array();
  for (const TuneRecord& r : records_) records.push_back(record_json(r));
  return json{{"format", kFormat}, {"version", kVersion}, {"records", std::move(records)}};
}

TuneDb::Lock::Lock(const std::string& path) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  const std::string lock = lock_path(path);
  fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    throw Error(ErrorCode::kIoError, fmt::format("cannot open the tuning database's lock \"{}\": {}", lock,
                                                 std::strerror(errno)));
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    ::close(fd);
    throw Error(ErrorCode::kIoError, fmt::format("cannot lock \"{}\": {}", lock, std::strerror(err)));
  }
}

TuneDb::Lock::~Lock() { ::close(fd); }  // closing the descriptor releases the lock

void TuneDb::publish(const std::string& path) const {
  const std::filesystem::path p(path);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : std::string(".");
  std::string why;
  if (!publish_file(dir, "tune-db", path, to_json().dump(1) + "\n", &why))
    throw Error(ErrorCode::kIoError, fmt::format("cannot write the tuning database \"{}\": {}", path, why));
}

std::optional<std::string> tune_db_path(const std::string& cache_dir) {
  if (const char* env = std::getenv("FA3JIT_TUNE_DB"); env != nullptr && *env != '\0') {
    if (std::strcmp(env, "off") == 0) return std::nullopt;
    return std::string(env);
  }
  if (cache_dir.empty()) return std::nullopt;
  return cache_dir + "/tune-db.json";
}

}  // namespace fa3jit

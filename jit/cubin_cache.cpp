// fa3jit cubin cache (see cubin_cache.h; design from docs/kernel-design.md §7).
//
// Entry file <dir>/<key>.cubin-entry, all integers little-endian:
//   "FA3JITC1" | u32 format version | u64 key length, key | 32-byte SHA-256 of payload
//   | u64 payload length | payload
//   payload = str kernel_name | u32 entry count, per entry: str name | 6 x i32 report
//             | str cubin | str ptx | str log | f64 compile_ms
//   (str = u64 length, then the bytes)
// The key inside the header must equal the key asked for, so an entry copied or renamed onto another key's
// name is never served. Writers publish with write-to-temp + fsync + rename, so readers see either no file,
// an old complete file or the new complete file; correctness across processes does not need a lock.
// Efficiency does: processes sharing a directory (one rank per GPU, warming the same manifest at once) take an
// exclusive flock on <dir>/.lock-<key> around a compile and read the entry again once they hold it, so each key
// compiles once per host (CompileLock).
#include "jit/cubin_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <optional>
#include <random>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"

namespace fa3jit {
namespace {

constexpr std::string_view kEntryMagic = "FA3JITC1";
constexpr uint32_t kEntryFormatVersion = 3;  // 2: the checksum covers the key too; 3: several entry points
constexpr std::string_view kEntrySuffix = ".cubin-entry";
constexpr std::string_view kTempPrefix = ".tmp-";
constexpr std::string_view kLockPrefix = ".lock-";  // <dir>/.lock-<key>: CompileLock's file
constexpr int kLockPollMs = 5;
constexpr size_t kKeyHexChars = 64;
constexpr uint64_t kMaxEntryBytes = uint64_t{1} << 30;  // far above any cubin + PTX; guards a garbage length
constexpr uint64_t kMaxEntryPoints = 64;                // far above any family's entry count; guards a garbage count
constexpr std::string_view kProbeTag = "probe";       // the write test's temp file: .tmp-probe-<pid>-<16 hex>
constexpr size_t kRandomHexChars = 16;
constexpr int kStaleTempSeconds = 60;       // a publish takes milliseconds; older temp files are orphans
constexpr int kDeadWriterTempSeconds = 5;   // ... and so are younger ones whose writer process is gone

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::string errno_text(int err) { return std::strerror(err); }

// ---- little-endian serialisation -------------------------------------------------------------------------
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_str(std::string& out, std::string_view s) {
  put_u64(out, s.size());
  out.append(s);
}

// Bounds-checked reader: any read past the end sets ok = false and returns zeros / empty strings.
struct Reader {
  std::string_view in;
  size_t pos = 0;
  bool ok = true;

  uint64_t uint(int bytes) {
    if (!ok || in.size() - pos < static_cast<size_t>(bytes)) {
      ok = false;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(in[pos + i])} << (8 * i);
    pos += bytes;
    return v;
  }
  std::string_view bytes(uint64_t n) {
    if (!ok || in.size() - pos < n) {
      ok = false;
      return {};
    }
    std::string_view s = in.substr(pos, n);
    pos += n;
    return s;
  }
  std::string str() { return std::string(bytes(uint(8))); }
};

std::string sha256_raw(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr) != 1 || len != 32) {
    throw Error(ErrorCode::kInternal, "OpenSSL EVP_Digest(SHA-256) failed");
  }
  return std::string(reinterpret_cast<const char*>(md), len);
}

std::string encode_entry(const std::string& key, const CompiledKernel& k) {
  // decode_entry refuses any other count: such an entry would be rebuilt on every read.
  if (k.entries.empty() || k.entries.size() > kMaxEntryPoints) {
    throw Error(ErrorCode::kInternal, fmt::format("kernel '{}' has {} entry points; a cache entry holds 1 to {}",
                                                  k.kernel_name, k.entries.size(), kMaxEntryPoints));
  }
  std::string payload;
  put_str(payload, k.kernel_name);
  put_u32(payload, static_cast<uint32_t>(k.entries.size()));
  for (const CompiledEntry& e : k.entries) {
    put_str(payload, e.name);
    for (int v : {e.report.registers, e.report.spill_store_bytes, e.report.spill_load_bytes,
                  e.report.stack_frame_bytes, e.report.static_smem_bytes, e.report.barriers}) {
      put_u32(payload, static_cast<uint32_t>(v));
    }
  }
  put_str(payload, k.cubin);
  put_str(payload, k.ptx);
  put_str(payload, k.log);
  uint64_t ms_bits = 0;
  static_assert(sizeof(ms_bits) == sizeof(k.compile_ms));
  std::memcpy(&ms_bits, &k.compile_ms, sizeof(ms_bits));
  put_u64(payload, ms_bits);

  std::string out(kEntryMagic);
  put_u32(out, kEntryFormatVersion);
  put_str(out, key);
  out += sha256_raw(key + payload);  // the key is covered: a relabelled entry fails the check
  put_u64(out, payload.size());
  out += payload;
  return out;
}

// The kernel in `bytes` if it is a complete, intact entry for `key`; otherwise nullopt and `why`.
std::optional<CompiledKernel> decode_entry(std::string_view bytes, const std::string& key, std::string* why) {
  const auto reject = [why](std::string reason) {
    *why = std::move(reason);
    return std::nullopt;
  };
  Reader r{bytes};
  if (bytes.size() < kEntryMagic.size()) return reject(fmt::format("truncated to {} bytes", bytes.size()));
  if (r.bytes(kEntryMagic.size()) != kEntryMagic) return reject("not an fa3jit cache entry (bad magic)");
  const uint64_t version = r.uint(4);
  if (!r.ok) return reject("truncated header");
  if (version != kEntryFormatVersion) {
    return reject(fmt::format("format version {}, this build reads {}", version, kEntryFormatVersion));
  }
  const uint64_t key_len = r.uint(8);
  if (!r.ok || key_len > 1024) return reject("truncated or corrupt header");
  const std::string_view stored_key = r.bytes(key_len);
  if (!r.ok) return reject("truncated header");
  if (stored_key != key) {
    return reject(fmt::format("foreign entry: it belongs to key {:.12}, not {:.12}", stored_key, key));
  }
  const std::string_view checksum = r.bytes(32);
  const uint64_t payload_len = r.uint(8);
  if (!r.ok) return reject("truncated header");
  const uint64_t remaining = bytes.size() - r.pos;
  if (payload_len != remaining) {
    return reject(fmt::format("payload is {} bytes, the header says {}", remaining, payload_len));
  }
  const std::string_view payload = r.bytes(payload_len);
  if (sha256_raw(std::string(stored_key) + std::string(payload)) != checksum) return reject("checksum mismatch");

  Reader p{payload};
  CompiledKernel k;
  k.kernel_name = p.str();
  const uint64_t num_entries = p.uint(4);
  if (!p.ok || num_entries == 0 || num_entries > kMaxEntryPoints) return reject("malformed payload");
  for (uint64_t i = 0; i < num_entries; ++i) {
    CompiledEntry e;
    e.name = p.str();
    for (int* v : {&e.report.registers, &e.report.spill_store_bytes, &e.report.spill_load_bytes,
                   &e.report.stack_frame_bytes, &e.report.static_smem_bytes, &e.report.barriers}) {
      *v = static_cast<int>(static_cast<uint32_t>(p.uint(4)));
    }
    if (!p.ok || e.name.empty()) return reject("malformed payload");
    k.entries.push_back(std::move(e));
  }
  k.report = combined_report(k.entries);
  k.cubin = p.str();
  k.ptx = p.str();
  k.log = p.str();
  const uint64_t ms_bits = p.uint(8);
  std::memcpy(&k.compile_ms, &ms_bits, sizeof(ms_bits));
  // A matching checksum with a malformed payload means a writer bug, not a torn file; still never serve it.
  if (!p.ok || p.pos != payload.size() || k.kernel_name.empty()) return reject("malformed payload");
  return k;
}

// ---- file helpers ------------------------------------------------------------------------------------------
bool is_valid_key(std::string_view key) {
  return key.size() == kKeyHexChars &&
         std::all_of(key.begin(), key.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Reads the whole file. Missing file: false with `why` empty (a plain miss). Other failures: false and `why`.
bool read_whole_file(const std::string& path, std::string* out, std::string* why) {
  // O_NONBLOCK and O_NOFOLLOW: a FIFO or a symlink planted at an entry's name must not block or redirect us.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) {
    if (errno != ENOENT) *why = fmt::format("cannot open: {}", errno_text(errno));
    return false;
  }
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0;
  if (!ok) *why = fmt::format("cannot stat: {}", errno_text(errno));
  if (ok && !S_ISREG(st.st_mode)) {
    *why = "not a regular file";
    ok = false;
  }
  if (ok && static_cast<uint64_t>(st.st_size) > kMaxEntryBytes) {
    *why = fmt::format("file is {} bytes, more than any entry", st.st_size);
    ok = false;
  }
  if (ok) {
    out->resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < out->size()) {
      const ssize_t n = ::read(fd, out->data() + done, out->size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        *why = fmt::format("read failed: {}", errno_text(errno));
        ok = false;
        break;
      }
      if (n == 0) break;  // shrank under us; the length check in decode_entry rejects it
      done += static_cast<size_t>(n);
    }
    out->resize(done);
  }
  ::close(fd);
  return ok;
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::string random_hex() {
  // Unique among processes (pid is in the name too) and threads; not security relevant.
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   static_cast<uint64_t>(Clock::now().time_since_epoch().count()));
  return fmt::format("{:016x}", rng());
}

bool is_lower_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The one name of this cache's temp files: ".tmp-<tag>-<pid>-<16 hex>", tag a key or "probe".
std::string temp_file_name(std::string_view tag) {
  return fmt::format("{}{}-{}-{}", kTempPrefix, tag, ::getpid(), random_hex());
}

// The writer's pid when `name` is exactly one of this cache's temp file names (temp_file_name), else 0: a
// user's own ".tmp-notes" in the directory is never touched.
pid_t temp_file_writer(std::string_view name) {
  if (name.substr(0, kTempPrefix.size()) != kTempPrefix) return 0;
  name.remove_prefix(kTempPrefix.size());
  const size_t tag_end = name.find('-');
  if (tag_end == std::string_view::npos) return 0;
  const std::string_view tag = name.substr(0, tag_end);
  if (tag != kProbeTag && !(tag.size() == kKeyHexChars && is_lower_hex(tag))) return 0;
  name.remove_prefix(tag_end + 1);
  const size_t pid_end = name.find('-');
  if (pid_end == std::string_view::npos || pid_end == 0 || name[0] == '0') return 0;
  const std::string_view random = name.substr(pid_end + 1);
  if (random.size() != kRandomHexChars || !is_lower_hex(random)) return 0;
  long long pid = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + pid_end, pid);
  if (ec != std::errc() || end != name.data() + pid_end || pid <= 0 || pid > INT_MAX) return 0;
  return static_cast<pid_t>(pid);
}

// An exclusive flock(2) on <dir>/.lock-<key> for as long as it lives: other processes compiling the same key wait
// for it, then find the entry published. held() is false when the file cannot be opened as a regular file, or when
// `wait` passed with another process still holding it (a stopped or hung compile never blocks a caller for longer;
// the caller compiles itself, which the atomic publish keeps correct). The kernel releases a flock when its holder
// exits, crashed or not, so no lock outlives its process; the file stays (unlinking a file another process waits on
// would let a third lock a new one), and clear() removes the unlocked ones.
class CompileLock {
 public:
  CompileLock(const std::string& dir, std::string_view key, std::chrono::milliseconds wait) {
    const std::string path = fmt::format("{}/{}{}", dir, kLockPrefix, key);
    const auto start = Clock::now();
    for (;;) {
      fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
      struct stat st {};
      if (fd_ < 0 || ::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) return;
      while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) return;
        if (Clock::now() - start >= wait) {
          log(LogLevel::kWarn, fmt::format("{} stayed locked for {:.0f} ms (another process compiling this kernel is "
                                           "stopped or hung?); compiling it here as well",
                                           path, ms_since(start)));
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(kLockPollMs));
      }
      // Held; but clear() may have unlinked the file between its holder's release and this lock (a newcomer then
      // locks a new file): only a lock on the file still at the path counts.
      struct stat now {};
      if (::stat(path.c_str(), &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino) break;
      ::close(fd_);
      fd_ = -1;
    }
    held_ = true;
    waited_ms_ = ms_since(start);
  }
  ~CompileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the lock
  }
  CompileLock(const CompileLock&) = delete;
  CompileLock& operator=(const CompileLock&) = delete;
  bool held() const { return held_; }
  double waited_ms() const { return waited_ms_; }

 private:
  int fd_ = -1;
  bool held_ = false;
  double waited_ms_ = 0.0;
};

// Removes <dir>/<name> if it is a lock file of this cache's naming that no process holds now.
void remove_unheld_lock(const std::string& dir, const std::string& name) {
  if (name.size() != kLockPrefix.size() + kKeyHexChars || name.compare(0, kLockPrefix.size(), kLockPrefix) != 0 ||
      !is_valid_key(std::string_view(name).substr(kLockPrefix.size())))
    return;
  const std::string path = dir + "/" + name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) ::unlink(path.c_str());
  ::close(fd);
}

// A temp file of this cache that no writer will rename any more: older than any publish takes, or a few
// seconds old with its writer gone (kill(pid, 0) fails with ESRCH; EPERM means alive, another user's). The
// age rule alone covers a writer's pid reused by a live process. A writer in another pid namespace sharing
// the directory may look gone: its publish (milliseconds) would then have to stall for seconds, and even
// then it only loses the rename and keeps the kernel in memory.
bool is_stale_temp(const std::string& dir, const std::string& name, time_t now) {
  const pid_t pid = temp_file_writer(name);
  if (pid == 0) return false;
  struct stat st {};
  if (::lstat((dir + "/" + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  const time_t age = now - st.st_mtime;
  if (age > kStaleTempSeconds) return true;
  return age >= kDeadWriterTempSeconds && ::kill(pid, 0) != 0 && errno == ESRCH;
}

// mkdir -p with mode 0700 for the directories it creates (the cache holds code that will run on the GPU).
bool make_dirs(const std::string& dir, std::string* why) {
  size_t pos = 0;
  do {
    pos = dir.find('/', pos + 1);  // "/a/b" -> "/a", "/a/b"; "a/b" -> "a", "a/b"
    const std::string part = dir.substr(0, pos);
    if (::mkdir(part.c_str(), 0700) == 0) continue;
    const int err = errno;
    struct stat st {};
    if (err == EEXIST && ::stat(part.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
    *why = fmt::format("cannot create {}: {}", part, errno_text(err == EEXIST ? ENOTDIR : err));
    return false;
  } while (pos != std::string::npos);
  return true;
}

bool fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

// Writes `bytes` to a fresh temp file in `dir`, fsyncs it and renames it to `final_path`. The final name
// only ever holds a complete file; on failure the temp file is removed and `why` says what went wrong.
bool publish_file(const std::string& dir, const std::string& tag, const std::string& final_path,
                  std::string_view bytes, std::string* why) {
  const std::string tmp = dir + "/" + temp_file_name(tag);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = fmt::format("cannot create {}: {}", tmp, errno_text(errno));
    return false;
  }
  const auto failed = [&](const char* step) {
    *why = fmt::format("{} of {} failed: {}", step, tmp, errno_text(errno));
    return false;
  };
  bool ok = write_all(fd, bytes) || failed("write");
  ok = ok && (::fsync(fd) == 0 || failed("fsync"));
  ok = (::close(fd) == 0 || failed("close")) && ok;
  ok = ok && (::rename(tmp.c_str(), final_path.c_str()) == 0 || failed("rename to the entry name"));
  if (!ok) {
    ::unlink(tmp.c_str());
    return false;
  }
  // Makes the rename itself durable; the entry is already visible and complete, so a failure is harmless.
  fsync_dir(dir);
  return true;
}

namespace {

// Names of the directory's entries (empty when it cannot be opened).
std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  return names;
}

// A writer killed between write and rename leaves a full-size temp file; the next publish removes it.
void remove_stale_temps(const std::string& dir) {
  const time_t now = std::time(nullptr);
  for (const std::string& name : list_dir(dir))
    if (is_stale_temp(dir, name, now)) ::unlink((dir + "/" + name).c_str());
}

// "<key>.cubin-entry" -> key, else empty.
std::string key_of_entry_name(std::string_view name) {
  if (name.size() != kKeyHexChars + kEntrySuffix.size() || name.substr(kKeyHexChars) != kEntrySuffix) return {};
  const std::string_view key = name.substr(0, kKeyHexChars);
  return is_valid_key(key) ? std::string(key) : std::string();
}

}  // namespace

// ---- public functions ------------------------------------------------------------------------------------
std::string sha256_hex(const std::string& data) {
  const std::string raw = sha256_raw(data);
  std::string hex;
  hex.reserve(64);
  for (unsigned char c : raw) hex += fmt::format("{:02x}", c);
  return hex;
}

std::string cache_key(const std::string& canonical_spec, const std::string& source,
                      const std::vector<std::string>& flags, const std::string& nvrtc_version,
                      const std::string& target_arch, const std::string& generator_version) {
  // Length prefixes (and the flag count) make the encoding injective: {"ab"} and {"a","b"} differ.
  std::string buf;
  put_str(buf, "fa3jit-cache-v1");
  // The entry format too: builds of different formats use different keys, so processes of both sharing one
  // directory never reject and rewrite each other's entries.
  put_u64(buf, kEntryFormatVersion);
  put_str(buf, canonical_spec);
  put_str(buf, source);
  put_u64(buf, flags.size());
  for (const std::string& f : flags) put_str(buf, f);
  put_str(buf, nvrtc_version);
  put_str(buf, target_arch);
  put_str(buf, generator_version);
  return sha256_hex(buf);
}

std::string default_cache_dir() {
  const auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  if (std::string d = env("FA3JIT_CACHE_DIR"); !d.empty()) return d;
  // The XDG spec says relative values are invalid and must be ignored.
  if (std::string d = env("XDG_CACHE_HOME"); !d.empty() && d.front() == '/') return d + "/fa3jit";
  if (std::string d = env("HOME"); !d.empty()) return d + "/.cache/fa3jit";
  return {};
}

// One per key: single-flight state. `attempts` counts finished attempts so that a waiter can tell that the
// attempt it waited for ended, even if a new one has started since.
struct CubinCache::Slot {
  std::mutex mu;
  std::condition_variable cv;
  bool busy = false;
  std::shared_ptr<const CompiledKernel> kernel;
  std::exception_ptr error;  // the last attempt's failure, handed to every thread that waited for it
  uint64_t attempts = 0;
};

void CubinCache::memory_only(std::string why) {
  memory_only_why_ = std::move(why);
  log(LogLevel::kWarn, memory_only_why_ + "; kernels are cached in memory only");
}

CubinCache::CubinCache(std::string dir, CacheOpen open) : dir_(dir.empty() ? default_cache_dir() : std::move(dir)) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  if (dir_.empty()) {
    memory_only("no cache directory (FA3JIT_CACHE_DIR, XDG_CACHE_HOME and HOME are unset)");
    return;
  }
  std::string why;
  bool writable = false;
  if (open == CacheOpen::kCreate) {
    writable = make_dirs(dir_, &why);
  } else {
    // Inspection creates nothing: a mistyped path must not leave a directory chain behind.
    struct stat st {};
    if (::stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;
    writable = true;
  }
  exists_ = writable;
  // The cache holds code that runs in this process's GPU context: only a directory that nobody else can
  // write to is trusted for reading and writing.
  struct stat st {};
  if (writable && ::stat(dir_.c_str(), &st) == 0 &&
      (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)) {
    memory_only(fmt::format("cache directory {} is owned by another user or writable by others (mode {:o})", dir_,
                            st.st_mode & 07777));
    dir_.clear();  // neither read nor written
    return;
  }
  if (writable && open == CacheOpen::kExisting) {
    // No test file: inspection writes nothing. Good enough for saying whether entries could be removed.
    writable = ::access(dir_.c_str(), W_OK) == 0;
    if (!writable) why = errno_text(errno);
  } else if (writable) {
    // Creating a file is the only reliable test: access(W_OK) ignores read-only mounts on some filesystems.
    const std::string probe = dir_ + "/" + temp_file_name(kProbeTag);
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      writable = false;
      why = errno_text(errno);
    } else {
      if (!write_all(fd, "x")) {
        writable = false;
        why = fmt::format("write failed: {}", errno_text(errno));
      }
      ::close(fd);
      ::unlink(probe.c_str());
    }
  }
  if (!writable) {
    memory_only(fmt::format("cache directory {} is not writable ({})", dir_, why));
    return;
  }
  persistent_ = true;
}

CacheLookup CubinCache::get_or_compile(const std::string& key, const std::function<CompiledKernel()>& compile) {
  const auto start = Clock::now();
  if (!is_valid_key(key)) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("key '{:.80}' is not a cache key; expected 64 lowercase hex characters from cache_key()", key));
  }
  if (!compile) throw Error(ErrorCode::kInvalidArgument, "compile: an empty function was given");

  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<Slot>& s = slots_[key];
    if (!s) s = std::make_shared<Slot>();
    slot = s;
  }

  CacheLookup result;
  result.key = key;
  std::unique_lock<std::mutex> lk(slot->mu);
  if (slot->busy) {
    const uint64_t seen = slot->attempts;
    slot->cv.wait(lk, [&] { return slot->attempts != seen; });
    if (!slot->kernel) std::rethrow_exception(slot->error);
  }
  if (slot->kernel) {
    result.kernel = slot->kernel;
    result.hit = true;
    result.ms = ms_since(start);
    log(LogLevel::kDebug, fmt::format("cache hit (memory) {:.12} {}", key, slot->kernel->kernel_name));
    return result;
  }
  slot->busy = true;
  lk.unlock();

  // Only this thread works on `key` now; other keys proceed in parallel.
  std::shared_ptr<const CompiledKernel> kernel;
  try {
    const std::string path = fmt::format("{}/{}{}", dir_, key, kEntrySuffix);
    // A verified entry from disk, or null (a rejected one is said once loudly per cache, then quietly).
    auto read_entry = [&](bool say_rejected) -> std::shared_ptr<const CompiledKernel> {
      std::string bytes;
      std::string why;
      if (read_whole_file(path, &bytes, &why)) {
        if (std::optional<CompiledKernel> k = decode_entry(bytes, key, &why)) {
          result.hit = true;
          result.from_disk = true;
          log(LogLevel::kDebug, fmt::format("cache hit (disk) {:.12} {}", key, k->kernel_name));
          return std::make_shared<const CompiledKernel>(std::move(*k));
        }
      }
      if (say_rejected && !why.empty()) {
        log(warned_rejected_.exchange(true) ? LogLevel::kInfo : LogLevel::kWarn,
            fmt::format("cache entry {} rejected ({}); recompiling", path, why));
      }
      return nullptr;
    };
    // Read even when not persistent: a read-only directory can still serve the entries it holds.
    if (!dir_.empty()) kernel = read_entry(true);
    std::optional<CompileLock> lock;
    if (!kernel && persistent_) {
      // Another process may be compiling this key: wait for it and read what it published.
      lock.emplace(dir_, key, compile_lock_wait());
      if (lock->held()) {
        kernel = read_entry(false);
        if (kernel && lock->waited_ms() >= 1.0)
          log(LogLevel::kInfo, fmt::format("waited {:.0f} ms for another process compiling {:.12} {}",
                                           lock->waited_ms(), key, kernel->kernel_name));
      }
    }
    if (!kernel) {
      const auto t0 = Clock::now();
      kernel = std::make_shared<const CompiledKernel>(compile());
      log(LogLevel::kInfo, fmt::format("compiled {:.12} {} in {:.0f} ms", key, kernel->kernel_name, ms_since(t0)));
      std::string why;
      if (persistent_ && !publish_file(dir_, key, path, encode_entry(key, *kernel), &why)) {
        // The directory passed the write test, so this is rare (disk full, removed directory): say it once
        // loudly per process, then quietly.
        static std::atomic<bool> warned{false};
        log(warned.exchange(true) ? LogLevel::kInfo : LogLevel::kWarn,
            fmt::format("could not write cache entry ({}); the kernel stays in memory only", why));
      } else if (persistent_) {
        remove_stale_temps(dir_);
      }
    }
  } catch (...) {
    lk.lock();
    slot->busy = false;
    slot->error = std::current_exception();
    ++slot->attempts;
    slot->cv.notify_all();
    throw;
  }

  lk.lock();
  slot->kernel = kernel;
  slot->error = nullptr;
  slot->busy = false;
  ++slot->attempts;
  slot->cv.notify_all();
  lk.unlock();

  result.kernel = std::move(kernel);
  result.ms = ms_since(start);
  return result;
}

bool CubinCache::compiling_elsewhere(const std::string& key) const {
  if (!persistent_ || !is_valid_key(key)) return false;
  const std::string path = fmt::format("{}/{}{}", dir_, kLockPrefix, key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;  // no lock file: nobody has compiled it here
  struct stat st {};
  bool held = false;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    // LOCK_SH against the holder's LOCK_EX; a shared probe never delays another probe.
    held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  }
  ::close(fd);  // releases the probe's lock, if it took one
  return held;
}

bool CubinCache::stored(const std::string& key) const {
  if (dir_.empty() || !is_valid_key(key)) return false;
  struct stat st {};
  return ::lstat(fmt::format("{}/{}{}", dir_, key, kEntrySuffix).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<CacheEntryInfo> CubinCache::list() const {
  std::vector<CacheEntryInfo> out;
  if (dir_.empty()) return out;
  for (const std::string& name : list_dir(dir_)) {
    const std::string key = key_of_entry_name(name);
    if (key.empty()) continue;
    const std::string path = dir_ + "/" + name;
    std::string bytes;
    std::string why;
    std::optional<CompiledKernel> k;
    if (read_whole_file(path, &bytes, &why)) k = decode_entry(bytes, key, &why);
    if (!k) {
      if (!why.empty()) log(LogLevel::kInfo, fmt::format("cache entry {} is not valid ({}); not listed", path, why));
      continue;
    }
    out.push_back(CacheEntryInfo{key, k->kernel_name, static_cast<int64_t>(bytes.size())});
  }
  std::sort(out.begin(), out.end(), [](const CacheEntryInfo& a, const CacheEntryInfo& b) { return a.key < b.key; });
  return out;
}

size_t CubinCache::clear() {
  size_t removed = 0;
  if (!dir_.empty()) {
    const time_t now = std::time(nullptr);
    for (const std::string& name : list_dir(dir_)) {
      const std::string path = dir_ + "/" + name;
      if (!key_of_entry_name(name).empty()) {
        if (::unlink(path.c_str()) == 0) ++removed;
        continue;
      }
      // Only this cache's own temp files, and only those no live publish will rename; lock files no process holds.
      if (is_stale_temp(dir_, name, now)) ::unlink(path.c_str());
      remove_unheld_lock(dir_, name);
    }
  }
  // Forget finished kernels too, so later lookups compile (and publish) again; slots with a compile in
  // flight stay, their waiters still need them. Kernels already handed out stay valid (shared_ptr).
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = slots_.begin(); it != slots_.end();) {
    bool busy = false;
    {
      const std::shared_ptr<Slot> slot = it->second;  // keeps the Slot alive past its lock
      std::lock_guard<std::mutex> slot_lock(slot->mu);
      busy = slot->busy;
    }
    it = busy ? std::next(it) : slots_.erase(it);
  }
  log(LogLevel::kInfo, fmt::format("cleared {} cache entries from {}", removed, dir_.empty() ? "memory" : dir_));
  return removed;
}

}  // namespace fa3jit

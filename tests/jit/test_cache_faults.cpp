// Faults the cache must survive with correct results and one clear warning (jit/cubin_cache.cpp, docs/reliability.md):
// a full disk (a write failure injected with RLIMIT_FSIZE, which needs no mount), read-only and foreign-owned
// directories even when the tests run as root (a child process drops to an unprivileged user first), an entry of
// an older entry format at the key's own name, and entries of another NVRTC or generator version. Each fault runs
// in a forked child where it changes process state (rlimits, user ids); the child reports through its exit code and
// stderr. Compiles are faked; no NVRTC or GPU needed.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/log.h"
#include "jit/cubin_cache.h"
#include "temp_dir.h"

using namespace fa3jit;
namespace fs = std::filesystem;

namespace {

constexpr uid_t kNobody = 65534;

CompiledKernel kernel_named(const std::string& name) {
  CompiledKernel k;
  k.kernel_name = name;
  k.entries = {{name, {}}};
  k.cubin = std::string(4096, '\0') + "cubin-of-" + name;  // larger than the injected file size limit
  k.log = "ptxas info: " + name;
  return k;
}

std::string key_of(const std::string& spec, const char* nvrtc = "13.0", const char* generator = "gen-test") {
  return cache_key(spec, "src", {"-x"}, nvrtc, "sm_90a", generator);
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().filename().string());
  return out;
}

// What a child checks; it prints the failures and exits with their count (0: every check held).
struct ChildChecks {
  int failures = 0;
  void expect(bool ok, const std::string& what) {
    if (!ok) {
      std::fprintf(stderr, "child check failed: %s\n", what.c_str());
      ++failures;
    }
  }
};

// Warning lines of the log, counted by substring.
struct WarnCounter {
  std::vector<std::string> lines;
  WarnCounter() {
    set_log_level(LogLevel::kWarn);
    set_log_sink([this](LogLevel level, const std::string& message) {
      if (level == LogLevel::kWarn) lines.push_back(message);
    });
  }
  ~WarnCounter() { set_log_sink({}); }
  int count(const std::string& needle) const {
    int n = 0;
    for (const std::string& line : lines) n += line.find(needle) != std::string::npos ? 1 : 0;
    return n;
  }
};

// Runs `body` in a forked child and returns its exit status (-1 if it did not exit normally).
int in_child(const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 100;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child threw: %s\n", e.what());
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Drops the child to an unprivileged user (when it runs as root); false when that is not possible.
bool drop_to_nobody() {
  if (::geteuid() != 0) return true;  // already unprivileged
  return ::setgid(kNobody) == 0 && ::setuid(kNobody) == 0;
}

}  // namespace

TEST_CASE("a full disk (write failure injected) keeps kernels in memory, leaves no temp file and warns once",
          "[cache][faults]") {
  fa3jit::test::TempDir tmp;
  const std::string dir = tmp.path + "/cache";
  const int status = in_child([&] {
    ChildChecks c;
    WarnCounter warnings;
    CubinCache cache(dir);  // creates the directory and passes its 1-byte write test
    c.expect(cache.persistent(), "the directory passed the write test");
    // Any write past 1 KiB now fails with EFBIG, as writes on a full disk fail with ENOSPC.
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{1024, 1024};
    c.expect(::setrlimit(RLIMIT_FSIZE, &limit) == 0, "setrlimit(RLIMIT_FSIZE)");
    for (const char* spec : {"full-a", "full-b", "full-a"}) {
      const CacheLookup r = cache.get_or_compile(key_of(spec), [&] { return kernel_named(spec); });
      c.expect(r.kernel && r.kernel->cubin == kernel_named(spec).cubin, std::string("the kernel of ") + spec);
      c.expect(!cache.stored(key_of(spec)), std::string(spec) + " is not on disk");
    }
    c.expect(cache.get_or_compile(key_of("full-a"), [] { return kernel_named("wrong"); }).hit, "memory hit");
    for (const std::string& name : names_in(dir)) c.expect(name.rfind(".tmp-", 0) != 0, "temp file left: " + name);
    c.expect(warnings.count("could not write cache entry") == 1,
             "one warning for the failed writes, got " + std::to_string(warnings.count("could not write")));
    return c.failures;
  });
  CHECK(status == 0);
  // Space again (a new process without the limit): the same kernels are compiled and published.
  CubinCache cache(dir);
  const CacheLookup r = cache.get_or_compile(key_of("full-a"), [] { return kernel_named("full-a"); });
  CHECK_FALSE(r.hit);
  CHECK(r.kernel->cubin == kernel_named("full-a").cubin);
  CHECK(cache.stored(key_of("full-a")));
}

TEST_CASE("read-only and foreign-owned cache directories serve correct kernels with one warning, also for root",
          "[cache][faults]") {
  fa3jit::test::TempDir tmp;
  REQUIRE(::chmod(tmp.path.c_str(), 0755) == 0);
  // Written by this user: one entry, then the directory's write permission is taken away.
  const std::string readonly = tmp.path + "/readonly";
  { CubinCache(readonly).get_or_compile(key_of("ro-old"), [] { return kernel_named("ro-old"); }); }
  REQUIRE(::chmod(readonly.c_str(), 0555) == 0);
  const bool root = ::geteuid() == 0;

  // Read-only: a child that cannot write there (root drops to nobody and owns the directory first).
  if (root) REQUIRE(::chown(readonly.c_str(), kNobody, kNobody) == 0);
  if (root) REQUIRE(::chown((readonly + "/" + key_of("ro-old") + ".cubin-entry").c_str(), kNobody, kNobody) == 0);
  const int ro = in_child([&] {
    ChildChecks c;
    if (!drop_to_nobody()) return 90;
    WarnCounter warnings;
    CubinCache cache(readonly);
    c.expect(!cache.persistent(), "a read-only directory is not written");
    const CacheLookup old_entry = cache.get_or_compile(key_of("ro-old"), [] { return kernel_named("wrong"); });
    c.expect(old_entry.from_disk && old_entry.kernel->cubin == kernel_named("ro-old").cubin, "its entry is served");
    const CacheLookup fresh = cache.get_or_compile(key_of("ro-new"), [] { return kernel_named("ro-new"); });
    c.expect(!fresh.hit && fresh.kernel->cubin == kernel_named("ro-new").cubin, "a new kernel is compiled");
    c.expect(!cache.stored(key_of("ro-new")), "nothing is written");
    c.expect(warnings.count("not writable") == 1, "one warning, got " + std::to_string(warnings.lines.size()));
    return c.failures;
  });
  if (ro == 90) {
    WARN("skipped: the child could not drop to uid " << kNobody);
  } else {
    CHECK(ro == 0);
  }

  // Foreign-owned: a directory of another user (root's, seen by nobody; or nobody's... seen by this user) is not
  // trusted, so even its entries are not read.
  if (root) {
    const std::string foreign = tmp.path + "/foreign";
    { CubinCache(foreign).get_or_compile(key_of("foreign"), [] { return kernel_named("planted"); }); }
    REQUIRE(::chmod(foreign.c_str(), 0755) == 0);
    const int fo = in_child([&] {
      ChildChecks c;
      if (!drop_to_nobody()) return 90;
      WarnCounter warnings;
      CubinCache cache(foreign);
      c.expect(!cache.persistent(), "a foreign-owned directory is not used");
      const CacheLookup r = cache.get_or_compile(key_of("foreign"), [] { return kernel_named("foreign"); });
      c.expect(!r.hit && r.kernel->cubin == kernel_named("foreign").cubin, "the entry of another user is not served");
      c.expect(warnings.count("owned by another user") == 1, "one warning, got " +
                                                                  std::to_string(warnings.lines.size()));
      return c.failures;
    });
    if (fo != 90) CHECK(fo == 0);
  }
}

TEST_CASE("an entry of an older entry format at the key's name is rebuilt with one warning", "[cache][faults]") {
  fa3jit::test::TempDir tmp;
  const std::string key = key_of("old-format");
  { CubinCache(tmp.path).get_or_compile(key, [] { return kernel_named("old-format"); }); }
  const std::string path = tmp.path + "/" + key + ".cubin-entry";
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  REQUIRE(bytes.size() > 12);
  bytes[8] = 1;  // u32 format version after the 8-byte magic: an older generator's entry format
  { std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size())); }
  WarnCounter warnings;
  CubinCache cache(tmp.path);
  int compiles = 0;
  const CacheLookup r = cache.get_or_compile(key, [&] {
    ++compiles;
    return kernel_named("old-format");
  });
  CHECK_FALSE(r.hit);
  CHECK(compiles == 1);
  CHECK(r.kernel->cubin == kernel_named("old-format").cubin);
  CHECK(warnings.count("format version 1") == 1);
  CHECK(cache.stored(key));
  CHECK(CubinCache(tmp.path).get_or_compile(key, [] { return kernel_named("wrong"); }).from_disk);
}

TEST_CASE("entries of another NVRTC or generator version are never served and stay until cache clear",
          "[cache][faults]") {
  fa3jit::test::TempDir tmp;
  const std::string spec = "same-spec";
  const std::string old_nvrtc = key_of(spec, "12.8"), old_generator = key_of(spec, "13.0", "gen-old");
  const std::string current = key_of(spec);
  CHECK(old_nvrtc != current);
  CHECK(old_generator != current);
  {
    CubinCache writer(tmp.path);
    writer.get_or_compile(old_nvrtc, [] { return kernel_named("built-by-nvrtc-12.8"); });
    writer.get_or_compile(old_generator, [] { return kernel_named("built-by-gen-old"); });
  }
  WarnCounter warnings;
  CubinCache cache(tmp.path);
  const CacheLookup r = cache.get_or_compile(current, [] { return kernel_named("current"); });
  CHECK_FALSE(r.hit);
  CHECK(r.kernel->cubin == kernel_named("current").cubin);
  CHECK(warnings.lines.empty());  // an upgrade is no fault: the old entries are simply other keys
  CHECK(cache.list().size() == 3);
  CHECK(cache.clear() == 3);
  CHECK(cache.list().empty());
}

// What the cache does to files in its directory (jit/cubin_cache.cpp): it removes only temp files of its own
// naming whose writer will never rename them (a writer killed between write and rename), leaves every other
// file alone, and inspection (list, clear) creates nothing. Compiles are faked; no NVRTC or GPU needed.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>

#include "jit/cubin_cache.h"
#include "temp_dir.h"

using namespace fa3jit;
namespace fs = std::filesystem;

namespace {

CompiledKernel kernel_named(const std::string& name) {
  CompiledKernel k;
  k.kernel_name = name;
  k.entries = {{name, {}}};
  k.cubin = "cubin-of-" + name;
  return k;
}

std::string key_of(const char* spec) { return cache_key(spec, "src", {"-x"}, "13.0", "sm_90a", "gen-test"); }

// A pid that no process has: a child that has exited and been reaped (pids are not reused that quickly).
pid_t dead_pid() {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  return child;
}

// A file of `bytes` bytes whose modification time is `age_seconds` in the past.
void make_file(const std::string& path, int age_seconds, size_t bytes = 1000) {
  std::ofstream(path, std::ios::binary) << std::string(bytes, 'x');
  const timespec when[2] = {{std::time(nullptr) - age_seconds, 0}, {std::time(nullptr) - age_seconds, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), when, 0) == 0);
}

bool exists(const std::string& path) { return fs::exists(fs::symlink_status(path)); }

}  // namespace

TEST_CASE("a publish removes temp files of dead writers and nothing else", "[cache][files]") {
  test::TempDir dir;
  const std::string key = key_of("other");
  const std::string hex = "0123456789abcdef";
  const std::string dead = std::to_string(dead_pid());
  const std::string alive = std::to_string(::getpid());
  const std::string orphan = dir.path + "/.tmp-" + key + "-" + dead + "-" + hex;         // killed writer
  const std::string orphan_probe = dir.path + "/.tmp-probe-" + dead + "-" + hex;         // killed write test
  const std::string fresh = dir.path + "/.tmp-" + key + "-" + dead + "-fedcba9876543210";  // < 5 s old
  const std::string live = dir.path + "/.tmp-" + key + "-" + alive + "-" + hex;           // writer alive
  const std::string user_file = dir.path + "/.tmp-notes";                                 // not ours
  const std::string near_miss = dir.path + "/.tmp-" + key + "-" + dead + "-" + hex + "x";  // not our name
  make_file(orphan, 30, 1 << 20);
  make_file(orphan_probe, 30);
  make_file(fresh, 0);
  make_file(live, 30);
  make_file(user_file, 3600);
  make_file(near_miss, 30);

  CubinCache cache(dir.path);
  REQUIRE(cache.persistent());
  const CacheLookup r = cache.get_or_compile(key_of("new"), [] { return kernel_named("kernel_new"); });
  CHECK(cache.stored(r.key));
  CHECK_FALSE(exists(orphan));
  CHECK_FALSE(exists(orphan_probe));
  CHECK(exists(fresh));
  CHECK(exists(live));
  CHECK(exists(user_file));
  CHECK(exists(near_miss));
}

TEST_CASE("cache clear removes entries and stale temp files of its own naming only", "[cache][files]") {
  test::TempDir dir;
  const std::string key = key_of("x");
  const std::string alive = std::to_string(::getpid());
  const std::string user_files[] = {dir.path + "/.tmp-notes", dir.path + "/.tmp-", dir.path + "/.tmp-probe-1-2",
                                    dir.path + "/.tmp-" + key + "-0" + alive + "-0123456789abcdef",
                                    dir.path + "/.tmp-" + key.substr(1) + "-" + alive + "-0123456789abcdef",
                                    dir.path + "/notes.txt"};
  for (const std::string& f : user_files) make_file(f, 3600);
  {
    CubinCache writer(dir.path);
    writer.get_or_compile(key, [] { return kernel_named("kernel_x"); });
  }
  // Made after the publish (which would remove it): its writer is alive, but it is older than any publish.
  const std::string old_temp = dir.path + "/.tmp-" + key + "-" + alive + "-0123456789abcdef";
  make_file(old_temp, 3600);
  CubinCache cache(dir.path, CacheOpen::kExisting);
  CHECK(cache.clear() == 1);
  CHECK_FALSE(exists(old_temp));
  for (const std::string& f : user_files) {
    INFO(f);
    CHECK(exists(f));
  }
}

TEST_CASE("listing or clearing a missing cache directory creates nothing", "[cache][files]") {
  test::TempDir dir;
  const std::string missing = dir.path + "/typo/fa3jit";
  {
    CubinCache cache(missing, CacheOpen::kExisting);
    CHECK_FALSE(cache.exists());
    CHECK_FALSE(cache.persistent());
    CHECK(cache.list().empty());
    CHECK(cache.clear() == 0);
    CHECK_FALSE(cache.stored(key_of("x")));
  }
  CHECK_FALSE(exists(dir.path + "/typo"));
  // An existing directory is inspected without a test file being written into it.
  CubinCache existing(dir.path, CacheOpen::kExisting);
  CHECK(existing.exists());
  CHECK(existing.persistent());
  CHECK(fs::is_empty(dir.path));
  // Writers create the directory chain.
  CubinCache writer(missing);
  CHECK(writer.exists());
  CHECK(writer.persistent());
  CHECK(fs::is_directory(missing));
}

TEST_CASE("stored() says whether an entry reached the disk", "[cache][files]") {
  test::TempDir dir;
  fs::permissions(dir.path, fs::perms::all);  // writable by others: memory only
  CubinCache memory(dir.path);
  REQUIRE_FALSE(memory.persistent());
  const CacheLookup r = memory.get_or_compile(key_of("m"), [] { return kernel_named("kernel_m"); });
  CHECK_FALSE(memory.stored(r.key));
  fs::permissions(dir.path, fs::perms::owner_all);
  CubinCache disk(dir.path);
  REQUIRE(disk.persistent());
  CHECK_FALSE(disk.stored(r.key));
  disk.get_or_compile(r.key, [] { return kernel_named("kernel_m"); });
  CHECK(disk.stored(r.key));
  CHECK_FALSE(disk.stored("not-a-key"));
}

// The cache never serves an entry it cannot trust: a relabelled entry (another key written into its
// header), a FIFO or other non-regular file at an entry's name (must not block), and any entry of a
// directory that other users can write to. Compiles are faked; no NVRTC or GPU needed.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "jit/cubin_cache.h"
#include "temp_dir.h"

using namespace fa3jit;
namespace fs = std::filesystem;

namespace {

using ScratchDir = fa3jit::test::TempDir;

CompiledKernel kernel_named(const std::string& name) {
  CompiledKernel k;
  k.kernel_name = name;
  k.entries = {{name, {}}};
  k.cubin = std::string("\x7f" "ELF-cubin-of-") + name;
  k.ptx = ".entry " + name;
  return k;
}

std::string entry_path(const std::string& dir, const std::string& key) { return dir + "/" + key + ".cubin-entry"; }

std::string key_of(const char* spec) { return cache_key(spec, "src", {"-x"}, "13.0", "sm_90a", "gen-test"); }

}  // namespace

TEST_CASE("an entry relabelled with another key is not served", "[cache]") {
  ScratchDir dir;
  const std::string key_a = key_of("A"), key_b = key_of("B");
  {
    CubinCache cache(dir.path);
    REQUIRE(cache.persistent());
    cache.get_or_compile(key_a, [] { return kernel_named("kernel_a"); });
  }
  // Copy A's entry to B's name with B's key written over A's key in its header.
  std::ifstream in(entry_path(dir.path, key_a), std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  std::string text = bytes.str();
  const auto at = text.find(key_a);
  REQUIRE(at != std::string::npos);
  text.replace(at, key_a.size(), key_b);
  std::ofstream(entry_path(dir.path, key_b), std::ios::binary) << text;

  CubinCache cache(dir.path);
  int calls = 0;
  const CacheLookup r = cache.get_or_compile(key_b, [&] {
    ++calls;
    return kernel_named("kernel_b");
  });
  CHECK(calls == 1);
  CHECK_FALSE(r.hit);
  CHECK(r.kernel->kernel_name == "kernel_b");
}

TEST_CASE("a FIFO at an entry's name neither blocks nor is served", "[cache]") {
  ScratchDir dir;
  const std::string key = key_of("fifo");
  REQUIRE(::mkfifo(entry_path(dir.path, key).c_str(), 0600) == 0);
  CubinCache cache(dir.path);
  int calls = 0;
  const auto start = std::chrono::steady_clock::now();
  const CacheLookup r = cache.get_or_compile(key, [&] {
    ++calls;
    return kernel_named("kernel_fifo");
  });
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK(calls == 1);
  CHECK(r.kernel->kernel_name == "kernel_fifo");
}

TEST_CASE("a directory writable by others is used from memory only", "[cache]") {
  ScratchDir dir;
  const std::string key = key_of("shared");
  {
    CubinCache cache(dir.path);
    cache.get_or_compile(key, [] { return kernel_named("planted"); });
  }
  REQUIRE(fs::exists(entry_path(dir.path, key)));
  REQUIRE(::chmod(dir.path.c_str(), 0777) == 0);
  CubinCache cache(dir.path);
  CHECK_FALSE(cache.persistent());
  int calls = 0;
  const CacheLookup r = cache.get_or_compile(key, [&] {
    ++calls;
    return kernel_named("fresh");
  });
  CHECK(calls == 1);  // the entry already on disk is not trusted
  CHECK(r.kernel->kernel_name == "fresh");
}

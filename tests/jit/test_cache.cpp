// Tests of runtime/cubin_cache: keys, on-disk entries, corruption handling, single-flight, fallbacks.
// Compiles are faked (known bytes, counted calls) so the tests need neither NVRTC nor a GPU.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "core/error.h"
#include "jit/cubin_cache.h"
#include "core/log.h"
#include "temp_dir.h"

using namespace fa3jit;
namespace fs = std::filesystem;

namespace {

using fa3jit::test::TempDir;

CompiledKernel fake_kernel(const std::string& name, const std::string& tag) {
  CompiledKernel k;
  k.kernel_name = name;
  k.cubin = std::string("\x7f" "ELF") + "CUBIN-" + tag + "-";
  for (int i = 0; i < 256; ++i) k.cubin.push_back(static_cast<char>(i));  // every byte value, NUL included
  k.ptx = ".visible .entry " + name + "(\n)";
  k.report.registers = 168;
  k.report.spill_store_bytes = 0;
  k.report.spill_load_bytes = 4;
  k.report.stack_frame_bytes = 16;
  k.report.static_smem_bytes = 9216;
  k.report.barriers = 1;
  k.entries = {{name, k.report}};
  k.log = "ptxas info    : Used 168 registers for " + tag;
  k.compile_ms = 12.5;
  return k;
}

// A fake compile function that counts its calls.
struct FakeCompiler {
  std::atomic<int> calls{0};
  std::string name;
  std::string tag;
  FakeCompiler(std::string n, std::string t) : name(std::move(n)), tag(std::move(t)) {}
  std::function<CompiledKernel()> fn() {
    return [this] {
      ++calls;
      return fake_kernel(name, tag);
    };
  }
};

std::string key_for(const std::string& spec) {
  return cache_key(spec, "source", {"--gpu-architecture=sm_90a"}, "13.0", "sm_90a", "gen-test");
}

std::string entry_path(const std::string& dir, const std::string& key) { return dir + "/" + key + ".cubin-entry"; }

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::string> temp_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind(".tmp-", 0) == 0) out.push_back(e.path().filename().string());
  }
  return out;
}

void check_equal(const CompiledKernel& a, const CompiledKernel& b) {
  CHECK(a.kernel_name == b.kernel_name);
  CHECK(a.cubin == b.cubin);
  CHECK(a.ptx == b.ptx);
  CHECK(a.log == b.log);
  CHECK(a.compile_ms == b.compile_ms);
  CHECK(a.report.registers == b.report.registers);
  CHECK(a.report.spill_store_bytes == b.report.spill_store_bytes);
  CHECK(a.report.spill_load_bytes == b.report.spill_load_bytes);
  CHECK(a.report.stack_frame_bytes == b.report.stack_frame_bytes);
  CHECK(a.report.static_smem_bytes == b.report.static_smem_bytes);
  CHECK(a.report.barriers == b.report.barriers);
  REQUIRE(a.entries.size() == b.entries.size());
  for (size_t i = 0; i < a.entries.size(); ++i) {
    const ResourceReport& x = a.entries[i].report;
    const ResourceReport& y = b.entries[i].report;
    CHECK(a.entries[i].name == b.entries[i].name);
    CHECK(x.registers == y.registers);
    CHECK(x.spill_store_bytes == y.spill_store_bytes);
    CHECK(x.spill_load_bytes == y.spill_load_bytes);
    CHECK(x.stack_frame_bytes == y.stack_frame_bytes);
    CHECK(x.static_smem_bytes == y.static_smem_bytes);
    CHECK(x.barriers == y.barriers);
  }
}

// Captures log lines at the given level for the lifetime of the object.
struct LogCapture {
  std::mutex mu;
  std::vector<std::pair<LogLevel, std::string>> lines;
  LogLevel saved_level;
  explicit LogCapture(LogLevel level) : saved_level(log_level()) {
    set_log_level(level);
    set_log_sink([this](LogLevel lv, const std::string& msg) {
      std::lock_guard<std::mutex> lock(mu);
      lines.emplace_back(lv, msg);
    });
  }
  ~LogCapture() {
    set_log_sink({});
    set_log_level(saved_level);
  }
  int count(LogLevel level, const std::string& needle) {
    std::lock_guard<std::mutex> lock(mu);
    int n = 0;
    for (const auto& [lv, msg] : lines) n += (lv == level && msg.find(needle) != std::string::npos) ? 1 : 0;
    return n;
  }
};

// Forks `n` children that start together (each blocks on a pipe until the parent closes it) and run `child`,
// whose return value is the child's exit status (an exception exits 2; no Catch2 teardown in a child). Returns how
// many children exited 0.
int processes_together(int n, const std::function<int()>& child) {
  int go[2];
  REQUIRE(::pipe(go) == 0);
  std::vector<pid_t> children;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(go[1]);
      char c;
      while (::read(go[0], &c, 1) < 0) {}  // EOF once the parent closes its end: all start together
      int status = 3;
      try {
        status = child();
      } catch (...) {
        status = 2;
      }
      ::_exit(status);
    }
    children.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);
  int ok = 0;
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    ok += (WIFEXITED(status) && WEXITSTATUS(status) == 0) ? 1 : 0;
  }
  return ok;
}

}  // namespace

TEST_CASE("sha256_hex matches the FIPS 180-2 test vectors", "[cache]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("cache_key changes with every input and only with them", "[cache]") {
  const std::vector<std::string> flags = {"--gpu-architecture=sm_90a", "-Xptxas=-v"};
  const std::string base = cache_key("{\"head_dim\":128}", "src", flags, "13.0", "sm_90a", "fa3jit-gen-1");
  CHECK(base.size() == 64);
  CHECK(base == cache_key("{\"head_dim\":128}", "src", flags, "13.0", "sm_90a", "fa3jit-gen-1"));  // stable
  std::set<std::string> keys = {
      base,
      cache_key("{\"head_dim\":64}", "src", flags, "13.0", "sm_90a", "fa3jit-gen-1"),
      cache_key("{\"head_dim\":128}", "src2", flags, "13.0", "sm_90a", "fa3jit-gen-1"),
      cache_key("{\"head_dim\":128}", "src", {"--gpu-architecture=sm_90a"}, "13.0", "sm_90a", "fa3jit-gen-1"),
      cache_key("{\"head_dim\":128}", "src", flags, "13.1", "sm_90a", "fa3jit-gen-1"),   // B9: NVRTC version
      cache_key("{\"head_dim\":128}", "src", flags, "13.0", "sm_100a", "fa3jit-gen-1"),  // B9: architecture
      cache_key("{\"head_dim\":128}", "src", flags, "13.0", "sm_90a", "fa3jit-gen-2"),   // B11: generator
  };
  CHECK(keys.size() == 7);
  // Length prefixes: moving bytes between fields or splitting a flag gives a different key.
  CHECK(cache_key("ab", "c", {}, "v", "a", "g") != cache_key("a", "bc", {}, "v", "a", "g"));
  CHECK(cache_key("s", "c", {"ab"}, "v", "a", "g") != cache_key("s", "c", {"a", "b"}, "v", "a", "g"));
  CHECK(cache_key("s", "c", {}, "v", "a", "g") != cache_key("s", "c", {""}, "v", "a", "g"));
}

TEST_CASE("default_cache_dir follows FA3JIT_CACHE_DIR, XDG_CACHE_HOME, HOME", "[cache]") {
  const auto saved = [](const char* n) -> std::optional<std::string> {
    const char* v = std::getenv(n);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  const auto restore = [](const char* n, const std::optional<std::string>& v) {
    if (v) {
      ::setenv(n, v->c_str(), 1);
    } else {
      ::unsetenv(n);
    }
  };
  const auto a = saved("FA3JIT_CACHE_DIR"), x = saved("XDG_CACHE_HOME"), h = saved("HOME");
  ::setenv("FA3JIT_CACHE_DIR", "/c/dir", 1);
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  ::setenv("HOME", "/home/u", 1);
  CHECK(default_cache_dir() == "/c/dir");
  ::unsetenv("FA3JIT_CACHE_DIR");
  CHECK(default_cache_dir() == "/xdg/fa3jit");
  ::setenv("XDG_CACHE_HOME", "relative", 1);  // invalid per the XDG spec: ignored
  CHECK(default_cache_dir() == "/home/u/.cache/fa3jit");
  ::unsetenv("XDG_CACHE_HOME");
  ::unsetenv("HOME");
  CHECK(default_cache_dir().empty());
  restore("FA3JIT_CACHE_DIR", a);
  restore("XDG_CACHE_HOME", x);
  restore("HOME", h);
}

TEST_CASE("miss, then memory hit, then disk hit from a new cache object", "[cache]") {
  TempDir tmp;
  FakeCompiler fc("fa3jit_fwd_test", "one");
  const std::string key = key_for("spec-1");
  {
    CubinCache cache(tmp.path);
    CHECK(cache.persistent());
    CHECK(cache.directory() == tmp.path);
    const CacheLookup first = cache.get_or_compile(key, fc.fn());
    CHECK(fc.calls == 1);
    CHECK_FALSE(first.hit);
    CHECK(first.key == key);
    REQUIRE(first.kernel);
    check_equal(*first.kernel, fake_kernel("fa3jit_fwd_test", "one"));
    CHECK(fs::exists(entry_path(tmp.path, key)));
    CHECK(temp_files(tmp.path).empty());

    const CacheLookup second = cache.get_or_compile(key, fc.fn());
    CHECK(fc.calls == 1);
    CHECK(second.hit);
    CHECK_FALSE(second.from_disk);
    CHECK(second.kernel == first.kernel);
  }
  CubinCache reopened(tmp.path);
  const CacheLookup third = reopened.get_or_compile(key, fc.fn());
  CHECK(fc.calls == 1);
  CHECK(third.hit);
  CHECK(third.from_disk);
  REQUIRE(third.kernel);
  check_equal(*third.kernel, fake_kernel("fa3jit_fwd_test", "one"));

  const std::vector<CacheEntryInfo> entries = reopened.list();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].key == key);
  CHECK(entries[0].kernel_name == "fa3jit_fwd_test");
  CHECK(entries[0].bytes == static_cast<int64_t>(fs::file_size(entry_path(tmp.path, key))));
}

TEST_CASE("a kernel of several entry points comes back from disk with each entry's report", "[cache]") {
  TempDir tmp;
  CompiledKernel k = fake_kernel("fa3jit_passes", "passes");
  ResourceReport small;
  small.registers = 40;
  small.spill_store_bytes = small.spill_load_bytes = small.stack_frame_bytes = small.barriers = 0;
  small.static_smem_bytes = 0;
  k.entries = {{"fa3jit_passes_a", k.report}, {"fa3jit_passes_b", small}};
  const std::string key = key_for("spec-passes");
  CubinCache(tmp.path).get_or_compile(key, [&] { return k; });
  const CacheLookup back = CubinCache(tmp.path).get_or_compile(key, [] { return fake_kernel("wrong", "wrong"); });
  CHECK(back.from_disk);
  REQUIRE(back.kernel);
  check_equal(*back.kernel, k);
  CHECK(back.kernel->entries[1].report.registers == 40);
  CHECK(back.kernel->report.registers == 168);  // the largest over the entries

  // A kernel of no entry points is a programming error, refused before it is written.
  CompiledKernel none = fake_kernel("fa3jit_none", "none");
  none.entries.clear();
  CHECK_THROWS_AS(CubinCache(tmp.path).get_or_compile(key_for("spec-none"), [&] { return none; }), Error);
}

TEST_CASE("missing parent directories are created, private to the user", "[cache]") {
  TempDir tmp;
  const std::string nested = tmp.path + "/a/b/fa3jit/";
  CubinCache cache(nested);
  CHECK(cache.persistent());
  CHECK(cache.directory() == tmp.path + "/a/b/fa3jit");  // trailing slash dropped
  CHECK(fs::is_directory(cache.directory()));
  CHECK((fs::status(cache.directory()).permissions() & (fs::perms::group_all | fs::perms::others_all)) ==
        fs::perms::none);
  FakeCompiler fc("k_nested", "n");
  cache.get_or_compile(key_for("nested"), fc.fn());
  CHECK(fs::exists(entry_path(cache.directory(), key_for("nested"))));
  CHECK(temp_files(cache.directory()).empty());  // the write probe leaves nothing behind
}

TEST_CASE("torn or corrupted entries are rebuilt, never served (B6)", "[cache]") {
  TempDir tmp;
  FakeCompiler fc("fa3jit_fwd_b6", "good");
  const std::string key = key_for("spec-b6");
  { CubinCache(tmp.path).get_or_compile(key, fc.fn()); }
  const std::string path = entry_path(tmp.path, key);
  const std::string good = read_bytes(path);
  REQUIRE(good.size() > 300);

  std::string flipped = good;
  const size_t cubin_at = flipped.find("CUBIN-good-");
  REQUIRE(cubin_at != std::string::npos);
  flipped[cubin_at + 20] ^= 0x01;

  const std::vector<std::pair<const char*, std::string>> damaged = {
      {"truncated", good.substr(0, good.size() / 2)},
      {"zero-length", std::string()},
      {"header only", good.substr(0, 40)},
      {"one flipped cubin byte", flipped},
      {"trailing garbage", good + "xx"},
  };
  int expected_calls = 1;
  for (const auto& [what, bytes] : damaged) {
    INFO(what);
    write_bytes(path, bytes);
    LogCapture logs(LogLevel::kInfo);
    CubinCache cache(tmp.path);
    const CacheLookup r = cache.get_or_compile(key, fc.fn());
    ++expected_calls;
    CHECK(fc.calls == expected_calls);
    CHECK_FALSE(r.hit);
    check_equal(*r.kernel, fake_kernel("fa3jit_fwd_b6", "good"));
    CHECK(read_bytes(path) == good);  // overwritten with a valid entry
    CHECK(logs.count(LogLevel::kWarn, "rejected") == 1);  // one warning per cache
  }
}

TEST_CASE("an entry renamed onto another key is not served (foreign entry)", "[cache]") {
  TempDir tmp;
  FakeCompiler fa("kernel_a", "A");
  FakeCompiler fb("kernel_b", "B");
  const std::string key_a = key_for("spec-a");
  const std::string key_b = key_for("spec-b");
  { CubinCache(tmp.path).get_or_compile(key_a, fa.fn()); }
  fs::copy_file(entry_path(tmp.path, key_a), entry_path(tmp.path, key_b));

  CubinCache cache(tmp.path);
  CHECK(cache.list().size() == 1);  // the foreign file is not listed as an entry for key_b
  const CacheLookup r = cache.get_or_compile(key_b, fb.fn());
  CHECK(fb.calls == 1);
  CHECK_FALSE(r.hit);
  CHECK(r.kernel->kernel_name == "kernel_b");
  CHECK(cache.list().size() == 2);
}

TEST_CASE("concurrent lookups of one key compile once", "[cache]") {
  for (int threads : {2, 8}) {
    TempDir tmp;
    CubinCache cache(tmp.path);
    std::atomic<int> calls{0};
    const std::string key = key_for("spec-threads");
    std::latch start(threads);
    std::vector<CacheLookup> results(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        start.arrive_and_wait();
        results[t] = cache.get_or_compile(key, [&] {
          ++calls;
          std::this_thread::sleep_for(std::chrono::milliseconds(100));  // lets the others pile up
          return fake_kernel("k_threads", "t");
        });
      });
    }
    for (auto& th : pool) th.join();
    INFO("threads = " << threads);
    CHECK(calls == 1);
    int compiled = 0;
    for (const CacheLookup& r : results) {
      REQUIRE(r.kernel);
      CHECK(r.kernel == results[0].kernel);
      compiled += r.hit ? 0 : 1;
    }
    CHECK(compiled == 1);
  }
}

TEST_CASE("a slow compile of one key does not block another key", "[cache]") {
  TempDir tmp;
  CubinCache cache(tmp.path);
  std::promise<void> a_started;
  std::promise<void> b_done;
  std::future<void> b_done_future = b_done.get_future();
  bool a_saw_b_finish = false;

  std::thread a([&] {
    cache.get_or_compile(key_for("slow-a"), [&] {
      a_started.set_value();
      // Finishes as soon as B is done; the timeout only bounds a failing run.
      a_saw_b_finish = b_done_future.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
      return fake_kernel("k_a", "a");
    });
  });
  a_started.get_future().wait();
  const CacheLookup b = cache.get_or_compile(key_for("fast-b"), [] { return fake_kernel("k_b", "b"); });
  b_done.set_value();
  a.join();
  CHECK(b.kernel->kernel_name == "k_b");
  CHECK(a_saw_b_finish);
}

TEST_CASE("a failing compile reaches every waiter and a later call retries", "[cache]") {
  TempDir tmp;
  CubinCache cache(tmp.path);
  const std::string key = key_for("spec-fail");
  constexpr int kThreads = 4;
  std::atomic<int> calls{0};
  std::latch start(kThreads);
  std::atomic<int> errors{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&] {
      start.arrive_and_wait();
      try {
        cache.get_or_compile(key, [&]() -> CompiledKernel {
          ++calls;
          std::this_thread::sleep_for(std::chrono::milliseconds(150));
          throw Error(ErrorCode::kCompileFailed, "error: expected a \";\"");
        });
      } catch (const Error& e) {
        if (e.code() == ErrorCode::kCompileFailed && std::string(e.what()).find("expected") != std::string::npos) {
          ++errors;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  CHECK(errors == kThreads);
  CHECK(calls == 1);
  CHECK_FALSE(fs::exists(entry_path(tmp.path, key)));

  FakeCompiler fc("k_retry", "ok");
  const CacheLookup r = cache.get_or_compile(key, fc.fn());
  CHECK(fc.calls == 1);
  CHECK(r.kernel->kernel_name == "k_retry");
  CHECK(fs::exists(entry_path(tmp.path, key)));
}

TEST_CASE("bad keys and empty compile functions are rejected", "[cache]") {
  TempDir tmp;
  CubinCache cache(tmp.path);
  FakeCompiler fc("k", "k");
  for (const std::string& bad : {std::string(), std::string("../../etc/passwd"), std::string(64, 'G'),
                                 key_for("x").substr(1)}) {
    try {
      cache.get_or_compile(bad, fc.fn());
      FAIL("key accepted: " << bad);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidArgument);
      CHECK(std::string(e.what()).find("key") != std::string::npos);
    }
  }
  CHECK_THROWS_AS(cache.get_or_compile(key_for("x"), {}), Error);
  CHECK(fc.calls == 0);
}

TEST_CASE("cold compile logs key prefix, kernel and milliseconds at info; hits at debug (B12)", "[cache]") {
  TempDir tmp;
  LogCapture logs(LogLevel::kDebug);
  CubinCache cache(tmp.path);
  FakeCompiler fc("fa3jit_fwd_bf16_d128", "log");
  const std::string key = key_for("spec-log");
  cache.get_or_compile(key, fc.fn());
  CHECK(logs.count(LogLevel::kInfo, key.substr(0, 12)) == 1);
  CHECK(logs.count(LogLevel::kInfo, "fa3jit_fwd_bf16_d128") == 1);
  CHECK(logs.count(LogLevel::kInfo, " ms") == 1);
  CHECK(logs.count(LogLevel::kInfo, key.substr(0, 13)) == 0);  // a prefix, not the whole key
  cache.get_or_compile(key, fc.fn());
  CubinCache(tmp.path).get_or_compile(key, fc.fn());
  CHECK(logs.count(LogLevel::kDebug, "cache hit (memory)") == 1);
  CHECK(logs.count(LogLevel::kDebug, "cache hit (disk)") == 1);
  CHECK(logs.count(LogLevel::kInfo, "compiled") == 1);
}

TEST_CASE("an uncreatable cache directory falls back to memory and warns once (B8)", "[cache]") {
  TempDir tmp;
  write_bytes(tmp.path + "/file", "not a directory");
  LogCapture logs(LogLevel::kWarn);
  CubinCache cache(tmp.path + "/file/cache");
  CHECK_FALSE(cache.persistent());
  FakeCompiler fc("k_mem", "m");
  const std::string key = key_for("spec-mem");
  CHECK_FALSE(cache.get_or_compile(key, fc.fn()).hit);
  CHECK(cache.get_or_compile(key, fc.fn()).hit);
  cache.get_or_compile(key_for("spec-mem-2"), fc.fn());
  CHECK(fc.calls == 2);
  CHECK(logs.count(LogLevel::kWarn, "is not writable") == 1);
  CHECK(logs.count(LogLevel::kWarn, "memory only") == 1);
  CHECK(cache.list().empty());
}

TEST_CASE("a read-only cache directory serves its entries and works from memory (B8)", "[cache]") {
  TempDir tmp;
  FakeCompiler fc("k_ro", "ro");
  const std::string old_key = key_for("spec-ro-old");
  { CubinCache(tmp.path).get_or_compile(old_key, fc.fn()); }
  REQUIRE(::chmod(tmp.path.c_str(), 0555) == 0);
  const std::string probe = tmp.path + "/probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT, 0600);
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
    WARN("skipped: chmod 0555 does not stop this user (root?) from writing, so read-only cannot be tested");
    return;
  }
  LogCapture logs(LogLevel::kWarn);
  CubinCache cache(tmp.path);
  CHECK_FALSE(cache.persistent());
  const CacheLookup old_entry = cache.get_or_compile(old_key, fc.fn());
  CHECK(old_entry.from_disk);
  CHECK(fc.calls == 1);
  const std::string new_key = key_for("spec-ro-new");
  CHECK_FALSE(cache.get_or_compile(new_key, fc.fn()).hit);
  CHECK(cache.get_or_compile(new_key, fc.fn()).hit);
  CHECK(fc.calls == 2);
  CHECK_FALSE(fs::exists(entry_path(tmp.path, new_key)));
  CHECK(logs.count(LogLevel::kWarn, "is not writable") == 1);
  CHECK(cache.list().size() == 1);
}

TEST_CASE("processes racing on a cold cache all succeed and leave one valid entry (B7)", "[cache]") {
  TempDir tmp;
  const std::string key = key_for("spec-fork");
  constexpr int kChildren = 8;
  const int ok = processes_together(kChildren, [&] {
    CubinCache cache(tmp.path);
    const CacheLookup r = cache.get_or_compile(key, [] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return fake_kernel("k_fork", "fork");
    });
    const CompiledKernel expected = fake_kernel("k_fork", "fork");
    const bool good = cache.persistent() && r.kernel->cubin == expected.cubin && r.kernel->kernel_name == "k_fork";
    return good ? 0 : 1;
  });
  CHECK(ok == kChildren);
  CubinCache cache(tmp.path);
  const std::vector<CacheEntryInfo> entries = cache.list();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].key == key);
  CHECK(temp_files(tmp.path).empty());
  FakeCompiler fc("k_fork", "fork");
  const CacheLookup r = cache.get_or_compile(key, fc.fn());
  CHECK(r.from_disk);
  CHECK(fc.calls == 0);
  check_equal(*r.kernel, fake_kernel("k_fork", "fork"));
}

TEST_CASE("processes racing on a cold cache compile each key once between them", "[cache]") {
  TempDir tmp;
  TempDir counter_dir;  // one byte appended per compile, by whichever process compiles
  const std::string counter = counter_dir.path + "/compiles";
  const std::string key = key_for("spec-once-per-host");
  constexpr int kChildren = 8;
  const int ok = processes_together(kChildren, [&] {
    CubinCache cache(tmp.path);
    const CacheLookup r = cache.get_or_compile(key, [&] {
      const int fd = ::open(counter.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      if (fd >= 0) {
        (void)!::write(fd, "c", 1);
        ::close(fd);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(150));  // the others arrive meanwhile
      return fake_kernel("k_once", "once");
    });
    return r.kernel->cubin == fake_kernel("k_once", "once").cubin ? 0 : 1;
  });
  CHECK(ok == kChildren);
  CHECK(read_bytes(counter) == "c");  // compiled once, by one process; the seven others read its entry
  CubinCache cache(tmp.path);
  CHECK(cache.list().size() == 1);
  CHECK(temp_files(tmp.path).empty());
}

namespace {
// Holds the compile lock of `key` in `dir` as another process would (flock locks belong to an open file
// description, so a second open in this process contends with the cache's own).
struct HeldCompileLock {
  int fd;
  HeldCompileLock(const std::string& dir, const std::string& key)
      : fd(::open((dir + "/.lock-" + key).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    REQUIRE(fd >= 0);
    REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  }
  ~HeldCompileLock() { release(); }
  void release() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};
}  // namespace

TEST_CASE("a waiter reads the entry the compile lock's holder published and compiles nothing", "[cache]") {
  TempDir tmp;
  const std::string key = key_for("spec-waiter");
  HeldCompileLock other(tmp.path, key);
  FakeCompiler waiter_compiler("k_wait", "w");
  std::promise<CacheLookup> looked_up;
  std::thread waiter([&] {
    try {
      CubinCache cache(tmp.path);
      looked_up.set_value(cache.get_or_compile(key, waiter_compiler.fn()));
    } catch (...) {
      looked_up.set_exception(std::current_exception());
    }
  });
  std::future<CacheLookup> result = looked_up.get_future();
  CHECK(result.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout);  // blocked on the lock
  {
    // The holder's compile, published as its process would (a cache that does not wait for the lock it holds).
    CubinCache holder(tmp.path);
    holder.set_compile_lock_wait(std::chrono::milliseconds(0));
    FakeCompiler holder_compiler("k_wait", "w");
    holder.get_or_compile(key, holder_compiler.fn());
    CHECK(holder_compiler.calls == 1);
  }
  other.release();
  REQUIRE(result.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  const CacheLookup r = result.get();
  waiter.join();
  CHECK(r.from_disk);
  CHECK(waiter_compiler.calls == 0);
  check_equal(*r.kernel, fake_kernel("k_wait", "w"));
}

TEST_CASE("a waiter that locks a lock file clear() unlinked locks the one at the path instead", "[cache]") {
  TempDir tmp;
  const std::string key = key_for("spec-relinked-lock");
  const std::string path = tmp.path + "/.lock-" + key;
  auto first = std::make_unique<HeldCompileLock>(tmp.path, key);
  FakeCompiler waiter_compiler("k_relink", "r");
  std::promise<CacheLookup> looked_up;
  std::thread waiter([&] {
    try {
      CubinCache cache(tmp.path);
      looked_up.set_value(cache.get_or_compile(key, waiter_compiler.fn()));
    } catch (...) {
      looked_up.set_exception(std::current_exception());
    }
  });
  std::future<CacheLookup> result = looked_up.get_future();
  REQUIRE(result.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
  // As clear() would between the holder's release and the waiter's lock: the file goes, a newcomer makes and
  // locks a new one, then the first holder lets go.
  REQUIRE(::unlink(path.c_str()) == 0);
  HeldCompileLock second(tmp.path, key);
  first.reset();
  // The waiter now holds the unlinked file's lock, which guards nothing: it must wait for the one at the path.
  CHECK(result.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout);
  {
    CubinCache holder(tmp.path);
    holder.set_compile_lock_wait(std::chrono::milliseconds(0));
    FakeCompiler holder_compiler("k_relink", "r");
    holder.get_or_compile(key, holder_compiler.fn());
  }
  second.release();
  REQUIRE(result.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  const CacheLookup r = result.get();
  waiter.join();
  CHECK(r.from_disk);
  CHECK(waiter_compiler.calls == 0);
}

TEST_CASE("a compile lock held past compile_lock_wait delays a caller by that long, then it compiles", "[cache]") {
  TempDir tmp;
  const std::string key = key_for("spec-hung-holder");
  HeldCompileLock hung(tmp.path, key);  // a stopped process's lock: never released during the call
  CubinCache cache(tmp.path);
  CHECK(cache.compile_lock_wait() == std::chrono::milliseconds(60000));
  cache.set_compile_lock_wait(std::chrono::milliseconds(200));
  LogCapture logs(LogLevel::kWarn);
  FakeCompiler fc("k_hung", "h");
  const auto start = std::chrono::steady_clock::now();
  const CacheLookup r = cache.get_or_compile(key, fc.fn());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  CHECK(fc.calls == 1);
  CHECK_FALSE(r.hit);
  CHECK(ms >= 200);
  CHECK(ms < 5000);
  CHECK(cache.stored(key));  // published all the same: the rename keeps it whole
  CHECK(logs.count(LogLevel::kWarn, ".lock-" + key + " stayed locked") == 1);
}

TEST_CASE("compiling_elsewhere says whether another process holds a key's compile lock, without waiting", "[cache]") {
  TempDir tmp;
  const std::string key = key_for("spec-probe");
  CubinCache cache(tmp.path);
  CHECK_FALSE(cache.compiling_elsewhere(key));  // no lock file yet
  {
    HeldCompileLock other(tmp.path, key);
    const auto start = std::chrono::steady_clock::now();
    CHECK(cache.compiling_elsewhere(key));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
  }
  CHECK_FALSE(cache.compiling_elsewhere(key));  // released (the file stays)
  CHECK(fs::exists(tmp.path + "/.lock-" + key));
  CHECK_FALSE(cache.compiling_elsewhere("not-a-key"));
  CubinCache memory_only(tmp.path + "/missing/too", CacheOpen::kExisting);
  CHECK_FALSE(memory_only.compiling_elsewhere(key));
}

TEST_CASE("clear removes the lock files no process holds and keeps held ones", "[cache]") {
  TempDir tmp;
  CubinCache cache(tmp.path);
  FakeCompiler fc("k_locks", "l");
  cache.get_or_compile(key_for("l1"), fc.fn());
  cache.get_or_compile(key_for("l2"), fc.fn());
  const std::string lock1 = tmp.path + "/.lock-" + key_for("l1");
  const std::string lock2 = tmp.path + "/.lock-" + key_for("l2");
  REQUIRE(fs::exists(lock1));  // left by the compiles (never unlinked by their holder)
  REQUIRE(fs::exists(lock2));
  write_bytes(tmp.path + "/.lock-notes", "a user's file");  // not of the cache's naming: kept
  HeldCompileLock held(tmp.path, key_for("l2"));
  CHECK(cache.clear() == 2);
  CHECK_FALSE(fs::exists(lock1));
  CHECK(fs::exists(lock2));
  CHECK(fs::exists(tmp.path + "/.lock-notes"));
  CHECK(cache.list().empty());
}

TEST_CASE("clear removes entries and stale temp files, and forgets kernels in memory", "[cache]") {
  TempDir tmp;
  CubinCache cache(tmp.path);
  FakeCompiler fc("k_clear", "c");
  for (const char* s : {"c1", "c2", "c3"}) cache.get_or_compile(key_for(s), fc.fn());
  CHECK(cache.list().size() == 3);
  // Named as the cache names its temp files (.tmp-<key>-<pid>-<16 hex>): other names are never removed.
  const std::string stale = tmp.path + "/.tmp-" + key_for("c1") + "-1-00000000deaddead";
  const std::string fresh = tmp.path + "/.tmp-" + key_for("c2") + "-2-000000000000beef";
  write_bytes(stale, "partial");
  write_bytes(fresh, "partial");
  const struct timeval old_times[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
  REQUIRE(::utimes(stale.c_str(), old_times) == 0);

  CHECK(cache.clear() == 3);
  CHECK(cache.list().empty());
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(fresh));  // may belong to a publish in flight elsewhere
  cache.get_or_compile(key_for("c1"), fc.fn());
  CHECK(fc.calls == 4);
  CHECK(cache.list().size() == 1);
}

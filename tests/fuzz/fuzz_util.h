// Helpers shared by the libFuzzer harnesses of tests/fuzz (docs/reliability.md).
//
// A harness reports a broken promise with FUZZ_REQUIRE, which prints the reason and aborts: libFuzzer treats
// an abort like a crash and saves the input as crash-<sha1>. fa3jit::Error is the documented way to say no,
// so harnesses catch exactly that type; any other exception escapes and is reported as a finding.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#define FUZZ_REQUIRE(cond, ...)                                                    \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "\nFUZZ_REQUIRE(%s) failed at %s:%d: ", #cond, __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                                           \
      std::fprintf(stderr, "\n");                                                  \
      std::abort();                                                                \
    }                                                                              \
  } while (0)

namespace fa3jit::fuzz {

/// A private directory (mode 0700, as the cache's trust rule wants) on tmpfs when there is one: the cache
/// harness writes a file per input and fsyncs on every publish, which a disk would make the bottleneck.
/// Removed when the process exits normally (libFuzzer's -runs / -max_total_time end with exit()).
class ScratchDir {
 public:
  ScratchDir() {
    const char* env = std::getenv("TMPDIR");
    std::string base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (env != nullptr && *env ? env : "/tmp");
    std::string tmpl = base + "/fa3jit-fuzz-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace fa3jit::fuzz

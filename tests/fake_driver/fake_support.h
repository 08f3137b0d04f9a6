// What the fake-driver test files share: the fake driver's own functions (fake_cuda.h), found in the libcuda.so.1
// that LD_LIBRARY_PATH gives (the one the runtime dlopens too), the Params a recorded launch carried, and a
// temporary cache directory. Test code only; Catch2 must be included before.
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "fake_cuda.h"
#include "kernels/attention_combine/params.h"
#include "kernels/attention_fwd/params.h"

namespace fake_support {

struct FakeDriver {
  void* handle = nullptr;
  int (*last_launch)(FakeCudaLaunch*) = nullptr;
  int (*launch)(int, FakeCudaLaunch*) = nullptr;
  uint64_t (*alloc)(uint64_t) = nullptr;
  uint64_t (*alloc_on)(int, uint64_t) = nullptr;
  int (*device_count)() = nullptr;
  int (*make_current)(int) = nullptr;
  void (*set_param_bytes)(uint64_t) = nullptr;
  void (*set_max_active_clusters)(int) = nullptr;
};

/// The fake's functions, once per process. Launches then record the attention kernel's Params, and a combine
/// kernel's launch its own, smaller Params (a split call launches both). REQUIREs that libcuda.so.1 is the fake.
inline const FakeDriver& fake_driver() {
  static const FakeDriver f = [] {
    FakeDriver r;
    r.handle = dlopen("libcuda.so.1", RTLD_NOW);
    INFO("libcuda.so.1 is not loadable; run with LD_LIBRARY_PATH=<build>/fake_driver");
    REQUIRE(r.handle != nullptr);
    auto symbol = [&](const char* name) { return dlsym(r.handle, name); };
    r.last_launch = reinterpret_cast<int (*)(FakeCudaLaunch*)>(symbol("fake_cuda_last_launch"));
    r.launch = reinterpret_cast<int (*)(int, FakeCudaLaunch*)>(symbol("fake_cuda_launch"));
    r.alloc = reinterpret_cast<uint64_t (*)(uint64_t)>(symbol("fake_cuda_alloc"));
    r.alloc_on = reinterpret_cast<uint64_t (*)(int, uint64_t)>(symbol("fake_cuda_alloc_on"));
    r.device_count = reinterpret_cast<int (*)()>(symbol("fake_cuda_device_count"));
    r.make_current = reinterpret_cast<int (*)(int)>(symbol("fake_cuda_make_current"));
    r.set_param_bytes = reinterpret_cast<void (*)(uint64_t)>(symbol("fake_cuda_set_param_bytes"));
    r.set_max_active_clusters = reinterpret_cast<void (*)(int)>(symbol("fake_cuda_set_max_active_clusters"));
    auto set_param_bytes_for =
        reinterpret_cast<void (*)(const char*, uint64_t)>(symbol("fake_cuda_set_param_bytes_for"));
    INFO("the loaded libcuda.so.1 is not the fake driver; run with LD_LIBRARY_PATH=<build>/fake_driver");
    REQUIRE(r.last_launch != nullptr);
    REQUIRE(r.launch != nullptr);
    REQUIRE(r.alloc != nullptr);
    REQUIRE(r.alloc_on != nullptr);
    REQUIRE(r.device_count != nullptr);
    REQUIRE(r.make_current != nullptr);
    REQUIRE(r.set_param_bytes != nullptr);
    REQUIRE(r.set_max_active_clusters != nullptr);
    REQUIRE(set_param_bytes_for != nullptr);
    r.set_param_bytes(sizeof(fa3jit::attention_fwd::Params));
    set_param_bytes_for("fa3jit_attention_combine", sizeof(fa3jit::attention_combine::Params));
    return r;
  }();
  return f;
}

/// Launches so far.
inline int launch_count() { return fake_driver().last_launch(nullptr); }

/// The last launch; REQUIREs that there was one.
inline FakeCudaLaunch last_launch() {
  FakeCudaLaunch r{};
  REQUIRE(fake_driver().last_launch(&r) > 0);
  return r;
}

/// Launch number n (1-based, one of the last 8 kept); REQUIREs that it is kept.
inline FakeCudaLaunch launch_number(int n) {
  FakeCudaLaunch r{};
  REQUIRE(fake_driver().launch(n, &r) == 1);
  return r;
}

/// The attention kernel's Params a launch carried (for another kernel, its first bytes).
inline fa3jit::attention_fwd::Params params_of(const FakeCudaLaunch& r) {
  fa3jit::attention_fwd::Params p;
  std::memcpy(&p, r.params, sizeof(p));
  return p;
}

/// A fresh directory /tmp/<prefix>.XXXXXX (empty path when mkdtemp fails), removed with its contents at exit.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& prefix) {
    std::string tmpl = "/tmp/" + prefix + ".XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace fake_support

// A fresh directory under /tmp for one test, removed (with its permissions restored first) afterwards.
#pragma once

#include <catch2/catch.hpp>

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace fa3jit::test {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/fa3jit-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace fa3jit::test

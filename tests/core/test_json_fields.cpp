// Hostile spec text and spec files (core/json_fields.cpp): every one is a clear Error naming the field, the
// position or the file and the rule, never a crash or a hang. Deep documents run on a 256 KiB thread stack,
// where an unbounded recursion in the parser or in a message (show()) would crash the test.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

#include "../jit/temp_dir.h"
#include "../small_stack.h"
#include "core/error.h"
#include "core/json_fields.h"
#include "jit/family.h"

using namespace fa3jit;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using nlohmann::json;

namespace {

// {"dtype": [[[...]]]} with `depth` brackets: about 2 x depth bytes.
std::string nested_spec(size_t depth) {
  return "{\"dtype\": " + std::string(depth, '[') + std::string(depth, ']') + "}";
}

// The error that `body` throws (it must throw fa3jit::Error).
Error error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no fa3jit::Error was thrown");
  return Error(ErrorCode::kOk, "");
}

}  // namespace

TEST_CASE("a deeply nested spec is rejected while parsing, on a 256 KiB stack", "[json][hostile]") {
  for (const size_t bytes : {size_t{4} << 10, size_t{10} << 20}) {
    const std::string text = nested_spec(bytes / 2);
    INFO("spec of " << text.size() << " bytes");
    const auto start = std::chrono::steady_clock::now();
    std::string message;
    ErrorCode code = ErrorCode::kOk;
    test::run_on_small_stack([&] {
      try {
        parse_spec_document(text);
      } catch (const Error& e) {
        message = e.what();
        code = e.code();
      }
    });
    CHECK(code == ErrorCode::kInvalidSpec);
    CHECK_THAT(message, Contains("more than 64 levels deep") && Contains("\"dtype\""));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  }
}

TEST_CASE("nesting is allowed up to 64 levels and refused at 65", "[json][hostile]") {
  const auto nested = [](int levels) { return std::string(levels, '[') + std::string(levels, ']'); };
  CHECK(json_fields::parse_text(nested(json_fields::kMaxDepth)).is_array());
  const Error e = error_of([&] { json_fields::parse_text(nested(json_fields::kMaxDepth + 1)); });
  CHECK(e.code() == ErrorCode::kInvalidSpec);
  CHECK_THAT(e.what(), Contains("more than 64 levels deep"));
}

TEST_CASE("show() is bounded for a value built in code, however deep or large", "[json][hostile]") {
  // Built iteratively (nlohmann destroys iteratively too); 100000 levels would overflow any recursive dump.
  json deep = 1;
  for (int i = 0; i < 100000; ++i) {
    json wrapper = json::array();
    wrapper.push_back(std::move(deep));
    deep = std::move(wrapper);
  }
  json wide = json::array();
  for (int i = 0; i < 200000; ++i) wide.push_back(i);
  std::string deep_text, wide_text, message;
  test::run_on_small_stack([&] {
    deep_text = json_fields::show(deep);
    wide_text = json_fields::show(wide);
    try {
      json_fields::read_string(deep, "dtype", "fp16 or bf16");
    } catch (const Error& e) {
      message = e.what();
    }
  });
  CHECK(deep_text.size() <= 60);
  CHECK(deep_text.rfind("[[[[", 0) == 0);
  CHECK(wide_text.size() <= 60);
  CHECK(wide_text.rfind("[0,1,2,3", 0) == 0);
  CHECK_THAT(message, Contains("spec field \"dtype\"") && Contains("wrong type"));
  // Small values are shown exactly as written (compact JSON).
  CHECK(json_fields::show(json::parse(R"({"b": [1, 2.5, "x"], "a": null})")) == R"({"a":null,"b":[1,2.5,"x"]})");
  CHECK(json_fields::show(json(std::string(100, 'x'))) == "\"" + std::string(56, 'x') + "...");
  // A string built in code with invalid UTF-8 is shown, not thrown on.
  CHECK_NOTHROW(json_fields::show(json(std::string("\xff\xfe"))));
}

TEST_CASE("show() escapes control characters and cuts a long value at a character boundary", "[json][hostile]") {
  // NUL and control characters are escaped: a raw NUL ends a message where a C caller (what(), fa3jit_last_error)
  // reads it, and a raw newline or escape sequence garbles a terminal.
  CHECK(json_fields::show(json(std::string("a\0b\n\x1b", 5))) == R"("a\u0000b\n\u001b")");
  // "a" then 100 x U+00E9 (2 bytes each): the cut at 57 bytes would split the 28th; the message stays valid UTF-8.
  std::string accented = "a", shown = "\"a";
  for (int i = 0; i < 100; ++i) accented += "\xc3\xa9";
  for (int i = 0; i < 27; ++i) shown += "\xc3\xa9";
  CHECK(json_fields::show(json(accented)) == shown + "...");
  // Nor inside an escape: the cut at 57 bytes falls in the first "\u0000", which is left out whole.
  CHECK(json_fields::show(json(std::string(54, 'x') + std::string(10, '\0'))) ==
        "\"" + std::string(54, 'x') + "...");
  // Keys are cut the same way.
  CHECK(json_fields::show(json{{accented, 1}}) == "{" + shown + "...");
}

TEST_CASE("the family lookup echoes a kind escaped and shortened", "[json][hostile]") {
  const Error nul = error_of([] { request_for(parse_spec_document(R"({"kind": "attention_fwd\u0000x"})")); });
  CHECK(nul.code() == ErrorCode::kInvalidSpec);
  CHECK_THAT(std::string(nul.what()),
             StartsWith(R"(spec field "kind": "attention_fwd\u0000x" is not a kernel family; expected one of )") &&
                 Contains("\"attention_fwd\""));
  const std::string huge = std::string(900000, 'k') + "\n";
  const Error big = error_of([&] { request_for(parse_spec_document(json{{"kind", huge}}.dump())); });
  CHECK_THAT(std::string(big.what()),
             StartsWith("spec field \"kind\": \"" + std::string(56, 'k') + "... is not a kernel family"));
  CHECK(std::string(big.what()).size() < 200);
}

TEST_CASE("a number beyond a double is invalid_spec naming the field and the position", "[json][hostile]") {
  const Error e = error_of([] {
    parse_spec_document("{\"dtype\": \"bf16\",\n \"problem\": {\"batch\": 1e309}}");
  });
  CHECK(e.code() == ErrorCode::kInvalidSpec);
  CHECK_THAT(e.what(), Contains("\"problem.batch\"") && Contains("1e309") && Contains("line 2, column 23 (byte 40)") &&
                           Contains("out of range"));
  // In an array: the element is named by its index.
  const Error in_array = error_of([] { json_fields::parse_text(R"({"sweep": {"stages": [2, -1e400]}})"); });
  CHECK(in_array.code() == ErrorCode::kInvalidSpec);
  CHECK_THAT(in_array.what(), Contains("\"sweep.stages[1]\""));
}

TEST_CASE("a NUL byte in spec text is refused, naming its offset", "[json][hostile]") {
  // nlohmann's lexer stops at a NUL byte: without the check the text after it would be ignored silently.
  const std::string text = std::string(R"({"dtype": "bf16", "head_dim": 128})") + '\0' + R"({"head_dim": 64})";
  const Error e = error_of([&] { parse_spec_document(text); });
  CHECK(e.code() == ErrorCode::kInvalidSpec);
  CHECK_THAT(e.what(), Contains("NUL byte at byte offset 34"));
}

TEST_CASE("a key given twice is refused with its path, at any depth", "[json][hostile]") {
  const Error e = error_of([] { json_fields::parse_text(R"({"tile": {"block_n": 64, "block_n": 128}})"); });
  CHECK(e.code() == ErrorCode::kInvalidSpec);
  CHECK_THAT(e.what(), Contains("\"tile.block_n\" appears twice"));
  // Equal keys in different objects are fine.
  CHECK_NOTHROW(json_fields::parse_text(R"({"a": {"k": 1}, "b": {"k": 2}, "k": [{"k": 1}, {"k": 2}]})"));
}

TEST_CASE("spec files must be regular files of at most 1 MiB; nothing blocks", "[json][hostile]") {
  test::TempDir dir;
  const auto io_error = [](const std::string& path) {
    const auto start = std::chrono::steady_clock::now();
    const Error e = error_of([&] { json_fields::read_file(path); });
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
    CHECK(e.code() == ErrorCode::kIoError);
    CHECK_THAT(e.what(), Contains("\"" + path + "\""));
    return std::string(e.what());
  };
  const std::string fifo = dir.path + "/spec.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);  // no writer: a blocking open would never return
  CHECK_THAT(io_error(fifo), Contains("a FIFO") && Contains("must be a regular file"));
  CHECK_THAT(io_error("/dev/zero"), Contains("a character device"));
  CHECK_THAT(io_error(dir.path), Contains("a directory"));
  CHECK_THAT(io_error(dir.path + "/missing.json"), Contains("No such file"));

  const std::string big = dir.path + "/big.json";
  std::ofstream(big) << std::string(json_fields::kMaxFileBytes + 1, ' ');
  CHECK_THAT(io_error(big), Contains("1048577 bytes") && Contains("at most 1048576 bytes"));
  const std::string fits = dir.path + "/fits.json";
  std::ofstream(fits) << R"({"dtype": "bf16"})" << std::string(json_fields::kMaxFileBytes - 17, ' ');
  CHECK(json_fields::read_file(fits).size() == static_cast<size_t>(json_fields::kMaxFileBytes));

  // Through load_spec_document the same error, not a parse of endless zeros.
  const Error e = error_of([] { load_spec_document("/dev/zero"); });
  CHECK(e.code() == ErrorCode::kIoError);
}

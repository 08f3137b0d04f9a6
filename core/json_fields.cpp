// Readers of JSON spec fields (json_fields.h).
#include "core/json_fields.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "core/error.h"

namespace fa3jit::json_fields {

namespace {

constexpr size_t kShowChars = 60;
// Deeper than any value show() spells out; a deeper part is written as "[...]" or "{...}".
constexpr int kShowDepth = 8;

// The longest prefix of `text` of at most `max` bytes that does not end inside a UTF-8 character.
size_t utf8_cut(const std::string& text, size_t max) {
  if (max >= text.size()) return text.size();
  while (max > 0 && (static_cast<unsigned char>(text[max]) & 0xC0) == 0x80) --max;
  return max;
}

// Appends `value` to `out` in JSON syntax, stopping soon after `out` holds kShowChars characters: a huge or
// deeply nested value costs a bounded amount of work and stack (values built in code are not depth-checked).
void show_into(const json& value, std::string& out, int depth) {
  if (out.size() > kShowChars) return;
  if (value.is_structured() && depth >= kShowDepth) {
    out += value.is_object() ? "{...}" : "[...]";
    return;
  }
  if (value.is_object() || value.is_array()) {
    out += value.is_object() ? '{' : '[';
    bool first = true;
    for (auto it = value.begin(); it != value.end() && out.size() <= kShowChars; ++it) {
      if (!first) out += ',';
      first = false;
      if (value.is_object()) {
        show_into(json(it.key().substr(0, utf8_cut(it.key(), kShowChars))), out, depth + 1);
        out += ':';
      }
      show_into(*it, out, depth + 1);
    }
    out += value.is_object() ? '}' : ']';
  } else if (value.is_string() && value.get_ref<const json::string_t&>().size() > kShowChars) {
    const json::string_t& s = value.get_ref<const json::string_t&>();
    show_into(json(s.substr(0, utf8_cut(s, kShowChars))), out, depth);
  } else {
    // dump() escapes control characters and NUL (\u0000), which would otherwise garble or cut a message.
    // `replace`: a string built in code may hold invalid UTF-8, which the default dump() throws on.
    out += value.dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

}  // namespace

void fail(const std::string& message) { throw Error(ErrorCode::kInvalidSpec, message); }

std::string show(const json& value) {
  std::string text;
  show_into(value, text, 0);
  if (text.size() > kShowChars) {
    // Cut neither inside a UTF-8 character nor inside an escape (\n, \u0000): in JSON text each backslash starts one.
    size_t cut = utf8_cut(text, kShowChars - 3);
    for (size_t i = 0; i < cut; ++i) {
      if (text[i] != '\\') continue;
      const size_t end = i + (text[i + 1] == 'u' ? 6 : 2);
      if (end > cut) cut = i;
      i = end - 1;
    }
    text = text.substr(0, cut) + "...";
  }
  return text;
}

std::string join_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

void require_object(const json& value, const std::string& path) {
  if (value.is_object()) return;
  fail(path.empty() ? fmt::format("spec must be a JSON object, got {}", show(value))
                    : fmt::format("spec field \"{}\": {} has the wrong type; expected an object", path, show(value)));
}

void reject_unknown_keys(const json& object, const std::string& path, const std::vector<std::string>& known) {
  for (const auto& item : object.items()) {
    bool found = false;
    for (const auto& k : known) found = found || item.key() == k;
    if (!found) {
      fail(fmt::format("spec field {} is unknown; known keys {}: {}", show(json(join_path(path, item.key()))),
                       path.empty() ? "at the top level" : fmt::format("in \"{}\"", path), fmt::join(known, ", ")));
    }
  }
}

bool read_bool(const json& value, const std::string& path) {
  if (!value.is_boolean())
    fail(fmt::format("spec field \"{}\": {} has the wrong type; expected true or false", path, show(value)));
  return value.get<bool>();
}

int64_t read_int(const json& value, const std::string& path, int64_t lo, int64_t hi, const std::string& allowed) {
  if (!value.is_number_integer())
    fail(fmt::format("spec field \"{}\": {} has the wrong type; expected an integer, {}", path, show(value), allowed));
  // Unsigned values above int64 max cannot be in range; compare before converting.
  const bool too_big = value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(hi);
  if (too_big || value.get<int64_t>() < lo || value.get<int64_t>() > hi)
    fail(fmt::format("spec field \"{}\": {} is not allowed; expected {}", path, show(value), allowed));
  return value.get<int64_t>();
}

std::string read_string(const json& value, const std::string& path, const std::string& allowed) {
  if (!value.is_string())
    fail(fmt::format("spec field \"{}\": {} has the wrong type; expected a string, {}", path, show(value), allowed));
  return value.get<std::string>();
}

// The rules on a spec's text, checked in one pass before any json value is built. nlohmann's SAX parser is
// iterative, so nothing recurses here whatever the input; the DOM, which nlohmann copies, compares and dumps
// recursively, is built only from a text that passed, whose depth is bounded.
//  - depth: at most kMaxDepth nested objects/arrays (a spec has 3; a deep one would overflow the stack);
//  - duplicate keys: nlohmann keeps the last of two equal keys silently, which would let two
//    different-looking documents mean different things depending on the parser;
//  - errors name the field being read and the position (nlohmann's out_of_range for a number that overflows
//    a double carries neither).
namespace {

class TextChecker final : public nlohmann::json_sax<json> {
 public:
  explicit TextChecker(const std::string& text) : text_(text) {}
  std::string error;  // empty while the text is accepted

  bool null() override { return value_done(); }
  bool boolean(bool) override { return value_done(); }
  bool number_integer(number_integer_t) override { return value_done(); }
  bool number_unsigned(number_unsigned_t) override { return value_done(); }
  bool number_float(number_float_t, const string_t&) override { return value_done(); }
  bool string(string_t&) override { return value_done(); }
  bool binary(binary_t&) override { return value_done(); }
  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& key) override {
    Frame& f = frames_.back();
    f.key = key;
    if (!f.keys.insert(key).second) {
      error = fmt::format("spec key {} appears twice in one object; give each key once", show(json(path())));
      return false;
    }
    return true;
  }
  bool parse_error(std::size_t position, const std::string& token, const json::exception& e) override {
    if (!error.empty()) return false;  // already stopped by a rule above
    if (dynamic_cast<const json::parse_error*>(&e) != nullptr) {
      error = fmt::format("spec is not valid JSON: {}", e.what());  // nlohmann's message has line and column
    } else {
      // 406: a number beyond a double (1e309). position is just past the token.
      const size_t at = position >= token.size() ? position - token.size() : 0;
      error = fmt::format("spec {}: number {} at {} is out of range; numbers must be finite doubles",
                          frames_.empty() ? std::string("value") : fmt::format("field \"{}\"", path()),
                          token.substr(0, kShowChars), where(at));
    }
    return false;
  }

 private:
  struct Frame {
    bool object = false;
    std::string key;    // object: the key being read
    size_t index = 0;   // array: the element being read
    std::set<std::string> keys;
  };

  bool open(bool object) {
    if (frames_.size() >= static_cast<size_t>(kMaxDepth)) {
      // Names the top-level field only: the full path would be 64 levels long.
      const std::string where = frames_.front().object ? fmt::format(" in field \"{}\"", frames_.front().key) : "";
      error = fmt::format("spec nests objects and arrays more than {} levels deep{}; at most {} levels are allowed",
                          kMaxDepth, where, kMaxDepth);
      return false;
    }
    frames_.push_back(Frame{object, {}, 0, {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return value_done();
  }
  bool value_done() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
    return true;
  }
  // "problem.batch", "sweep.stages[1]"
  std::string path() const {
    std::string p;
    for (const Frame& f : frames_) {
      if (f.object) {
        p += (p.empty() ? "" : ".") + f.key;
      } else {
        p += fmt::format("[{}]", f.index);
      }
    }
    return p;
  }
  // "line 3, column 14 (byte 40)", counted from 1 as nlohmann does.
  std::string where(size_t offset) const {
    offset = std::min(offset, text_.size());
    const size_t line = 1 + static_cast<size_t>(std::count(text_.begin(), text_.begin() + offset, '\n'));
    const size_t line_start = offset == 0 ? 0 : text_.rfind('\n', offset - 1);
    const size_t column = line_start == std::string::npos ? offset + 1 : offset - line_start;
    return fmt::format("line {}, column {} (byte {})", line, column, offset);
  }

  const std::string& text_;
  std::vector<Frame> frames_;
};

}  // namespace

json parse_text(const std::string& text) {
  // nlohmann's lexer takes a NUL byte for the end of the input and would ignore whatever follows it.
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    fail(fmt::format("spec contains a NUL byte at byte offset {}; a spec is JSON text, which has none", nul));
  TextChecker checker(text);
  if (!json::sax_parse(text, &checker)) {
    fail(checker.error.empty() ? std::string("spec is not valid JSON") : checker.error);
  }
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    // The checker accepted the text, so this is not expected; still an error about the spec, not a crash.
    fail(fmt::format("spec is not valid JSON: {}", e.what()));
  }
}

std::string read_file(const std::string& path) { return read_file(path, "spec file", kMaxFileBytes); }

std::string read_file(const std::string& path, const std::string& what, int64_t max_bytes) {
  const auto error = [&](const std::string& why) {
    return Error(ErrorCode::kIoError, fmt::format("cannot read {} \"{}\": {}", what, path, why));
  };
  // O_NONBLOCK: opening a FIFO that has no writer must not block; fstat then rejects it like any other file
  // that is not a regular one (a device such as /dev/zero would be read without end).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw error(std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw error(std::strerror(errno));
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    throw error(fmt::format("it is {}; a {} must be a regular file", kind, what));
  }
  if (st.st_size > max_bytes)
    throw error(fmt::format("it is {} bytes; a {} is at most {} bytes", st.st_size, what, max_bytes));
  // Read until the end, but never past the limit: a file that grows while it is read is caught too.
  std::string text;
  text.reserve(static_cast<size_t>(st.st_size));
  char buffer[16 * 1024];  // small: callers may run on small thread stacks
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw error(std::strerror(errno));
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > static_cast<size_t>(max_bytes))
      throw error(fmt::format("it grew past {} bytes, the limit for a {}, while it was read", max_bytes, what));
  }
  return text;
}

}  // namespace fa3jit::json_fields

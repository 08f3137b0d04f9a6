// Readers of JSON spec fields shared by every kernel family. Each rejection is one Error(kInvalidSpec)
// whose message names the field's JSON path ("tile.block_n"), the value as written and what is allowed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fa3jit::json_fields {

using nlohmann::json;

/// Objects and arrays nested deeper than this are rejected before any json value is built: every spec and
/// sweep file needs at most 4 levels, and a deeper document would overflow the stack in nlohmann's recursive
/// copy, comparison and dump.
inline constexpr int kMaxDepth = 64;
/// Spec and sweep files are at most this large (real ones are under 2 KB).
inline constexpr int64_t kMaxFileBytes = int64_t{1} << 20;

[[noreturn]] void fail(const std::string& message);

/// The value as the user wrote it, for a message: JSON syntax with control characters and NUL escaped ("\u0000"),
/// shortened to 60 characters so a huge value does not flood a message, cut at a character boundary and marked
/// "...". Bounded work and stack for any value, however large or deep. Every message that echoes a user's value
/// (a spec field, a sweep value, a "kind", a command-line value) renders it with this: show(json(text)) for text.
std::string show(const json& value);

/// "parent.key", or "key" at the top level.
std::string join_path(const std::string& parent, const std::string& key);

/// `value` must be an object; `path` empty means the whole spec.
void require_object(const json& value, const std::string& path);

/// Every key of `object` must be one of `known`.
void reject_unknown_keys(const json& object, const std::string& path, const std::vector<std::string>& known);

bool read_bool(const json& value, const std::string& path);

/// An integer in [lo, hi]; `allowed` says what is accepted, for the message.
int64_t read_int(const json& value, const std::string& path, int64_t lo, int64_t hi, const std::string& allowed);

/// A string; `allowed` says what is accepted, for the message.
std::string read_string(const json& value, const std::string& path, const std::string& allowed);

/// JSON text -> json. Error(kInvalidSpec) naming the position or field for: a syntax error, a number beyond a
/// double (1e309), a key given twice in one object, nesting deeper than kMaxDepth, a NUL byte in the text.
json parse_text(const std::string& text);

/// Reads a spec (or sweep) file. Error(kIoError) naming the path and the rule when it cannot be opened or read,
/// is not a regular file (a FIFO without a writer would block, /dev/zero never ends) or exceeds kMaxFileBytes.
std::string read_file(const std::string& path);
/// The same for another kind of file: `what` names it in the messages ("tuning database"), `max_bytes` bounds it.
std::string read_file(const std::string& path, const std::string& what, int64_t max_bytes);

}  // namespace fa3jit::json_fields

// Readers of JSON spec fields shared by every kernel family. Each rejection is one Error(kInvalidSpec)
// whose message names the field's JSON path ("tile.block_n"), the value as written and what is allowed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fa3jit::json_fields {

using nlohmann::json;

[[noreturn]] void fail(const std::string& message);

/// The value as the user wrote it, shortened to 60 characters so a huge value does not flood a message.
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

/// JSON text -> json; a syntax error or a key given twice in one object is an Error(kInvalidSpec).
json parse_text(const std::string& text);

/// Reads a spec file; Error(kIoError) naming the path when it cannot be read.
std::string read_file(const std::string& path);

}  // namespace fa3jit::json_fields

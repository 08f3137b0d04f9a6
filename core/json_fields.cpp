// Readers of JSON spec fields (json_fields.h).
#include "core/json_fields.h"

#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"

namespace fa3jit::json_fields {

void fail(const std::string& message) { throw Error(ErrorCode::kInvalidSpec, message); }

std::string show(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
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
      fail(fmt::format("spec field \"{}\" is unknown; known keys {}: {}", join_path(path, item.key()),
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

// nlohmann keeps the last of two equal keys silently, which would let two different-looking documents mean
// different things depending on the parser: a duplicate is an error.
json parse_text(const std::string& text) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  const json::parser_callback_t callback = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !open_objects.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json doc;
  try {
    doc = json::parse(text, callback);
  } catch (const json::parse_error& e) {
    fail(fmt::format("spec is not valid JSON: {}", e.what()));
  }
  if (!duplicate.empty())
    fail(fmt::format("spec key \"{}\" appears twice in one object; give each key once", duplicate));
  return doc;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::kIoError, fmt::format("cannot read spec file \"{}\"", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(ErrorCode::kIoError, fmt::format("cannot read spec file \"{}\"", path));
  return text.str();
}

}  // namespace fa3jit::json_fields

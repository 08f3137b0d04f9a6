// The sweep file of `fa3jit tune`: reader, axes and dotted-field setter (sweep.h).
#include "tools/cli/sweep.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_fields.h"

namespace fa3jit::cli {

using nlohmann::json;

json read_sweep(const std::string& path) {
  const std::string text = json_fields::read_file(path);
  json doc;
  try {
    doc = json_fields::parse_text(text);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", path, e.what()));
  }
  if (!doc.is_object()) throw Error(ErrorCode::kInvalidSpec, fmt::format("{}: must be a JSON object", path));
  for (const auto& [key, value] : doc.items()) {
    if (key != "base" && key != "sweep") {
      throw Error(ErrorCode::kInvalidSpec,
                  fmt::format("{}: unknown key {}; allowed: \"base\", \"sweep\"", path, json_fields::show(json(key))));
    }
  }
  if (!doc.contains("base") || !doc["base"].is_object()) {
    throw Error(ErrorCode::kInvalidSpec, fmt::format("{}: \"base\" must be a spec object", path));
  }
  if (!doc.contains("sweep") || !doc["sweep"].is_object()) {
    throw Error(ErrorCode::kInvalidSpec,
                fmt::format("{}: \"sweep\" must be an object of field -> list of values", path));
  }
  return doc;
}

std::vector<Axis> sweep_axes(const json& sweep) {
  std::vector<Axis> axes;
  size_t total = 1;
  for (const auto& [key, values] : sweep.items()) {
    if (!values.is_array() || values.empty()) {
      throw Error(ErrorCode::kInvalidSpec,
                  fmt::format("{} must be a non-empty list of values, got {}", json_fields::show(json("sweep." + key)),
                              json_fields::show(values)));
    }
    total *= values.size();
    if (total > kMaxCandidates) {
      throw Error(ErrorCode::kInvalidSpec,
                  fmt::format("the sweep has more than {} candidates; narrow the lists", kMaxCandidates));
    }
    axes.push_back({key, std::vector<json>(values.begin(), values.end())});
  }
  return axes;
}

void set_field(json& doc, const std::string& dotted, const json& value) {
  json* node = &doc;
  size_t start = 0;
  for (size_t dot = dotted.find('.'); dot != std::string::npos; dot = dotted.find('.', start)) {
    json& child = (*node)[dotted.substr(start, dot - start)];
    if (child.is_null()) child = json::object();
    if (!child.is_object()) {
      throw Error(ErrorCode::kInvalidSpec,
                  fmt::format("{}: {} in base is not an object", json_fields::show(json("sweep." + dotted)),
                              json_fields::show(json(dotted.substr(0, dot)))));
    }
    node = &child;
    start = dot + 1;
  }
  (*node)[dotted.substr(start)] = value;
}

}  // namespace fa3jit::cli

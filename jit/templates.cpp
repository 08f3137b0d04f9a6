#include "jit/templates.h"

#include <map>

#include "core/error.h"

namespace fa3jit {

const std::string& template_source(const std::string& path) {
  static const std::map<std::string, std::string> kByPath = [] {
    std::map<std::string, std::string> m;
    for (const EmbeddedTemplate& t : embedded_templates()) m.emplace(t.path, t.content);
    return m;
  }();
  auto it = kByPath.find(path);
  if (it == kByPath.end()) throw Error(ErrorCode::kInternal, "kernel template \"" + path + "\" is not embedded");
  return it->second;
}

}  // namespace fa3jit

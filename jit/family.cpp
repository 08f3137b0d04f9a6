// The kernel family registry and spec documents (family.h).
#include "jit/family.h"

#include <algorithm>
#include <mutex>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_fields.h"
#include "jit/cubin_cache.h"

namespace fa3jit {

namespace {

struct Registry {
  std::mutex mu;
  std::vector<KernelFamily> families;
  std::vector<std::string> duplicates;
};

Registry& registry() {
  static Registry r;  // constructed on first use: safe from static registrars in any order
  return r;
}

}  // namespace

void register_family(const KernelFamily& family) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const KernelFamily& f : r.families) {
    if (f.kind == family.kind) {
      r.duplicates.emplace_back(family.kind);
      return;
    }
  }
  r.families.push_back(family);
  std::sort(r.families.begin(), r.families.end(),
            [](const KernelFamily& a, const KernelFamily& b) { return a.kind < b.kind; });
}

std::vector<KernelFamily> families() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.families;
}

const KernelFamily& find_family(std::string_view kind) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.duplicates.empty())
    throw Error(ErrorCode::kInternal, fmt::format("kernel family \"{}\" is registered twice", r.duplicates.front()));
  for (const KernelFamily& f : r.families)
    if (f.kind == kind) return f;
  std::vector<std::string> known;
  for (const KernelFamily& f : r.families) known.push_back(fmt::format("\"{}\"", f.kind));
  throw Error(ErrorCode::kInvalidSpec, fmt::format("spec field \"kind\": {} is not a kernel family; expected one of {}",
                                                   json_fields::show(nlohmann::json(std::string(kind))),
                                                   fmt::join(known, ", ")));
}

SpecDocument split_spec_document(const nlohmann::json& doc) {
  json_fields::require_object(doc, "");
  SpecDocument d;
  d.kind = doc.contains("kind") ? json_fields::read_string(doc.at("kind"), "kind", "a kernel family")
                                : std::string(kDefaultKind);
  d.spec = doc;
  if (d.spec.contains("problem")) {
    d.problem = d.spec.at("problem");
    d.spec.erase("problem");
  }
  return d;
}

SpecDocument parse_spec_document(const std::string& json_text) {
  return split_spec_document(json_fields::parse_text(json_text));
}

SpecDocument load_spec_document(const std::string& path) {
  const std::string text = json_fields::read_file(path);
  try {
    return parse_spec_document(text);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", path, e.what()));
  }
}

KernelRequest request_for(const SpecDocument& document) { return find_family(document.kind).request(document.spec); }

std::string kernel_name(std::string_view kind, std::string_view token, const std::string& canonical) {
  return fmt::format("fa3jit_{}_{}_{}", kind, token, sha256_hex(canonical).substr(0, 8));
}

}  // namespace fa3jit

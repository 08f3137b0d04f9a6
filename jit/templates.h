// Access to the kernel templates embedded into the library at build time.
#pragma once

#include <string>
#include <vector>

namespace fa3jit {

struct EmbeddedTemplate {
  const char* path;     // from the repository root, e.g. "hopper/wgmma.cuh"
  const char* content;
};

const std::vector<EmbeddedTemplate>& embedded_templates();

/// Content of one template; throws Error(kInternal) when the path is unknown.
const std::string& template_source(const std::string& path);

}  // namespace fa3jit

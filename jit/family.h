// Kernel families: the seam between the generic JIT (emit helpers, NVRTC, cache, loading, launching) and
// each kind of kernel fa3jit generates. A family is one folder, kernels/<kind>/, holding its spec and
// validator, tile table, parameter struct (params.h), emitter, launch code and device templates; it
// registers itself here with FA3JIT_REGISTER_KERNEL_FAMILY, so adding one edits no generic file.
//
// The generic layers see a family only through KernelRequest: canonical spec, summary, generated source
// and launch invariants. Typed launch paths (kernels/<kind>/launch.h) call the family directly.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "jit/emit_util.h"

namespace fa3jit {

/// What a launch of the kernel needs that does not depend on the call: block size, dynamic shared memory,
/// thread-block cluster size along x, and whether the kernel begins with griddepcontrol.wait
/// (hopper/grid_dependency.cuh) before any memory access, so that it is launched with programmatic stream
/// serialization and may start while the kernel before it on the stream finishes.
struct LaunchInvariants {
  int num_threads = 0;
  int smem_bytes = 0;
  int cluster_x = 1;
  bool waits_for_prerequisites = false;
};

/// Everything the generic layers need to build, cache and load one kernel.
struct KernelRequest {
  std::string kind;       // family, e.g. "attention_fwd"
  std::string canonical;  // canonical JSON of the spec, "kind" included: the kernel's identity
  std::string summary;    // for humans (logs, `fa3jit compile`)
  KernelSource source;
  LaunchInvariants launch;
};

struct KernelFamily {
  std::string_view kind;
  std::string_view description;
  /// Parses and validates a spec document of this family (the "kind" key may be present) and emits it.
  KernelRequest (*request)(const nlohmann::json& spec);
  /// The family's capability table as JSON (dtypes, head dims, features).
  nlohmann::json (*capabilities)();
};

/// The kind of a spec document without a "kind" key.
inline constexpr std::string_view kDefaultKind = "attention_fwd";

/// Adds a family (called by FA3JIT_REGISTER_KERNEL_FAMILY at load time). A second family of the same kind
/// is a programming error and is reported by find_family as kInternal.
void register_family(const KernelFamily& family);
/// Every registered family, sorted by kind.
std::vector<KernelFamily> families();
/// The family of `kind`; Error(kInvalidSpec) naming the field "kind" and the known kinds otherwise.
const KernelFamily& find_family(std::string_view kind);

/// A spec document: the kernel spec (with its kind) and, for run/bench, an optional "problem" section that
/// is no part of the kernel's identity.
struct SpecDocument {
  std::string kind;
  nlohmann::json spec;                    // without "problem"
  std::optional<nlohmann::json> problem;  // as written, when present
};
/// Splits a document; Error(kInvalidSpec) when it is no object or "kind" is no string.
SpecDocument split_spec_document(const nlohmann::json& doc);
/// JSON text or a file -> document; syntax errors and duplicate keys are kInvalidSpec, an unreadable file
/// kIoError, both naming the file.
SpecDocument parse_spec_document(const std::string& json_text);
SpecDocument load_spec_document(const std::string& path);

/// The family's request for a document.
KernelRequest request_for(const SpecDocument& document);

/// The name of a kernel (its entry point, or the prefix of its entry points where a family emits several,
/// KernelSource::entries): "fa3jit_<kind>_<token>_<hash8>", where token is the family's short
/// description (e.g. "bf16_d128_causal") and hash8 the first 8 hex digits of SHA-256 over the canonical spec.
/// Derived, never listed field by field: two canonical specs never share a name.
std::string kernel_name(std::string_view kind, std::string_view token, const std::string& canonical);

namespace detail {
struct FamilyRegistrar {
  explicit FamilyRegistrar(const KernelFamily& family) { register_family(family); }
};
}  // namespace detail

}  // namespace fa3jit

/// Registers a family at load time from its own .cpp file (the library is one shared object, so no
/// registration is dropped by the linker).
#define FA3JIT_REGISTER_KERNEL_FAMILY(ident, ...) \
  static const ::fa3jit::detail::FamilyRegistrar fa3jit_family_registrar_##ident{::fa3jit::KernelFamily{__VA_ARGS__}}

// The generic runtime (runtime.h): request -> compiled (NVRTC or cache) -> loaded, once per identity.
#include "runtime/runtime.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/log.h"
#include "jit/compiler.h"

namespace fa3jit {

namespace {
std::atomic<uint64_t> g_next_runtime_id{1};
std::atomic<int> g_next_state_index{0};
}  // namespace

struct Runtime::Impl {
  explicit Impl(const RuntimeOptions& o) : cache(o.cache_dir) {
    if (o.tune_db == "off") return;
    if (!o.tune_db.empty()) {
      tune_path = o.tune_db;
    } else if (const std::optional<std::string> p = fa3jit::tune_db_path(cache.directory())) {
      tune_path = *p;
    }
  }
  CubinCache cache;
  std::string tune_path;  // empty: no database
  std::once_flag tune_once;
  TuneDb tune;
  std::mutex mu;
  std::map<std::string, std::shared_ptr<LoadedKernel>> loaded;  // by canonical spec
  std::mutex state_mu;
  std::vector<std::shared_ptr<void>> states;
};

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>(options)), id_(g_next_runtime_id++) {}
Runtime::~Runtime() = default;

CubinCache& Runtime::cache() { return impl_->cache; }

int Runtime::next_state_index() { return g_next_state_index++; }

void* Runtime::state_slot(int index, std::shared_ptr<void> (*make)()) {
  std::lock_guard<std::mutex> lock(impl_->state_mu);
  if (static_cast<int>(impl_->states.size()) <= index) impl_->states.resize(index + 1);
  if (!impl_->states[index]) impl_->states[index] = make();
  return impl_->states[index].get();
}

std::string Runtime::kernel_key(const KernelRequest& request) {
  return cache_key(request.canonical, request.source.code, compile_flags(request.source), nvrtc_version_string(),
                   kTargetArch, kGeneratorVersion);
}

std::string Runtime::tune_db_path() const { return impl_->tune_path; }

const TuneDb& Runtime::tune_db() {
  std::call_once(impl_->tune_once, [&] {
    if (impl_->tune_path.empty()) return;
    try {
      impl_->tune = TuneDb::load(impl_->tune_path);
    } catch (const Error& e) {
      log(LogLevel::kWarn, fmt::format("{}; kernels come from the built-in tile table", e.what()));
    }
  });
  return impl_->tune;
}

std::optional<nlohmann::json> Runtime::tuned_choice(const std::string& kind, const std::string& kernel_class,
                                                    int ordinal) {
  const TuneDb& db = tune_db();
  if (db.records().empty()) return std::nullopt;
  const TuneRecord* r = db.applied(kind, kernel_class, tune_identity(ordinal));
  if (r == nullptr) return std::nullopt;
  return r->choice;
}

std::vector<nlohmann::json> Runtime::applied_choices(const std::string& kind, const std::string& kernel_class) {
  std::vector<nlohmann::json> choices;
  const TuneDb& db = tune_db();
  if (db.records().empty()) return choices;
  const std::string nvrtc = nvrtc_version_string();
  for (const TuneRecord& r : db.records()) {
    if (!r.applied || r.kind != kind || r.kernel_class != kernel_class || r.device.nvrtc_version != nvrtc ||
        r.device.generator_version != kGeneratorVersion)
      continue;
    if (std::find(choices.begin(), choices.end(), r.choice) == choices.end()) choices.push_back(r.choice);
  }
  return choices;
}

bool Runtime::compiling_elsewhere(const KernelRequest& request) {
  return impl_->cache.compiling_elsewhere(kernel_key(request));
}

PreparedKernel Runtime::prepare(const KernelRequest& request) {
  PreparedKernel out;
  out.request = request;
  const KernelSource& source = request.source;
  out.key = kernel_key(request);
  CacheLookup lookup = impl_->cache.get_or_compile(out.key, [&] { return compile_kernel(source); });
  if (lookup.kernel->kernel_name != source.kernel_name)
    throw Error(ErrorCode::kCacheError,
                fmt::format("the cache entry for key {:.12} in {} holds kernel {}, not {}; it was not written by this "
                            "fa3jit for this spec: run `fa3jit cache clear`",
                            out.key, impl_->cache.directory(), lookup.kernel->kernel_name, source.kernel_name));
  std::vector<std::string> cached_entries;
  for (const CompiledEntry& e : lookup.kernel->entries) cached_entries.push_back(e.name);
  if (cached_entries != entry_names(source))
    throw Error(ErrorCode::kCacheError,
                fmt::format("the cache entry for key {:.12} in {} holds the entry points [{}], not [{}]; it was not "
                            "written by this fa3jit for this spec: run `fa3jit cache clear`",
                            out.key, impl_->cache.directory(), fmt::join(cached_entries, ", "),
                            fmt::join(entry_names(source), ", ")));
  out.cache_hit = lookup.hit;
  out.ms = lookup.ms;
  out.compiled = lookup.kernel;
  const ResourceReport& r = out.compiled->report;
  if (r.spill_store_bytes > 0 || r.spill_load_bytes > 0)
    log(LogLevel::kWarn, fmt::format("kernel {} spills registers ({} bytes stored, {} loaded): expect it to be slow",
                                     source.kernel_name, r.spill_store_bytes, r.spill_load_bytes));
  return out;
}

PreparedKernel Runtime::prepare(const std::string& spec_json) {
  return prepare(request_for(parse_spec_document(spec_json)));
}

std::shared_ptr<LoadedKernel> Runtime::load(const KernelRequest& request) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->loaded.find(request.canonical);
    if (it != impl_->loaded.end()) return it->second;
  }
  PreparedKernel prepared = prepare(request);  // compiles outside the lock; the cache compiles once per key
  auto kernel = std::make_shared<LoadedKernel>(prepared.compiled, request.launch);
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->loaded.emplace(request.canonical, std::move(kernel)).first->second;
}

}  // namespace fa3jit

// `fa3jit cache warm`: compile specs, and the kernels of serving manifests (kernels/attention_fwd/manifest.h), into
// the cubin cache ahead of time, several at once.
// NVRTC compiles independent programs concurrently, and the cache compiles each key once even when two
// specs resolve to the same kernel (cubin_cache.h). A kernel another process sharing the cache directory is
// compiling is warmed after all the others (core/workers.h: run_deferring, as warm_manifest does), so ranks warming
// the same manifest split it instead of waiting on each other.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/workers.h"
#include "jit/cubin_cache.h"
#include "jit/family.h"
#include "jit/tune_db.h"
#include "kernels/attention_fwd/manifest.h"
#include "tools/cli/commands.h"

namespace fa3jit::cli {
namespace {

// The spec files of `paths`: files as given, the *.json files of directories. An entry whose status cannot be read
// (a symlink loop, a dangling link) is an error line, and the rest are warmed.
std::vector<std::string> expand(const std::vector<std::string>& paths, std::vector<std::string>& errors) {
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      std::vector<std::string> found;
      for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
        if (entry.path().extension() != ".json") continue;
        std::error_code status_ec;
        const bool regular = entry.is_regular_file(status_ec);
        if (status_ec) {
          errors.push_back(fmt::format("error {}: {}", entry.path().string(), status_ec.message()));
        } else if (regular) {
          found.push_back(entry.path().string());
        }
      }
      if (ec) throw Error(ErrorCode::kIoError, fmt::format("cannot list directory {}: {}", path, ec.message()));
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(path);
    }
  }
  return files;
}

// A tuning database named with --db must be usable: the runtime would warn and go on without it (a serving process
// keeps the built-in choices), and the warm would miss every tuned kernel the user asked for.
void check_db(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw Error(ErrorCode::kIoError, fmt::format("--db: tuning database \"{}\" {}", path,
                                                 ec ? "cannot be read: " + ec.message() : std::string("does not exist")));
  }
  try {
    (void)TuneDb::load(path);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("--db: {}", e.what()));
  }
}

// The result line of one spec. Every exception a compile can raise (not only fa3jit::Error: std::bad_alloc,
// an exception from a library) becomes this spec's error line: one thrown out of a worker thread would
// terminate the process.
struct Outcome {
  bool ok = false;
  std::string line;
};

// One kernel to warm: a spec file, or one kernel of a serving manifest (kernels/attention_fwd/manifest.h).
struct Item {
  std::string file;                     // the spec or manifest file
  std::optional<nlohmann::json> spec;   // a manifest's kernel; empty: the file is the spec
  std::string what;                     // which of the manifest's calls needs it
};

// Spec files as they are; a serving manifest becomes its kernels, with the tuned tiles of the runtime's tuning
// database (manifest.h). A manifest that cannot be read or expanded is one error line (and counts as a failure).
std::vector<Item> items_of(Runtime& runtime, const std::vector<std::string>& files, std::vector<std::string>& errors) {
  std::vector<Item> items;
  for (const std::string& file : files) {
    try {
      const SpecDocument document = load_spec_document(file);  // its errors name the file
      if (document.kind != attention_fwd::kManifestKind) {
        items.push_back({file, std::nullopt, {}});
        continue;
      }
      try {
        for (attention_fwd::ManifestKernel& k : attention_fwd::manifest_kernels(document.spec, &runtime))
          items.push_back({file, std::move(k.spec), std::move(k.what)});
      } catch (const Error& e) {
        throw Error(e.code(), fmt::format("{}: {}", file, e.what()));
      }
    } catch (const Error& e) {
      errors.push_back(fmt::format("error {}", e.what()));
    } catch (const std::bad_alloc&) {
      errors.push_back(fmt::format("error {}: out of host memory", file));
    } catch (const std::exception& e) {
      errors.push_back(fmt::format("error {}: internal: {}", file, e.what()));
    }
  }
  return items;
}

// `request`: the item's request when already built (the deferral's probe built it), else null.
Outcome warm_one(Runtime& runtime, const Item& item, const KernelRequest* request) {
  Outcome out;
  const std::string file = item.spec ? fmt::format("{} [{}]", item.file, item.what) : item.file;
  try {
    std::optional<KernelRequest> built;
    if (request == nullptr) {
      built = request_for(item.spec ? split_spec_document(*item.spec)
                                    : load_spec_document(item.file));  // its errors name the file
      request = &*built;
    }
    PreparedKernel k;
    try {
      k = runtime.prepare(*request);
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("{}: {}", file, e.what()));
    }
    const CubinCache& cache = runtime.cache();
    if (!cache.persistent()) {
      out.line = fmt::format("error {}: compiled, but into memory only (no usable cache directory)", file);
    } else if (!cache.stored(k.key)) {
      out.line = fmt::format("error {}: compiled, but its entry could not be written to {} (see the warning above)",
                             file, cache.directory());
    } else {
      out.ok = true;
      out.line = fmt::format("{:<5} {:>8.1f} ms  {}  {}", k.cache_hit ? "hit" : "built", k.ms,
                             k.compiled->kernel_name, file);
    }
  } catch (const Error& e) {
    out.line = fmt::format("error {}", e.what());
  } catch (const std::bad_alloc&) {
    out.line = fmt::format("error {}: out of host memory", file);
  } catch (const std::exception& e) {
    out.line = fmt::format("error {}: internal: {}", file, e.what());
  } catch (...) {
    out.line = fmt::format("error {}: internal: an exception of unknown type", file);
  }
  return out;
}

}  // namespace

int cmd_cache_warm(const GlobalOptions& global, const WarmOptions& options) {
  if (!options.db.empty() && options.db != "off") check_db(options.db);
  std::vector<std::string> errors;
  const std::vector<std::string> files = expand(options.paths, errors);
  if (files.empty() && errors.empty())
    throw Error(ErrorCode::kIoError, "cache warm: no spec files found in the given paths");
  Runtime runtime(RuntimeOptions{global.cache_dir, options.db});
  const std::vector<Item> items = items_of(runtime, files, errors);
  for (const std::string& line : errors) fmt::print("{}\n", line);
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  const size_t jobs = std::max<size_t>(1, std::min<size_t>(items.size(), options.jobs > 0 ? options.jobs : hardware));
  std::atomic<size_t> failures{errors.size()};
  std::mutex print_mu;
  // Whether another process sharing the cache directory is compiling item i's kernel (ranks warming one manifest):
  // then it is warmed after all the others (run_deferring), by when that process has mostly published it.
  // The probe builds the item's request (spec read, source generated, key hashed) once, for warm_one to use: both
  // run on the thread that took the item, and the second pass starts after the first has joined.
  std::vector<std::optional<KernelRequest>> requests(items.size());
  auto busy = [&](size_t i) noexcept {
    try {
      const Item& item = items[i];
      requests[i] = request_for(item.spec ? split_spec_document(*item.spec) : load_spec_document(item.file));
      return runtime.compiling_elsewhere(*requests[i]);
    } catch (...) {
      return false;  // warm_one reports it
    }
  };
  auto work = [&](size_t i) noexcept {
    Outcome outcome;
    try {
      outcome = warm_one(runtime, items[i], requests[i] ? &*requests[i] : nullptr);
    } catch (...) {  // only when even the error line could not be built (host memory exhausted)
      outcome = Outcome{};
    }
    if (!outcome.ok) ++failures;
    try {
      std::lock_guard<std::mutex> lock(print_mu);
      if (outcome.line.empty()) {
        std::fputs("error (a spec failed; out of host memory for its message)\n", stdout);
      } else {
        fmt::print("{}\n", outcome.line);
      }
    } catch (...) {
      // A failed write to stdout sets its error flag; main() reports it and exits 2.
    }
  };
  // The calling thread is one of the workers; a thread that cannot be started means fewer workers, never an abort.
  const size_t missing = run_deferring(items.size(), jobs, busy, work, []() noexcept { return false; });
  if (missing > 0)
    fmt::print(stderr, "fa3jit: warning: could not start {} of the {} worker threads asked for; compiled with fewer\n",
               missing, jobs);
  const CubinCache& cache = runtime.cache();
  const size_t warmed = items.size() + errors.size() - failures;
  fmt::print("{} kernel{} warmed into {}, {} failed\n", warmed, warmed == 1 ? "" : "s",
             cache.persistent() ? cache.directory() : std::string("memory only"), failures.load());
  if (!cache.persistent()) {
    fmt::print("nothing was written to disk: the cache directory{} is not usable (see the warning above), so "
               "the compiled kernels are lost when this command exits\n",
               cache.directory().empty() ? "" : " " + cache.directory());
  }
  return failures ? 2 : 0;
}

}  // namespace fa3jit::cli

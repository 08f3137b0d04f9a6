// `fa3jit emit`, `fa3jit compile` and `fa3jit cache list|clear`: everything that needs no GPU. emit and compile
// take a spec of any kernel family (jit/family.h).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "core/error.h"
#include "jit/compiler.h"
#include "jit/cubin_cache.h"
#include "jit/family.h"
#include "tools/cli/commands.h"

namespace fa3jit::cli {
namespace {

void write_file(const std::string& path, const std::string& content, const char* what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) out.write(content.data(), static_cast<std::streamsize>(content.size()));
  if (out) out.close();
  if (!out) {
    throw Error(ErrorCode::kIoError, fmt::format("cannot write the {} to {}", what, path));
  }
}

// A spec file of any family, as a request; errors name the file.
KernelRequest load_request(const std::string& path) {
  const SpecDocument document = load_spec_document(path);
  try {
    return request_for(document);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", path, e.what()));
  }
}

}  // namespace

std::string reported(int value, const char* unit) {
  return value < 0 ? std::string("n/a") : fmt::format("{}{}", value, unit);
}

void print_kernel_report(const PreparedKernel& kernel) {
  const ResourceReport& r = kernel.compiled->report;
  fmt::print("kernel          {}\n", kernel.compiled->kernel_name);
  fmt::print("kind            {}\n", kernel.request.kind);
  fmt::print("spec            {}\n", kernel.request.summary);
  fmt::print("cache key       {}\n", kernel.key);
  fmt::print("cache           {} ({:.1f} ms {})\n", kernel.cache_hit ? "hit" : "miss", kernel.ms,
             kernel.cache_hit ? "to load" : "to generate and compile");
  fmt::print("registers       {}\n", reported(r.registers));
  fmt::print("spill stores    {}\n", reported(r.spill_store_bytes, " B"));
  fmt::print("spill loads     {}\n", reported(r.spill_load_bytes, " B"));
  fmt::print("stack frame     {}\n", reported(r.stack_frame_bytes, " B"));
  fmt::print("static smem     {}\n", reported(r.static_smem_bytes, " B"));
  fmt::print("dynamic smem    {} B\n", kernel.request.launch.smem_bytes);
  fmt::print("threads         {}\n", kernel.request.launch.num_threads);
  // The figures above are the largest over the entry points; a kernel of several shows each one's.
  if (kernel.compiled->entries.size() > 1) {
    for (const CompiledEntry& e : kernel.compiled->entries)
      fmt::print("entry           {}: {} registers, {} static smem, {} spilled\n", e.name, reported(e.report.registers, ""),
                 reported(e.report.static_smem_bytes, " B"),
                 reported(std::max(e.report.spill_store_bytes, e.report.spill_load_bytes), " B"));
  }
}

int cmd_emit(const GlobalOptions&, const EmitOptions& options) {
  const KernelSource source = load_request(options.spec_path).source;
  if (options.output_path.empty()) {
    std::cout << source.code;
    std::cout.flush();
    if (!std::cout) throw Error(ErrorCode::kIoError, "cannot write the kernel source to stdout");
  } else {
    write_file(options.output_path, source.code, "kernel source");
    fmt::print(stderr, "wrote {} ({} bytes, kernel {})\n", options.output_path, source.code.size(),
               source.kernel_name);
  }
  return 0;
}

int cmd_compile(const GlobalOptions& global, const CompileOptions& options) {
  const KernelRequest request = load_request(options.spec_path);
  Runtime runtime(RuntimeOptions{global.cache_dir});
  const PreparedKernel kernel = runtime.prepare(request);
  print_kernel_report(kernel);
  if (!options.ptx_path.empty()) {
    std::string ptx = kernel.compiled->ptx;
    if (ptx.empty()) {
      // A cache entry may carry only the cubin; the PTX is cheap to regenerate for inspection.
      ptx = compile_kernel(request.source).ptx;
    }
    write_file(options.ptx_path, ptx, "PTX");
    fmt::print("ptx             {}\n", options.ptx_path);
  }
  return 0;
}

int cmd_cache_list(const GlobalOptions& global) {
  CubinCache cache(global.cache_dir, CacheOpen::kExisting);  // listing creates nothing
  const auto entries = cache.list();
  if (cache.directory().empty()) {  // none, or one the cache does not trust: nothing of it is read
    fmt::print("{}; nothing is listed\n", cache.memory_only_why());
  } else {
    fmt::print("cache directory {}{}\n", cache.directory(),
               !cache.exists() ? " (does not exist)" : cache.persistent() ? "" : " (not writable: memory only)");
  }
  int64_t total = 0;
  for (const CacheEntryInfo& e : entries) {
    fmt::print("{}  {:>9} B  {}\n", e.key, e.bytes, e.kernel_name);
    total += e.bytes;
  }
  fmt::print("{} entr{}, {} B\n", entries.size(), entries.size() == 1 ? "y" : "ies", total);
  return 0;
}

int cmd_cache_clear(const GlobalOptions& global) {
  CubinCache cache(global.cache_dir, CacheOpen::kExisting);  // nothing to clear in a missing directory
  // A directory the cache does not trust or cannot write: its entries stay, which is an error, not "removed 0".
  if (!cache.memory_only_why().empty())
    throw Error(ErrorCode::kCacheError, fmt::format("cache clear: {}; nothing was removed", cache.memory_only_why()));
  const size_t removed = cache.clear();
  fmt::print("removed {} entr{} from {}\n", removed, removed == 1 ? "y" : "ies", cache.directory());
  return 0;
}

}  // namespace fa3jit::cli

// fa3jit compiler: KernelSource -> cubin with NVRTC for sm_90a, and the ptxas resource report.
#pragma once

#include <string>
#include <vector>

#include "jit/emit_util.h"

namespace fa3jit {

/// What ptxas reported for the kernel (parsed from the NVRTC program log, `-Xptxas -v`).
/// -1 means "not reported".
struct ResourceReport {
  int registers = -1;
  int spill_store_bytes = -1;
  int spill_load_bytes = -1;
  int stack_frame_bytes = -1;
  int static_smem_bytes = -1;
  int barriers = -1;
};

/// One extern "C" entry point of a compiled kernel and what ptxas reported for it.
struct CompiledEntry {
  std::string name;
  ResourceReport report;
};

/// A compiled kernel image plus everything the runtime needs to load and describe it.
struct CompiledKernel {
  std::string kernel_name;             // the unit's name (KernelSource::kernel_name)
  std::vector<CompiledEntry> entries;  // entry_names(source), in that order
  std::string cubin;  // ELF bytes for sm_90a
  std::string ptx;    // PTX text (kept for inspection and tests)
  ResourceReport report;  // combined_report(entries): what limits and checks read for the kernel as a whole
  std::string log;    // full NVRTC program log
  double compile_ms = 0.0;
};

/// The report of a kernel with these entries: the largest of each field over them (registers, spills, stack,
/// static shared memory, barriers), or -1 where any entry did not report the field (a missing report is not
/// hidden behind another entry's figure).
ResourceReport combined_report(const std::vector<CompiledEntry>& entries);

/// NVRTC options used for every kernel: sm_90a, -O3 equivalent, --use_fast_math, -DNDEBUG, -std=c++17,
/// -Xptxas -v (report), --no-cache (the driver compute cache would otherwise swallow the ptxas report).
const std::vector<std::string>& default_compile_flags();

/// Every NVRTC option of `source`'s compile (what compile_kernel(source) passes and the cache key hashes): the
/// default flags and, for a source of N > 1 entry points, "--split-compile=N", so that ptxas compiles the functions
/// on N threads. N is the entry count, not the host's core count: the SASS ptxas writes depends on N (register
/// allocation differs between 1, 2 and 3), so it must be the same on every host that shares a cache.
std::vector<std::string> compile_flags(const KernelSource& source);

/// "13.0" etc., from nvrtcVersion.
std::string nvrtc_version_string();

/// Target architecture string baked into cache keys ("sm_90a").
inline constexpr const char* kTargetArch = "sm_90a";

/// Compiles with NVRTC, with compile_flags(source), or exactly `flags`. Throws Error(kCompileFailed) with the
/// NVRTC log on failure or when an entry of the source is missing from the PTX; every NVRTC return code is checked.
CompiledKernel compile_kernel(const KernelSource& source);
CompiledKernel compile_kernel(const KernelSource& source, const std::vector<std::string>& flags);

/// Parses ptxas "-v" lines of `log` for `kernel_name` (the lines after "Compiling entry function '<name>'").
ResourceReport parse_ptxas_report(const std::string& log, const std::string& kernel_name);

}  // namespace fa3jit

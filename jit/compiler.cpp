// fa3jit compiler: NVRTC for sm_90a plus the ptxas "-v" report (docs/kernel-design.md §5).
#include "jit/compiler.h"

#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/log.h"

namespace fa3jit {
namespace {

// Any NVRTC API failure other than the compile itself means a broken installation or a bug here.
void check_nvrtc(nvrtcResult r, const char* call, const std::string& kernel_name) {
  if (r != NVRTC_SUCCESS) {
    throw Error(ErrorCode::kInternal,
                fmt::format("{} failed for kernel '{}': {}", call, kernel_name, nvrtcGetErrorString(r)));
  }
}

// Owns one nvrtcProgram so every exit path destroys it.
class Program {
 public:
  Program(const KernelSource& source) : name_(source.kernel_name) {
    const std::string file = source.kernel_name + ".cu";
    check_nvrtc(nvrtcCreateProgram(&prog_, source.code.c_str(), file.c_str(), 0, nullptr, nullptr),
                "nvrtcCreateProgram", name_);
  }
  ~Program() {
    if (prog_ != nullptr) nvrtcDestroyProgram(&prog_);
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  nvrtcProgram get() const { return prog_; }

  std::string log() const {
    size_t size = 0;
    check_nvrtc(nvrtcGetProgramLogSize(prog_, &size), "nvrtcGetProgramLogSize", name_);
    std::string text(size, '\0');
    if (size > 0) check_nvrtc(nvrtcGetProgramLog(prog_, text.data()), "nvrtcGetProgramLog", name_);
    while (!text.empty() && text.back() == '\0') text.pop_back();  // size counts the terminator
    return text;
  }

  std::string cubin() const {
    size_t size = 0;
    check_nvrtc(nvrtcGetCUBINSize(prog_, &size), "nvrtcGetCUBINSize", name_);
    std::string bytes(size, '\0');
    if (size > 0) check_nvrtc(nvrtcGetCUBIN(prog_, bytes.data()), "nvrtcGetCUBIN", name_);
    return bytes;
  }

  std::string ptx() const {
    size_t size = 0;
    check_nvrtc(nvrtcGetPTXSize(prog_, &size), "nvrtcGetPTXSize", name_);
    std::string text(size, '\0');
    if (size > 0) check_nvrtc(nvrtcGetPTX(prog_, text.data()), "nvrtcGetPTX", name_);
    while (!text.empty() && text.back() == '\0') text.pop_back();
    return text;
  }

 private:
  std::string name_;
  nvrtcProgram prog_ = nullptr;
};

// The integer written just before `suffix` in `line` ("... 168 registers" -> 168), or -1.
int number_before(std::string_view line, std::string_view suffix) {
  const size_t at = line.find(suffix);
  if (at == std::string_view::npos) return -1;
  size_t end = at;
  size_t begin = end;
  while (begin > 0 && line[begin - 1] >= '0' && line[begin - 1] <= '9') --begin;
  if (begin == end || end - begin > 9) return -1;  // no digits, or too many for an int
  int value = 0;
  for (size_t i = begin; i < end; ++i) value = value * 10 + (line[i] - '0');
  return value;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

const std::vector<std::string>& default_compile_flags() {
  // Optimisation is on by default in NVRTC ("-O3" is not an NVRTC option; -dopt only matters with -G).
  // --no-cache: with a driver present NVRTC 13 serves repeat compiles from the driver compute cache and then
  // the program log is empty, losing the ptxas report (docs/kernel-design.md §5). All six are accepted by
  // NVRTC 13.0 (checked with nvrtcCompileProgram).
  static const std::vector<std::string> flags = {
      "--gpu-architecture=sm_90a", "-std=c++17", "--use_fast_math", "-DNDEBUG", "-Xptxas=-v", "--no-cache"};
  return flags;
}

std::vector<std::string> compile_flags(const KernelSource& source) {
  std::vector<std::string> flags = default_compile_flags();
  const size_t entries = entry_names(source).size();
  if (entries > 1) flags.push_back(fmt::format("--split-compile={}", entries));
  return flags;
}

ResourceReport combined_report(const std::vector<CompiledEntry>& entries) {
  if (entries.empty()) return {};
  ResourceReport out = entries.front().report;
  const auto merge = [](int& into, int value) { into = (into < 0 || value < 0) ? -1 : std::max(into, value); };
  for (const CompiledEntry& e : entries) {
    const ResourceReport& r = e.report;
    merge(out.registers, r.registers);
    merge(out.spill_store_bytes, r.spill_store_bytes);
    merge(out.spill_load_bytes, r.spill_load_bytes);
    merge(out.stack_frame_bytes, r.stack_frame_bytes);
    merge(out.static_smem_bytes, r.static_smem_bytes);
    merge(out.barriers, r.barriers);
  }
  return out;
}

std::string nvrtc_version_string() {
  int major = 0;
  int minor = 0;
  check_nvrtc(nvrtcVersion(&major, &minor), "nvrtcVersion", "-");
  return fmt::format("{}.{}", major, minor);
}

CompiledKernel compile_kernel(const KernelSource& source) { return compile_kernel(source, compile_flags(source)); }

CompiledKernel compile_kernel(const KernelSource& source, const std::vector<std::string>& flags) {
  if (source.kernel_name.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "KernelSource.kernel_name is empty; it must name the unit (and its extern \"C\" __global__ entry point "
                "when KernelSource.entries is empty)");
  }
  const auto start = std::chrono::steady_clock::now();

  Program program(source);
  std::vector<const char*> options;
  options.reserve(flags.size());
  for (const std::string& f : flags) options.push_back(f.c_str());

  const nvrtcResult compiled =
      nvrtcCompileProgram(program.get(), static_cast<int>(options.size()), options.data());
  // The log is fetched whatever the outcome: on failure it is the error text, on success the ptxas report.
  std::string log = program.log();
  if (compiled != NVRTC_SUCCESS) {
    throw Error(ErrorCode::kCompileFailed,
                fmt::format("NVRTC could not compile kernel '{}' ({}); flags: {}\n{}", source.kernel_name,
                            nvrtcGetErrorString(compiled), fmt::join(flags, " "), log));
  }

  CompiledKernel out;
  out.kernel_name = source.kernel_name;
  out.cubin = program.cubin();
  out.ptx = program.ptx();
  if (out.cubin.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("flags: NVRTC produced no CUBIN for kernel '{}' with flags [{}]; they must name a real "
                            "architecture (--gpu-architecture=sm_90a), not a virtual one (compute_90a)",
                            source.kernel_name, fmt::join(flags, " ")));
  }
  for (const std::string& name : entry_names(source)) {
    // An entry that the source does not define would only fail later, at load time, far from the cause.
    if (name.empty() || out.ptx.find(".entry " + name + "(") == std::string::npos) {
      throw Error(ErrorCode::kCompileFailed,
                  fmt::format("the source compiled but defines no extern \"C\" __global__ entry named '{}'", name));
    }
    out.entries.push_back({name, parse_ptxas_report(log, name)});
    if (out.entries.back().report.registers < 0) {
      fa3jit::log(LogLevel::kDebug,
                  fmt::format("no ptxas report for '{}' in the NVRTC log (compile without -Xptxas=-v?)", name));
    }
  }
  out.report = combined_report(out.entries);
  out.log = std::move(log);
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

ResourceReport parse_ptxas_report(const std::string& log, const std::string& kernel_name) {
  ResourceReport report;
  const std::string entry_marker = "Compiling entry function '" + kernel_name + "'";
  bool in_entry = false;       // between our "Compiling entry function" and the next one
  bool in_properties = false;  // right after "Function properties for <kernel_name>"

  size_t pos = 0;
  while (pos <= log.size()) {
    size_t eol = log.find('\n', pos);
    if (eol == std::string::npos) eol = log.size();
    const std::string_view line(log.data() + pos, eol - pos);
    pos = eol + 1;

    if (line.find("Compiling entry function '") != std::string_view::npos) {
      in_entry = line.find(entry_marker) != std::string_view::npos;
      in_properties = false;
      continue;
    }
    // Properties blocks also exist for non-inlined device functions; only ours counts. The name must match
    // whole so that "k" does not pick up "k2".
    const size_t props = line.find("Function properties for ");
    if (props != std::string_view::npos) {
      in_properties = trim(line.substr(props + 24)) == kernel_name;
      continue;
    }
    if (in_properties && line.find("bytes stack frame") != std::string_view::npos) {
      report.stack_frame_bytes = number_before(line, " bytes stack frame");
      report.spill_store_bytes = number_before(line, " bytes spill stores");
      report.spill_load_bytes = number_before(line, " bytes spill loads");
      in_properties = false;
      continue;
    }
    if (in_entry && line.find("Used ") != std::string_view::npos &&
        line.find(" registers") != std::string_view::npos) {
      report.registers = number_before(line, " registers");
      // ptxas leaves out "bytes smem" (and older releases "used N barriers") when the count is zero.
      const int barriers = number_before(line, " barriers");
      const int smem = number_before(line, " bytes smem");
      report.barriers = barriers < 0 ? 0 : barriers;
      report.static_smem_bytes = smem < 0 ? 0 : smem;
      in_entry = false;  // one "Used" line per entry; later ones belong to other functions
    }
  }
  return report;
}

}  // namespace fa3jit

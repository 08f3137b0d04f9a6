// A stand-in NVRTC for the C ABI harness (fuzz_c_api.cpp), defined in the harness executable so that it interposes
// on libnvrtc for the library's calls (the executable comes first in the dynamic linker's lookup scope).
//
// Why: the harness checks the launch path's argument handling against the fake driver; the kernels' contents do not
// matter there (the fake driver loads any image). With every multiple of 8 a valid head dim and the serving and
// variant fields in the struct, almost every new input names a shape class never compiled before, and a real
// compile (about 0.5 s) per class made the harness run at about 170 inputs per second instead of tens of
// thousands. "Compiling" here returns at once: a PTX text with every entry point the source defines (each
// `extern "C" __global__` function, the runtime checks for them), a placeholder cubin and a ptxas-style report per
// entry. nvrtcVersion says 0.1, so these entries have cache keys no real compile has.
// The emitted source still comes from the real generator (spec -> emit), which fuzz_spec covers with NVRTC out
// of the loop too.
#include <nvrtc.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

struct FakeProgram {
  std::string entry;   // the kernel name: the program's file name without ".cu"
  std::string source;
  std::string ptx, cubin, log;
};

bool is_identifier_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The names of the source's `extern "C" __global__ void [__launch_bounds__(...)] NAME(` functions, in order.
std::vector<std::string> entry_points(const std::string& src) {
  static const std::string marker = "extern \"C\" __global__ void";
  std::vector<std::string> names;
  for (size_t at = src.find(marker); at != std::string::npos; at = src.find(marker, at + 1)) {
    size_t i = at + marker.size();
    const auto skip_space = [&] {
      while (i < src.size() && (src[i] == ' ' || src[i] == '\n' || src[i] == '\t')) ++i;
    };
    skip_space();
    if (src.compare(i, 17, "__launch_bounds__") == 0) {
      i = src.find(')', i);
      if (i == std::string::npos) break;
      ++i;
      skip_space();
    }
    const size_t begin = i;
    while (i < src.size() && is_identifier_char(src[i])) ++i;
    if (i > begin) names.push_back(src.substr(begin, i - begin));
  }
  return names;
}

FakeProgram* program_of(nvrtcProgram prog) { return reinterpret_cast<FakeProgram*>(prog); }

nvrtcResult copy_out(const std::string& text, char* out) {
  if (out == nullptr) return NVRTC_ERROR_INVALID_INPUT;
  std::memcpy(out, text.c_str(), text.size() + 1);
  return NVRTC_SUCCESS;
}

}  // namespace

extern "C" {

const char* nvrtcGetErrorString(nvrtcResult result) {
  return result == NVRTC_SUCCESS ? "NVRTC_SUCCESS (fake)" : "an NVRTC error (fake)";
}

nvrtcResult nvrtcVersion(int* major, int* minor) {
  if (major == nullptr || minor == nullptr) return NVRTC_ERROR_INVALID_INPUT;
  *major = 0;
  *minor = 1;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name, int, const char* const*,
                               const char* const*) {
  if (prog == nullptr || src == nullptr) return NVRTC_ERROR_INVALID_INPUT;
  auto* p = new FakeProgram;
  p->entry = name != nullptr ? name : "kernel";
  p->source = src;
  if (p->entry.size() > 3 && p->entry.compare(p->entry.size() - 3, 3, ".cu") == 0) p->entry.resize(p->entry.size() - 3);
  *prog = reinterpret_cast<nvrtcProgram>(p);
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) {
  if (prog == nullptr) return NVRTC_ERROR_INVALID_INPUT;
  delete program_of(*prog);
  *prog = nullptr;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int, const char* const*) {
  FakeProgram* p = program_of(prog);
  if (p == nullptr) return NVRTC_ERROR_INVALID_PROGRAM;
  std::vector<std::string> names = entry_points(p->source);
  if (names.empty()) names.push_back(p->entry);
  p->ptx = ".version 9.0\n.target sm_90a\n";
  p->log.clear();
  for (const std::string& name : names) {
    p->ptx += ".visible .entry " + name + "(\n)\n{\n}\n";
    p->log += "ptxas info    : Compiling entry function '" + name + "' for 'sm_90a'\n"
              "ptxas info    : Function properties for " + name + "\n"
              "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
              "ptxas info    : Used 168 registers, used 1 barriers\n";
  }
  p->cubin = "\x7f" "ELF fake cubin of " + p->entry;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t* size) {
  if (program_of(prog) == nullptr || size == nullptr) return NVRTC_ERROR_INVALID_INPUT;
  *size = program_of(prog)->log.size() + 1;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* log) {
  if (program_of(prog) == nullptr) return NVRTC_ERROR_INVALID_PROGRAM;
  return copy_out(program_of(prog)->log, log);
}

nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t* size) {
  if (program_of(prog) == nullptr || size == nullptr) return NVRTC_ERROR_INVALID_INPUT;
  *size = program_of(prog)->ptx.size() + 1;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char* ptx) {
  if (program_of(prog) == nullptr) return NVRTC_ERROR_INVALID_PROGRAM;
  return copy_out(program_of(prog)->ptx, ptx);
}

nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t* size) {
  if (program_of(prog) == nullptr || size == nullptr) return NVRTC_ERROR_INVALID_INPUT;
  *size = program_of(prog)->cubin.size();
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* cubin) {
  if (program_of(prog) == nullptr || cubin == nullptr) return NVRTC_ERROR_INVALID_INPUT;
  std::memcpy(cubin, program_of(prog)->cubin.data(), program_of(prog)->cubin.size());
  return NVRTC_SUCCESS;
}

}  // extern "C"

// The `fa3jit` subcommands. Each returns the process exit code (0 ok, 1 check failure) and throws
// fa3jit::Error for everything else; main() turns an Error into "fa3jit: error: <message>" and exit 2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/runtime.h"

namespace fa3jit::cli {

struct GlobalOptions {
  std::string cache_dir;  // empty = FA3JIT_CACHE_DIR / XDG default (cubin_cache.h)
};

struct EmitOptions {
  std::string spec_path;
  std::string output_path;  // empty = stdout
};

struct CompileOptions {
  std::string spec_path;
  std::string ptx_path;  // empty = do not write PTX
};

struct RunOptions {
  std::string spec_path;
  int iters = 30;
  int warmup = 5;
  int64_t check_rows = 1024;  // random rows checked (plus the first and last m-block of one head)
  uint64_t seed = 0;
  int device = 0;
  bool json = false;  // bench only
};

struct TuneOptions {
  std::string sweep_path;
  int iters = 30;
  int warmup = 5;
  int64_t check_rows = 256;
  uint64_t seed = 0;
  int device = 0;                         // --device: the one timing GPU when --gpus is not given
  std::vector<int> gpus;                  // timing devices; empty = every visible GPU
  int jobs = 0;                           // NVRTC workers; 0 = hardware threads, bounded by memory
  bool apply = false;                     // make each class's winner the runtime's choice
  std::string db;                         // tuning database; empty = FA3JIT_TUNE_DB, else <cache dir>/tune-db.json
  std::vector<std::string> heatmap_axes;  // the heat map's x and y axes; empty = the first two swept
};

struct TuneShowOptions {
  std::string db;
  bool json = false;
};

int cmd_emit(const GlobalOptions& global, const EmitOptions& options);
int cmd_compile(const GlobalOptions& global, const CompileOptions& options);
int cmd_run(const GlobalOptions& global, const RunOptions& options);
int cmd_bench(const GlobalOptions& global, const RunOptions& options);
/// run / bench of a quantize_fp8 (FP8 pre-pass) spec (cmd_quantize.cpp); is_quantize_spec reads the file's "kind".
bool is_quantize_spec(const std::string& path);
int cmd_run_quantize(const GlobalOptions& global, const RunOptions& options);
int cmd_bench_quantize(const GlobalOptions& global, const RunOptions& options);
int cmd_tune(const GlobalOptions& global, const TuneOptions& options);
int cmd_tune_show(const GlobalOptions& global, const TuneShowOptions& options);
struct WarmOptions {
  std::vector<std::string> paths;  // spec files, or directories whose *.json files are specs
  int jobs = 0;                    // parallel compiles; 0 = hardware threads
  std::string db;                  // the tuning database whose tuned tiles a manifest adds (must be usable);
                                   // empty: the runtime's
};

int cmd_cache_list(const GlobalOptions& global);
/// Compiles every spec into the cache ahead of time (no GPU needed), `jobs` at a time, so a serving
/// process never pays a first-call compile for them; a manifest brings the tuned tiles of the tuning database for
/// its calls too (kernels/attention_fwd/manifest.h). Exit 0 when all compiled, 2 when any failed.
int cmd_cache_warm(const GlobalOptions& global, const WarmOptions& options);
int cmd_cache_clear(const GlobalOptions& global);

/// Prints the resource report of a prepared kernel (what `fa3jit compile` shows), one "key  value" per line.
void print_kernel_report(const PreparedKernel& kernel);

/// "168" or "n/a" for a value ptxas did not report (-1).
std::string reported(int value, const char* unit = "");

}  // namespace fa3jit::cli

// Split-KV combine: how a spec maps onto threads and shared memory. The one source of the numbers the
// validator checks, the emitter bakes into the kernel (struct CombineConfig) and the launcher uses (block
// size, grid), as attention_fwd's tile table is for the forward kernel.
//
// Work split (device/combine.cuh): a row is one (batch, head, query) of the output. head_dim_v / 4 16-byte
// fp32 vectors make a row; lanes_per_row adjacent lanes of one warp share it, lane j reading vectors
// j, j + lanes_per_row, ... of every split, so one warp-wide load covers contiguous memory. A CTA combines
// rows_per_cta consecutive rows and stages their LSEs in a shared-memory table of rows_per_cta x lse_stride
// floats (sized by max_splits), which is overwritten by the split weights exp(L_s - L).
#pragma once

#include <vector>

#include "kernels/attention_combine/spec.h"

namespace fa3jit::attention_combine {

/// Static shared memory a CTA may hold without the opt-in attribute (CUDA programming guide, "Shared
/// memory": 48 KB per block).
inline constexpr int kMaxStaticSmemBytes = 48 * 1024;
inline constexpr int kMinThreads = 32;    // whole warps: the row groups use warp shuffles
inline constexpr int kMaxThreads = 1024;  // per CTA (sm_90)
/// Threads per CTA the default rows_per_cta aims at, and the LSE table size it stays under: small CTAs keep
/// a decode step's few rows spread over many SMs.
inline constexpr int kDefaultThreads = 128;
inline constexpr int kDefaultSmemBudgetBytes = 24 * 1024;

/// Registers per thread the kernel is compiled for (through __launch_bounds__' minimum CTAs per SM): enough
/// for 8 loads of 16 bytes in flight per lane, and 1024 threads per SM, far more bytes in flight than HBM
/// latency needs. Without a minimum, ptxas 13 picks a tighter budget by itself and may spill.
inline constexpr int kRegisterBudget = 64;
inline constexpr int kRegistersPerSm = 65536;

/// Numbers derived from a spec.
struct Geometry {
  int vecs_per_row;     // head_dim_v / 4: 16-byte fp32 vectors in one row of a partial
  int lanes_per_row;    // threads sharing a row: the power of two >= vecs_per_row, at most 32 (one warp)
  int vecs_per_lane;    // ceil(vecs_per_row / lanes_per_row): loads per split per lane
  int split_unroll;     // splits whose loads a lane issues before the first is used: 8 / vecs_per_lane
  int num_threads;      // rows_per_cta * lanes_per_row
  int min_ctas_per_sm;  // __launch_bounds__ minimum: caps registers at kRegisterBudget per thread
  int lse_stride;       // floats between two rows of the LSE table (padded against bank conflicts)
  int smem_bytes;       // static shared memory of the LSE table: rows_per_cta * lse_stride * 4
};

/// The geometry of a spec whose head_dim_v and max_splits are in range (pure arithmetic; never throws).
Geometry derive_geometry(const Spec& spec);

/// Lanes per row for head_dim_v (a multiple of 4 > 0).
int lanes_per_row(int head_dim_v);

/// Whether validate() accepts `rows_per_cta` for (head_dim_v, max_splits): a power of two whose CTA has
/// kMinThreads..kMaxThreads threads and whose LSE table fits kMaxStaticSmemBytes. Allocates nothing.
bool rows_per_cta_fits(int head_dim_v, int max_splits, int rows_per_cta);

/// Every value rows_per_cta_fits() accepts, ascending (for messages); never empty for head_dim_v and
/// max_splits in range.
std::vector<int> allowed_rows_per_cta(int head_dim_v, int max_splits);

/// The default: the largest allowed value with at most kDefaultThreads threads and a table of at most
/// kDefaultSmemBudgetBytes (the smallest allowed value if none is that small).
int default_rows_per_cta(int head_dim_v, int max_splits);

}  // namespace fa3jit::attention_combine

// A serving batch (serving_batch.h) on the device: its images uploaded, the forward's serving arguments built
// from them, a run with poisoned outputs and a caller-owned workspace, and the check of what came back.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/attention_fwd/launch.h"
#include "testing/device_memory.h"
#include "testing/serving_batch.h"

namespace fa3jit::testing {

class ServingProblem {
 public:
  /// make_serving_batch(shape, seed), uploaded; out and lse allocated. Needs the current context of the device.
  ServingProblem(const ServingShape& shape, uint64_t seed);

  /// The forward's arguments: packed / dense q and out, cu_seqlens_q + max_seqlen_q, cu_seqlens_k, seqused_k,
  /// page_table (+ stride, max_pages, num_pages, page_size; k/v stride_batch = the page stride), max_seqlen_k,
  /// num_splits, pack_gqa, softmax_scale explicit. No workspace: run() sizes it with workspace_size().
  attention_fwd::ForwardArgs args() const;

  /// Poisons out, lse and the workspace with 0xFF bytes (NaN), sizes the workspace with workspace_size(args()),
  /// records plan_info(args()) in `plan`, launches once on the default stream, synchronises and downloads out
  /// and lse into the images.
  void run(Runtime& runtime);

  ServingCheck check(const RowSampling& sampling) const { return check_serving(batch, out, lse, sampling); }

  ServingBatch batch;
  std::vector<uint16_t> out;  // out image (ServingBatch::q_offset layout)
  std::vector<float> lse;     // lse image (ServingBatch::lse_index layout)
  attention_fwd::CallPlanInfo plan;  // of the last run
  DeviceBuffer d_q, d_k, d_v, d_out, d_lse, d_cu_seqlens_q, d_cu_seqlens_k, d_seqused_k, d_page_table, d_workspace,
      d_sinks;
};

}  // namespace fa3jit::testing

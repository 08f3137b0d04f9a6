// The debug check of the values inside a call's int32 index tensors (cu_seqlens_q, cu_seqlens_k, seqused_k,
// page_table), which the kernels only clamp (launch.h, "serving layouts"): with it a caller learns which value is
// wrong instead of getting a wrong answer for one sequence. It synchronises the stream and copies the tensors to
// the host, so it is for debugging, never for a serving hot path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention_fwd/launch.h"

namespace fa3jit::attention_fwd {

/// Host copies of a call's index tensors; a vector is empty when its tensor is not given. page_table holds
/// (batch - 1) * page_table_stride + max_pages elements (its rows at page_table_stride).
struct IndexValues {
  std::vector<int32_t> cu_seqlens_q, cu_seqlens_k, seqused_k, page_table;
};

/// The first value of `v` that breaks ForwardArgs' rules, as a message naming the argument, the index, the value
/// and what is allowed; empty when every value holds. `a` has passed the host checks of forward(). The rules:
///   cu_seqlens_q: starts >= 0, non-decreasing, cu_seqlens_q[batch] <= seqlen_q (total_q), each sequence at most
///                 max_seqlen_q long (rows past it would not be computed);
///   cu_seqlens_k: starts >= 0, non-decreasing, cu_seqlens_k[batch] <= seqlen_k (total_k);
///   seqused_k:    in [0, the sequence's capacity] (dense: seqlen_k; cu_seqlens_k: its span; paged:
///                 max_pages * page_size);
///   page_table:   the entries of a sequence's first ceil(seqused_k / page_size) pages in [0, num_pages).
/// Order: cu_seqlens_q, cu_seqlens_k, seqused_k, then page_table, each by sequence.
std::string first_bad_index(const ForwardArgs& a, const IndexValues& v);

/// Synchronises `stream`, copies the call's index tensors to the host and throws Error(kInvalidArgument) with
/// first_bad_index's message (prefixed "index check: "); returns when every value holds or the call has no index
/// tensor. Error(kInvalidArgument) on a stream that is capturing a CUDA graph (it cannot synchronise there), for
/// extents out of range (batch, page_size, max_pages, num_pages, page_table_stride) and for an index tensor that
/// does not lie inside its device allocation. forward() calls it after its own host checks, for calls that launch.
void check_index_values(const ForwardArgs& a, void* stream);

/// True when the environment variable FA3JIT_CHECK_INDICES is set to anything but "" or "0" (read once per
/// process): then every forward() runs check_index_values before it launches.
bool index_check_enabled();

}  // namespace fa3jit::attention_fwd

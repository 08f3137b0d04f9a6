// A serving batch on the device (serving_problem.h).
#include "testing/serving_problem.h"

#include "core/error.h"
#include "jit/driver.h"

namespace fa3jit::testing {
namespace {

template <class T>
DeviceBuffer upload(const std::vector<T>& host) {
  DeviceBuffer buffer(host.size() * sizeof(T));
  buffer.upload(host.data(), host.size() * sizeof(T));
  return buffer;
}

}  // namespace

ServingProblem::ServingProblem(const ServingShape& shape, uint64_t seed) : batch(make_serving_batch(shape, seed)) {
  out.assign(batch.out_elements(), 0);
  lse.assign(batch.lse_elements(), 0.0f);
  d_q = upload(batch.q_image);
  d_k = upload(batch.k_image);
  d_v = upload(batch.v_image);
  d_cu_seqlens_q = upload(batch.cu_seqlens_q);
  d_cu_seqlens_k = upload(batch.cu_seqlens_k);
  d_seqused_k = upload(batch.seqused_k);
  d_page_table = upload(batch.page_table);
  d_sinks = upload(batch.sinks);
  d_out = DeviceBuffer(out.size() * sizeof(uint16_t));
  d_lse = DeviceBuffer(lse.size() * sizeof(float));
}

attention_fwd::ForwardArgs ServingProblem::args() const {
  const ServingShape& s = batch.shape;
  const int64_t H = s.num_heads, Hkv = s.num_heads_kv, d = s.head_dim;
  attention_fwd::ForwardArgs a;
  a.dtype = s.dtype;
  a.batch = s.batch();
  a.seqlen_q = batch.seqlen_q;
  a.seqlen_k = batch.seqlen_k;
  a.num_heads = H;
  a.num_heads_kv = Hkv;
  a.head_dim = a.head_dim_v = d;
  a.softmax_scale = batch.softmax_scale;
  a.causal = s.causal;
  // q and out: (batch, seqlen_q, heads, d) dense, or (total_q, heads, d) packed (stride_batch unused: 0).
  const int64_t q_batch_stride = s.packed_q ? 0 : batch.seqlen_q * H * d;
  a.q = TensorView{d_q.get(), q_batch_stride, H * d, d};
  a.out = TensorView{d_out.get(), q_batch_stride, H * d, d};
  a.lse = static_cast<float*>(d_lse.get());
  if (s.packed_q) {
    a.cu_seqlens_q = static_cast<const int32_t*>(d_cu_seqlens_q.get());
    a.max_seqlen_q = batch.max_seqlen_q;
  }
  int64_t kv_batch_stride = 0;  // packed: unused
  switch (s.kv) {
    case KvLayout::kDense: kv_batch_stride = batch.kv_capacity * Hkv * d; break;
    case KvLayout::kPacked:
      a.cu_seqlens_k = static_cast<const int32_t*>(d_cu_seqlens_k.get());
      a.max_seqlen_k = batch.max_seqlen_k;
      break;
    case KvLayout::kPaged:
      kv_batch_stride = batch.page_stride_rows * Hkv * d;  // the page stride
      a.page_table = static_cast<const int32_t*>(d_page_table.get());
      a.page_table_stride = batch.page_table_stride;
      a.max_pages = batch.max_pages;
      a.num_pages = batch.num_pages;
      a.page_size = s.page_size;
      a.max_seqlen_k = batch.max_seqlen_k;
      break;
  }
  a.k = TensorView{d_k.get(), kv_batch_stride, Hkv * d, d};
  a.v = TensorView{d_v.get(), kv_batch_stride, Hkv * d, d};
  if (!batch.seqused_k.empty()) a.seqused_k = static_cast<const int32_t*>(d_seqused_k.get());
  a.num_splits = s.num_splits;
  a.pack_gqa = s.pack_gqa;
  a.window_left = s.window_left;
  a.window_right = s.window_right;
  a.softcap = s.softcap;
  if (!batch.sinks.empty()) a.sinks = static_cast<const float*>(d_sinks.get());
  return a;
}

void ServingProblem::run(Runtime& runtime) {
  attention_fwd::ForwardArgs a = args();
  plan = attention_fwd::plan_info(a);
  const size_t workspace = attention_fwd::workspace_size(a);
  if (workspace > d_workspace.bytes()) d_workspace = DeviceBuffer(workspace);
  // Poison first: a skipped tile or an unwritten split partial leaves NaN behind, not a plausible stale value.
  d_out.fill_bytes(0xFF);
  d_lse.fill_bytes(0xFF);
  d_workspace.fill_bytes(0xFF);
  if (workspace > 0) {
    a.workspace = d_workspace.get();
    a.workspace_bytes = d_workspace.bytes();
  }
  attention_fwd::forward(runtime, a, nullptr);
  check_cu(driver().cuCtxSynchronize(nullptr), "cuCtxSynchronize after the serving forward");
  d_out.download(out.data(), out.size() * sizeof(uint16_t));
  d_lse.download(lse.data(), lse.size() * sizeof(float));
}

}  // namespace fa3jit::testing

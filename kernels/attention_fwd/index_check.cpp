// The debug check of index-tensor values (index_check.h).
#include "kernels/attention_fwd/index_check.h"

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "jit/driver.h"
#include "runtime/tensor_check.h"

namespace fa3jit::attention_fwd {

namespace {

// The offsets of a cu_seqlens tensor: >= 0 at the start, non-decreasing, ending at most at `total`; each span at
// most `max_span` (-1: unbounded). Empty when they hold.
std::string bad_offsets(const std::vector<int32_t>& cu, const char* name, int64_t total, const char* total_name,
                        int64_t max_span, const char* max_name) {
  if (cu.empty()) return {};
  if (cu[0] < 0) return fmt::format("{}[0] = {} is negative; expected offsets from 0", name, cu[0]);
  for (size_t b = 1; b < cu.size(); ++b) {
    if (cu[b] < cu[b - 1])
      return fmt::format("{}[{}] = {} is below {}[{}] = {}; expected non-decreasing offsets", name, b, cu[b], name,
                         b - 1, cu[b - 1]);
    if (max_span >= 0 && int64_t{cu[b]} - cu[b - 1] > max_span)
      return fmt::format("sequence {} has {} rows ({}[{}] - {}[{}]), more than {} = {}; rows past it would not be "
                         "computed",
                         b - 1, int64_t{cu[b]} - cu[b - 1], name, b, name, b - 1, max_name, max_span);
  }
  if (cu.back() > total)
    return fmt::format("{}[{}] = {} is past the {} rows of the tensor ({}); expected at most {}", name, cu.size() - 1,
                       cu.back(), total, total_name, total);
  return {};
}

void copy_to_host(std::vector<int32_t>& host, const int32_t* device_ptr, int64_t count, const CallDevice& device,
                  const char* name) {
  if (device_ptr == nullptr || count <= 0) return;
  const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(int32_t);
  check_allocation(device_ptr, bytes, device, name, nullptr, nullptr);
  host.resize(static_cast<size_t>(count));
  check_cu(driver().cuMemcpyDtoH(host.data(), reinterpret_cast<CUdeviceptr>(device_ptr), bytes),
           "cuMemcpyDtoH (index check)");
}

}  // namespace

std::string first_bad_index(const ForwardArgs& a, const IndexValues& v) {
  const bool paged = a.page_table != nullptr;
  const int64_t max_seqlen_q = a.cu_seqlens_q != nullptr ? a.max_seqlen_q : -1;
  std::string bad = bad_offsets(v.cu_seqlens_q, "cu_seqlens_q", a.seqlen_q, "total_q = seqlen_q", max_seqlen_q,
                                "max_seqlen_q");
  if (bad.empty())
    bad = bad_offsets(v.cu_seqlens_k, "cu_seqlens_k", a.seqlen_k, "total_k = seqlen_k", -1, "");
  if (!bad.empty()) return bad;
  const int64_t paged_capacity = a.max_pages * a.page_size;
  for (size_t b = 0; b < v.seqused_k.size(); ++b) {
    int64_t capacity = a.seqlen_k;
    const char* what = "seqlen_k";
    if (paged) {
      capacity = paged_capacity;
      what = "max_pages x page_size";
    } else if (b + 1 < v.cu_seqlens_k.size()) {
      capacity = int64_t{v.cu_seqlens_k[b + 1]} - v.cu_seqlens_k[b];
      what = "its cu_seqlens_k span";
    }
    if (v.seqused_k[b] < 0 || v.seqused_k[b] > capacity)
      return fmt::format("seqused_k[{}] = {} is outside [0, {}] ({} of sequence {})", b, v.seqused_k[b], capacity,
                         what, b);
  }
  if (paged && !v.page_table.empty()) {
    for (int64_t b = 0; b < a.batch; ++b) {
      const int64_t used = static_cast<size_t>(b) < v.seqused_k.size() ? v.seqused_k[static_cast<size_t>(b)] : 0;
      const int64_t pages = (used + a.page_size - 1) / a.page_size;
      for (int64_t j = 0; j < pages; ++j) {
        const int32_t page = v.page_table[static_cast<size_t>(b * a.page_table_stride + j)];
        if (page < 0 || page >= a.num_pages)
          return fmt::format("page_table[{}, {}] = {} is outside [0, num_pages = {}) (page {} of sequence {}'s {} "
                             "keys)",
                             b, j, page, a.num_pages, j, b, used);
      }
    }
  }
  return {};
}

void check_index_values(const ForwardArgs& a, void* stream) {
  if (a.cu_seqlens_q == nullptr && a.cu_seqlens_k == nullptr && a.seqused_k == nullptr && a.page_table == nullptr)
    return;
  // The extents the copies and first_bad_index use (forward() checks these and more before it calls here).
  if (a.batch < 0 || a.batch > 0x7fffffff)
    bad_argument(fmt::format("index check: argument batch = {} is out of range; expected [0, 2^31)", a.batch));
  if (a.page_table != nullptr &&
      (a.page_size < 1 || a.page_size > 0x7fffffff || a.max_pages < 0 || a.max_pages > 0x7fffffff ||
       a.num_pages < 0 || a.page_table_stride < a.max_pages || a.page_table_stride > 0x7fffffff))
    bad_argument(fmt::format("index check: arguments page_size = {}, max_pages = {}, num_pages = {}, "
                             "page_table_stride = {} are out of range; expected page_size in [1, 2^31), max_pages and "
                             "num_pages >= 0, page_table_stride in [max_pages, 2^31)",
                             a.page_size, a.max_pages, a.num_pages, a.page_table_stride));
  const Driver& d = driver();
  const CallDevice device = call_device(a.q.data, "q.data", "q");
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  check_cu(d.cuStreamIsCapturing(static_cast<CUstream>(stream), &capture), "cuStreamIsCapturing (index check)");
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE)
    bad_argument("index check: the stream is capturing a CUDA graph; the check synchronises and copies the index "
                 "tensors to the host, so run it outside capture (unset FA3JIT_CHECK_INDICES while capturing)");
  check_cu(d.cuStreamSynchronize(static_cast<CUstream>(stream)), "cuStreamSynchronize (index check)");
  IndexValues v;
  copy_to_host(v.cu_seqlens_q, a.cu_seqlens_q, a.batch + 1, device, "cu_seqlens_q");
  copy_to_host(v.cu_seqlens_k, a.cu_seqlens_k, a.batch + 1, device, "cu_seqlens_k");
  copy_to_host(v.seqused_k, a.seqused_k, a.batch, device, "seqused_k");
  if (a.batch > 0)
    copy_to_host(v.page_table, a.page_table, (a.batch - 1) * a.page_table_stride + a.max_pages, device, "page_table");
  const std::string bad = first_bad_index(a, v);
  if (!bad.empty()) bad_argument("index check: " + bad);
}

bool index_check_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("FA3JIT_CHECK_INDICES");
    return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
  }();
  return enabled;
}

}  // namespace fa3jit::attention_fwd

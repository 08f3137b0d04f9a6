// first_bad_index (kernels/attention_fwd/index_check.h): the rules of the debug index check on host values.
#include <catch2/catch.hpp>

#include <string>

#include "kernels/attention_fwd/index_check.h"

using namespace fa3jit::attention_fwd;

namespace {

// Three paged sequences: page_size 16, 4 pages per sequence (row stride 5), a pool of 10 pages.
ForwardArgs paged_args() {
  static const int32_t dummy = 0;
  ForwardArgs a;
  a.batch = 3;
  a.seqlen_q = 3;
  a.page_table = &dummy;  // only its presence matters to first_bad_index
  a.seqused_k = &dummy;
  a.page_table_stride = 5, a.max_pages = 4, a.page_size = 16, a.num_pages = 10;
  return a;
}

IndexValues paged_values() {
  IndexValues v;
  v.seqused_k = {64, 17, 0};
  v.page_table = {0, 1, 2, 3, -7, /**/ 9, 4, 99, 99, 99, /**/ 99, 99, 99, 99};  // unused entries may hold anything
  return v;
}

}  // namespace

TEST_CASE("index check: a valid paged batch passes, unused page-table entries are not read", "[index_check]") {
  CHECK(first_bad_index(paged_args(), paged_values()).empty());
}

TEST_CASE("index check: the first bad page index is named with its sequence and page", "[index_check]") {
  IndexValues v = paged_values();
  v.page_table[6] = 10;  // sequence 1, page 1 (its keys 16..16): num_pages is 10
  CHECK(first_bad_index(paged_args(), v) ==
        "page_table[1, 1] = 10 is outside [0, num_pages = 10) (page 1 of sequence 1's 17 keys)");
  v.page_table[6] = -1;
  CHECK(first_bad_index(paged_args(), v).find("page_table[1, 1] = -1") == 0);
  v.page_table[2] = 12;  // sequence 0 comes first
  CHECK(first_bad_index(paged_args(), v).find("page_table[0, 2] = 12") == 0);
}

TEST_CASE("index check: seqused_k outside [0, capacity]", "[index_check]") {
  IndexValues v = paged_values();
  v.seqused_k[2] = 65;  // 4 pages x 16
  CHECK(first_bad_index(paged_args(), v) ==
        "seqused_k[2] = 65 is outside [0, 64] (max_pages x page_size of sequence 2)");
  v.seqused_k[2] = -1;
  CHECK(first_bad_index(paged_args(), v).find("seqused_k[2] = -1") == 0);

  // Packed K/V: the capacity is the sequence's span of cu_seqlens_k.
  ForwardArgs a;
  a.batch = 2, a.seqlen_q = 2, a.seqlen_k = 30;
  IndexValues packed;
  packed.cu_seqlens_k = {0, 10, 30};
  packed.seqused_k = {10, 21};
  CHECK(first_bad_index(a, packed) == "seqused_k[1] = 21 is outside [0, 20] (its cu_seqlens_k span of sequence 1)");
}

TEST_CASE("index check: cu_seqlens offsets negative, decreasing, past the tensor or longer than max_seqlen_q",
          "[index_check]") {
  static const int32_t dummy = 0;
  ForwardArgs a;
  a.batch = 3, a.seqlen_q = 20, a.seqlen_k = 40, a.max_seqlen_q = 8;
  a.cu_seqlens_q = &dummy;
  IndexValues v;
  v.cu_seqlens_q = {0, 5, 13, 20};
  CHECK(first_bad_index(a, v).empty());
  v.cu_seqlens_q = {-2, 5, 13, 20};
  CHECK(first_bad_index(a, v) == "cu_seqlens_q[0] = -2 is negative; expected offsets from 0");
  v.cu_seqlens_q = {0, 5, 4, 20};
  CHECK(first_bad_index(a, v) == "cu_seqlens_q[2] = 4 is below cu_seqlens_q[1] = 5; expected non-decreasing offsets");
  v.cu_seqlens_q = {0, 5, 13, 21};
  CHECK(first_bad_index(a, v) ==
        "cu_seqlens_q[3] = 21 is past the 20 rows of the tensor (total_q = seqlen_q); expected at most 20");
  v.cu_seqlens_q = {0, 9, 13, 20};
  CHECK(first_bad_index(a, v).find("sequence 0 has 9 rows (cu_seqlens_q[1] - cu_seqlens_q[0]), more than "
                                   "max_seqlen_q = 8") == 0);
  v.cu_seqlens_q = {0, 5, 13, 20};
  v.cu_seqlens_k = {0, 10, 41, 41};
  CHECK(first_bad_index(a, v).find("cu_seqlens_k[3] = 41 is past the 40 rows") == 0);
}

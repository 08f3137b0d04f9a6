// B4/B5: launch arguments the kernel cannot take give a clear Error naming the argument; never an
// illegal memory access. Run on a GPU (the checks need real device pointers); skipped elsewhere.
#include <catch2/catch.hpp>

#include <string>

#include "gpu_test.h"

using namespace fa3jit;
using namespace fa3jit::test;
using namespace fa3jit::attention_fwd;

TEST_CASE("B4: bad pointers, strides and shapes are rejected with the argument's name", "[gpu][arguments]") {
  if (!have_gpu()) return;
  ProblemShape s{DType::kBf16, 2, 256, 256, 4, 2, 128, false};
  AttentionProblem p(s, 9);

  ForwardArgs a = p.args();
  a.q.data = static_cast<char*>(a.q.data) + 2;  // one element off: 2-byte aligned only
  expect_forward_error(a, ErrorCode::kInvalidArgument, "q.data");

  a = p.args();
  a.k.stride_seq = 2 * 128 + 4;  // 520 bytes: not a multiple of 16
  expect_forward_error(a, ErrorCode::kInvalidArgument, "k.stride_seq");

  a = p.args();
  a.v.data = nullptr;
  expect_forward_error(a, ErrorCode::kInvalidArgument, "v.data is null");

  std::vector<uint16_t> host(1 << 20);
  a = p.args();
  a.out.data = host.data() + (16 - reinterpret_cast<uintptr_t>(host.data()) % 16) / 2;
  expect_forward_error(a, ErrorCode::kInvalidArgument, "out.data");

  a = p.args();
  a.seqlen_k = 4096;  // k/v buffers hold 256 rows
  expect_forward_error(a, ErrorCode::kInvalidArgument, "past its allocation");

  a = p.args();
  a.num_heads_kv = 3;
  expect_forward_error(a, ErrorCode::kInvalidArgument, "num_heads_kv");

  a = p.args();
  a.seqlen_q = 0;
  expect_forward_error(a, ErrorCode::kInvalidArgument, "seqlen_q");

  a = p.args();
  a.out = a.k;  // the kernel would write K while other CTAs read it
  a.seqlen_k = s.seqlen_q;
  expect_forward_error(a, ErrorCode::kInvalidArgument, "argument out");

  a = p.args();
  a.out.stride_seq = 64;  // rows of 128 columns overlapping by half
  expect_forward_error(a, ErrorCode::kInvalidArgument, "overlap");

  a = p.args();
  a.softmax_scale = -0.125f;
  expect_forward_error(a, ErrorCode::kInvalidArgument, "softmax_scale");

  testing::DeviceBuffer tiny_lse(64);
  a = p.args();
  a.lse = static_cast<float*>(tiny_lse.get());
  expect_forward_error(a, ErrorCode::kInvalidArgument, "lse");

  // head_dim_v != head_dim is a supported call since the head-dims work (128/64 runs); a pair with no tile is
  // refused naming both dims in test_head_dims.cpp and test_arguments_fake.cpp.

  // After all the rejected calls the runtime and the context still work.
  p.run(runtime());
  CHECK(p.check().passed);
}

TEST_CASE("B5: an unsupported head_dim lists the supported ones", "[gpu][arguments]") {
  if (!have_gpu()) return;
  ProblemShape s{DType::kFp16, 1, 64, 64, 2, 2, 128, false};
  AttentionProblem p(s, 1);
  ForwardArgs a = p.args();
  a.head_dim = a.head_dim_v = 84;
  expect_forward_error(a, ErrorCode::kInvalidArgument, "head_dim = 84");
  expect_forward_error(a, ErrorCode::kInvalidArgument, "a multiple of 8 in [8, 256]");
  a.head_dim = 128;
  a.head_dim_v = 264;
  expect_forward_error(a, ErrorCode::kInvalidArgument, "head_dim_v = 264");
}

TEST_CASE("a size-1 seqlen dimension may carry any stride (decode step from a DLPack producer)", "[gpu][arguments]") {
  if (!have_gpu()) return;
  ProblemShape s{DType::kBf16, 3, 1, 300, 8, 2, 128, false};
  AttentionProblem p(s, 4);
  p.run(runtime());
  const auto expected = p.out.data;
  ForwardArgs a = p.args();
  a.q.stride_seq = 1;
  a.out.stride_seq = 3;
  p.d_out.fill_bytes(0xFF);
  forward(runtime(), a, nullptr);
  check_cu(driver().cuCtxSynchronize(nullptr), "cuCtxSynchronize");
  p.d_out.download(p.out.data.data(), p.out.size_bytes());
  CHECK(p.out.data == expected);
}

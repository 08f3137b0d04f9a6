// Several devices in one process, against the fake CUDA driver run with FAKE_CUDA_DEVICES=2 (tools/bootstrap.sh runs
// this binary a second time that way, tag [multi_device]): calls whose tensors alternate between the devices, from
// one thread and from two, launch each kernel through a function of the tensors' device's context, on that context's
// stream, with the dynamic shared memory set on that function, and size their splits by that device's SM count
// (the fake gives device d 132 - 18 d SMs and refuses a launch of a function fetched in another context). Kernels
// compile for real with NVRTC; only the driver is fake. With one fake device every case says so and checks nothing
// (the tests of this binary's first run, which has one).
#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "fake_cuda.h"
#include "fake_support.h"
#include "jit/driver.h"
#include "kernels/attention_fwd/launch.h"

using namespace fa3jit;
using namespace fa3jit::attention_fwd;
using Catch::Matchers::Contains;

namespace {

using fake_support::last_launch;

const fake_support::FakeDriver& fake() { return fake_support::fake_driver(); }

// False (with a warning) when the fake has fewer than two devices: this binary's single-device run.
bool have_two_devices() {
  if (fake().device_count() >= 2) return true;
  WARN("one fake device: run with FAKE_CUDA_DEVICES=2 for the multi-device cases (tools/bootstrap.sh does)");
  return false;
}

Runtime& runtime() {
  static fake_support::TempDir dir("fa3jit-fake-multi-device");
  REQUIRE(!dir.path.empty());
  static Runtime rt(RuntimeOptions{dir.path});
  return rt;
}

// Throws instead of REQUIRE: the two-thread case calls it off Catch's thread.
TensorView tensor_on(int device, int64_t batch, int64_t seqlen, int64_t heads, int64_t dim) {
  const uint64_t bytes = static_cast<uint64_t>(batch * seqlen * heads * dim * 2);
  void* data = reinterpret_cast<void*>(fake().alloc_on(device, bytes));
  if (data == nullptr) throw std::runtime_error("the fake driver has no device " + std::to_string(device));
  return {data, seqlen * heads * dim, heads * dim, dim};
}

// A bf16 attention call with every tensor on `device`: a prefill (seqlen_q 300) or a decode step over a 4096-key
// cache that the heuristic splits (num_splits 0).
ForwardArgs call_on(int device, bool decode, int64_t batch = 2) {
  ForwardArgs a;
  a.dtype = DType::kBf16;
  a.batch = batch, a.num_heads = 16, a.num_heads_kv = decode ? 2 : 16, a.head_dim = 128;
  a.seqlen_q = decode ? 1 : 300, a.seqlen_k = decode ? 4096 : 300;
  a.causal = true;
  a.q = tensor_on(device, batch, a.seqlen_q, a.num_heads, 128);
  a.k = tensor_on(device, batch, a.seqlen_k, a.num_heads_kv, 128);
  a.v = tensor_on(device, batch, a.seqlen_k, a.num_heads_kv, 128);
  a.out = tensor_on(device, batch, a.seqlen_q, a.num_heads, 128);
  if (decode) {
    a.num_splits = 0;
    const size_t bytes = workspace_size(a);
    if (bytes > 0) {
      a.workspace = reinterpret_cast<void*>(fake().alloc_on(device, bytes));
      a.workspace_bytes = bytes;
    }
  }
  return a;
}

// forward() refuses the call with kInvalidArgument and a message containing `fragment`, launching nothing.
void expect_refused(const ForwardArgs& a, void* stream, const std::string& fragment) {
  const int before = fake_support::launch_count();
  try {
    forward(runtime(), a, stream);
    FAIL("forward accepted the call; expected an error containing \"" << fragment << "\"");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(std::string(e.what()), Contains(fragment));
  }
  CHECK(fake_support::launch_count() == before);
}

}  // namespace

TEST_CASE("calls alternating between two devices launch on the tensors' device with its own SM count",
          "[fake_driver][multi_device]") {
  if (!have_two_devices()) return;
  // A decode shape whose split count differs between 132 and 114 SMs, so that a count read from the wrong device
  // shows in num_splits (plan_info uses the launch's own heuristic).
  int64_t batch = 0;
  for (int64_t b = 1; b <= 32 && batch == 0; ++b) {
    fake().make_current(0);
    const int on_0 = plan_info(call_on(0, true, b)).num_splits;
    fake().make_current(1);
    const int on_1 = plan_info(call_on(1, true, b)).num_splits;
    if (on_0 != on_1) batch = b;
  }
  INFO("no decode batch of 1-32 sequences splits differently on 132 and 114 SMs");
  REQUIRE(batch > 0);
  int splits[2] = {0, 0};
  for (int round = 0; round < 3; ++round)
    for (int device : {0, 1, 1, 0}) {
      INFO("round " << round << ", device " << device);
      fake().make_current(device);
      forward(runtime(), call_on(device, false), nullptr);  // a fake launch refuses another context's function
      CHECK(last_launch().device == device);
      const ForwardArgs decode = call_on(device, true, batch);
      forward(runtime(), decode, nullptr);  // split pass, then (when it splits) the combine kernel, on this device
      CHECK(last_launch().device == device);
      const int expected = plan_info(decode).num_splits;
      if (expected > 1) CHECK_THAT(std::string(last_launch().kernel_name), Contains("attention_combine"));
      if (splits[device] == 0) splits[device] = expected;
      CHECK(expected == splits[device]);
    }
  CHECK(splits[0] != splits[1]);
}

TEST_CASE("two threads, one per device, share the runtime and its kernels", "[fake_driver][multi_device]") {
  if (!have_two_devices()) return;
  (void)runtime();  // made here: the worker threads must not run Catch assertions
  std::atomic<int> failures{0}, calls{0};
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int device : {0, 1})
    threads.emplace_back([&, device] {
      fake().make_current(device);
      try {
        for (int i = 0; i < 200; ++i) {
          forward(runtime(), call_on(device, i % 2 == 1), nullptr);
          ++calls;
        }
      } catch (const std::exception& e) {
        ++failures;
        errors[device] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  INFO("device 0: " << errors[0] << " | device 1: " << errors[1]);
  CHECK(failures == 0);
  CHECK(calls == 400);
}

TEST_CASE("tensors on one device with another device current, or another context's stream, are refused by name",
          "[fake_driver][multi_device]") {
  if (!have_two_devices()) return;
  fake().make_current(0);
  const ForwardArgs on_1 = call_on(1, false);
  expect_refused(on_1, nullptr, "current CUDA context is not on q's device 1");
  CUstream stream_0 = nullptr;
  REQUIRE(driver().cuStreamCreate(&stream_0, 0) == CUDA_SUCCESS);
  fake().make_current(1);
  expect_refused(on_1, stream_0, "belongs to another CUDA context");
}

// capture_snapshot_gpu_test.cpp: Note [Input snapshots on the host] on CUDA. A step captured with
// Scope(true) keeps the snapshot of every input whose storage existed before the Scope in host
// memory (a fresh one on the device); replay() and an Executable still reproduce the eager step
// bit for bit, including an input that nobody references after the capture (the Executable
// rebuilds it on the device from its host snapshot) and one the step overwrites (refilled every
// run from the device copy the Executable makes once).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "blutensor/blutensor.h"
#include "blutensor/capture.h"
#include "common/gpu_test.h"

namespace {

using namespace blu;

const Device kGpu = Device::cuda(0);

std::vector<uint8_t> host_bytes(const Tensor& t) {
  Tensor b = capture::bytes_of(t).to(Device::cpu());
  std::vector<uint8_t> out(static_cast<size_t>(b.numel()) * b.element_size());
  std::memcpy(out.data(), b.data_ptr(), out.size());
  return out;
}

// w <- w * c + s, where s = scratch * 0.5 and scratch is an input the step overwrites (scratch <-
// scratch + 1 after its read): every run must start from scratch's captured value.
void step(Tensor& w, const Tensor& c, Tensor& scratch) {
  NoGradGuard ng;
  Tensor s = mul(scratch, 0.5);
  w.copy_(add(mul(w, c), s));
  scratch.add_(1.0);
}

TEST(CaptureSnapshotGpu, PreexistingInputsAreSnapshottedOnTheHostAndReplayBitForBit) {
  BLU_REQUIRE_GPU();
  Generator g(7);
  const Tensor w0 = randn({257, 33}, {}, &g).to(kGpu), c0 = randn({257, 33}, {}, &g).to(kGpu),
               s0 = randn({257, 33}, {}, &g).to(kGpu);
  // Eager: three steps, each from the same scratch value (what the Executable's refill gives).
  Tensor we = w0.clone();
  std::vector<std::vector<uint8_t>> eager;
  for (int i = 0; i < 3; ++i) {
    Tensor sc = s0.clone();
    step(we, c0, sc);
    eager.push_back(host_bytes(we));
  }

  Tensor w = w0.clone(), c = c0.clone(), scratch = s0.clone();
  capture::Scope scope(true);
  step(w, c, scratch);
  capture::Graph graph = scope.finish();
  EXPECT_EQ(host_bytes(w), eager[0]);
  const int wb = graph.buffer_of(w), cb = graph.buffer_of(c), sb = graph.buffer_of(scratch);
  ASSERT_GE(wb, 0);
  ASSERT_GE(cb, 0);
  ASSERT_GE(sb, 0);
  for (const int id : {wb, cb, sb}) {
    ASSERT_TRUE(graph.initial.count(id)) << "buffer " << id;
    EXPECT_TRUE(graph.initial.at(id).device().is_cpu()) << "buffer " << id << " snapshot on "
                                                         << graph.initial.at(id).device().str();
  }
  // replay() fills every input from its (host) snapshot: step 1 again, on new device buffers.
  {
    const std::map<int, Tensor> out = capture::replay(graph);
    ASSERT_TRUE(out.count(wb));
    EXPECT_EQ(host_bytes(out.at(wb)), eager[0]);
  }
  // c and scratch die: the Executable rebuilds them from the host snapshots; w stays live.
  w.copy_(w0);
  c = Tensor();
  scratch = Tensor();
  capture::Executable exe(std::move(graph));
  for (int i = 0; i < 3; ++i) {
    exe.run({0.0, -1});
    EXPECT_EQ(host_bytes(w), eager[static_cast<size_t>(i)]) << "run " << i;
  }
}

}  // namespace

// optimizer_gpu_test.cpp: blu::train's AdamW and clip_grad_norm on CUDA (the fused multi-tensor
// kernels: Note [Fused optimizer step]) against blutensor's CPU loops on the same random
// state: several steps, clipping on odd steps, every element of the norm, clipped gradients, p,
// m and v within f32 rounding. Also: the CUDA step is bitwise deterministic.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>

#include "common/gpu_test.h"
#include "optimizer_compare.h"

TEST(TrainOptimizerGpu, FusedCudaStepMatchesCpuStep) {
  BLU_REQUIRE_GPU();
  blu::test::compare_optimizer_paths(blu::test::OptimizerCase{}, blu::Device::cuda(0), false);
}

TEST(TrainOptimizerGpu, ClipAndUpdateIsClipThenStepBitwise) {
  BLU_REQUIRE_GPU();
  blu::test::expect_clip_and_update_is_clip_then_step(blu::Device::cuda(0));
}

TEST(TrainOptimizerGpu, DeferredUpdateIsClipAndUpdateWithTheSkipOnTheDevice) {
  BLU_REQUIRE_GPU();
  blu::test::expect_deferred_update_is_clip_and_update(blu::Device::cuda(0));
}

TEST(TrainOptimizerGpu, ManyTensorsSpanSeveralLaunches) {
  BLU_REQUIRE_GPU();
  blu::test::OptimizerCase oc;  // 480 decayed tensors: more than 256 per launch
  oc.shapes.clear();
  oc.decay.clear();
  for (int i = 0; i < 600; ++i) {
    oc.shapes.push_back({1 + (i * 37) % 301});
    oc.decay.push_back(i % 5 != 0);
  }
  oc.steps = 3;
  blu::test::compare_optimizer_paths(oc, blu::Device::cuda(0), false);
}

TEST(TrainOptimizerGpu, CudaStepIsBitwiseDeterministic) {
  BLU_REQUIRE_GPU();
  using namespace blu;
  const test::OptimizerCase oc;
  Generator gen(99);
  std::vector<Tensor> init, grads;
  for (const Shape& s : oc.shapes) {
    init.push_back(randn(s, {}, &gen));
    grads.push_back(randn(s, {}, &gen) * 0.3);
  }
  std::vector<std::vector<double>> first;
  for (int run = 0; run < 2; ++run) {
    test::OptimizerState st = test::make_state(oc, init, Device::cuda(0));
    for (int t = 1; t <= 3; ++t) {
      for (std::size_t i = 0; i < init.size(); ++i)
        st.params[i]->set_grad(grads[i].to(Device::cuda(0)));
      train::clip_grad_norm(st.named, 0.5);
      st.opt->step(1e-3);
      st.opt->zero_grad();
    }
    for (std::size_t i = 0; i < init.size(); ++i) {
      const std::vector<double> p = st.params[i]->to(kCPU).to_double_vector();
      if (run == 0) {
        first.push_back(p);
      } else {
        for (std::size_t e = 0; e < p.size(); ++e) {
          ASSERT_EQ(p[e], first[i][e])
              << "parameter " << i << " element " << e << " differs between runs";
        }
      }
    }
  }
}

// Not a benchmark (no rotation, host clock), a measurement for the log: the optimizer step of
// GPT-2 124M's 148 parameter tensors (clip + AdamW) through the fused path, and through the
// per-tensor blutensor ops the trainer used before (~10 ops per tensor + ~3 for the norm).
TEST(TrainOptimizerGpu, Gpt2SizedStepTiming) {
  BLU_REQUIRE_GPU();
  using namespace blu;
  const Device dev = Device::cuda(0);
  test::OptimizerCase oc;
  oc.shapes = {{50304, 768}, {1024, 768}};
  oc.decay = {true, true};
  for (int l = 0; l < 12; ++l) {
    const std::vector<Shape> layer{{768}, {768}, {2304, 768}, {2304}, {768, 768},  {768},
                                   {768}, {768}, {3072, 768}, {3072}, {768, 3072}, {768}};
    for (const Shape& s : layer) {
      oc.shapes.push_back(s);
      oc.decay.push_back(s.size() == 2);
    }
  }
  oc.shapes.push_back({768});
  oc.shapes.push_back({768});
  oc.decay.push_back(false);
  oc.decay.push_back(false);
  ASSERT_EQ(oc.shapes.size(), 148u);
  std::vector<Tensor> init, grads;
  for (const Shape& s : oc.shapes) {
    init.push_back(randn(s, TensorOptions().device(dev)) * 0.02);
    grads.push_back(randn(s, TensorOptions().device(dev)));
  }
  test::OptimizerState st = test::make_state(oc, init, dev);
  const train::AdamWConfig cfg = test::compare_config();
  auto median_ms = [&](const std::function<void()>& fn) -> double {
    std::vector<double> ms;
    for (int i = 0; i < 12; ++i) {
      for (std::size_t k = 0; k < grads.size(); ++k) st.params[k]->set_grad(grads[k].clone());
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      if (i >= 2)
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  const double fused = median_ms([&] {
    train::clip_grad_norm(st.named, 1.0);
    st.opt->step(1e-4);
  });
  int64_t t = st.opt->step_count();
  const double per_tensor = median_ms([&] {  // the previous implementation, op for op
    NoGradGuard ng;
    std::vector<Tensor> squares;
    for (const auto& p : st.named)
      squares.push_back(sum(p.tensor->grad() * p.tensor->grad()).reshape({1}));
    const double norm = std::sqrt(sum(cat(squares, 0)).item());
    for (const auto& p : st.named) {
      Tensor g = p.tensor->grad();
      if (norm > 1.0) g.mul_(1.0 / (norm + 1e-6));
    }
    ++t;
    const double bc1 = 1 - std::pow(cfg.beta1, static_cast<double>(t)),
                 bc2 = 1 - std::pow(cfg.beta2, static_cast<double>(t));
    for (std::size_t i = 0; i < st.named.size(); ++i) {
      const Tensor& g = st.named[i].tensor->grad();
      Tensor p = st.named[i].tensor->detach();
      Tensor& m = st.opt->exp_avg()[i];
      Tensor& v = st.opt->exp_avg_sq()[i];
      m.mul_(cfg.beta1).add_(g, 1.0 - cfg.beta1);
      v.mul_(cfg.beta2).add_(g * g, 1.0 - cfg.beta2);
      Tensor denom = add(mul(sqrt(v), 1.0 / std::sqrt(bc2)), cfg.eps);
      if (st.named[i].decay) p.mul_(1.0 - 1e-4 * cfg.weight_decay);
      p.add_(m / denom, -1e-4 / bc1);
    }
  });
  int64_t n = 0;
  for (const Tensor& p : init) n += p.numel();
  std::printf(
      "GPT-2 124M optimizer step (%lld params, 148 tensors, clip + AdamW): fused %.3f ms, "
      "per-tensor ops %.3f ms, speedup %.2fx; fused moves %.0f GB/s (40 B/param: norm g r, clip g "
      "rw, AdamW p m v rw + g r)\n",
      static_cast<long long>(n), fused, per_tensor, per_tensor / fused,
      static_cast<double>(n) * 40 / (fused * 1e-3) / 1e9);
  EXPECT_LT(fused, per_tensor) << "the fused step should not be slower than per-tensor ops";
}

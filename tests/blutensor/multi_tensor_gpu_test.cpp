// multi_tensor_gpu_test.cpp: blutensor's multi-tensor optimizer primitives on CUDA (adamw_step_
// through blublas::adamw_update, global_norm through blublas::grad_global_norm, scale_tensors_,
// blutensor's own kernel) against the CPU backend on the same random lists: every element within
// f32 rounding; more than 256 tensors (several launches); bitwise repeatable norms.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "blutensor/blutensor.h"
#include "common/gpu_test.h"
#include "support/grad_scale_update.h"

namespace {

using namespace blu;

const Device kGpu = Device::cuda(0);

std::vector<Tensor> random_list(Generator& gen, int count, double scale) {
  std::vector<Tensor> out;
  for (int i = 0; i < count; ++i) {
    const int64_t n = 1 + (static_cast<int64_t>(i) * 7919) % 5003;
    out.push_back(randn(i % 2 ? Shape{n} : Shape{1 + n % 13, n}, {}, &gen) * scale);
  }
  return out;
}

std::vector<Tensor> to_device(const std::vector<Tensor>& ts, Device d) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.to(d).clone());
  return out;
}

// Worst |gpu - cpu| / (atol + rtol |cpu|) over a list; reports the element on failure.
void expect_lists_close(const char* what, const std::vector<Tensor>& cpu,
                        const std::vector<Tensor>& gpu, double atol, double rtol) {
  double worst = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    const std::vector<double> a = cpu[i].to_double_vector(), b = gpu[i].to(kCPU).to_double_vector();
    for (std::size_t e = 0; e < a.size(); ++e) {
      double r = std::fabs(a[e] - b[e]) / (atol + rtol * std::fabs(a[e]));
      if (std::isnan(r)) r = INFINITY;
      worst = std::max(worst, r);
      ASSERT_LE(r, 1.0) << what << ": tensor " << i << " element " << e << " cuda " << b[e]
                        << " cpu " << a[e];
    }
  }
  std::printf("%s: worst |diff|/tol %.3g\n", what, worst);
}

TEST(MultiTensorGpu, AdamWStepMatchesCpu) {
  BLU_REQUIRE_GPU();
  Generator gen(21);
  std::vector<Tensor> p_cpu = random_list(gen, 300, 1.0), m_cpu, v_cpu;
  for (const Tensor& p : p_cpu) {
    m_cpu.push_back(zeros_like(p));
    v_cpu.push_back(zeros_like(p));
  }
  std::vector<Tensor> p_gpu = to_device(p_cpu, kGpu), m_gpu = to_device(m_cpu, kGpu),
                      v_gpu = to_device(v_cpu, kGpu);
  optim::AdamWOptions o{2e-3, 0.9, 0.95, 1e-8, 0.1};
  for (int64_t step = 1; step <= 4; ++step) {
    std::vector<Tensor> g_cpu = random_list(gen, 300, 0.05 * static_cast<double>(step));
    optim::adamw_step_(p_cpu, g_cpu, m_cpu, v_cpu, o, step);
    optim::adamw_step_(p_gpu, to_device(g_cpu, kGpu), m_gpu, v_gpu, o, step);
  }
  // m: a few ulps of its terms per step (|g| ~ 0.2: m cancels towards 0, so an absolute part);
  // v: a few ulps (no cancellation); p: a few ulps of p plus of the update (~lr) per step.
  expect_lists_close("adamw m", m_cpu, m_gpu, 5e-8, 2e-6);
  expect_lists_close("adamw v", v_cpu, v_gpu, 1e-12, 2e-6);
  expect_lists_close("adamw p", p_cpu, p_gpu, 8 * 2e-3 * 1e-6, 1e-6);
}

// Note [Clip coefficient in the update] (blutrain): f32 lists (blublas::adamw_update's
// grad_scale) and f64 lists (the generic kernel), each against the scaling pass on the GPU.
TEST(MultiTensorGpu, AdamWGradScaleIsScaleTensorsThenStep) {
  BLU_REQUIRE_GPU();
  test::expect_grad_scale_update_is_scale_then_update(kGpu, kFloat32, 41);
  test::expect_grad_scale_update_is_scale_then_update(kGpu, kFloat64, 42);
}

TEST(MultiTensorGpu, GlobalNormMatchesCpuAndRepeats) {
  BLU_REQUIRE_GPU();
  Generator gen(4);
  for (DType dt : {kFloat32, kBFloat16, kFloat64}) {
    std::vector<Tensor> cpu;
    for (const Tensor& t : random_list(gen, 280, 0.3)) cpu.push_back(t.to(dt));
    std::vector<Tensor> gpu = to_device(cpu, kGpu);
    const optim::GlobalNorm a = optim::global_norm(cpu, 1.0);
    const optim::GlobalNorm b = optim::global_norm(gpu, 1.0);
    const optim::GlobalNorm c = optim::global_norm(gpu, 1.0);
    EXPECT_TRUE(b.norm.is_cuda() && b.clip_coef.is_cuda());
    const double na = a.norm.item(), nb = b.norm.item();
    EXPECT_NEAR(nb, na, 2e-6 * na) << dtype_name(dt);
    EXPECT_NEAR(b.clip_coef.item(), a.clip_coef.item(), 2e-6 * a.clip_coef.item())
        << dtype_name(dt);
    EXPECT_EQ(c.norm.item(), nb) << dtype_name(dt) << ": the norm must repeat bitwise";
    std::printf("global_norm %s: cpu %.9g cuda %.9g\n", dtype_name(dt), na, nb);
  }
}

TEST(MultiTensorGpu, ScaleTensorsMatchesCpu) {
  BLU_REQUIRE_GPU();
  Generator gen(8);
  std::vector<Tensor> cpu = random_list(gen, 270, 1.0);
  cpu[3] = cpu[3].to(kBFloat16);
  cpu[4] = cpu[4].to(kFloat64);
  cpu[5] = cpu[5].to(kFloat16);
  std::vector<Tensor> gpu = to_device(cpu, kGpu);
  gpu.push_back(randn({6, 10}, {}, &gen).to(kGpu).t());  // strided: the generic path
  cpu.push_back(gpu.back().to(kCPU).clone());
  optim::scale_tensors_(cpu, scalar_tensor(-0.731, kFloat32));
  optim::scale_tensors_(gpu, scalar_tensor(-0.731, kFloat32).to(kGpu));
  expect_lists_close("scale_tensors_", cpu, gpu, 0, 1e-7);
}

TEST(MultiTensorGpu, ClipGradNormMatchesCpu) {
  BLU_REQUIRE_GPU();
  Generator gen(12);
  std::vector<Tensor> grads = random_list(gen, 40, 1.0);
  std::vector<Tensor> pc, pg;
  for (const Tensor& g : grads) {
    pc.push_back(zeros_like(g).requires_grad_(true));
    pc.back().set_grad(g.clone());
    pg.push_back(zeros_like(g).to(kGpu).requires_grad_(true));
    pg.back().set_grad(g.to(kGpu).clone());
  }
  const double nc = optim::clip_grad_norm_(pc, 2.0).item();
  const double ng = optim::clip_grad_norm_(pg, 2.0).item();
  EXPECT_NEAR(ng, nc, 2e-6 * nc);
  std::vector<Tensor> gc, gg;
  for (std::size_t i = 0; i < pc.size(); ++i) {
    gc.push_back(pc[i].grad());
    gg.push_back(pg[i].grad());
  }
  expect_lists_close("clip_grad_norm_ grads", gc, gg, 0, 4e-6);
}

// Note [Multi-tensor cast] on CUDA: copy_tensors_ (f32 -> bf16 / f16 and back, f32 -> f64),
// more than 256 tensors (several launches), equals the CPU's casts bit for bit.
TEST(MultiTensorGpu, ToDtypeAllMatchesCpuCasts) {
  BLU_REQUIRE_GPU();
  Generator gen(23);
  const std::vector<Tensor> cpu = random_list(gen, 300, 2.0);
  const std::vector<Tensor> gpu = to_device(cpu, kGpu);
  for (DType dt : {DType::BF16, DType::F16, DType::F64}) {
    const std::vector<Tensor> down = to_dtype_all(gpu, dt);
    const std::vector<Tensor> back = to_dtype_all(down, DType::F32);
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      ASSERT_EQ(down[i].to(kCPU).to_double_vector(), cpu[i].to(dt).to_double_vector()) << dtype_name(dt) << " " << i;
      ASSERT_EQ(back[i].to(kCPU).to_double_vector(), cpu[i].to(dt).to(DType::F32).to_double_vector()) << i;
    }
  }
}

}  // namespace

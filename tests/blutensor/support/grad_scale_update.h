// grad_scale_update.h: a check shared by multi_tensor_test (CPU) and multi_tensor_gpu_test (CUDA):
// blu::optim::adamw_step_ with a grad_scale tensor gives the same bits as scale_tensors_ on the
// gradients followed by adamw_step_ without one (the two-pass clip that Note [Clip coefficient in
// the update] replaces), over several steps with coefficients below, at and (not clipping) exactly
// 1, and leaves the gradients as they were.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "blutensor/blutensor.h"

namespace blu::test {

inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.to(kCPU).contiguous();
  std::vector<uint8_t> out(static_cast<std::size_t>(c.numel()) * c.element_size());
  if (!out.empty()) std::memcpy(out.data(), c.data_ptr(), out.size());
  return out;
}

inline void expect_grad_scale_update_is_scale_then_update(Device dev, DType dt, uint64_t seed) {
  Generator gen(seed);
  const std::vector<Shape> shapes{{37, 53}, {129}, {3, 1001}, {1}, {5, 7, 9}, {4099}};
  std::vector<Tensor> pa, ma, va, pb, mb, vb;
  for (const Shape& s : shapes) {
    const Tensor p = (randn(s, {}, &gen) * 0.5).to(dt).to(dev);
    pa.push_back(p.clone());
    pb.push_back(p.clone());
    for (auto* list : {&ma, &va, &mb, &vb}) list->push_back(zeros_like(p));
  }
  optim::AdamWOptions o;
  o.lr = 3e-3;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.weight_decay = 0.1;
  const double coefs[] = {0.37, 1.0, 0.0123456789, 0.999999};
  for (int step = 1; step <= 4; ++step) {
    std::vector<Tensor> ga, gb, g0;
    for (const Shape& s : shapes) {
      const Tensor g = (randn(s, {}, &gen) * (0.1 * step)).to(dt).to(dev);
      ga.push_back(g.clone());
      gb.push_back(g.clone());
      g0.push_back(g);
    }
    const Tensor coef = scalar_tensor(coefs[step - 1], kFloat32).to(dev);
    optim::scale_tensors_(ga, coef);
    optim::adamw_step_(pa, ga, ma, va, o, step);
    optim::adamw_step_(pb, gb, mb, vb, o, step, coef);
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_EQ(bytes_of(pa[i]), bytes_of(pb[i])) << "param " << i << " step " << step << " " << dev.str();
      EXPECT_EQ(bytes_of(ma[i]), bytes_of(mb[i])) << "exp_avg " << i << " step " << step;
      EXPECT_EQ(bytes_of(va[i]), bytes_of(vb[i])) << "exp_avg_sq " << i << " step " << step;
    }
    // The gradients were read, not scaled.
    for (std::size_t i = 0; i < shapes.size(); ++i)
      EXPECT_EQ(bytes_of(gb[i]), bytes_of(g0[i])) << "grad " << i << " step " << step << " was written";
  }
}

}  // namespace blu::test

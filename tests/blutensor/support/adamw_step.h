// adamw_step.h: one eager training step of a small test model (anything with loss(x, y)): forward,
// backward, AdamW, zero_grad; returns the loss. Shared by the capture tests, which record it.
#pragma once

#include "blutensor/autograd.h"
#include "blutensor/optim.h"

namespace blu::test {

template <typename Model>
double adamw_step(const Model& m, optim::AdamW& opt, const Tensor& x, const Tensor& y) {
  Tensor loss = m.loss(x, y);
  loss.backward();
  opt.step();
  opt.zero_grad();
  return loss.item();
}

}  // namespace blu::test

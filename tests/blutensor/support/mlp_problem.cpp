// The MLP problem of mlp_problem.h.
#include "mlp_problem.h"

namespace blu::test {

namespace {

class Mlp : public nn::Module {
 public:
  Mlp(int64_t in, int64_t hidden, int64_t out, TensorOptions o, Generator* gen) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(in, hidden, true, o, gen));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden, out, true, o, gen));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.05));
  }
  Tensor forward(const Tensor& x) { return fc2->forward(drop->forward(gelu(fc1->forward(x)))); }
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::Dropout> drop;
};

}  // namespace

MlpRun train_mlp(Device device, int steps, DType dtype) {
  constexpr int64_t kSamples = 256, kIn = 9, kHidden = 33, kClasses = 5;
  Generator gen(2024);
  manual_seed(7);  // dropout masks
  // Data on the CPU: x ~ N(0, 1), label = argmax(x @ teacher).
  Tensor x = randn({kSamples, kIn}, kFloat64, &gen);
  Tensor teacher = randn({kIn, kClasses}, kFloat64, &gen);
  std::vector<double> scores = matmul(x, teacher).to_double_vector();
  std::vector<int64_t> labels(kSamples);
  for (int64_t i = 0; i < kSamples; ++i) {
    int64_t best = 0;
    for (int64_t c = 1; c < kClasses; ++c)
      if (scores[i * kClasses + c] > scores[i * kClasses + best]) best = c;
    labels[i] = best;
  }
  Tensor xd = x.to(dtype).to(device);
  Tensor yd = from_vector(labels, {kSamples}, TensorOptions(kInt64).device(device));
  Mlp model(kIn, kHidden, kClasses, TensorOptions(dtype).device(device), &gen);
  optim::AdamW opt(model.parameters(), optim::AdamWOptions{3e-2, 0.9, 0.999, 1e-8, 0.0});
  MlpRun run;
  for (int step = 0; step < steps; ++step) {
    opt.set_lr(optim::lr_warmup_cosine(step, 10, steps, 3e-2, 3e-3));
    opt.zero_grad();
    Tensor loss = cross_entropy(model.forward(xd), yd);
    loss.backward();
    optim::clip_grad_norm_(model.parameters(), 5.0);
    opt.step();
    run.losses.push_back(loss.item());
  }
  model.eval();
  NoGradGuard ng;
  std::vector<double> logits = model.forward(xd).to_double_vector();
  int64_t correct = 0;
  for (int64_t i = 0; i < kSamples; ++i) {
    int64_t best = 0;
    for (int64_t c = 1; c < kClasses; ++c)
      if (logits[i * kClasses + c] > logits[i * kClasses + best]) best = c;
    correct += best == labels[i];
  }
  run.final_accuracy = static_cast<double>(correct) / kSamples;
  return run;
}

}  // namespace blu::test

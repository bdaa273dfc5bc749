// capture_llama_step: one training step of blutensor's Llama-style block (Note [Llama block]:
// forward, loss, autograd backward, AdamW) captured (Note [Step capture]) and written as JSON for
// blu-import; prints the capture's summary. tests/blucomp/llama_block_step.mlir runs it.
//   capture_llama_step OUT.json
#include <cstdio>
#include <fstream>

#include "blutensor/capture.h"
#include "blutensor/llama.h"
#include "blutensor/optim.h"
#include "blutensor/random.h"

int main(int argc, char** argv) {
  using namespace blu;
  if (argc != 2) {
    std::fprintf(stderr, "usage: capture_llama_step OUT.json\n");
    return 2;
  }
  try {
    const int64_t B = 2, T = 16, C = 64, H = 4, F = 176;
    Generator gen(7);
    nn::LlamaBlock block(C, H, F, TensorOptions(kFloat32), &gen);
    std::vector<Tensor> params;
    for (auto& [name, p] : block.named_parameters()) params.push_back(p);
    optim::AdamW opt(params, optim::AdamWOptions{1e-3, 0.9, 0.95, 1e-8, 0.1});
    auto [cos, sin] = nn::rotary_tables(T, C / H, 10000.0, TensorOptions(kFloat32));
    auto step = [&](uint64_t seed) {
      Generator g(seed);
      const Tensor x = randn({B, T, C}, TensorOptions(kFloat32), &g);
      Tensor loss = mean(block.forward(x, cos, sin).pow(2.0));
      loss.backward();
      opt.step();
      opt.zero_grad();
      return loss.item();
    };
    step(1);  // the moments exist from here on
    capture::Scope scope;
    step(2);
    const capture::Graph g = scope.finish();
    std::ofstream(argv[1]) << g.to_json();
    std::printf("llama block step (B=%lld T=%lld C=%lld heads=%lld hidden=%lld): %s", static_cast<long long>(B),
                static_cast<long long>(T), static_cast<long long>(C), static_cast<long long>(H),
                static_cast<long long>(F), g.summary().c_str());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "capture_llama_step: %s\n", e.what());
    return 1;
  }
}

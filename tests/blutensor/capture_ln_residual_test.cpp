// capture_ln_residual_test.cpp: which (layer_norm_backward, add) pairs of a record Note [LayerNorm
// backward with the residual gradient] (src/capture/capture_ln_residual.cpp) fuses, on
// hand-built records of a CUDA bf16 step (finding them needs no GPU): the pattern, and each
// condition that keeps a pair out. The fused kernel's bits are checked on the GPU by the captured
// engine's test (captured vs autograd, bit for bit).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "blutensor/capture.h"
#include "support/capture_record.h"

namespace {

using blu::Device;
using blu::DType;
using blu::capture::Arg;
using blu::capture::Graph;
using blu::capture::LnResidualPair;
using blu::capture::Node;

struct Record {
  Graph g;
  Device dev = Device::cuda(0);
  DType dt = DType::BF16;
  int buffer() { return blu::test::add_buffer(g, dev, 64 * 32 * 2, /*written=*/true); }
  static Arg tensor(const std::string& name, int buf, bool read, bool write, DType dt, blu::Shape sizes) {
    return blu::test::tensor_arg(name, buf, read, write, dt, std::move(sizes));
  }
  int ln_backward(int dx, int dy, int x) {
    Node n;
    n.op = "layer_norm_backward";
    n.device = dev;
    n.args = {tensor("dx", dx, false, true, dt, {64, 32}), tensor("dweight", buffer(), false, true, DType::F32, {32}),
              tensor("dbias", buffer(), false, true, DType::F32, {32}), tensor("dy", dy, true, false, dt, {64, 32}),
              tensor("x", x, true, false, dt, {64, 32}), tensor("weight", buffer(), true, false, dt, {32}),
              tensor("mean", buffer(), true, false, DType::F32, {64}), tensor("rstd", buffer(), true, false, DType::F32, {64})};
    g.nodes.push_back(n);
    return static_cast<int>(g.nodes.size()) - 1;
  }
  int add(int out, int a, int b, double alpha = 1.0, const char* op = "kAdd", blu::Shape sizes = {64, 32}) {
    Node n;
    n.op = "binary";
    n.device = dev;
    Arg e;
    e.name = "op";
    e.kind = Arg::Kind::kEnum;
    e.enum_name = op;
    Arg al;
    al.name = "alpha";
    al.kind = Arg::Kind::kNumber;
    al.number = alpha;
    n.args = {e, tensor("out", out, false, true, dt, sizes), tensor("a", a, true, false, dt, sizes),
              tensor("b", b, true, false, dt, sizes), al};
    g.nodes.push_back(n);
    return static_cast<int>(g.nodes.size()) - 1;
  }
  void read(int buf) {  // a later call reading `buf`
    Node n;
    n.op = "unary";
    n.device = dev;
    n.args = {tensor("out", buffer(), false, true, dt, {64, 32}), tensor("a", buf, true, false, dt, {64, 32})};
    g.nodes.push_back(n);
  }
  std::vector<LnResidualPair> pairs(const std::vector<int>& override_of = {}) const {
    return blu::capture::find_ln_residual_pairs(g, override_of);
  }
};

// One block's two LayerNorm backwards as autograd records them: dx + the residual gradient.
TEST(CaptureLnResidual, FindsBothOrdersOfTheAdd) {
  Record r;
  const int dy = r.buffer(), x = r.buffer(), g = r.buffer(), dx1 = r.buffer(), s1 = r.buffer();
  const int dy2 = r.buffer(), x2 = r.buffer(), dx2 = r.buffer(), s2 = r.buffer();
  r.ln_backward(dx1, dy, x);  // 0
  r.add(s1, g, dx1);          // 1: residual first
  r.ln_backward(dx2, dy2, x2);  // 2
  r.add(s2, dx2, s1);           // 3: dx first
  r.read(s2);
  const auto p = r.pairs();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].ln, 0);
  EXPECT_EQ(p[0].add, 1);
  EXPECT_EQ(p[0].residual, 0);
  EXPECT_EQ(p[1].ln, 2);
  EXPECT_EQ(p[1].residual, 1);
}

TEST(CaptureLnResidual, EachConditionKeepsAPairOut) {
  const auto one = [](auto&& build) {
    Record r;
    build(r);
    return r.pairs().size();
  };
  // The reference: fused.
  EXPECT_EQ(one([](Record& r) {
              const int dx = r.buffer(), g = r.buffer(), s = r.buffer();
              r.ln_backward(dx, r.buffer(), r.buffer());
              r.add(s, dx, g);
            }),
            1u);
  // dx read again later (a third use): kept.
  EXPECT_EQ(one([](Record& r) {
              const int dx = r.buffer(), g = r.buffer(), s = r.buffer();
              r.ln_backward(dx, r.buffer(), r.buffer());
              r.add(s, dx, g);
              r.read(dx);
            }),
            0u);
  // Not the next call.
  EXPECT_EQ(one([](Record& r) {
              const int dx = r.buffer(), g = r.buffer(), s = r.buffer();
              r.ln_backward(dx, r.buffer(), r.buffer());
              r.read(g);
              r.add(s, dx, g);
            }),
            0u);
  // alpha != 1, or not an add.
  EXPECT_EQ(one([](Record& r) {
              const int dx = r.buffer(), g = r.buffer(), s = r.buffer();
              r.ln_backward(dx, r.buffer(), r.buffer());
              r.add(s, dx, g, 0.5);
            }),
            0u);
  EXPECT_EQ(one([](Record& r) {
              const int dx = r.buffer(), g = r.buffer(), s = r.buffer();
              r.ln_backward(dx, r.buffer(), r.buffer());
              r.add(s, dx, g, 1.0, "kMul");
            }),
            0u);
  // f32 (blublas's LayerNorm backward would round differently), or on the CPU.
  EXPECT_EQ(one([](Record& r) {
              r.dt = DType::F32;
              const int dx = r.buffer(), g = r.buffer(), s = r.buffer();
              r.ln_backward(dx, r.buffer(), r.buffer());
              r.add(s, dx, g);
            }),
            0u);
  EXPECT_EQ(one([](Record& r) {
              r.dev = Device::cpu();
              const int dx = r.buffer(), g = r.buffer(), s = r.buffer();
              r.ln_backward(dx, r.buffer(), r.buffer());
              r.add(s, dx, g);
            }),
            0u);
  // dx an output of the step (kept after it), or an input.
  EXPECT_EQ(one([](Record& r) {
              const int dx = r.buffer(), g = r.buffer(), s = r.buffer();
              r.g.buffers[static_cast<size_t>(dx)].alive = true;
              r.ln_backward(dx, r.buffer(), r.buffer());
              r.add(s, dx, g);
            }),
            0u);
  EXPECT_EQ(one([](Record& r) {
              const int dx = r.buffer(), g = r.buffer(), s = r.buffer();
              r.g.buffers[static_cast<size_t>(dx)].origin = blu::capture::Origin::kInput;
              r.ln_backward(dx, r.buffer(), r.buffer());
              r.add(s, dx, g);
            }),
            0u);
  // The add writes into dx itself, or reads dx twice.
  EXPECT_EQ(one([](Record& r) {
              const int dx = r.buffer(), g = r.buffer();
              r.ln_backward(dx, r.buffer(), r.buffer());
              r.add(dx, dx, g);
            }),
            0u);
  EXPECT_EQ(one([](Record& r) {
              const int dx = r.buffer(), s = r.buffer();
              r.ln_backward(dx, r.buffer(), r.buffer());
              r.add(s, dx, dx);
            }),
            0u);
  // In place into the residual gradient: fused (out is g's view exactly).
  EXPECT_EQ(one([](Record& r) {
              const int dx = r.buffer(), g = r.buffer();
              r.ln_backward(dx, r.buffer(), r.buffer());
              r.add(g, g, dx);
            }),
            1u);
  // A call already replaced (blu-plan's kernel) keeps the pair out.
  {
    Record r;
    const int dx = r.buffer(), g = r.buffer(), s = r.buffer();
    r.ln_backward(dx, r.buffer(), r.buffer());
    r.add(s, dx, g);
    EXPECT_EQ(r.pairs({-1, 0}).size(), 0u);
    EXPECT_EQ(r.pairs({-1, -1}).size(), 1u);
  }
}

}  // namespace

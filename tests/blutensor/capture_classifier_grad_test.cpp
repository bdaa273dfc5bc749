// capture_classifier_grad_test.cpp: which calls of a record Note [Classifier gradient scaling]
// (src/capture/capture_classifier_grad.cpp) folds, on hand-built records of a CUDA step shaped like
// linear_cross_entropy's backward and GPT-2's tied embedding (finding them needs no GPU): the bf16
// and fp32 patterns, and each condition that keeps a chain as recorded. The launches' numbers are
// checked on the GPU (the captured engine's test: captured vs autograd bit for bit with the dX
// rewrite; the compiled step against autograd within tolerance).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "blutensor/capture.h"
#include "support/capture_record.h"

namespace {

using blu::Device;
using blu::DType;
using blu::Shape;
using blu::capture::Arg;
using blu::capture::ClassifierGradChains;
using blu::capture::Graph;
using blu::capture::Node;
using blu::capture::TensorRef;

constexpr int64_t kV = 96, kC = 32, kN = 64;

struct Record {
  Graph g;
  Device dev = Device::cuda(0);
  int buffer(std::size_t bytes = kV * kC * 4) { return blu::test::add_buffer(g, dev, bytes, /*written=*/true); }
  static Arg tensor(const std::string& name, int buf, bool read, bool write, DType dt, Shape sizes) {
    return blu::test::tensor_arg(name, buf, read, write, dt, std::move(sizes));
  }
  static Arg scalar(const std::string& name, int buf, Shape over) {  // a 0-d f32 broadcast over `over`
    Arg a = tensor(name, buf, true, false, DType::F32, over);
    a.tensors[0].strides.assign(a.tensors[0].sizes.size(), 0);
    return a;
  }
  int push(Node n) {
    n.device = dev;
    g.nodes.push_back(std::move(n));
    return static_cast<int>(g.nodes.size()) - 1;
  }
  int copy(int dst, DType dd, int src, DType sd, Shape sizes) {
    Node n;
    n.op = "copy_";
    n.args = {tensor("dst", dst, false, true, dd, sizes), tensor("src", src, true, false, sd, sizes)};
    return push(n);
  }
  static Arg enum_arg(const char* v) {
    Arg e;
    e.name = "op";
    e.kind = Arg::Kind::kEnum;
    e.enum_name = v;
    return e;
  }
  static Arg alpha(double v) {
    Arg a;
    a.name = "alpha";
    a.kind = Arg::Kind::kNumber;
    a.number = v;
    return a;
  }
  int mul_scalar(int out, int a, int s, Shape sizes, double al = 1.0, bool scalar_first = false) {
    Node n;
    n.op = "binary";
    Arg x = tensor("a", a, true, false, DType::F32, sizes), y = scalar("b", s, sizes);
    if (scalar_first) {
      std::swap(x.tensors, y.tensors);
    }
    n.args = {enum_arg("kMul"), tensor("out", out, false, true, DType::F32, sizes), x, y, alpha(al)};
    return push(n);
  }
  int add(int out, int a, int b, DType dt, Shape sizes) {
    Node n;
    n.op = "binary";
    n.args = {enum_arg("kAdd"), tensor("out", out, false, true, dt, sizes), tensor("a", a, true, false, dt, sizes),
              tensor("b", b, true, false, dt, sizes), alpha(1.0)};
    return push(n);
  }
  int write(int buf, DType dt, Shape sizes) {  // some call producing `buf`
    Node n;
    n.op = "unary";
    n.args = {tensor("out", buf, false, true, dt, sizes), tensor("a", buffer(), true, false, dt, sizes)};
    return push(n);
  }
  int read(int buf, DType dt, Shape sizes) {  // some later call reading `buf`
    Node n;
    n.op = "unary";
    n.args = {tensor("out", buffer(), false, true, dt, sizes), tensor("a", buf, true, false, dt, sizes)};
    return push(n);
  }
  int embedding_backward(int dweight, DType dt, int dout, int idx) {
    Node n;
    n.op = "embedding_backward";
    n.args = {tensor("dweight", dweight, false, true, dt, {kV, kC}), tensor("dout", dout, true, false, dt, {kN, kC}),
              tensor("indices", idx, true, false, DType::I32, {kN})};
    return push(n);
  }
  ClassifierGradChains find(const std::vector<int>& override_of = {}) const {
    return blu::capture::find_classifier_grad_chains(g, override_of);
  }
};

// linear_cross_entropy's backward and the tied embedding in a bf16 record: node indices of each chain.
struct Bf16Step {
  Record r;
  int s, xu, dwu, dout, idx, E, S, G, H, W;
  int dx[3], mul, cast, emb, add, widen;
  explicit Bf16Step(bool read_e_again = false) {
    s = r.buffer(4);
    xu = r.buffer();
    dwu = r.buffer();
    dout = r.buffer();
    idx = r.buffer();
    r.write(xu, DType::BF16, {kN, kC});
    r.write(dwu, DType::F32, {1, kV, kC});
    const int a = r.buffer(), b = r.buffer(), d = r.buffer();
    dx[0] = r.copy(a, DType::F32, xu, DType::BF16, {kN, kC});
    dx[1] = r.mul_scalar(b, a, s, {kN, kC});
    dx[2] = r.copy(d, DType::BF16, b, DType::F32, {kN, kC});
    W = r.buffer();
    H = r.buffer();
    mul = r.mul_scalar(W, dwu, s, {1, kV, kC}, 1.0, /*scalar_first=*/true);
    cast = r.copy(H, DType::BF16, W, DType::F32, {1, kV, kC});
    r.read(d, DType::BF16, {kN, kC});  // the backward through the layers
    r.write(dout, DType::BF16, {kN, kC});
    E = r.buffer();
    S = r.buffer();
    G = r.buffer();
    emb = r.embedding_backward(E, DType::BF16, dout, idx);
    add = r.add(S, E, H, DType::BF16, {kV, kC});
    widen = r.copy(G, DType::F32, S, DType::BF16, {kV, kC});
    if (read_e_again) r.read(E, DType::BF16, {kV, kC});
    r.read(G, DType::F32, {kV, kC});  // the norm, AdamW
  }
};

TEST(CaptureClassifierGrad, FindsTheBf16Chains) {
  const Bf16Step st;
  const ClassifierGradChains c = st.r.find();
  ASSERT_EQ(c.dx.size(), 1u);
  EXPECT_EQ(c.dx[0], (std::vector<int>{st.dx[0], st.dx[1], st.dx[2]}));
  EXPECT_EQ(c.embedding, (std::vector<int>{st.mul, st.cast, st.emb, st.add, st.widen})) << c.why_embedding;
  EXPECT_EQ(c.embedding_split, 2u);  // the scaling: mul, cast; the sum from the embedding backward
}

TEST(CaptureClassifierGrad, FindsTheFp32Chain) {
  Record r;
  const int s = r.buffer(4), dwu = r.buffer(), dout = r.buffer(), idx = r.buffer(), W = r.buffer(), E = r.buffer(),
            S = r.buffer();
  r.write(dwu, DType::F32, {1, kV, kC});
  const int mul = r.mul_scalar(W, dwu, s, {1, kV, kC});
  r.write(dout, DType::F32, {kN, kC});
  const int emb = r.embedding_backward(E, DType::F32, dout, idx);
  const int add = r.add(S, W, E, DType::F32, {kV, kC});
  r.read(S, DType::F32, {kV, kC});
  const ClassifierGradChains c = r.find();
  EXPECT_TRUE(c.dx.empty());
  EXPECT_EQ(c.embedding, (std::vector<int>{mul, emb, add})) << c.why_embedding;
  EXPECT_EQ(c.embedding_split, 1u);
}

TEST(CaptureClassifierGrad, KeepsWhatItCannotFold) {
  {  // the embedding's gradient read by another call
    const Bf16Step st(/*read_e_again=*/true);
    const ClassifierGradChains c = st.r.find();
    EXPECT_TRUE(c.embedding.empty());
    EXPECT_NE(c.why_embedding.find("dweight"), std::string::npos) << c.why_embedding;
    EXPECT_EQ(c.dx.size(), 1u);
  }
  {  // blu-plan took the kMul, or one of the dX run
    const Bf16Step st;
    std::vector<int> over(st.r.g.nodes.size(), -1);
    over[static_cast<size_t>(st.mul)] = 0;
    over[static_cast<size_t>(st.dx[1])] = 1;
    const ClassifierGradChains c = st.r.find(over);
    EXPECT_TRUE(c.embedding.empty());
    EXPECT_NE(c.why_embedding.find("kMul"), std::string::npos) << c.why_embedding;
    EXPECT_TRUE(c.dx.empty());
  }
  {  // a multiplier that is not 1, or a non-scalar factor
    Bf16Step st;
    st.r.g.nodes[static_cast<size_t>(st.dx[1])].args.back().number = 2.0;
    Node& m = st.r.g.nodes[static_cast<size_t>(st.mul)];
    for (Arg& a : m.args) {
      if (a.name == "a") a.tensors[0].strides = {kV * kC, kC, 1};  // the scalar's side made dense
    }
    const ClassifierGradChains c = st.r.find();
    EXPECT_TRUE(c.dx.empty());
    EXPECT_TRUE(c.embedding.empty());
  }
  {  // the narrowed dX read twice (its f32 temporaries must die in the run)
    Bf16Step st;
    st.r.read(st.r.g.nodes[static_cast<size_t>(st.dx[0])].args[0].tensors[0].buffer, DType::F32, {kN, kC});
    EXPECT_TRUE(st.r.find().dx.empty());
  }
  {  // on the CPU: left to the backends
    Bf16Step st;
    for (Node& n : st.r.g.nodes) n.device = Device::cpu();
    const ClassifierGradChains c = st.r.find();
    EXPECT_TRUE(c.dx.empty());
    EXPECT_TRUE(c.embedding.empty());
  }
}

}  // namespace

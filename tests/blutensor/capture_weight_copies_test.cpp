// capture_weight_copies_test.cpp: which casts of a record Note [Weight copies from the update]
// (src/capture/capture_weight_copies.cpp) folds into the AdamW update, on hand-built records of a
// CUDA bf16 step (finding them needs no GPU): a block's copy_tensors_ and the embedding's copy_,
// and each condition that keeps a cast. The update's copies are checked on the GPU (the captured
// engine's test: folded vs cast every step, bit for bit).
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
using blu::capture::Graph;
using blu::capture::Node;
using blu::capture::WeightCastFolds;

struct Record {
  Graph g;
  Device dev = Device::cuda(0);
  int buffer(std::size_t bytes) { return blu::test::add_buffer(g, dev, bytes, /*written=*/true); }
  int param() { return buffer(16 * 8 * 4); }  // f32 [16, 8]
  int copy() { return buffer(16 * 8 * 2); }   // bf16 [16, 8]
  static Arg list(const std::string& name, const std::vector<int>& bufs, bool write, DType dt) {
    Arg a = blu::test::tensor_arg(name, 0, !write, write, dt, {16, 8});
    a.kind = Arg::Kind::kTensorList;
    a.tensors.clear();
    for (int b : bufs) a.tensors.push_back(blu::test::tensor_arg(name, b, !write, write, dt, {16, 8}).tensors[0]);
    return a;
  }
  int push(Node n) {
    n.device = dev;
    g.nodes.push_back(std::move(n));
    return static_cast<int>(g.nodes.size()) - 1;
  }
  int cast(const std::vector<int>& dsts, const std::vector<int>& srcs, DType dt = DType::BF16) {
    Node n;
    n.op = dsts.size() == 1 ? "copy_" : "copy_tensors_";
    if (dsts.size() == 1) {
      n.args = {blu::test::tensor_arg("dst", dsts[0], false, true, dt, {16, 8}),
                blu::test::tensor_arg("src", srcs[0], true, false, DType::F32, {16, 8})};
    } else {
      n.args = {list("dsts", dsts, true, dt), list("srcs", srcs, false, DType::F32)};
    }
    return push(n);
  }
  int read(int buf, DType dt) {
    Node n;
    n.op = "unary";
    n.args = {blu::test::tensor_arg("out", buffer(16 * 8 * 4), false, true, dt, {16, 8}),
              blu::test::tensor_arg("a", buf, true, false, dt, {16, 8})};
    return push(n);
  }
  int adamw(const std::vector<int>& params) {
    std::vector<int> grads, m, v;
    for (size_t i = 0; i < params.size(); ++i) {
      grads.push_back(param());
      m.push_back(param());
      v.push_back(param());
    }
    Node n;
    n.op = "adamw_step";
    n.args = {list("params", params, true, DType::F32), list("grads", grads, false, DType::F32),
              list("exp_avgs", m, true, DType::F32), list("exp_avg_sqs", v, true, DType::F32)};
    return push(n);
  }
  std::vector<int> last_use() const {
    std::vector<int> last(g.buffers.size(), -1);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      for (const Arg& a : g.nodes[i].args) {
        for (const auto& t : a.tensors) {
          if (t.defined()) last[static_cast<size_t>(t.buffer)] = static_cast<int>(i);
        }
      }
    }
    return last;
  }
  WeightCastFolds find(const std::vector<int>& override_of = {}) const {
    return blu::capture::find_weight_casts(g, override_of, last_use());
  }
};

// The embedding's copy_ and a block's copy_tensors_, read by the forward and backward, then the
// update of all three parameters.
struct Step {
  Record r;
  int wte, w1, w2, c_wte, c1, c2, cast_wte, cast_block, update;
  explicit Step(bool read_after_update = false, DType copy_dtype = DType::BF16) {
    wte = r.param();
    w1 = r.param();
    w2 = r.param();
    c_wte = r.copy();
    c1 = r.copy();
    c2 = r.copy();
    cast_wte = r.cast({c_wte}, {wte}, copy_dtype);
    cast_block = r.cast({c1, c2}, {w1, w2}, copy_dtype);
    r.read(c_wte, copy_dtype);
    r.read(c1, copy_dtype);
    r.read(c2, copy_dtype);
    update = r.adamw({w1, wte, w2});
    if (read_after_update) r.read(c2, copy_dtype);
  }
};

TEST(CaptureWeightCopies, FoldsTheCastsOfUpdatedParameters) {
  const Step st;
  const WeightCastFolds f = st.r.find();
  ASSERT_EQ(f.casts.size(), 2u);
  EXPECT_EQ(f.casts[0].node, st.cast_wte);
  ASSERT_EQ(f.casts[0].copies.size(), 1u);
  EXPECT_EQ(f.casts[0].copies[0].dst.buffer, st.c_wte);
  EXPECT_EQ(f.casts[0].copies[0].update, st.update);
  EXPECT_EQ(f.casts[0].copies[0].index, 1);
  EXPECT_EQ(f.casts[1].node, st.cast_block);
  ASSERT_EQ(f.casts[1].copies.size(), 2u);
  EXPECT_EQ(f.casts[1].copies[0].index, 0);
  EXPECT_EQ(f.casts[1].copies[1].index, 2);
  EXPECT_EQ(f.casts[1].copies[1].src.buffer, st.w2);
}

TEST(CaptureWeightCopies, KeepsCastsItCannotFold) {
  {  // a copy read after the update: its whole copy_tensors_ stays, the embedding's goes
    const Step st(/*read_after_update=*/true);
    const WeightCastFolds f = st.r.find();
    ASSERT_EQ(f.casts.size(), 1u);
    EXPECT_EQ(f.casts[0].node, st.cast_wte);
  }
  {  // f16 copies (blublas's update writes bf16 only)
    const Step st(false, DType::F16);
    EXPECT_TRUE(st.r.find().casts.empty());
  }
  {  // a parameter something else writes too
    Step st;
    Node n;
    n.op = "fill_";
    n.args = {blu::test::tensor_arg("dst", st.wte, false, true, DType::F32, {16, 8})};
    st.r.push(n);
    const WeightCastFolds f = st.r.find();
    ASSERT_EQ(f.casts.size(), 1u);
    EXPECT_EQ(f.casts[0].node, st.cast_block);
  }
  {  // the update already replaced (a compiled kernel), or a cast
    const Step st;
    std::vector<int> over(st.r.g.nodes.size(), -1);
    over[static_cast<size_t>(st.update)] = 0;
    EXPECT_TRUE(st.r.find(over).casts.empty());
    over.assign(st.r.g.nodes.size(), -1);
    over[static_cast<size_t>(st.cast_block)] = 0;
    EXPECT_EQ(st.r.find(over).casts.size(), 1u);
  }
  {  // a cast after the update (of next step's values) or on the CPU
    Step st;
    st.r.cast({st.r.copy()}, {st.w1});
    EXPECT_EQ(st.r.find().casts.size(), 2u);
    for (Node& n : st.r.g.nodes) n.device = Device::cpu();
    EXPECT_TRUE(st.r.find().casts.empty());
  }
}

}  // namespace

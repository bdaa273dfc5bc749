// Tensor core: factories, views sharing storage, the version counter, contiguous/clone/casts,
// broadcasting, printing, Philox streams and the error messages of bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "blutensor/blutensor.h"
#include "blutensor/philox.h"
#include "support/error_of.h"

namespace {

using namespace blu;

using blu::test::error_of;

TEST(TensorCore, FactoriesAndMetadata) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.sizes(), (Shape{2, 3}));
  EXPECT_EQ(z.strides(), (Shape{3, 1}));
  EXPECT_EQ(z.dtype(), kFloat32);
  EXPECT_TRUE(z.is_cpu());
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.describe(), "f32[2, 3] on cpu");
  Tensor f = full({4}, 2.5, kFloat64);
  EXPECT_EQ(f.to_vector<double>(), (std::vector<double>{2.5, 2.5, 2.5, 2.5}));
  Tensor a = arange(5, kInt64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  Tensor v = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(v.select(0, 1).to_vector<float>(), (std::vector<float>{4, 5, 6}));
  EXPECT_DOUBLE_EQ(scalar_tensor(3.0).item(), 3.0);
  EXPECT_EQ(scalar_tensor(3.0).dim(), 0);
}

TEST(TensorCore, ViewsShareStorage) {
  Tensor t = arange(12, kFloat32).view({3, 4});
  Tensor tr = t.transpose(0, 1);
  EXPECT_EQ(tr.sizes(), (Shape{4, 3}));
  EXPECT_EQ(tr.strides(), (Shape{1, 4}));
  EXPECT_FALSE(tr.is_contiguous());
  EXPECT_EQ(tr.storage(), t.storage());
  Tensor s = t.slice(1, 1, 4, 2);  // columns 1, 3
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{1, 3, 5, 7, 9, 11}));
  Tensor n = t.narrow(0, 1, 2);
  EXPECT_EQ(n.storage_offset(), 4);
  Tensor e = from_vector(std::vector<float>{1, 2, 3}).unsqueeze(0).expand({2, 3});
  EXPECT_EQ(e.strides(), (Shape{0, 1}));
  EXPECT_EQ(e.to_vector<float>(), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  Tensor p = arange(24, kFloat32).view({2, 3, 4}).permute({2, 0, 1});
  EXPECT_EQ(p.sizes(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.contiguous().view({-1}).to_vector<float>()[1], 4.0f);
  // Writing through a view is seen by the base.
  {
    NoGradGuard ng;
    Tensor col = t.select(1, 2);
    col.fill_(-1);
  }
  EXPECT_EQ(t.to_vector<float>()[2], -1.0f);
  EXPECT_EQ(t.to_vector<float>()[6], -1.0f);
  // reshape copies when a view is impossible; view refuses.
  EXPECT_NE(error_of([&] { tr.view({12}); }).find("view: shape [12] is not compatible"), std::string::npos);
  Tensor r = tr.reshape({12});
  EXPECT_NE(r.storage(), t.storage());
  EXPECT_EQ(r.to_vector<float>()[1], 4.0f);
  EXPECT_EQ(t.view({2, -1}).sizes(), (Shape{2, 6}));
  EXPECT_EQ(t.unsqueeze(1).squeeze(1).sizes(), t.sizes());
  EXPECT_EQ(t.flatten().sizes(), (Shape{12}));
  auto parts = t.split(2, 1);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].storage(), t.storage());
}

TEST(TensorCore, VersionCounterSharedByViews) {
  Tensor t = zeros({4, 4});
  Tensor v = t.narrow(0, 1, 2);
  Tensor d = t.detach();
  uint64_t v0 = t.version();
  v.add_(1.0);
  EXPECT_EQ(t.version(), v0 + 1);
  EXPECT_EQ(d.version(), v0 + 1);
  d.mul_(2.0);
  t.zero_();
  t.copy_(ones({4}));
  EXPECT_EQ(v.version(), v0 + 4);
  Tensor c = t.clone();
  EXPECT_EQ(c.version(), 0u);
}

TEST(TensorCore, BroadcastingElementwise) {
  Tensor a = from_vector(std::vector<double>{1, 2, 3}, {3, 1}, kFloat64);
  Tensor b = from_vector(std::vector<double>{10, 20}, {2}, kFloat64);
  Tensor c = a + b;
  EXPECT_EQ(c.sizes(), (Shape{3, 2}));
  EXPECT_EQ(c.to_vector<double>(), (std::vector<double>{11, 21, 12, 22, 13, 23}));
  Tensor d = (a * b - 1.0) / 2.0;
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{4.5, 9.5, 9.5, 19.5, 14.5, 29.5}));
  EXPECT_EQ((2.0 - a).to_vector<double>(), (std::vector<double>{1, 0, -1}));
  EXPECT_EQ((6.0 / a).to_vector<double>(), (std::vector<double>{6, 3, 2}));
  // Strided (transposed) operands.
  Tensor m = arange(6, kFloat64).view({2, 3});
  Tensor s = m.t() + m.t();
  EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{0, 6, 2, 8, 4, 10}));
  // Large enough to take the parallel path, broadcast inner dim.
  Tensor big = ones({300, 257}) + from_vector(std::vector<float>(257, 2.0f));
  EXPECT_EQ(sum(big).item(), 300.0 * 257.0 * 3.0);
}

TEST(TensorCore, CastsAndCopies) {
  Tensor x = from_vector(std::vector<double>{1.5, -2.25, 3.0, 65504.0, 1e-6}, {}, kFloat64);
  EXPECT_EQ(x.to(kFloat32).to_vector<double>(), (std::vector<double>{1.5, -2.25, 3.0, 65504.0, static_cast<float>(1e-6)}));
  std::vector<double> h = x.to(kFloat16).to_vector<double>();
  EXPECT_EQ(h[0], 1.5);
  EXPECT_EQ(h[3], 65504.0);
  EXPECT_NEAR(h[4], 1e-6, 1e-7);  // subnormal half
  std::vector<double> b = x.to(kBFloat16).to_vector<double>();
  EXPECT_EQ(b[1], -2.25);
  EXPECT_EQ(x.to(kInt64).to_vector<int64_t>()[1], -2);
  EXPECT_EQ(x.to(kUInt16).to_vector<double>()[2], 3.0);
  // Out of an integer type's range: saturated, NaN -> 0 (CUDA's conversions; a plain C++ cast is UB).
  Tensor wild = from_vector(std::vector<double>{-2.25, 70000.0, std::nan(""), 1e30, -1e30}, {}, kFloat64);
  EXPECT_EQ(wild.to(kUInt16).to_vector<double>(), (std::vector<double>{0.0, 65535.0, 0.0, 65535.0, 0.0}));
  const std::vector<int32_t> w32 = wild.to(kInt32).to_vector<int32_t>();
  EXPECT_EQ(w32[0], -2);
  EXPECT_EQ(w32[2], 0);
  EXPECT_EQ(w32[3], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(w32[4], std::numeric_limits<int32_t>::lowest());
  // bf16 rounding is to nearest even.
  EXPECT_EQ(static_cast<float>(BFloat16(1.00390625f)), 1.0f);      // halfway: even (down)
  EXPECT_EQ(static_cast<float>(BFloat16(1.01171875f)), 1.015625f); // halfway: even (up)
  EXPECT_EQ(static_cast<float>(Half(2049.0f)), 2048.0f);
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(70000.0f))));
  Tensor src = arange(6, kFloat32).view({2, 3});
  Tensor dst = zeros({3, 2}, kFloat64);
  dst.copy_(src.t());
  EXPECT_EQ(dst.to_vector<double>(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  Tensor row = zeros({2, 3});
  row.copy_(from_vector(std::vector<float>{7, 8, 9}));
  EXPECT_EQ(row.to_vector<float>(), (std::vector<float>{7, 8, 9, 7, 8, 9}));
}

TEST(TensorCore, Printing) {
  Tensor t = from_vector(std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f}, {2, 2});
  EXPECT_EQ(to_string(t), "tensor([[ 1.5000, -2.0000],\n        [ 3.2500,  0.0000]])");
  EXPECT_EQ(to_string(arange(3, kInt64)), "tensor([0, 1, 2])");
  EXPECT_EQ(to_string(ones({2}, kFloat64)), "tensor([1., 1.], dtype=float64)");
  Tensor big = arange(2000, kFloat32).view({40, 50});
  std::string s = to_string(big);
  EXPECT_NE(s.find("..."), std::string::npos);
  EXPECT_LT(s.size(), 1000u);
  EXPECT_NE(s.find("1999."), std::string::npos);
  Tensor g = ones({2}).requires_grad_();
  EXPECT_NE(to_string(g).find("requires_grad=True"), std::string::npos);
  EXPECT_NE(to_string(g * 2.0).find("grad_fn=<mul_scalar>"), std::string::npos);
  EXPECT_NE(to_string(from_vector(std::vector<float>{1e-8f, 1.0f})).find("e-08"), std::string::npos);
}

TEST(TensorCore, PhiloxStreamsAreReproducible) {
  // Known-answer: Random123's Philox4x32-10 test vector (counter 0, key 0).
  philox::U32x4 r = philox::philox4x32_10(0, 0);
  EXPECT_EQ(r.x, 0x6627e8d5u);
  EXPECT_EQ(r.y, 0xe169c58du);
  EXPECT_EQ(r.z, 0xbc57ac4cu);
  EXPECT_EQ(r.w, 0x9b00dbd8u);
  Generator g1(42), g2(42);
  Tensor a = randn({1001}, kFloat32, &g1);
  Tensor b = randn({1001}, kFloat32, &g2);
  EXPECT_EQ(max_abs_diff(a, b), 0.0);
  EXPECT_EQ(g1.offset(), 501u);
  Tensor c = randn({1001}, kFloat32, &g1);  // next draw differs
  EXPECT_GT(max_abs_diff(a, c), 0.1);
  std::vector<double> v = randn({20000}, kFloat64, &g1).to_double_vector();
  double mean = 0, var = 0;
  for (double x : v) mean += x;
  mean /= v.size();
  for (double x : v) var += (x - mean) * (x - mean);
  var /= v.size();
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(var, 1.0, 0.05);
  std::vector<double> u = rand({20000}, kFloat64, &g1).to_double_vector();
  for (double x : u) ASSERT_TRUE(x >= 0.0 && x < 1.0);
  Tensor ri = randint(3, 9, {500}, kInt64, &g1);
  for (double x : ri.to_double_vector()) ASSERT_TRUE(x >= 3 && x < 9);
}

TEST(TensorCore, ErrorsNameOpShapesAndDtypes) {
  Tensor a = zeros({2, 3}), b = zeros({4, 5});
  std::string e = error_of([&] { (void)(a + b); });
  EXPECT_NE(e.find("add"), std::string::npos) << e;
  EXPECT_NE(e.find("[2, 3]"), std::string::npos) << e;
  EXPECT_NE(e.find("[4, 5]"), std::string::npos) << e;
  e = error_of([&] { (void)matmul(a, b); });
  EXPECT_NE(e.find("matmul: inner sizes differ: f32[2, 3] on cpu x f32[4, 5] on cpu"), std::string::npos) << e;
  e = error_of([&] { (void)(a * zeros({2, 3}, kFloat64)); });
  EXPECT_NE(e.find("mul: dtypes differ"), std::string::npos) << e;
  EXPECT_NE(e.find("f64[2, 3]"), std::string::npos) << e;
  e = error_of([&] { (void)exp(zeros({2}, kInt64)); });
  EXPECT_NE(e.find("exp: expected floating tensors"), std::string::npos) << e;
  e = error_of([&] { (void)linear(zeros({2, 3}), zeros({4, 5})); });
  EXPECT_NE(e.find("linear: input f32[2, 3] on cpu does not match weight f32[4, 5] on cpu"), std::string::npos) << e;
  e = error_of([&] { (void)embedding(zeros({5, 3}), from_vector(std::vector<int64_t>{1, 7})); });
  EXPECT_NE(e.find("embedding: index 7 at position 1 is out of range"), std::string::npos) << e;
  e = error_of([&] { (void)cross_entropy(zeros({3, 4}), from_vector(std::vector<int64_t>{1, 2})); });
  EXPECT_NE(e.find("cross_entropy: logits f32[3, 4]"), std::string::npos) << e;
  e = error_of([&] { (void)cross_entropy(zeros({2, 4}), from_vector(std::vector<int64_t>{1, 9})); });
  EXPECT_NE(e.find("target 9"), std::string::npos) << e;
  e = error_of([&] { (void)layer_norm(zeros({2, 3}), ones({4}), Tensor()); });
  EXPECT_NE(e.find("layer_norm: weight/bias f32[4]"), std::string::npos) << e;
  e = error_of([&] { (void)a.transpose(0, 2); });
  EXPECT_NE(e.find("transpose: dim 2 out of range"), std::string::npos) << e;
  e = error_of([&] { (void)a.view({4}); });
  EXPECT_NE(e.find("view: shape [4] is invalid for input of shape [2, 3]"), std::string::npos) << e;
  e = error_of([&] { (void)cat({a, zeros({2, 3}, kFloat64)}, 0); });
  EXPECT_NE(e.find("cat: dtypes differ"), std::string::npos) << e;
  e = error_of([&] { (void)a.item(); });
  EXPECT_NE(e.find("item: expects a tensor with one element"), std::string::npos) << e;
  e = error_of([&] { (void)Device("gpu:0"); });
  EXPECT_NE(e.find("Device: bad spec 'gpu:0'"), std::string::npos) << e;
  EXPECT_EQ(Device("cuda:3"), Device::cuda(3));
  if (cuda_device_count() == 0) {
    e = error_of([&] { (void)zeros({2}, Device::cuda(0)); });
    EXPECT_NE(e.find("cuda:0"), std::string::npos) << e;
  }
}

TEST(TensorCore, MixedDevicesAreRejected) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "needs a CUDA device to build a CUDA tensor";
  Tensor a = zeros({2});
  Tensor b = zeros({2}, Device::cuda(0));
  std::string e = error_of([&] { (void)(a + b); });
  EXPECT_NE(e.find("add: expected all tensors on one device"), std::string::npos) << e;
}

}  // namespace

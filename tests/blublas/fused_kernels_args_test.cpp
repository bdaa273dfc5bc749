// Argument checking of the memory-bound kernel launchers (layernorm, elementwise, softmax,
// cross-entropy, embedding, reduce, adamw), without a GPU: every bad argument returns the right
// status code with a message naming the op, before anything touches the device.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "blublas/adamw.h"
#include "blublas/cross_entropy.h"
#include "blublas/elementwise.h"
#include "blublas/embedding.h"
#include "blublas/layernorm.h"
#include "blublas/reduce.h"
#include "blublas/softmax.h"

namespace {

using blublas::Dtype;
using blublas::StatusCode;

// Fake, never dereferenced device pointers (16-byte aligned).
void* fake(std::uintptr_t i = 1) { return reinterpret_cast<void*>(0x100000 * i); }
float* fakef(std::uintptr_t i = 1) { return static_cast<float*>(fake(i)); }

void expect_error(const blublas::Status& st, StatusCode code, const std::string& op) {
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find(op), std::string::npos) << st.message();
}

TEST(LayerNormArgs, Rejected) {
  expect_error(blublas::layernorm_forward(fake(), fakef(2), fakef(3), nullptr, fake(4), nullptr,
                                          fake(5), fake(6), 4, 0, 1e-5f, Dtype::kF32, nullptr),
               StatusCode::kInvalidArgument, "layernorm_forward");
  expect_error(blublas::layernorm_forward(fake(), fakef(2), fakef(3), nullptr, fake(4), nullptr,
                                          fake(5), fake(6), 4, 8, 1e-5f, Dtype::kF16, nullptr),
               StatusCode::kInvalidArgument, "layernorm_forward");
  expect_error(blublas::layernorm_forward(nullptr, fakef(2), fakef(3), nullptr, fake(4), nullptr,
                                          fake(5), fake(6), 4, 8, 1e-5f, Dtype::kF32, nullptr),
               StatusCode::kInvalidArgument, "layernorm_forward");
  expect_error(blublas::layernorm_forward(fake(), fakef(2), fakef(3), fake(7), fake(4), nullptr,
                                          fake(5), fake(6), 4, 8, 1e-5f, Dtype::kF32, nullptr),
               StatusCode::kInvalidArgument, "residual");
  expect_error(blublas::layernorm_forward(fake(), fakef(2), fakef(3), nullptr, fake(4), nullptr,
                                          fake(5), fake(6), -1, 8, 1e-5f, Dtype::kF32, nullptr),
               StatusCode::kInvalidArgument, "layernorm_forward");
  std::size_t ws = 0;
  ASSERT_TRUE(blublas::layernorm_backward_workspace_size(100, 768, &ws).ok());
  EXPECT_GT(ws, 0u);
  expect_error(blublas::layernorm_backward(fake(), fakef(2), fakef(3), fake(4), fake(5), fakef(6),
                                           fakef(7), fake(8), 100, 768, Dtype::kF32, false, false,
                                           fake(9), ws - 4, nullptr),
               StatusCode::kWorkspaceTooSmall, "layernorm_backward");
  expect_error(blublas::layernorm_backward(fake(), fakef(2), fakef(3), fake(4), fake(5), nullptr,
                                           fakef(7), fake(8), 100, 768, Dtype::kF32, false, false,
                                           fake(9), ws, nullptr),
               StatusCode::kInvalidArgument, "layernorm_backward");
  expect_error(blublas::layernorm_backward(fake(), fakef(2), fakef(3), fake(4), fake(5), fakef(6),
                                           fakef(7), fake(8), 100, 768, Dtype::kF32, false, false,
                                           static_cast<char*>(fake(9)) + 4, ws, nullptr),
               StatusCode::kMisaligned, "layernorm_backward");
  EXPECT_EQ(blublas::layernorm_backward_workspace_size(1, 1, nullptr).code(),
            StatusCode::kInvalidArgument);
}

TEST(ElementwiseArgs, Rejected) {
  expect_error(blublas::gelu_forward(nullptr, fake(), nullptr, 3, 5, Dtype::kF32, nullptr),
               StatusCode::kInvalidArgument, "gelu_forward");
  expect_error(blublas::gelu_forward(fake(), fake(), nullptr, 3, 0, Dtype::kF32, nullptr),
               StatusCode::kInvalidArgument, "gelu_forward");
  expect_error(blublas::gelu_backward(fake(), nullptr, fake(), nullptr, 3, 5, Dtype::kBF16, nullptr),
               StatusCode::kInvalidArgument, "gelu_backward");
  expect_error(blublas::gelu_backward(fake(), fake(), fake(), nullptr, 3, 5, Dtype::kF16, nullptr),
               StatusCode::kInvalidArgument, "gelu_backward");
  expect_error(blublas::residual_add(fake(), nullptr, fake(), 10, Dtype::kF32, nullptr),
               StatusCode::kInvalidArgument, "residual_add");
  expect_error(blublas::residual_add(fake(), fake(), fake(), -1, Dtype::kF32, nullptr),
               StatusCode::kInvalidArgument, "residual_add");
  EXPECT_TRUE(blublas::residual_add(nullptr, nullptr, nullptr, 0, Dtype::kF32, nullptr).ok());
}

TEST(SoftmaxArgs, Rejected) {
  expect_error(blublas::softmax_forward(nullptr, fake(), 2, 5, Dtype::kF32, nullptr),
               StatusCode::kInvalidArgument, "softmax_forward");
  expect_error(blublas::softmax_forward(fake(), fake(), 2, 0, Dtype::kF32, nullptr),
               StatusCode::kInvalidArgument, "softmax_forward");
  expect_error(blublas::softmax_backward(fake(), fake(), nullptr, 2, 5, Dtype::kBF16, nullptr),
               StatusCode::kInvalidArgument, "softmax_backward");
  expect_error(blublas::softmax_backward(fake(), fake(), fake(), 2, 5, Dtype::kF16, nullptr),
               StatusCode::kInvalidArgument, "softmax_backward");
  expect_error(blublas::softmax_forward(fake(), fake(), int64_t{1} << 31, 5, Dtype::kF32, nullptr),
               StatusCode::kInvalidArgument, "too large");
  EXPECT_TRUE(blublas::softmax_forward(nullptr, nullptr, 0, 5, Dtype::kF32, nullptr).ok());
}

TEST(CrossEntropyArgs, Rejected) {
  std::size_t ws = 0;
  ASSERT_TRUE(blublas::cross_entropy_workspace_size(64, &ws).ok());
  auto* t = static_cast<const int32_t*>(fake(3));
  expect_error(blublas::cross_entropy_fused(fakef(), fakef(2), fake(4), fake(5), t, 64, 50304, -100,
                                            1.0f, nullptr, Dtype::kF32, fake(6), ws - 1, nullptr),
               StatusCode::kWorkspaceTooSmall, "cross_entropy_fused");
  expect_error(blublas::cross_entropy_fused(fakef(), fakef(2), fake(4), nullptr, t, 64, 50304, -100,
                                            1.0f, nullptr, Dtype::kF32, fake(6), ws, nullptr),
               StatusCode::kInvalidArgument, "cross_entropy_fused");
  expect_error(blublas::cross_entropy_fused(fakef(), fakef(2), fake(4), fake(5), nullptr, 64, 50304,
                                            -100, 1.0f, nullptr, Dtype::kF32, fake(6), ws, nullptr),
               StatusCode::kInvalidArgument, "cross_entropy_fused");
  expect_error(blublas::cross_entropy_fused(fakef(), fakef(2), fake(4), fake(5), t, 64, 0, -100,
                                            1.0f, nullptr, Dtype::kF32, fake(6), ws, nullptr),
               StatusCode::kInvalidArgument, "cross_entropy_fused");
  expect_error(blublas::cross_entropy_fused(fakef(), fakef(2), fake(4), fake(5), t, 64, 50304, -100,
                                            1.0f, nullptr, Dtype::kF16, fake(6), ws, nullptr),
               StatusCode::kInvalidArgument, "cross_entropy_fused");
  expect_error(blublas::cross_entropy_fused(fakef(), fakef(2), fake(4), fake(5), t, 64, 50304, -100,
                                            1.0f, nullptr, Dtype::kF32,
                                            static_cast<char*>(fake(6)) + 4, ws, nullptr),
               StatusCode::kMisaligned, "cross_entropy_fused");
}

TEST(EmbeddingArgs, Rejected) {
  auto* t = static_cast<const int32_t*>(fake(3));
  int* flag = static_cast<int*>(fake(7));
  expect_error(blublas::embedding_forward(fake(), t, fake(4), fake(5), 2, 8, 16, 100, nullptr,
                                          Dtype::kF32, nullptr),
               StatusCode::kInvalidArgument, "embedding_forward");
  expect_error(blublas::embedding_forward(fake(), nullptr, fake(4), fake(5), 2, 8, 16, 100, flag,
                                          Dtype::kF32, nullptr),
               StatusCode::kInvalidArgument, "embedding_forward");
  expect_error(blublas::embedding_forward(fake(), t, fake(4), fake(5), 2, 8, 0, 100, flag,
                                          Dtype::kF32, nullptr),
               StatusCode::kInvalidArgument, "embedding_forward");
  std::size_t ws = 0;
  ASSERT_TRUE(blublas::embedding_backward_workspace_size(2, 8, 100, &ws).ok());
  expect_error(blublas::embedding_backward(fakef(), fakef(2), fake(4), t, 2, 8, 16, 100, flag,
                                           Dtype::kF32, fake(6), ws - 1, nullptr),
               StatusCode::kWorkspaceTooSmall, "embedding_backward");
  expect_error(blublas::embedding_backward(nullptr, fakef(2), fake(4), t, 2, 8, 16, 100, flag,
                                           Dtype::kF32, fake(6), ws, nullptr),
               StatusCode::kInvalidArgument, "embedding_backward");
  expect_error(blublas::embedding_backward(fakef(), fakef(2), fake(4), t, 2, 8, 16, 100, flag,
                                           Dtype::kF16, fake(6), ws, nullptr),
               StatusCode::kInvalidArgument, "embedding_backward");
}

TEST(ColumnSumArgs, Rejected) {
  std::size_t ws = 0;
  ASSERT_TRUE(blublas::column_sum_workspace_size(100000, 768, &ws).ok());
  EXPECT_GT(ws, 0u);
  expect_error(blublas::column_sum(fakef(), fake(2), 100000, 768, Dtype::kF32, false, fake(3),
                                   ws - 1, nullptr),
               StatusCode::kWorkspaceTooSmall, "column_sum");
  expect_error(blublas::column_sum(fakef(), nullptr, 100000, 768, Dtype::kF32, false, fake(3), ws,
                                   nullptr),
               StatusCode::kInvalidArgument, "column_sum");
  expect_error(blublas::column_sum(nullptr, fake(2), 10, 768, Dtype::kF32, false, nullptr, 0,
                                   nullptr),
               StatusCode::kInvalidArgument, "column_sum");
  expect_error(blublas::column_sum(fakef(), fake(2), 10, 0, Dtype::kF32, false, nullptr, 0, nullptr),
               StatusCode::kInvalidArgument, "column_sum");
}

TEST(AdamWArgs, Rejected) {
  blublas::AdamWTensor t;
  t.param = fakef(1);
  t.grad = fake(2);
  t.m = fakef(3);
  t.v = nullptr;
  t.numel = 10;
  expect_error(blublas::adamw_update(&t, 1, Dtype::kF32, blublas::AdamWHyper{}, nullptr, nullptr),
               StatusCode::kInvalidArgument, "adamw_update");
  t.v = fakef(4);
  blublas::AdamWHyper h;
  h.step = 0;
  expect_error(blublas::adamw_update(&t, 1, Dtype::kF32, h, nullptr, nullptr),
               StatusCode::kInvalidArgument, "adamw_update");
  h.step = 1;
  h.beta2 = 1.0f;
  expect_error(blublas::adamw_update(&t, 1, Dtype::kF32, h, nullptr, nullptr),
               StatusCode::kInvalidArgument, "adamw_update");
  expect_error(blublas::adamw_update(nullptr, 3, Dtype::kF32, blublas::AdamWHyper{}, nullptr, nullptr),
               StatusCode::kInvalidArgument, "adamw_update");
  expect_error(blublas::adamw_update(&t, 1, Dtype::kF16, blublas::AdamWHyper{}, nullptr, nullptr),
               StatusCode::kInvalidArgument, "adamw_update");
  std::size_t ws = 0;
  ASSERT_TRUE(blublas::grad_global_norm_workspace_size(&t, 1, &ws).ok());
  EXPECT_EQ(ws, 4u);
  expect_error(blublas::grad_global_norm(fakef(5), nullptr, 1.0f, &t, 1, Dtype::kF32, fake(6),
                                         ws - 1, nullptr),
               StatusCode::kWorkspaceTooSmall, "grad_global_norm");
  expect_error(blublas::grad_global_norm(nullptr, nullptr, 1.0f, &t, 1, Dtype::kF32, fake(6), ws,
                                         nullptr),
               StatusCode::kInvalidArgument, "grad_global_norm");
  t.grad = nullptr;
  expect_error(blublas::grad_global_norm(fakef(5), nullptr, 1.0f, &t, 1, Dtype::kF32, fake(6), ws,
                                         nullptr),
               StatusCode::kInvalidArgument, "grad_global_norm");
}

// bf16_weight_copy: a copy needs its param; tensors without a copy (or empty) are skipped, so a
// list of those launches nothing and succeeds without a GPU.
TEST(AdamWArgs, Bf16WeightCopy) {
  blublas::AdamWTensor t;
  t.numel = 10;
  t.param_bf16 = fake(7);
  expect_error(blublas::bf16_weight_copy(&t, 1, nullptr), StatusCode::kInvalidArgument, "bf16_weight_copy");
  expect_error(blublas::bf16_weight_copy(nullptr, 2, nullptr), StatusCode::kInvalidArgument, "bf16_weight_copy");
  expect_error(blublas::bf16_weight_copy(&t, -1, nullptr), StatusCode::kInvalidArgument, "bf16_weight_copy");
  t.numel = -3;
  expect_error(blublas::bf16_weight_copy(&t, 1, nullptr), StatusCode::kInvalidArgument, "bf16_weight_copy");
  blublas::AdamWTensor skipped[2];
  skipped[0].param = fakef(8);  // no copy
  skipped[0].numel = 10;
  skipped[1].param_bf16 = fake(9);  // empty
  EXPECT_TRUE(blublas::bf16_weight_copy(skipped, 2, nullptr).ok());
  EXPECT_TRUE(blublas::bf16_weight_copy(nullptr, 0, nullptr).ok());
}

}  // namespace

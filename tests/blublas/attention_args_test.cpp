// attention_args_test.cpp: bad arguments to the attention launchers come back as the right
// blublas::Status (never a launch, never a fault); runs on machines without a GPU because every
// argument check happens before the first CUDA call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "../../blublas/src/attention/attention_params.h"  // table_entry (internal)
#include "blublas/attention.h"

namespace {

using blublas::AttentionDesc;
using blublas::AttnPath;
using blublas::AttnPrecision;
using blublas::StatusCode;

alignas(256) unsigned char g_mem[1 << 16];  // never dereferenced: checks fail before any launch

AttentionDesc valid_desc() {
  AttentionDesc d;
  d.batch = 2;
  d.seq_len = 17;
  d.heads = 3;
  d.head_dim = 64;
  d.softmax_scale = 0.125f;
  d.causal = true;
  d.precision = AttnPrecision::kBF16;
  int64_t sb = 0, st = 0, sh = 0;
  blublas::attn_dense_strides(d.seq_len, d.heads, d.head_dim, &sb, &st, &sh);
  auto in = [&](int off) {
    blublas::AttnInput a;
    a.ptr = g_mem + off;
    a.batch_stride = sb;
    a.seq_stride = st;
    a.head_stride = sh;
    return a;
  };
  auto out = [&](int off) {
    blublas::AttnOutput a;
    a.ptr = g_mem + off;
    a.batch_stride = sb;
    a.seq_stride = st;
    a.head_stride = sh;
    return a;
  };
  d.q = in(0);
  d.k = in(1024);
  d.v = in(2048);
  d.o = out(3072);
  d.lse = reinterpret_cast<float*>(g_mem + 4096);
  d.d_o = in(5120);
  d.dq = out(6144);
  d.dk = out(7168);
  d.dv = out(8192);
  return d;
}

StatusCode fwd(const AttentionDesc& d) {
  return blublas::attention_forward(d, nullptr).code();
}
StatusCode bwd(const AttentionDesc& d, std::size_t ws = 1 << 20) {
  return blublas::attention_backward(d, g_mem, ws, nullptr).code();
}

TEST(AttentionArgs, NullPointers) {
  {
    AttentionDesc d = valid_desc();
    d.q.ptr = nullptr;
    blublas::Status st = blublas::attention_forward(d, nullptr);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("attention_forward"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("q is null"), std::string::npos) << st.message();
  }
  {
    AttentionDesc d = valid_desc();
    d.lse = nullptr;
    EXPECT_EQ(fwd(d), StatusCode::kInvalidArgument);
  }
  {
    AttentionDesc d = valid_desc();
    d.o.ptr = nullptr;
    EXPECT_EQ(fwd(d), StatusCode::kInvalidArgument);
  }
  for (int which = 0; which < 4; ++which) {
    AttentionDesc d = valid_desc();
    if (which == 0) d.d_o.ptr = nullptr;
    if (which == 1) d.dq.ptr = nullptr;
    if (which == 2) d.dk.ptr = nullptr;
    if (which == 3) d.dv.ptr = nullptr;
    EXPECT_EQ(bwd(d), StatusCode::kInvalidArgument) << "which=" << which;
  }
}

TEST(AttentionArgs, HeadDimNotSupported) {
  for (int hd : {0, 32, 96, 256}) {
    AttentionDesc d = valid_desc();
    d.head_dim = hd;
    blublas::Status st = blublas::attention_forward(d, nullptr);
    EXPECT_EQ(st.code(), StatusCode::kNotSupported) << hd;
    EXPECT_NE(st.message().find("head_dim"), std::string::npos) << st.message();
    EXPECT_EQ(bwd(d), StatusCode::kNotSupported) << hd;
  }
}

TEST(AttentionArgs, BadSizesAndScale) {
  AttentionDesc d = valid_desc();
  d.seq_len = -1;
  EXPECT_EQ(fwd(d), StatusCode::kInvalidArgument);
  d = valid_desc();
  d.batch = 70000;
  EXPECT_EQ(fwd(d), StatusCode::kInvalidArgument);
  for (float s : {0.0f, -1.0f, NAN, INFINITY}) {
    d = valid_desc();
    d.softmax_scale = s;
    EXPECT_EQ(fwd(d), StatusCode::kInvalidArgument) << s;
  }
  d = valid_desc();
  d.k.seq_stride = -192;
  EXPECT_EQ(fwd(d), StatusCode::kInvalidArgument);
}

TEST(AttentionArgs, PrecisionAndPathCombinations) {
  AttentionDesc d = valid_desc();
  d.precision = AttnPrecision::kF32Strict;
  d.path = AttnPath::kSm80Mma;
  EXPECT_EQ(fwd(d), StatusCode::kInvalidArgument);
  d.precision = AttnPrecision::kF32TF32;
  d.path = AttnPath::kSimt;
  EXPECT_EQ(fwd(d), StatusCode::kInvalidArgument);
  // The sm90 wgmma path takes bf16 only: found by the argument checks, before any device query.
  d = valid_desc();
  d.path = AttnPath::kSm90Wgmma;
  d.precision = AttnPrecision::kF32TF32;
  EXPECT_EQ(fwd(d), StatusCode::kNotSupported);
  d.precision = AttnPrecision::kF32Strict;
  EXPECT_EQ(fwd(d), StatusCode::kNotSupported);
  // 3xTF32 needs tensor cores (not SIMT) and is not a wgmma mode.
  d.precision = AttnPrecision::kF32Split3TF32;
  EXPECT_EQ(fwd(d), StatusCode::kNotSupported);
  d.path = AttnPath::kSimt;
  EXPECT_EQ(fwd(d), StatusCode::kInvalidArgument);
  EXPECT_STREQ(blublas::attn_path_name(AttnPath::kSm90Wgmma), "sm90_wgmma");
  d = valid_desc();
  d.precision = static_cast<AttnPrecision>(7);
  EXPECT_EQ(fwd(d), StatusCode::kInvalidArgument);
  d = valid_desc();
  d.path = static_cast<AttnPath>(-1);
  EXPECT_EQ(fwd(d), StatusCode::kInvalidArgument);
}

TEST(AttentionArgs, MisalignedElements) {
  AttentionDesc d = valid_desc();
  d.v.ptr = g_mem + 1;  // odd address: not even a bf16 boundary
  EXPECT_EQ(fwd(d), StatusCode::kMisaligned);
  d = valid_desc();
  d.precision = AttnPrecision::kF32Strict;
  d.o.ptr = g_mem + 3074;  // 2-byte aligned, not 4
  EXPECT_EQ(fwd(d), StatusCode::kMisaligned);
  d = valid_desc();
  d.lse = reinterpret_cast<float*>(g_mem + 4098);
  EXPECT_EQ(fwd(d), StatusCode::kMisaligned);
}

TEST(AttentionArgs, Workspace) {
  AttentionDesc d = valid_desc();
  std::size_t need = 0;
  ASSERT_TRUE(blublas::attention_backward_workspace_size(d, &need).ok());
  EXPECT_GE(need, static_cast<std::size_t>(2 * 3 * 17) * sizeof(float));
  EXPECT_EQ(need % 256, 0u);
  EXPECT_EQ(bwd(d, need - 1), StatusCode::kWorkspaceTooSmall);
  EXPECT_EQ(blublas::attention_backward(d, nullptr, need, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(blublas::attention_backward(d, g_mem + 4, need, nullptr).code(),
            StatusCode::kMisaligned);
  EXPECT_EQ(blublas::attention_backward_workspace_size(d, nullptr).code(),
            StatusCode::kInvalidArgument);
}

// The backward workspace a desc asks for, and the desc with another dQ mode.
std::size_t ws_bytes(const AttentionDesc& d) {
  std::size_t bytes = 0;
  EXPECT_TRUE(blublas::attention_backward_workspace_size(d, &bytes).ok());
  return bytes;
}
AttentionDesc with_dq(AttentionDesc d, blublas::AttnDqMode m) {
  d.dq_mode = m;
  return d;
}

// Note [dQ partials]: the workspace grows by B*H*ceil(T/64)*T*64 floats only where the partials
// mode applies (3xTF32, d64, partials <= 2 GiB); every other request sizes as two passes.
TEST(AttentionArgs, DqPartialsWorkspace) {
  using blublas::AttnDqMode;
  AttentionDesc d = valid_desc();  // B2 T17 H3 d64
  EXPECT_EQ(ws_bytes(with_dq(d, AttnDqMode::kPartials)),
            ws_bytes(with_dq(d, AttnDqMode::kTwoPass)));  // bf16
  d.precision = AttnPrecision::kF32TF32;
  EXPECT_EQ(ws_bytes(with_dq(d, AttnDqMode::kPartials)),
            ws_bytes(with_dq(d, AttnDqMode::kTwoPass)));
  d.precision = AttnPrecision::kF32Split3TF32;
  const std::size_t two = ws_bytes(with_dq(d, AttnDqMode::kTwoPass));
  const std::size_t part = 2 * 3 * 1 * 17 * 64 * sizeof(float);  // one key block
  EXPECT_EQ(ws_bytes(with_dq(d, AttnDqMode::kPartials)), two + (part + 255) / 256 * 256);
  // GPT-2 124M: B16 H12 T1024 -> D (768 KiB) + 16 key blocks of partials (768 MiB).
  d.batch = 16;
  d.heads = 12;
  d.seq_len = 1024;
  EXPECT_EQ(ws_bytes(with_dq(d, AttnDqMode::kTwoPass)), std::size_t{786432});
  EXPECT_EQ(ws_bytes(with_dq(d, AttnDqMode::kPartials)),
            std::size_t{786432} + std::size_t{805306368});
  if (std::getenv("BLUBLAS_ATTN_DQ") == nullptr) {  // kAuto: partials by default
    EXPECT_EQ(ws_bytes(with_dq(d, AttnDqMode::kAuto)), ws_bytes(with_dq(d, AttnDqMode::kPartials)));
  }
  d.seq_len = 1664;  // 2,126,512,128 bytes of partials: still <= 2 GiB
  EXPECT_GT(ws_bytes(with_dq(d, AttnDqMode::kPartials)),
            ws_bytes(with_dq(d, AttnDqMode::kTwoPass)));
  d.seq_len = 1665;  // 2,209,628,160 bytes: falls back to two passes
  EXPECT_EQ(ws_bytes(with_dq(d, AttnDqMode::kPartials)),
            ws_bytes(with_dq(d, AttnDqMode::kTwoPass)));
  d = valid_desc();
  d.precision = AttnPrecision::kF32Split3TF32;
  d.head_dim = 128;
  EXPECT_EQ(ws_bytes(with_dq(d, AttnDqMode::kPartials)),
            ws_bytes(with_dq(d, AttnDqMode::kTwoPass)));
  // A partials-sized request is checked against the partials size.
  d.head_dim = 64;
  d.dq_mode = AttnDqMode::kPartials;
  EXPECT_EQ(bwd(d, ws_bytes(d) - 1), StatusCode::kWorkspaceTooSmall);
  d.dq_mode = static_cast<AttnDqMode>(7);
  EXPECT_EQ(bwd(d), StatusCode::kInvalidArgument);
}

// Note [sm90 flash backward: dQ accumulated in order]: the accumulator (B*H*ceil(T/64) tiles of
// 64 x 64 floats) and the chain counters (one per query block + the ticket) follow D, only for
// bf16, causal, head_dim 64 when requested (kAccumulate, or kAuto with BLUBLAS_ATTN_DQ=accumulate).
TEST(AttentionArgs, DqAccumulateWorkspace) {
  using blublas::AttnDqMode;
  AttentionDesc d = valid_desc();  // B2 T17 H3 d64 causal bf16: one query block per head
  const std::size_t two = ws_bytes(with_dq(d, AttnDqMode::kTwoPass));
  const std::size_t acc = 2 * 3 * 1 * 64 * 64 * sizeof(float);       // 49152: 256-aligned
  const std::size_t sems = ((2 * 3 * 1 + 1) * 4 + 255) / 256 * 256;  // 28 bytes -> 256
  EXPECT_EQ(ws_bytes(with_dq(d, AttnDqMode::kAccumulate)), two + acc + sems);
  if (std::getenv("BLUBLAS_ATTN_DQ") == nullptr) {  // kAuto: two passes for bf16 by default
    EXPECT_EQ(ws_bytes(with_dq(d, AttnDqMode::kAuto)), two);
  }
  EXPECT_EQ(ws_bytes(with_dq(d, AttnDqMode::kPartials)),
            two);  // a 3xTF32 request: two passes in bf16
  // Not applicable: non-causal, head_dim 128, fp32 modes.
  AttentionDesc e = with_dq(d, AttnDqMode::kAccumulate);
  e.causal = false;
  EXPECT_EQ(ws_bytes(e), two);
  e = with_dq(d, AttnDqMode::kAccumulate);
  e.head_dim = 128;
  EXPECT_EQ(ws_bytes(e), ws_bytes(with_dq(e, AttnDqMode::kTwoPass)));
  e = with_dq(d, AttnDqMode::kAccumulate);
  e.precision = AttnPrecision::kF32TF32;
  EXPECT_EQ(ws_bytes(e), ws_bytes(with_dq(e, AttnDqMode::kTwoPass)));
  // GPT-2 124M: B16 H12 T1024 -> D (768 KiB) + 3072 tiles (48 MiB) + 3073 counters (12,544 bytes).
  d.batch = 16;
  d.heads = 12;
  d.seq_len = 1024;
  EXPECT_EQ(ws_bytes(with_dq(d, AttnDqMode::kAccumulate)),
            std::size_t{786432} + std::size_t{50331648} + std::size_t{12544});
  // An accumulate-sized request is checked against that size.
  d = with_dq(valid_desc(), AttnDqMode::kAccumulate);
  EXPECT_EQ(bwd(d, ws_bytes(d) - 1), StatusCode::kWorkspaceTooSmall);
  d.dq_mode = static_cast<AttnDqMode>(4);
  EXPECT_EQ(bwd(d), StatusCode::kInvalidArgument);
}

TEST(AttentionArgs, EmptyProblemIsANoOp) {
  AttentionDesc d = valid_desc();
  d.seq_len = 0;
  EXPECT_EQ(fwd(d), StatusCode::kSuccess);
  EXPECT_EQ(bwd(d, 0), StatusCode::kSuccess);
}

TEST(AttentionArgs, QkvViewStrides) {
  const blublas::AttnInput k = blublas::attn_qkv_view(g_mem, 1, 1024, 12, 64, 2);
  EXPECT_EQ(static_cast<const unsigned char*>(k.ptr) - g_mem, 12 * 64 * 2);
  EXPECT_EQ(k.head_stride, 64);
  EXPECT_EQ(k.seq_stride, 3 * 12 * 64);
  EXPECT_EQ(k.batch_stride, 1024LL * 3 * 12 * 64);
  EXPECT_STREQ(blublas::attn_path_name(AttnPath::kSm80Mma), "sm80_mma");
  EXPECT_STREQ(blublas::attn_precision_name(AttnPrecision::kF32TF32), "tf32");
  EXPECT_STREQ(blublas::attn_precision_name(AttnPrecision::kF32Split3TF32), "f32_3xtf32");
}

// The launchers' table entry: BLUBLAS_ATTN_*_CFG when it is an index in range (0 included, so a
// run can force entry 0 where the launcher would pick another), else the launcher's choice.
TEST(AttentionArgs, TableEntryOverrideAndFallback) {
  namespace attn = blublas::attn;
  auto launch = [](const attn::Params&, const blublas::DeviceInfo&, cudaStream_t) {
    return blublas::Status::success();
  };
  const attn::KernelConfig table[] = {{"e0", launch}, {"e1", launch}, {"e2", launch}};
  const char* env = "BLUBLAS_ATTN_TEST_CFG";
  auto pick = [&](const char* v, int fallback) {
    if (v == nullptr) {
      ::unsetenv(env);
    } else {
      ::setenv(env, v, 1);
    }
    const char* name = attn::table_entry(table, 3, env, fallback).name;
    ::unsetenv(env);
    return std::string(name);
  };
  EXPECT_EQ(pick(nullptr, 0), "e0");
  EXPECT_EQ(pick(nullptr, 1), "e1");
  EXPECT_EQ(pick(nullptr, 7), "e0");  // a fallback outside the table: entry 0
  EXPECT_EQ(pick("0", 1), "e0");
  EXPECT_EQ(pick("2", 1), "e2");
  EXPECT_EQ(pick("3", 1), "e1");  // out of range
  EXPECT_EQ(pick("-1", 1), "e1");
  EXPECT_EQ(pick("abc", 1), "e1");
  EXPECT_EQ(pick("1x", 2), "e2");
  EXPECT_EQ(pick("", 2), "e2");
}

}  // namespace

// gemm_args_test.cpp: every argument error of blublas::gemm returns the right status code and a
// message naming the op, the sizes, the dtypes and the offending field, before any CUDA call
// (Note [Validate before CUDA] in gemm.cpp), so this runs without a GPU. The pointers are fake:
// no test here ever reaches a launch (every desc is invalid, or only queried).
#include <blublas/device_info.h>
#include <blublas/gemm.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace {

using blublas::Dtype;
using blublas::Epilogue;
using blublas::GemmDesc;
using blublas::GemmPath;
using blublas::Layout;
using blublas::Op;
using blublas::Status;
using blublas::StatusCode;

void* fake(uintptr_t v) { return reinterpret_cast<void*>(v); }

// A valid row-major NN problem: M=17, N=33, K=9.
GemmDesc valid_desc() {
  GemmDesc d;
  d.m = 17; d.n = 33; d.k = 9;
  d.a = fake(0x100000); d.lda = 9;
  d.b = fake(0x200000); d.ldb = 33;
  d.d = fake(0x300000); d.ldd = 33;
  return d;
}

// gemm() with no workspace; the desc must be invalid (never launches).
Status run(const GemmDesc& d) { return blublas::gemm(d, nullptr, 0, nullptr); }

void expect_error(const GemmDesc& d, StatusCode code, const std::string& needle) {
  const Status st = run(d);
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find("gemm"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(needle), std::string::npos)
      << "message lacks '" << needle << "': " << st.message();
  // The workspace query validates the same way.
  std::size_t bytes = 0;
  const Status ws = blublas::gemm_workspace_size(d, &bytes);
  EXPECT_EQ(ws.code(), code) << ws.to_string();
  GemmPath path;
  const Status sel = blublas::gemm_selected_path(d, &path);
  EXPECT_EQ(sel.code(), code) << sel.to_string();
}

TEST(GemmArgs, SizesMustBePositive) {
  GemmDesc d = valid_desc();
  d.m = 0;
  expect_error(d, StatusCode::kInvalidArgument, "M=0");
  d = valid_desc();
  d.n = -3;
  expect_error(d, StatusCode::kInvalidArgument, "N=-3");
  d = valid_desc();
  d.k = 0;
  expect_error(d, StatusCode::kInvalidArgument, "K=0");
  d = valid_desc();
  d.batch = 0;
  expect_error(d, StatusCode::kInvalidArgument, "batch");
  d = valid_desc();
  d.max_ctas = -1;  // Note [GEMM CTA budget]: 0 is one CTA per SM, a count above it a cap
  expect_error(d, StatusCode::kInvalidArgument, "max_ctas");
}

TEST(GemmArgs, MessageNamesSizesAndDtypes) {
  GemmDesc d = valid_desc();
  d.ab_type = Dtype::kBF16;
  d.cd_type = Dtype::kF16;
  d.lda = 8;
  const Status st = run(d);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  for (const char* needle : {"M=17", "N=33", "K=9", "ab=bf16", "cd=f16", "lda=8", "path=auto"}) {
    EXPECT_NE(st.message().find(needle), std::string::npos) << needle << " in " << st.message();
  }
}

TEST(GemmArgs, NullOperands) {
  GemmDesc d = valid_desc();
  d.a = nullptr;
  expect_error(d, StatusCode::kInvalidArgument, "a is null");
  d = valid_desc();
  d.b = nullptr;
  expect_error(d, StatusCode::kInvalidArgument, "b is null");
  d = valid_desc();
  d.d = nullptr;
  expect_error(d, StatusCode::kInvalidArgument, "d is null");
  d = valid_desc();
  d.beta = 0.5f;  // C is read: must be given
  expect_error(d, StatusCode::kInvalidArgument, "c is null");
}

TEST(GemmArgs, LeadingDimensionsRowMajor) {
  GemmDesc d = valid_desc();
  d.lda = 8;  // A is 17 x 9: lda >= 9
  expect_error(d, StatusCode::kInvalidArgument, "lda=8");
  d = valid_desc();
  d.op_a = Op::kT;  // A is stored 9 x 17: lda >= 17
  d.lda = 16;
  expect_error(d, StatusCode::kInvalidArgument, "lda=16");
  d.lda = 17;
  d.ldb = 32;  // B is 9 x 33
  expect_error(d, StatusCode::kInvalidArgument, "ldb=32");
  d = valid_desc();
  d.op_b = Op::kT;  // B stored 33 x 9: ldb >= 9
  d.ldb = 8;
  expect_error(d, StatusCode::kInvalidArgument, "ldb=8");
  d = valid_desc();
  d.ldd = 32;
  expect_error(d, StatusCode::kInvalidArgument, "ldd=32");
  d = valid_desc();
  d.beta = 1.0f;
  d.c = fake(0x400000);
  d.ldc = 5;
  expect_error(d, StatusCode::kInvalidArgument, "ldc=5");
}

TEST(GemmArgs, LeadingDimensionsColMajor) {
  GemmDesc d = valid_desc();
  d.layout = Layout::kColMajor;
  d.lda = 17;  // A col-major 17 x 9: lda >= 17
  d.ldb = 9;   // B col-major 9 x 33: ldb >= 9
  d.ldd = 16;  // D col-major 17 x 33: ldd >= 17
  expect_error(d, StatusCode::kInvalidArgument, "ldd=16");
  d.ldd = 17;
  d.lda = 16;
  expect_error(d, StatusCode::kInvalidArgument, "lda=16");
  d.lda = 17;
  d.op_b = Op::kT;  // B stored 33 x 9 col-major: ldb >= 33
  expect_error(d, StatusCode::kInvalidArgument, "ldb=9");
}

TEST(GemmArgs, DtypeAndComputeCombinations) {
  GemmDesc d = valid_desc();
  d.ab_type = Dtype::kBF16;
  d.compute = blublas::ComputeMode::kTF32;
  expect_error(d, StatusCode::kInvalidArgument, "compute=tf32");
  d.compute = blublas::ComputeMode::kStrictF32;
  expect_error(d, StatusCode::kInvalidArgument, "compute=strict_f32");
  d = valid_desc();
  d.cd_type = Dtype::kBF16;  // f32 inputs, bf16 output: not implemented
  expect_error(d, StatusCode::kNotSupported, "cd=bf16");
}

TEST(GemmArgs, InvalidEnums) {
  GemmDesc d = valid_desc();
  d.ab_type = static_cast<Dtype>(9);
  expect_error(d, StatusCode::kInvalidArgument, "dtype");
  d = valid_desc();
  d.op_a = static_cast<Op>(4);
  expect_error(d, StatusCode::kInvalidArgument, "op");
  d = valid_desc();
  d.layout = static_cast<Layout>(2);
  expect_error(d, StatusCode::kInvalidArgument, "layout");
  d = valid_desc();
  d.path = static_cast<GemmPath>(11);
  expect_error(d, StatusCode::kInvalidArgument, "path");
  d = valid_desc();
  d.epilogue = static_cast<Epilogue>(42);
  expect_error(d, StatusCode::kInvalidArgument, "epilogue");
  d = valid_desc();
  d.compute = static_cast<blublas::ComputeMode>(7);
  expect_error(d, StatusCode::kInvalidArgument, "compute");
}

TEST(GemmArgs, EpilogueOperands) {
  GemmDesc d = valid_desc();
  d.epilogue = Epilogue::kBias;
  expect_error(d, StatusCode::kInvalidArgument, "needs bias");
  d.epilogue = Epilogue::kBiasGelu;
  expect_error(d, StatusCode::kInvalidArgument, "needs bias");
  d.bias = fake(0x500000);
  expect_error(d, StatusCode::kInvalidArgument, "needs aux");
  d.aux = fake(0x600000);
  d.ld_aux = 20;  // < N = 33
  expect_error(d, StatusCode::kInvalidArgument, "ld_aux=20");
  d = valid_desc();
  d.epilogue = Epilogue::kGelu;
  d.aux = d.d;
  d.ld_aux = d.ldd;
  expect_error(d, StatusCode::kInvalidArgument, "aux must not alias d");
  d = valid_desc();
  d.epilogue = Epilogue::kBiasGradA;
  expect_error(d, StatusCode::kInvalidArgument, "needs bias_grad");
  d.epilogue = Epilogue::kBiasGradB;
  expect_error(d, StatusCode::kInvalidArgument, "needs bias_grad");
  d.bias_grad = static_cast<float*>(fake(0x700000));
  d.batch = 2;
  d.stride_a = 17 * 9; d.stride_b = 9 * 33; d.stride_d = 17 * 33;
  expect_error(d, StatusCode::kInvalidArgument, "batch == 1");
}

TEST(GemmArgs, BatchStrides) {
  GemmDesc d = valid_desc();
  d.batch = 3;
  d.stride_a = 17 * 9;
  d.stride_b = 9 * 33;
  d.stride_d = 17 * 33 - 1;  // outputs of consecutive batches would overlap
  expect_error(d, StatusCode::kInvalidArgument, "stride_d=560");
  d.stride_d = 17 * 33;
  d.stride_a = -1;
  expect_error(d, StatusCode::kInvalidArgument, "stride_a=-1");
}

TEST(GemmArgs, AliasedCAndDNeedTheSameLd) {
  GemmDesc d = valid_desc();
  d.beta = 1.0f;
  d.c = d.d;
  d.ldc = 40;
  expect_error(d, StatusCode::kInvalidArgument, "c aliases d");
}

TEST(GemmArgs, NullOutParameters) {
  const GemmDesc d = valid_desc();
  EXPECT_EQ(blublas::gemm_workspace_size(d, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(blublas::gemm_selected_path(d, nullptr).code(), StatusCode::kInvalidArgument);
}

// A valid desc only queried (no launch): succeeds with a device, reports the CUDA error without.
TEST(GemmArgs, ValidDescQueries) {
  const GemmDesc d = valid_desc();
  GemmPath path = GemmPath::kAuto;
  const Status st = blublas::gemm_selected_path(d, &path);
  if (blublas::device_count() == 0) {
    EXPECT_EQ(st.code(), StatusCode::kCudaError) << st.to_string();
  } else {
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(path, GemmPath::kSimt);  // strict fp32 always runs on the SIMT path
  }
}

TEST(GemmArgs, PathNames) {
  EXPECT_STREQ(blublas::gemm_path_name(GemmPath::kAuto), "auto");
  EXPECT_STREQ(blublas::gemm_path_name(GemmPath::kSimt), "simt");
  EXPECT_STREQ(blublas::gemm_path_name(GemmPath::kSm80Mma), "sm80_mma");
  EXPECT_STREQ(blublas::gemm_path_name(GemmPath::kSm90Wgmma), "sm90_wgmma");
  EXPECT_STREQ(blublas::gemm_path_name(static_cast<GemmPath>(99)), "invalid");
}

}  // namespace

// FP8 (Note [FP8 GEMM]): what the FP8 kernels do not take is refused before any CUDA call.
GemmDesc valid_fp8_desc() {  // row-major NT (both operands K-major), e4m3, bf16 out
  GemmDesc d;
  d.m = 17; d.n = 33; d.k = 64;
  d.ab_type = Dtype::kE4M3;
  d.cd_type = Dtype::kBF16;
  d.op_a = Op::kN; d.op_b = Op::kT;
  d.a = fake(0x100000); d.lda = 64;
  d.b = fake(0x200000); d.ldb = 64;
  d.d = fake(0x300000); d.ldd = 33;
  return d;
}

TEST(GemmArgs, Fp8RefusesWhatItsKernelsDoNotTake) {
  GemmDesc d = valid_fp8_desc();
  d.op_b = Op::kN;  // B N-major
  expect_error(d, StatusCode::kNotSupported, "K-major");
  d = valid_fp8_desc();
  d.layout = Layout::kColMajor;  // column-major needs TN: NT is refused
  d.lda = 17; d.ldb = 33; d.ldd = 17;
  expect_error(d, StatusCode::kNotSupported, "TN in this layout");
  d = valid_fp8_desc();
  d.cd_type = Dtype::kF16;
  expect_error(d, StatusCode::kNotSupported, "f32 or bf16 C/D");
  d = valid_fp8_desc();
  d.epilogue = Epilogue::kBiasGelu;
  d.bias = fake(0x400000);
  d.aux = fake(0x500000); d.ld_aux = 33;
  expect_error(d, StatusCode::kNotSupported, "epilogue none or bias");
  d = valid_fp8_desc();
  d.path = GemmPath::kSimt;  // sm80_mma (sm_89+) and sm90_wgmma take FP8: gemm_property_test
  expect_error(d, StatusCode::kNotSupported, "there is no SIMT FP8 kernel");
  d = valid_fp8_desc();
  d.compute = blublas::ComputeMode::kTF32;
  expect_error(d, StatusCode::kInvalidArgument, "compute=tf32");
  d = valid_fp8_desc();
  d.b_type = Dtype::kBF16;  // B must be FP8 too
  expect_error(d, StatusCode::kInvalidArgument, "invalid dtype");
  d = valid_fp8_desc();
  d.b_type = Dtype::kE5M2;  // e4m3 x e5m2 is fine: the message of another error names both
  d.op_b = Op::kN;
  expect_error(d, StatusCode::kNotSupported, "ab=e4m3, b=e5m2");
}

TEST(GemmArgs, Fp8ScalesAndAmaxAreForFp8Only) {
  GemmDesc d = valid_desc();
  float s = 1.0f;
  d.scale_a = &s;
  expect_error(d, StatusCode::kInvalidArgument, "FP8 inputs only");
  d = valid_desc();
  d.amax_d = &s;
  expect_error(d, StatusCode::kInvalidArgument, "FP8 inputs only");
  d = valid_desc();
  d.b_type = Dtype::kE4M3;
  expect_error(d, StatusCode::kInvalidArgument, "FP8 inputs only");
}

// cublas_reference.h: the one mapping of a blublas::GemmDesc onto cuBLAS / cuBLASLt, shared by the
// GEMM references (blublas-profiler's gemm command, tests/blublas/gemm_vs_cublas_gpu_test.cu,
// bench/gemm_bench.cu). Header-only and references only: it is never compiled into libblublas
// (blublas depends on the CUDA runtime alone); its users link CUDA::cublas and CUDA::cublasLt.
// Functions return the cublasStatus_t of the first call that failed, so each user reports errors
// its own way (exceptions, gtest assertions, exit codes).
//
// Note [The reference call]
// blublas describes row- or column-major data; cuBLAS is column-major. A row-major problem
// D = op(A) op(B) is handed to cuBLAS as D^T = op(B)^T op(A)^T (A and B swapped, M and N swapped,
// same memory and leading dimensions), which is cuBLAS's best form of the same data (the NT
// forward becomes cuBLAS's K-major "TN", what PyTorch calls). Compute: CUBLAS_COMPUTE_32F (strict
// fp32, and fp32 accumulation of bf16/f16) or CUBLAS_COMPUTE_32F_FAST_TF32 for ComputeMode::kTF32;
// scale type f32. Epilogues map to cuBLASLt's (BIAS, GELU_AUX_BIAS, GELU_AUX, BGRADA/BGRADB: our
// bias gradient of A is cuBLAS's of B after the swap). A per-column bias on a column-major D has
// no cuBLASLt form (its bias runs along rows): lt_epilogue says so and lt_plan refuses.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "blublas/gemm.h"

namespace blublas::cublas_ref {

// The workspace the references use (cublasSetWorkspace on the handle, cuBLASLt's preference).
inline constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

inline cudaDataType_t data_type(Dtype t) {
  return t == Dtype::kBF16 ? CUDA_R_16BF : t == Dtype::kF16 ? CUDA_R_16F : CUDA_R_32F;
}
inline cublasOperation_t op(Op o) {
  return o == Op::kT ? CUBLAS_OP_T : CUBLAS_OP_N;
}
inline cublasComputeType_t compute_type(const GemmDesc& d) {
  return d.compute == ComputeMode::kTF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// The column-major call for a desc (Note [The reference call]); D keeps the desc's ldd/stride_d.
struct ColMajorCall {
  cublasOperation_t ta, tb;
  int m, n, k;
  const void* a;
  int64_t lda, stride_a;
  const void* b;
  int64_t ldb, stride_b;
};
inline ColMajorCall col_major(const GemmDesc& d) {
  if (d.layout == Layout::kColMajor) {
    return {op(d.op_a), op(d.op_b), d.m, d.n, d.k, d.a, d.lda, d.stride_a, d.b, d.ldb, d.stride_b};
  }
  return {op(d.op_b), op(d.op_a), d.n, d.m, d.k, d.b, d.ldb, d.stride_b, d.a, d.lda, d.stride_a};
}

// cuBLASLt's epilogue for ours, or false when it has none (a bias along rows of a col-major D).
inline bool lt_epilogue(const GemmDesc& d, cublasLtEpilogue_t* e) {
  const bool row = d.layout == Layout::kRowMajor;
  switch (d.epilogue) {
    case Epilogue::kNone:
      *e = CUBLASLT_EPILOGUE_DEFAULT;
      return true;
    case Epilogue::kBias:
      *e = CUBLASLT_EPILOGUE_BIAS;
      return row;
    case Epilogue::kBiasGelu:
      *e = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
      return row;
    case Epilogue::kGelu:
      *e = CUBLASLT_EPILOGUE_GELU_AUX;
      return true;
    case Epilogue::kBiasGradA:
      *e = row ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BGRADA;
      return true;
    case Epilogue::kBiasGradB:
      *e = row ? CUBLASLT_EPILOGUE_BGRADA : CUBLASLT_EPILOGUE_BGRADB;
      return true;
    case Epilogue::kGeluGrad:
      *e = CUBLASLT_EPILOGUE_DGELU;
      return row;
  }
  return false;
}
inline bool is_bias_grad(Epilogue e) {
  return e == Epilogue::kBiasGradA || e == Epilogue::kBiasGradB;
}

// D = alpha op(A) op(B) + beta D through cublasGemmStridedBatchedEx (no epilogue). cuBLAS reads C
// from D: when d.beta != 0, copy C into d.d first. The handle's stream and workspace apply.
inline cublasStatus_t gemm_ex(cublasHandle_t h, const GemmDesc& d) {
  const ColMajorCall c = col_major(d);
  const float alpha = d.alpha, beta = d.beta;
  const cudaDataType_t tab = data_type(d.ab_type), tcd = data_type(d.cd_type);
  return cublasGemmStridedBatchedEx(
      h, c.ta, c.tb, c.m, c.n, c.k, &alpha, c.a, tab, static_cast<int>(c.lda), c.stride_a, c.b, tab,
      static_cast<int>(c.ldb), c.stride_b, &beta, d.d, tcd, static_cast<int>(d.ldd), d.stride_d,
      d.batch, compute_type(d), CUBLAS_GEMM_DEFAULT);
}

// A cuBLASLt plan for one desc: descriptors and the top heuristic algorithm. ok is false (why says
// why) when cuBLASLt has no epilogue for the desc or no algorithm. The pointers (A, B, D, bias,
// aux, bias gradient) are taken per call by lt_matmul, so one plan serves rotating buffer sets.
struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulAlgo_t algo{};
  cudaDataType_t bias_type = CUDA_R_32F;  // the type a bias gradient is written in
  bool ok = false;
  std::string why;
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {
    if (op) cublasLtMatmulDescDestroy(op);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
  }
};

#define BLUBLAS_CUBLAS_REF_TRY(expr)                      \
  do {                                                    \
    const cublasStatus_t blu_st_ = (expr);                \
    if (blu_st_ != CUBLAS_STATUS_SUCCESS) return blu_st_; \
  } while (0)

// The per-call pointers of a plan: bias (or the bias gradient's output) and aux.
inline cublasStatus_t lt_set_pointers(LtPlan& pl, const GemmDesc& d) {
  const void* bias = is_bias_grad(d.epilogue) ? static_cast<const void*>(d.bias_grad) : d.bias;
  if (bias) {
    BLUBLAS_CUBLAS_REF_TRY(cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                          &bias, sizeof(bias)));
  }
  if (d.aux) {
    BLUBLAS_CUBLAS_REF_TRY(cublasLtMatmulDescSetAttribute(
        pl.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &d.aux, sizeof(d.aux)));
  }
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t lt_layout(cublasLtMatrixLayout_t* l, cudaDataType_t t, uint64_t rows,
                                uint64_t cols, int64_t ld, int batch, int64_t stride) {
  BLUBLAS_CUBLAS_REF_TRY(cublasLtMatrixLayoutCreate(l, t, rows, cols, ld));
  if (batch > 1) {
    BLUBLAS_CUBLAS_REF_TRY(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                            &batch, sizeof(batch)));
    BLUBLAS_CUBLAS_REF_TRY(cublasLtMatrixLayoutSetAttribute(
        *l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return CUBLAS_STATUS_SUCCESS;
}

// Builds pl for d (a fresh LtPlan). bias_grad_type: the type cuBLASLt writes a bias gradient in
// (its default is D's type; some cases need CUDA_R_32F). An error status is a cuBLAS failure;
// "no epilogue / no algorithm" returns success with pl.ok false and pl.why set.
inline cublasStatus_t lt_plan(cublasLtHandle_t lt, const GemmDesc& d, cudaDataType_t bias_grad_type,
                              LtPlan& pl, std::size_t workspace_bytes = kWorkspaceBytes) {
  cublasLtEpilogue_t epi;
  if (!lt_epilogue(d, &epi)) {
    pl.why = "cuBLASLt has no per-column bias for a column-major D";
    return CUBLAS_STATUS_SUCCESS;
  }
  const ColMajorCall c = col_major(d);
  BLUBLAS_CUBLAS_REF_TRY(cublasLtMatmulDescCreate(&pl.op, compute_type(d), CUDA_R_32F));
  BLUBLAS_CUBLAS_REF_TRY(
      cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_TRANSA, &c.ta, sizeof(c.ta)));
  BLUBLAS_CUBLAS_REF_TRY(
      cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_TRANSB, &c.tb, sizeof(c.tb)));
  BLUBLAS_CUBLAS_REF_TRY(
      cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (is_bias_grad(d.epilogue)) {
    pl.bias_type = bias_grad_type;  // set explicitly: the default is D's type
    BLUBLAS_CUBLAS_REF_TRY(cublasLtMatmulDescSetAttribute(
        pl.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &pl.bias_type, sizeof(pl.bias_type)));
  }
  if (d.aux) {
    const int64_t ld_aux = d.ld_aux, stride_aux = d.stride_aux;
    BLUBLAS_CUBLAS_REF_TRY(cublasLtMatmulDescSetAttribute(
        pl.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof(ld_aux)));
    if (d.batch > 1) {
      BLUBLAS_CUBLAS_REF_TRY(cublasLtMatmulDescSetAttribute(
          pl.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &stride_aux, sizeof(stride_aux)));
    }
  }
  BLUBLAS_CUBLAS_REF_TRY(lt_set_pointers(pl, d));
  const cudaDataType_t tab = data_type(d.ab_type), tcd = data_type(d.cd_type);
  const bool na = c.ta == CUBLAS_OP_N, nb = c.tb == CUBLAS_OP_N;
  BLUBLAS_CUBLAS_REF_TRY(
      lt_layout(&pl.la, tab, na ? c.m : c.k, na ? c.k : c.m, c.lda, d.batch, c.stride_a));
  BLUBLAS_CUBLAS_REF_TRY(
      lt_layout(&pl.lb, tab, nb ? c.k : c.n, nb ? c.n : c.k, c.ldb, d.batch, c.stride_b));
  BLUBLAS_CUBLAS_REF_TRY(lt_layout(&pl.ld, tcd, c.m, c.n, d.ldd, d.batch, d.stride_d));
  cublasLtMatmulPreference_t pref;
  BLUBLAS_CUBLAS_REF_TRY(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(lt, pl.op, pl.la, pl.lb, pl.ld, pl.ld, pref, 1, &res,
                                        &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    pl.why = std::string("cuBLASLt found no algorithm (") + cublasLtGetStatusString(st) + ")";
    return CUBLAS_STATUS_SUCCESS;
  }
  pl.algo = res.algo;
  pl.ok = true;
  return CUBLAS_STATUS_SUCCESS;
}

// D = alpha op(A) op(B) + beta D with the plan's epilogue, for d's pointers (same shapes as the
// desc the plan was made for). C is read from D, as in gemm_ex.
inline cublasStatus_t lt_matmul(cublasLtHandle_t lt, LtPlan& pl, const GemmDesc& d, void* workspace,
                                std::size_t workspace_bytes, cudaStream_t stream) {
  const ColMajorCall c = col_major(d);
  BLUBLAS_CUBLAS_REF_TRY(lt_set_pointers(pl, d));
  const float alpha = d.alpha, beta = d.beta;
  return cublasLtMatmul(lt, pl.op, &alpha, c.a, pl.la, c.b, pl.lb, &beta, d.d, pl.ld, d.d, pl.ld,
                        &pl.algo, workspace, workspace_bytes, stream);
}

// lt_plan, then one lt_matmul into d's outputs: a plan cuBLASLt accepts but then refuses at the
// first call is dropped (ok false, its reason in why). Returns cuBLAS failures of the planning.
inline cublasStatus_t lt_plan_and_try(cublasLtHandle_t lt, const GemmDesc& d,
                                      cudaDataType_t bias_grad_type, LtPlan& pl, void* workspace,
                                      std::size_t workspace_bytes, cudaStream_t stream) {
  BLUBLAS_CUBLAS_REF_TRY(lt_plan(lt, d, bias_grad_type, pl, workspace_bytes));
  if (!pl.ok) return CUBLAS_STATUS_SUCCESS;
  const cublasStatus_t st = lt_matmul(lt, pl, d, workspace, workspace_bytes, stream);
  if (st != CUBLAS_STATUS_SUCCESS) {
    pl.ok = false;
    pl.why = std::string("cublasLtMatmul refused the plan (") + cublasGetStatusString(st) + ")";
  }
  return CUBLAS_STATUS_SUCCESS;
}

#undef BLUBLAS_CUBLAS_REF_TRY

}  // namespace blublas::cublas_ref

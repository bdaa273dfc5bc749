// blublas/gemm.h: general matrix multiply, the standalone API.
//
//   D = epilogue(alpha * op(A) * op(B) + beta * C)      op(A): M x K, op(B): K x N, C, D: M x N
//
// Matrices are described by pointer + leading dimension + layout (row- or column-major, the same
// for A, B, C and D), so both row-major (C/PyTorch) and column-major (BLAS) callers describe their
// data as it lies in memory. Strided batches use a per-matrix element stride. Every call takes a
// stream and a caller-provided workspace: no hidden allocation, no host synchronisation, safe to
// capture in a CUDA graph and to call from several threads. Errors come back as a Status; a path
// that cannot take an argument (alignment, arch) either falls back to a slower path (kAuto) or
// returns a clear error (a forced path). Nothing here calls cuBLAS.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "blublas/dtype.h"
#include "blublas/status.h"

namespace blublas {

enum class Op : int { kN = 0, kT = 1 };  // op(X) = X or X^T
enum class Layout : int { kRowMajor = 0, kColMajor = 1 };

// How products are formed. kDefault: strict fp32 for f32 inputs, fp32 accumulation for 16-bit.
enum class ComputeMode : int {
  kDefault = 0,
  kStrictF32 = 1,  // f32 inputs only: SIMT fp32 FMA, no TF32 rounding anywhere
  kTF32 = 2,       // f32 inputs only: tensor cores on tf32-rounded operands, fp32 accumulate
};

// Fused epilogues. Indices i, j are row and column of D as the caller sees it (M x N), whatever
// the layout. bias has D's dtype unless noted.
enum class Epilogue : int {
  kNone = 0,
  kBias = 1,          // D[i][j] = alpha*acc + beta*C + bias[j]
  kBiasGelu = 2,      // pre = alpha*acc + beta*C + bias[j]; aux[i][j] = pre; D[i][j] = gelu_tanh(pre)
  kGelu = 3,          // as kBiasGelu without bias (aux may be null: then not stored)
  kBiasGradA = 4,     // D as kNone; bias_grad[i] = sum_k op(A)[i][k]   (fp32, length M)
  kBiasGradB = 5,     // D as kNone; bias_grad[j] = sum_k op(B)[k][j]   (fp32, length N)
  kGeluGrad = 6,      // D[i][j] = (alpha*acc + beta*C) * gelu_tanh'(aux[i][j]), aux READ: the
                      // forward's pre-activation (cd_type, D's layout, must not alias D): the
                      // GELU backward fused into dX = dY W
};

// Which kernel family runs. kAuto lets the heuristic choose (blublas/src/gemm/heuristics.cpp);
// the others force a path, for tests, benchmarks and users who know better.
enum class GemmPath : int {
  kAuto = 0,
  kSimt = 1,       // CUDA-core FMA kernels; the only path for kStrictF32; any arch
  kSm80Mma = 2,    // mma.sync + ldmatrix + cp.async multistage (Ampere/Ada; also runs on Hopper)
  kSm90Wgmma = 3,  // wgmma + TMA + mbarrier, warp-specialized, persistent (sm_90a only)
};

// GemmDesc::b_type's default: B has A's dtype (ab_type).
inline constexpr Dtype kSameAsA = static_cast<Dtype>(-1);

// FP8 GEMM (ab_type kE4M3 or kE5M2; Note [FP8 GEMM] in src/gemm/gemm.cpp): sm_90a wgmma only
// (kAuto or kSm90Wgmma; on other devices a clear kUnsupportedArch), both operands K-major (row-
// major: op_a = kN, op_b = kT; column-major: op_a = kT, op_b = kN, as cuBLASLt requires), any of
// the four A x B type pairs (b_type), C/D f32 or bf16, epilogue kNone or kBias, fp32 accumulation
// in the tensor cores' FP8 mode (the fast-accumulation of cuBLASLt: partial sums inside each
// k32 instruction are kept to fewer bits than fp32; see the accuracy note below).
//   D = epilogue(alpha * scale_a * scale_b * op(A) op(B) + beta * C),  amax_d = max |D|.

struct GemmDesc {
  int m = 0, n = 0, k = 0;
  int batch = 1;
  Op op_a = Op::kN, op_b = Op::kN;
  Layout layout = Layout::kRowMajor;
  Dtype ab_type = Dtype::kF32;  // A's dtype, and B's unless b_type says otherwise
  Dtype b_type = kSameAsA;      // FP8 only: B's dtype (kE4M3 / kE5M2) when it differs from A's
  Dtype cd_type = Dtype::kF32;  // C and D share a dtype (f32, bf16, f16)
  ComputeMode compute = ComputeMode::kDefault;

  const void* a = nullptr;  int64_t lda = 0;  int64_t stride_a = 0;  // strides in elements
  const void* b = nullptr;  int64_t ldb = 0;  int64_t stride_b = 0;
  const void* c = nullptr;  int64_t ldc = 0;  int64_t stride_c = 0;  // read only when beta != 0
  void* d = nullptr;        int64_t ldd = 0;  int64_t stride_d = 0;  // may alias c (same ld)
  float alpha = 1.0f, beta = 0.0f;

  Epilogue epilogue = Epilogue::kNone;
  const void* bias = nullptr;    // kBias, kBiasGelu: N elements of cd_type (broadcast over batch)
  void* aux = nullptr;           // kBiasGelu, kGelu (written), kGeluGrad (read): pre-activation,
                                 // cd_type, same layout as D
  int64_t ld_aux = 0;  int64_t stride_aux = 0;
  float* bias_grad = nullptr;    // kBiasGradA (M floats), kBiasGradB (N floats); batch must be 1

  // FP8 only: per-tensor dequantization scales (device pointers to one float each, read by the
  // kernel, so they may change between graph replays; null = 1), and amax_d (device float: the
  // kernel max-es max |D| of this call into it atomically; the caller initialises it, e.g. 0).
  const float* scale_a = nullptr;
  const float* scale_b = nullptr;
  float* amax_d = nullptr;

  GemmPath path = GemmPath::kAuto;

  // Note [GEMM CTA budget]: the sm_90a path's persistent grid holds one CTA on every SM, so a
  // kernel launched beside it on another stream (a LayerNorm backward next to a weight-gradient
  // GEMM) waits for the GEMM's CTAs to leave. max_ctas > 0 caps the grid at that many CTAs (at
  // least one cluster), leaving the other SMs free; the tiles, split-K and tile order are chosen
  // as for the whole device, so D is the same bit for bit. 0: one per SM. Other paths ignore it.
  int max_ctas = 0;
};

// Bytes of workspace gemm() needs for this problem on the current device (0 is a valid answer).
// The same desc (sizes, types, path) must be passed to gemm() with at least this many bytes; the
// pointer may have any alignment (the size includes the slack to align it).
Status gemm_workspace_size(const GemmDesc& desc, std::size_t* bytes);

// Accuracy (what the tests hold every path to: tests/blublas/support/gemm_bound.h): every element
// of D (and of aux) satisfies, with exact = the float64 result of the same formula on the stored
// inputs and scale = |alpha| sum_k |op(A)_ik op(B)_kj| + |beta C_ij| + |bias|,
//   |D_ij - exact_ij| <= tol * scale + u * |exact_ij| + floor
// tol: 2e-6 strict fp32, 2e-3 tf32, 1e-4 bf16/f16 inputs; u: D's unit roundoff (f32 2^-24, bf16
// 2^-8, f16 2^-11); floor: the spacing of D's subnormals (f16 2^-24; f32/bf16 negligible). The
// floor matters for f16 outputs below 6.1e-5, which are subnormal: there a correctly rounded result
// can differ from the exact one by up to 2^-25 whatever its size, so a purely relative check flags
// correct elements (issue 11; Note [GEMM bound near underflow]). GELU epilogues add their slope (<
// 1.13) to the factor of tol, and with 16-bit D the hardware tanh (Note [Fast GELU for 16-bit
// outputs]: relative error up to 2^-10.99 on tanh) up to 2.5e-4 * |pre| (pre = the GELU's input).

// Runs the GEMM on `stream`. Asynchronous; argument errors are reported before any launch.
// "bias_gelu", "strict_f32", ...: the names the library's error messages use ("invalid" otherwise).
const char* epilogue_name(Epilogue e);
const char* compute_mode_name(ComputeMode c);

Status gemm(const GemmDesc& desc, void* workspace, std::size_t workspace_bytes,
            cudaStream_t stream);

// The path kAuto would take for this desc on the current device (for logs and benchmarks).
Status gemm_selected_path(const GemmDesc& desc, GemmPath* path);

const char* gemm_path_name(GemmPath path) noexcept;

}  // namespace blublas

// epilogue.cuh (internal, device side): the GEMM epilogue every kernel path shares. A kernel hands
// fp32 accumulators for D(i, j) to epilogue_store1/2 and this file applies alpha, beta*C, the bias
// (per column or per row after normalization), GELU(tanh) with the pre-activation stored to aux,
// and the conversion to D's dtype. Bias-gradient epilogues (kBiasGradA/B) are not per-element:
// they reduce an operand; bias_grad_run (bias_grad_reduce.cu) does that deterministically.
//
// Note [Epilogue contract]
// - All arithmetic is fp32: pre = alpha*acc (+ beta*C when beta != 0) (+ bias); C is never read when
//   beta == 0, so C may be null or hold NaNs then.
// - kBiasGelu / kGelu: aux(i, j) = pre (in D's dtype) when aux != null, D(i, j) = gelu_tanh(pre).
// - kGeluGrad: D(i, j) = (alpha*acc + beta*C) * gelu_tanh'(aux(i, j)), aux read (generic stores only).
// - Indices are those of the normalized row-major problem (GemmProblem): D(i, j) at d[i*ldd + j].
// - epilogue_store2 writes columns j and j+1 (the pair an mma accumulator fragment holds); it
//   checks both against n and uses 2-element vector loads/stores only when EpilogueArgs::pair_ok
//   (every ld/stride even and every base pointer aligned to two elements) and j is even.
// - The caller checks i < m (rows outside are skipped); columns are checked here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gemm/gelu_fast.h"
#include "gemm/gemm_problem.h"

namespace blublas::gemm_detail {

// ---- conversions -------------------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

// Two consecutive elements as one 4-byte (16-bit types) or 8-byte (f32) access.
template <typename T> struct Pair;
template <> struct Pair<float> { using type = float2; };
template <> struct Pair<__nv_bfloat16> { using type = __nv_bfloat162; };
template <> struct Pair<__half> { using type = __half2; };

template <typename T>
__device__ __forceinline__ void load_pair_f32(const T* p, float* v0, float* v1) {
  typename Pair<T>::type v = *reinterpret_cast<const typename Pair<T>::type*>(p);
  *v0 = to_f32(v.x);
  *v1 = to_f32(v.y);
}
template <typename T>
__device__ __forceinline__ void store_pair_f32(T* p, float v0, float v1) {
  typename Pair<T>::type v;
  v.x = from_f32<T>(v0);
  v.y = from_f32<T>(v1);
  *reinterpret_cast<typename Pair<T>::type*>(p) = v;
}

// GELU, tanh approximation (as GPT-2 and PyTorch approximate="tanh"), precise tanhf.
__device__ __forceinline__ float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

// Note [Fast GELU for 16-bit outputs]
// The same GELU with the hardware tanh (tanh.approx.f32, one MUFU op, max relative error ~2^-11)
// instead of tanhf (~25 instructions with two MUFU ops). Used only where D is bf16 / f16 (the sm90
// TMA-store epilogue): there the result is rounded to 8 (bf16) or 11 (f16) mantissa bits, so the
// approximation changes at most the last bit of a few outputs, while the epilogue of the fc GEMM
// (bias + GELU with the pre-activation saved, 16K values per warpgroup tile) becomes short enough
// to hide behind the other warpgroup's MMAs. f32 outputs keep the precise gelu_tanh.
// Since session 30 the short form of gelu_fast.h (u = x (k + k c x^2), 0.5 x (1 + t) as one FMA:
// five FP32 operations and the MUFU instead of eight): ncu on the fc forward with bias + GELU +
// aux (H200) found the D pass issue-bound and starved of instructions ('no instruction' half its
// stall samples), 765 SASS instructions per 64 elements a thread.
__device__ __forceinline__ float gelu_tanh_fast(float x) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 750)
  return gelu_fast::gelu(x);
#else
  return gelu_tanh(x);
#endif
}

// ---- the arguments, passed by value to kernels ---------------------------------------------------
struct EpilogueArgs {
  int m = 0, n = 0;
  float alpha = 1.0f, beta = 0.0f;
  int kind = 0;  // Epilogue; kBiasGradA/B behave as kNone here
  const void* c = nullptr;  int64_t ldc = 0, stride_c = 0;
  void* d = nullptr;        int64_t ldd = 0, stride_d = 0;
  const void* bias = nullptr;  int bias_per_col = 1;
  void* aux = nullptr;  int64_t ld_aux = 0, stride_aux = 0;
  int pair_ok = 0;
  int cd_type = 0;  // Dtype of C, D, aux, bias: for kernels that pick the store type at run time
  float* amax = nullptr;  // FP8 calls: max |D| is max-ed into it (Note [FP8 GEMM] in gemm.cpp)
};

inline bool epilogue_has_bias(Epilogue e) { return e == Epilogue::kBias || e == Epilogue::kBiasGelu; }
inline bool epilogue_has_gelu(Epilogue e) { return e == Epilogue::kGelu || e == Epilogue::kBiasGelu; }
inline bool epilogue_reads_aux(Epilogue e) { return e == Epilogue::kGeluGrad; }
inline bool epilogue_is_bias_grad(Epilogue e) {
  return e == Epilogue::kBiasGradA || e == Epilogue::kBiasGradB;
}

inline EpilogueArgs make_epilogue_args(const GemmProblem& p) {
  EpilogueArgs e;
  e.m = p.m;
  e.n = p.n;
  e.alpha = p.alpha;
  e.beta = p.beta;
  e.kind = static_cast<int>(epilogue_is_bias_grad(p.epilogue) ? Epilogue::kNone : p.epilogue);
  e.c = p.beta != 0.0f ? p.c : nullptr;
  e.ldc = p.ldc;
  e.stride_c = p.stride_c;
  e.d = p.d;
  e.ldd = p.ldd;
  e.stride_d = p.stride_d;
  e.bias = epilogue_has_bias(p.epilogue) ? p.bias : nullptr;
  e.bias_per_col = p.bias_per_col ? 1 : 0;
  e.aux = epilogue_has_gelu(p.epilogue) || epilogue_reads_aux(p.epilogue) ? p.aux : nullptr;
  e.ld_aux = p.ld_aux;
  e.stride_aux = p.stride_aux;
  const std::size_t pair_bytes = 2 * dtype_size(p.cd_type);
  auto aligned = [&](const void* ptr) {
    return ptr == nullptr || reinterpret_cast<std::uintptr_t>(ptr) % pair_bytes == 0;
  };
  auto even = [](int64_t v) { return v % 2 == 0; };
  e.cd_type = static_cast<int>(p.cd_type);
  e.amax = p.amax;
  e.pair_ok = aligned(e.d) && aligned(e.c) && aligned(e.aux) && even(e.ldd) && even(e.stride_d) &&
              (e.c == nullptr || (even(e.ldc) && even(e.stride_c))) &&
              (e.aux == nullptr || (even(e.ld_aux) && even(e.stride_aux)));
  return e;
}

// ---- device side ----------------------------------------------------------------------------------
// d/dx gelu_tanh(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) u'(x),  t = tanh(u), u = k (x + c x^3),
// u' = k (1 + 3 c x^2): the kGeluGrad epilogue (the fc GEMM's GELU backward in the dX GEMM).
__device__ __forceinline__ float gelu_tanh_grad(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
  const float x2 = x * x;
  const float t = tanhf(kSqrt2OverPi * (x + kCubic * x2 * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x2);
}

// Note [Fast GELU gradient for 16-bit outputs]
// gelu_tanh_grad from one exponential: with a = |u| and e = exp(-2a), tanh(a) = (1 - e) / (1 + e)
// and 1 - tanh^2 = 4e / (1 + e)^2, computed with the hardware exp2 and an approximate division
// (__expf / __fdividef: a few ulp each), about 12 instructions an element against ~40 with tanhf.
// Not tanh.approx.f32 as Note [Fast GELU for 16-bit outputs] uses: its ~2^-11 error relative to
// tanh becomes an absolute error in 1 - tanh^2, which the gradient multiplies by up to ~30 (at
// x = 3 ~2.6e-3 of gelu' = 1.01, more than half a bf16 step); here 1 - tanh^2 keeps a relative
// error of a few ulp. Over every bf16 input (a CPU model of the arithmetic, session 22's review):
// max absolute error 1.4e-7 against float64 (tanhf's form: 5.4e-7, its 1 - t*t underflowing for
// x < -5.5), relative up to ~6e-5 where gelu' cancels near 0 (x ~ -0.75; tanhf's form 4.6e-4).
// Used for bf16 / f16 D in the sm90 TMA-store epilogue only (f32 D keeps tanhf), so a 16-bit
// kGeluGrad GEMM's bits depend on the path (TMA-store vs the generic and split-K epilogues). Why: with tanhf the epilogue of the fc_proj dX GEMM (16384 x 3072 x 768, kGeluGrad)
// was longer than the other warpgroup's main loop (H100, session 22, ncu: 2.4x the
// instructions of the plain GEMM, 'no instruction' its first stall; 0.261 ms against 0.137 for
// the plain GEMM and 0.153 for cuBLASLt's DGELU).
// Since session 30 the one-exponential form of gelu_fast.h: s = sigmoid(2u) and s (1 - s) = e r^2
// from e = exp(-2|u|), r = 1 / (1 + e) (15 FP32 operations and two MUFU instead of 21 and two;
// tests/blublas/gelu_fast_test.cpp checks the algebra over every bf16 input on the CPU).
__device__ __forceinline__ float gelu_tanh_grad_fast(float x) { return gelu_fast::gelu_grad(x); }

template <typename OutT>
__device__ __forceinline__ float aux_at(const EpilogueArgs& e, int batch, int i, int j) {
  const OutT* aux = static_cast<const OutT*>(e.aux) + batch * e.stride_aux;
  return to_f32(aux[static_cast<int64_t>(i) * e.ld_aux + j]);
}

// pre-activation for one element, without C (added by the callers below).
template <typename OutT>
__device__ __forceinline__ float epilogue_bias(const EpilogueArgs& e, int i, int j) {
  const OutT* bias = static_cast<const OutT*>(e.bias);
  return to_f32(bias[e.bias_per_col ? j : i]);
}

// D(i, j) for batch `batch` from the accumulator. Checks j < n; the caller checks i < m.
template <typename OutT>
__device__ __forceinline__ void epilogue_store1(const EpilogueArgs& e, int batch, int i, int j,
                                                float acc) {
  if (j >= e.n) return;
  float v = e.alpha * acc;
  if (e.c != nullptr) {
    const OutT* c = static_cast<const OutT*>(e.c) + batch * e.stride_c;
    v += e.beta * to_f32(c[static_cast<int64_t>(i) * e.ldc + j]);
  }
  if (e.bias != nullptr) v += epilogue_bias<OutT>(e, i, j);
  if (e.kind == static_cast<int>(Epilogue::kBiasGelu) || e.kind == static_cast<int>(Epilogue::kGelu)) {
    if (e.aux != nullptr) {
      OutT* aux = static_cast<OutT*>(e.aux) + batch * e.stride_aux;
      aux[static_cast<int64_t>(i) * e.ld_aux + j] = from_f32<OutT>(v);
    }
    v = gelu_tanh(v);
  } else if (e.kind == static_cast<int>(Epilogue::kGeluGrad)) {
    v *= gelu_tanh_grad(aux_at<OutT>(e, batch, i, j));
  }
  OutT* d = static_cast<OutT*>(e.d) + batch * e.stride_d;
  d[static_cast<int64_t>(i) * e.ldd + j] = from_f32<OutT>(v);
}

// D(i, j) and D(i, j+1). Checks both columns against n; the caller checks i < m. Returns the two
// values stored, before the rounding to D's type (0 for a column past n: what amax needs).
// Note [One epilogue body]: the paired (vector) and the scalar (odd column, unaligned, last
// column) forms share one copy of the arithmetic and differ only in their loads and stores. Two
// calls of epilogue_store1 for the scalar form doubled every inlined epilogue (x 3 output dtypes
// x 64 fragment pairs per thread, with the precise tanhf of GELU): a 128x128 sm80 kernel was ~103K
// SASS instructions for a ~500-instruction main loop, and ptxas took 70% of the build's longest
// objects (bench/NOTES.md, "CI build time (session 10)"). Each element gets the same fp32 math.
template <typename OutT>
__device__ __forceinline__ float2 epilogue_store2(const EpilogueArgs& e, int batch, int i, int j,
                                                  float acc0, float acc1) {
  if (j >= e.n) return make_float2(0.0f, 0.0f);
  const bool in1 = j + 1 < e.n;
  const bool pair = e.pair_ok && (j & 1) == 0 && in1;
  float v0 = e.alpha * acc0, v1 = e.alpha * acc1;
  if (e.c != nullptr) {
    const OutT* c =
        static_cast<const OutT*>(e.c) + batch * e.stride_c + static_cast<int64_t>(i) * e.ldc + j;
    float c0, c1 = 0.0f;
    if (pair) {
      load_pair_f32(c, &c0, &c1);
    } else {
      c0 = to_f32(c[0]);
      if (in1) c1 = to_f32(c[1]);
    }
    v0 += e.beta * c0;
    v1 += e.beta * c1;
  }
  if (e.bias != nullptr) {
    v0 += epilogue_bias<OutT>(e, i, j);
    if (in1) v1 += epilogue_bias<OutT>(e, i, j + 1);
  }
  if (e.kind == static_cast<int>(Epilogue::kBiasGelu) || e.kind == static_cast<int>(Epilogue::kGelu)) {
    if (e.aux != nullptr) {
      OutT* aux = static_cast<OutT*>(e.aux) + batch * e.stride_aux +
                  static_cast<int64_t>(i) * e.ld_aux + j;
      if (pair) {
        store_pair_f32(aux, v0, v1);
      } else {
        aux[0] = from_f32<OutT>(v0);
        if (in1) aux[1] = from_f32<OutT>(v1);
      }
    }
    v0 = gelu_tanh(v0);
    v1 = gelu_tanh(v1);
  } else if (e.kind == static_cast<int>(Epilogue::kGeluGrad)) {
    const OutT* aux = static_cast<const OutT*>(e.aux) + batch * e.stride_aux +
                      static_cast<int64_t>(i) * e.ld_aux + j;
    float a0, a1 = 0.0f;
    if (pair) {
      load_pair_f32(aux, &a0, &a1);
    } else {
      a0 = to_f32(aux[0]);
      if (in1) a1 = to_f32(aux[1]);
    }
    v0 *= gelu_tanh_grad(a0);
    v1 *= gelu_tanh_grad(a1);
  }
  OutT* d = static_cast<OutT*>(e.d) + batch * e.stride_d + static_cast<int64_t>(i) * e.ldd + j;
  if (pair) {
    store_pair_f32(d, v0, v1);
  } else {
    d[0] = from_f32<OutT>(v0);
    if (in1) d[1] = from_f32<OutT>(v1);
  }
  return make_float2(v0, in1 ? v1 : 0.0f);
}

// amax of an FP8 call (Note [FP8 GEMM]): this warp's maximum of the lanes' running max |D| (>= 0,
// so its float bits order like ints) max-ed into *amax with one atomic. Every lane of the warp
// must call it (a shuffle).
__device__ __forceinline__ void amax_warp_commit(float* amax, float m) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  if ((threadIdx.x & 31) == 0) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
}

// ---- bias gradient (kBiasGradA / kBiasGradB) ------------------------------------------------------
// A separate, deterministic pass over the operand (A' rows for kBiasGradA, B' columns for
// kBiasGradB), fixed summation order independent of the GEMM tiling; fp32 accumulation of the
// operand values as stored (not tf32-rounded). Paths that do not fuse the reduction call it after
// (or before) their GEMM on the same stream. It needs bias_grad_workspace_bytes(p) of workspace
// (a path adds this to its own workspace need and passes the tail of its workspace).
// Defined in bias_grad_reduce.cu. Both return 0 / success when p.epilogue is not a bias gradient.
std::size_t bias_grad_workspace_bytes(const GemmProblem& p, const DeviceInfo& dev);
Status bias_grad_run(const GemmProblem& p, const DeviceInfo& dev, void* workspace,
                     std::size_t workspace_bytes, cudaStream_t stream);
// The "col" layout's chunk of reduced elements (Note [Fixed-order bias-gradient reduction]); the
// sm90 kernel's fused bias gradient sums the same chunks (Note [sm90 fused bias gradient]).
inline constexpr int kBiasGradColChunkK = 128;
inline int bias_grad_col_chunks(int k) { return (k + kBiasGradColChunkK - 1) / kBiasGradColChunkK; }
// out[r] = sum over chunks c, in order, of partial[c * rows + r]: the pass's second kernel, for a
// path that wrote the chunk partials itself.
Status bias_grad_finish(const float* partial, int chunks, int rows, float* out, cudaStream_t stream);

}  // namespace blublas::gemm_detail

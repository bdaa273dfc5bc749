// simt_f32_attn.cu: the CUDA-core attention family: forward, dK/dV pass and dQ pass with fp32
// FMA arithmetic (accurate expf/logf, no tensor cores, no tf32 rounding anywhere). It is the
// strict-fp32 mode and the fallback for bf16 views whose strides or pointers are not 16-byte
// aligned (elements are loaded one at a time and converted to fp32).
//
// Note [SIMT attention tiles]
// A CTA of 128 threads owns 32 rows (queries in the forward and dq pass, keys in the dkdv pass)
// and walks blocks of 32 of the other side. Thread (r = tid/4, sub = tid%4) owns row r: it computes
// 8 scores (columns sub + 4c) and the output columns 16m + 4sub + {0..3}, so a row's softmax
// reductions stay in one quad of lanes. Tiles are fp32 in shared memory with rows padded to kD+4
// floats: every operand is read as float4 (4 FMAs per load of the streamed operand), the eight
// rows a warp touches fall in eight different 16-byte bank groups, and the four column groups of
// a quad are adjacent 16-byte chunks: conflict-free. The backward is the same
// two-pass, atomic-free scheme as the mma.sync path (Note [Deterministic flash backward: two
// passes, no atomics] in sm80_flash_attn_bwd.cuh).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "attention/attention_params.h"
#include "blublas/check.h"

namespace blublas::attn {
namespace {

constexpr int kRows = 32;  // rows owned by a CTA
constexpr int kCols = 32;  // columns per block of the other side
constexpr int kThreads = 128;

__device__ __forceinline__ float load_f(const float* p) {
  return *p;
}
__device__ __forceinline__ float load_f(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}
__device__ __forceinline__ void store_f(float* p, float x) {
  *p = x;
}
__device__ __forceinline__ void store_f(__nv_bfloat16* p, float x) {
  *p = __float2bfloat16_rn(x);
}

// Loads rows [row0, row0 + 32) of a [T][kD] view (row stride `st`) into a padded fp32 tile.
template <int kD>
constexpr int ld_of() {
  return kD + 4;  // padded row length (floats), keeps rows 16-byte aligned
}

template <typename Elem, int kD>
__device__ __forceinline__ void load_rows(float* s, const Elem* g, int64_t st, int row0, int T,
                                          int tid) {
  constexpr int kLd = ld_of<kD>();
  for (int idx = tid; idx < kRows * kD; idx += kThreads) {
    const int rr = idx / kD, c = idx % kD;
    const int row = row0 + rr;
    s[rr * kLd + c] = row < T ? load_f(g + static_cast<int64_t>(row) * st + c) : 0.0f;
  }
}

__device__ __forceinline__ float4 ld4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ void fma4(float4& acc, float a, const float4& b) {
  acc.x = fmaf(a, b.x, acc.x);
  acc.y = fmaf(a, b.y, acc.y);
  acc.z = fmaf(a, b.z, acc.z);
  acc.w = fmaf(a, b.w, acc.w);
}

// acc[c] = a . b[sub + 4c] for c < 8: row `a` against 8 rows of tile `b` (rows of kLd floats).
template <int kD>
__device__ __forceinline__ void dots8(float (&acc)[kCols / 4], const float* a, const float* b,
                                      int sub) {
  constexpr int kLd = ld_of<kD>();
#pragma unroll
  for (int c = 0; c < kCols / 4; ++c) acc[c] = 0.0f;
#pragma unroll 4
  for (int k = 0; k < kD; k += 4) {
    const float4 x = ld4(a + k);
#pragma unroll
    for (int c = 0; c < kCols / 4; ++c) {
      const float4 y = ld4(b + (sub + 4 * c) * kLd + k);
      acc[c] = fmaf(x.x, y.x, fmaf(x.y, y.y, fmaf(x.z, y.z, fmaf(x.w, y.w, acc[c]))));
    }
  }
}

// out[m] (columns 16m + 4sub .. +3) += sum_c w[c] * t[c][those columns], w a row of 32 weights.
template <int kD>
__device__ __forceinline__ void accum_rows(float4 (&out)[kD / 16], const float* w, const float* t,
                                           int sub) {
  constexpr int kLd = ld_of<kD>();
#pragma unroll 4
  for (int c = 0; c < kCols; ++c) {
    const float wc = w[c];
#pragma unroll
    for (int m = 0; m < kD / 16; ++m) fma4(out[m], wc, ld4(t + c * kLd + 16 * m + 4 * sub));
  }
}

template <typename Elem, int kD>
__device__ __forceinline__ void store_cols(Elem* g, const float4 (&v)[kD / 16], float mul,
                                           int sub) {
#pragma unroll
  for (int m = 0; m < kD / 16; ++m) {
    Elem* dst = g + 16 * m + 4 * sub;
    store_f(dst + 0, v[m].x * mul);
    store_f(dst + 1, v[m].y * mul);
    store_f(dst + 2, v[m].z * mul);
    store_f(dst + 3, v[m].w * mul);
  }
}

template <int kD>
__device__ __forceinline__ void zero4(float4 (&v)[kD / 16]) {
#pragma unroll
  for (int m = 0; m < kD / 16; ++m) v[m] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int kD>
constexpr size_t fwd_smem_bytes() {
  return (3 * kRows * ld_of<kD>() + kRows * (kCols + 1)) * sizeof(float);
}
template <int kD>
constexpr size_t dkdv_smem_bytes() {
  return (4 * kRows * ld_of<kD>() + 2 * kRows * (kCols + 1) + 2 * kCols) * sizeof(float);
}
template <int kD>
constexpr size_t dq_smem_bytes() {
  return (4 * kRows * ld_of<kD>() + kRows * (kCols + 1)) * sizeof(float);
}

template <typename Elem, int kD>
__global__ void __launch_bounds__(kThreads, 1) simt_attn_fwd_kernel(const Params p) {
  constexpr int kLd = ld_of<kD>();
  extern __shared__ float smem[];
  float* sQ = smem;
  float* sK = sQ + kRows * kLd;
  float* sV = sK + kCols * kLd;
  float* sP = sV + kCols * kLd;  // [kRows][kCols + 1]

  const int tid = threadIdx.x, r = tid >> 2, sub = tid & 3;
  const int T = p.seq_len;
  const int nqb = (T + kRows - 1) / kRows;
  const int q0 = (nqb - 1 - static_cast<int>(blockIdx.x)) * kRows;
  const int h = blockIdx.y, b = blockIdx.z;
  const Elem* gQ = static_cast<const Elem*>(p.q) + b * p.sq.b + h * p.sq.h;
  const Elem* gK = static_cast<const Elem*>(p.k) + b * p.sk.b + h * p.sk.h;
  const Elem* gV = static_cast<const Elem*>(p.v) + b * p.sv.b + h * p.sv.h;
  load_rows<Elem, kD>(sQ, gQ, p.sq.t, q0, T, tid);

  const int row = q0 + r;
  const int n_kv = p.causal ? (min(T, q0 + kRows) + kCols - 1) / kCols : (T + kCols - 1) / kCols;
  float4 o[kD / 16];
  zero4<kD>(o);
  float m = -INFINITY, l = 0.0f;

  for (int j = 0; j < n_kv; ++j) {
    const int k0 = j * kCols;
    __syncthreads();
    load_rows<Elem, kD>(sK, gK, p.sk.t, k0, T, tid);
    load_rows<Elem, kD>(sV, gV, p.sv.t, k0, T, tid);
    __syncthreads();
    float s[kCols / 4];
    dots8<kD>(s, sQ + r * kLd, sK, sub);
    float mx = m;
#pragma unroll
    for (int c = 0; c < kCols / 4; ++c) {
      const int kg = k0 + sub + 4 * c;
      if (kg >= T || (p.causal && kg > row)) s[c] = -INFINITY;
      mx = fmaxf(mx, s[c]);
    }
    mx = quad_max(mx);
    const float mx_safe = mx == -INFINITY ? 0.0f : mx;
    const float corr = expf((m - mx_safe) * p.scale);
    m = mx;
    float rs = 0.0f;
#pragma unroll
    for (int c = 0; c < kCols / 4; ++c) {
      const float pv = expf((s[c] - mx_safe) * p.scale);
      sP[r * (kCols + 1) + sub + 4 * c] = pv;
      rs += pv;
    }
    l = l * corr + rs;
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kD / 16; ++i) {
      o[i].x *= corr;
      o[i].y *= corr;
      o[i].z *= corr;
      o[i].w *= corr;
    }
    accum_rows<kD>(o, sP + r * (kCols + 1), sV, sub);
  }
  l = quad_sum(l);
  if (row < T) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    Elem* gO =
        static_cast<Elem*>(p.o) + b * p.so.b + h * p.so.h + static_cast<int64_t>(row) * p.so.t;
    store_cols<Elem, kD>(gO, o, inv, sub);
    if (sub == 0) p.lse[(static_cast<int64_t>(b) * p.heads + h) * T + row] = m * p.scale + logf(l);
  }
}

template <typename Elem, int kD>
__global__ void __launch_bounds__(kThreads, 1) simt_attn_bwd_dkdv_kernel(const Params p) {
  constexpr int kLd = ld_of<kD>();
  extern __shared__ float smem[];
  float* sK = smem;
  float* sV = sK + kRows * kLd;
  float* sQ = sV + kRows * kLd;
  float* sdO = sQ + kCols * kLd;
  float* sP = sdO + kCols * kLd;  // [kRows][kCols + 1]
  float* sdS = sP + kRows * (kCols + 1);
  float* sL = sdS + kRows * (kCols + 1);
  float* sD = sL + kCols;

  const int tid = threadIdx.x, r = tid >> 2, sub = tid & 3;
  const int T = p.seq_len;
  const int k0 = blockIdx.x * kRows;
  const int h = blockIdx.y, b = blockIdx.z;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;
  const Elem* gQ = static_cast<const Elem*>(p.q) + b * p.sq.b + h * p.sq.h;
  const Elem* gK = static_cast<const Elem*>(p.k) + b * p.sk.b + h * p.sk.h;
  const Elem* gV = static_cast<const Elem*>(p.v) + b * p.sv.b + h * p.sv.h;
  const Elem* gdO = static_cast<const Elem*>(p.d_o) + b * p.sdo.b + h * p.sdo.h;
  load_rows<Elem, kD>(sK, gK, p.sk.t, k0, T, tid);
  load_rows<Elem, kD>(sV, gV, p.sv.t, k0, T, tid);

  const int key = k0 + r;
  float4 dk[kD / 16], dv[kD / 16];
  zero4<kD>(dk);
  zero4<kD>(dv);
  const int nqb = (T + kCols - 1) / kCols;
  const int i0 = p.causal ? k0 / kCols : 0;
  for (int i = i0; i < nqb; ++i) {
    const int qs = i * kCols;
    __syncthreads();
    load_rows<Elem, kD>(sQ, gQ, p.sq.t, qs, T, tid);
    load_rows<Elem, kD>(sdO, gdO, p.sdo.t, qs, T, tid);
    for (int c = tid; c < kCols; c += kThreads) {
      sL[c] = qs + c < T ? p.lse[bh * T + qs + c] : 0.0f;
      sD[c] = qs + c < T ? p.delta[bh * T + qs + c] : 0.0f;
    }
    __syncthreads();
    float s[kCols / 4], dp[kCols / 4];
    dots8<kD>(s, sK + r * kLd, sQ, sub);
    dots8<kD>(dp, sV + r * kLd, sdO, sub);
#pragma unroll
    for (int c = 0; c < kCols / 4; ++c) {
      const int qi = sub + 4 * c, q = qs + qi;
      const float pv = (q >= T || (p.causal && key > q)) ? 0.0f : expf(s[c] * p.scale - sL[qi]);
      sP[r * (kCols + 1) + qi] = pv;
      sdS[r * (kCols + 1) + qi] = pv * (dp[c] - sD[qi]);
    }
    __syncwarp();
    accum_rows<kD>(dv, sP + r * (kCols + 1), sdO, sub);
    accum_rows<kD>(dk, sdS + r * (kCols + 1), sQ, sub);
  }
  if (key < T) {
    Elem* gdK =
        static_cast<Elem*>(p.dk) + b * p.sdk.b + h * p.sdk.h + static_cast<int64_t>(key) * p.sdk.t;
    Elem* gdV =
        static_cast<Elem*>(p.dv) + b * p.sdv.b + h * p.sdv.h + static_cast<int64_t>(key) * p.sdv.t;
    store_cols<Elem, kD>(gdK, dk, p.scale, sub);
    store_cols<Elem, kD>(gdV, dv, 1.0f, sub);
  }
}

template <typename Elem, int kD>
__global__ void __launch_bounds__(kThreads, 1) simt_attn_bwd_dq_kernel(const Params p) {
  constexpr int kLd = ld_of<kD>();
  extern __shared__ float smem[];
  float* sQ = smem;
  float* sdO = sQ + kRows * kLd;
  float* sK = sdO + kRows * kLd;
  float* sV = sK + kCols * kLd;
  float* sdS = sV + kCols * kLd;  // [kRows][kCols + 1]

  const int tid = threadIdx.x, r = tid >> 2, sub = tid & 3;
  const int T = p.seq_len;
  const int nqb = (T + kRows - 1) / kRows;
  const int q0 = (nqb - 1 - static_cast<int>(blockIdx.x)) * kRows;
  const int h = blockIdx.y, b = blockIdx.z;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;
  const Elem* gQ = static_cast<const Elem*>(p.q) + b * p.sq.b + h * p.sq.h;
  const Elem* gK = static_cast<const Elem*>(p.k) + b * p.sk.b + h * p.sk.h;
  const Elem* gV = static_cast<const Elem*>(p.v) + b * p.sv.b + h * p.sv.h;
  const Elem* gdO = static_cast<const Elem*>(p.d_o) + b * p.sdo.b + h * p.sdo.h;
  load_rows<Elem, kD>(sQ, gQ, p.sq.t, q0, T, tid);
  load_rows<Elem, kD>(sdO, gdO, p.sdo.t, q0, T, tid);

  const int row = q0 + r;
  const float lr = row < T ? p.lse[bh * T + row] : 0.0f;
  const float dr = row < T ? p.delta[bh * T + row] : 0.0f;
  float4 dq[kD / 16];
  zero4<kD>(dq);
  const int n_kv = p.causal ? (min(T, q0 + kRows) + kCols - 1) / kCols : (T + kCols - 1) / kCols;
  for (int j = 0; j < n_kv; ++j) {
    const int k0 = j * kCols;
    __syncthreads();
    load_rows<Elem, kD>(sK, gK, p.sk.t, k0, T, tid);
    load_rows<Elem, kD>(sV, gV, p.sv.t, k0, T, tid);
    __syncthreads();
    float s[kCols / 4], dp[kCols / 4];
    dots8<kD>(s, sQ + r * kLd, sK, sub);
    dots8<kD>(dp, sdO + r * kLd, sV, sub);
#pragma unroll
    for (int c = 0; c < kCols / 4; ++c) {
      const int key = sub + 4 * c, kg = k0 + key;
      const float pv = (kg >= T || (p.causal && kg > row)) ? 0.0f : expf(s[c] * p.scale - lr);
      sdS[r * (kCols + 1) + key] = pv * (dp[c] - dr);
    }
    __syncwarp();
    accum_rows<kD>(dq, sdS + r * (kCols + 1), sK, sub);
  }
  if (row < T) {
    Elem* gdQ =
        static_cast<Elem*>(p.dq) + b * p.sdq.b + h * p.sdq.h + static_cast<int64_t>(row) * p.sdq.t;
    store_cols<Elem, kD>(gdQ, dq, p.scale, sub);
  }
}

template <typename Kernel>
Status launch(Kernel kernel, dim3 grid, size_t smem, const Params& p, cudaStream_t stream,
              const char* name) {
  BLUBLAS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
  kernel<<<grid, kThreads, smem, stream>>>(p);
  BLUBLAS_KERNEL_LAUNCH_CHECK(name);
  return Status::success();
}

template <typename Elem, int kD>
Status fwd(const Params& p, cudaStream_t stream) {
  const dim3 grid((p.seq_len + kRows - 1) / kRows, p.heads, p.batch);
  return launch(simt_attn_fwd_kernel<Elem, kD>, grid, fwd_smem_bytes<kD>(), p, stream,
                "simt_attn_fwd");
}

template <typename Elem, int kD>
Status bwd(const Params& p, cudaStream_t stream) {
  const dim3 grid((p.seq_len + kRows - 1) / kRows, p.heads, p.batch);
  BLUBLAS_RETURN_IF_ERROR(launch(simt_attn_bwd_dkdv_kernel<Elem, kD>, grid, dkdv_smem_bytes<kD>(),
                                 p, stream, "simt_attn_bwd_dkdv"));
  return launch(simt_attn_bwd_dq_kernel<Elem, kD>, grid, dq_smem_bytes<kD>(), p, stream,
                "simt_attn_bwd_dq");
}

}  // namespace

Status simt_attn_fwd(const Params& p, int head_dim, bool bf16, cudaStream_t stream) {
  if (bf16)
    return head_dim == 64 ? fwd<__nv_bfloat16, 64>(p, stream) : fwd<__nv_bfloat16, 128>(p, stream);
  return head_dim == 64 ? fwd<float, 64>(p, stream) : fwd<float, 128>(p, stream);
}

Status simt_attn_bwd(const Params& p, int head_dim, bool bf16, cudaStream_t stream) {
  if (bf16)
    return head_dim == 64 ? bwd<__nv_bfloat16, 64>(p, stream) : bwd<__nv_bfloat16, 128>(p, stream);
  return head_dim == 64 ? bwd<float, 64>(p, stream) : bwd<float, 128>(p, stream);
}

}  // namespace blublas::attn

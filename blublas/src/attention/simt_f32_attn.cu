// simt_f32_attn.cu: the CUDA-core attention family: forward, dK/dV pass and dQ pass with fp32
// FMA arithmetic (accurate expf/logf, no tensor cores, no tf32 rounding anywhere). It is the
// strict-fp32 mode and the fallback for bf16 views whose strides or pointers are not 16-byte
// aligned (elements are loaded one at a time and converted to fp32).
//
// Note [SIMT attention tiles]
// A CTA of 128 threads owns 32*kR rows (queries in the forward and dq pass, keys in the dkdv pass)
// and walks blocks of 32 of the other side. Thread (r = tid/4, sub = tid%4) owns rows r + 32i
// (i < kR): it computes 8 scores per row (columns sub + 4c) and the output columns
// 16m + 4sub + {0..3}, so a row's softmax reductions stay in one quad of lanes. Tiles are fp32 in
// shared memory with rows padded to kD+4 floats: every operand is read as float4, the eight rows a
// warp touches fall in eight different 16-byte bank groups and the four column groups of a quad
// are adjacent 16-byte chunks (conflict-free). Each streamed float4 feeds 4*kR FMAs, so kR = 2
// (d64) roughly halves the shared-memory loads per FMA; d128 keeps kR = 1 (register budget of the
// dK/dV accumulators, and shared memory on 100 KiB parts). The backward is the same two-pass,
// atomic-free scheme as the mma.sync path (Note [Deterministic flash backward: two passes, no
// atomics] in sm80_flash_attn_bwd.cuh).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "attention/attention_params.h"
#include "blublas/check.h"

namespace blublas::attn {
namespace {

constexpr int kCols = 32;  // columns per block of the other side
constexpr int kThreads = 128;
constexpr int kPLd = kCols + 1;  // row length of the score tiles (sP, sdS)

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

template <int kD>
constexpr int ld_of() {
  return kD + 4;  // padded row length (floats), keeps rows 16-byte aligned
}

// Loads rows [row0, row0 + kN) of a [T][kD] view (row stride `st`) into a padded fp32 tile.
template <typename Elem, int kD, int kN>
__device__ __forceinline__ void load_rows(float* s, const Elem* g, int64_t st, int row0, int T,
                                          int tid) {
  constexpr int kLd = ld_of<kD>();
  for (int idx = tid; idx < kN * kD; idx += kThreads) {
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

// acc[i][c] = a_i . b[sub + 4c] (c < 8) for the thread's rows a_i = a + 32*i rows.
template <int kD, int kR>
__device__ __forceinline__ void dots8(float (&acc)[kR][kCols / 4], const float* a, const float* b,
                                      int sub) {
  constexpr int kLd = ld_of<kD>();
#pragma unroll
  for (int i = 0; i < kR; ++i)
#pragma unroll
    for (int c = 0; c < kCols / 4; ++c) acc[i][c] = 0.0f;
#pragma unroll 2
  for (int k = 0; k < kD; k += 4) {
    float4 x[kR];
#pragma unroll
    for (int i = 0; i < kR; ++i) x[i] = ld4(a + i * 32 * kLd + k);
#pragma unroll
    for (int c = 0; c < kCols / 4; ++c) {
      const float4 y = ld4(b + (sub + 4 * c) * kLd + k);
#pragma unroll
      for (int i = 0; i < kR; ++i)
        acc[i][c] =
            fmaf(x[i].x, y.x, fmaf(x[i].y, y.y, fmaf(x[i].z, y.z, fmaf(x[i].w, y.w, acc[i][c]))));
    }
  }
}

// out[i][m] (columns 16m + 4sub .. +3) += sum_c w_i[c] * t[c][those columns], w_i = w + 32*i rows
// of a score tile.
template <int kD, int kR>
__device__ __forceinline__ void accum_rows(float4 (&out)[kR][kD / 16], const float* w,
                                           const float* t, int sub) {
  constexpr int kLd = ld_of<kD>();
#pragma unroll 2
  for (int c = 0; c < kCols; ++c) {
    float wc[kR];
#pragma unroll
    for (int i = 0; i < kR; ++i) wc[i] = w[i * 32 * kPLd + c];
#pragma unroll
    for (int m = 0; m < kD / 16; ++m) {
      const float4 v = ld4(t + c * kLd + 16 * m + 4 * sub);
#pragma unroll
      for (int i = 0; i < kR; ++i) fma4(out[i][m], wc[i], v);
    }
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

template <int kD, int kR>
__device__ __forceinline__ void zero4(float4 (&v)[kR][kD / 16]) {
#pragma unroll
  for (int i = 0; i < kR; ++i)
#pragma unroll
    for (int m = 0; m < kD / 16; ++m) v[i][m] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Rows per thread: 2 at d64, 1 at d128 (Note [SIMT attention tiles]).
template <int kD>
constexpr int rows_per_thread() {
  return kD == 64 ? 2 : 1;
}

template <int kD>
constexpr size_t fwd_smem_bytes() {
  constexpr int kN = 32 * rows_per_thread<kD>();
  return ((kN + 2 * kCols) * ld_of<kD>() + kN * kPLd) * sizeof(float);
}
template <int kD>
constexpr size_t dkdv_smem_bytes() {
  constexpr int kN = 32 * rows_per_thread<kD>();
  return ((2 * kN + 2 * kCols) * ld_of<kD>() + 2 * kN * kPLd + 2 * kCols) * sizeof(float);
}
template <int kD>
constexpr size_t dq_smem_bytes() {
  constexpr int kN = 32 * rows_per_thread<kD>();
  return ((2 * kN + 2 * kCols) * ld_of<kD>() + kN * kPLd) * sizeof(float);
}

template <typename Elem, int kD>
__global__ void __launch_bounds__(kThreads, 1) simt_attn_fwd_kernel(const Params p) {
  constexpr int kR = rows_per_thread<kD>(), kN = 32 * kR;
  constexpr int kLd = ld_of<kD>();
  extern __shared__ float smem[];
  float* sQ = smem;              // [kN][kLd]
  float* sK = sQ + kN * kLd;     // [kCols][kLd]
  float* sV = sK + kCols * kLd;  // [kCols][kLd]
  float* sP = sV + kCols * kLd;  // [kN][kPLd]

  const int tid = threadIdx.x, r = tid >> 2, sub = tid & 3;
  const int T = p.seq_len;
  const int nqb = (T + kN - 1) / kN;
  const int q0 = (nqb - 1 - static_cast<int>(blockIdx.x)) * kN;
  const int h = blockIdx.y, b = blockIdx.z;
  const Elem* gQ = static_cast<const Elem*>(p.q) + b * p.sq.b + h * p.sq.h;
  const Elem* gK = static_cast<const Elem*>(p.k) + b * p.sk.b + h * p.sk.h;
  const Elem* gV = static_cast<const Elem*>(p.v) + b * p.sv.b + h * p.sv.h;
  load_rows<Elem, kD, kN>(sQ, gQ, p.sq.t, q0, T, tid);

  const int n_kv = p.causal ? (min(T, q0 + kN) + kCols - 1) / kCols : (T + kCols - 1) / kCols;
  float4 o[kR][kD / 16];
  zero4<kD, kR>(o);
  float m[kR], l[kR];
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }

  for (int j = 0; j < n_kv; ++j) {
    const int k0 = j * kCols;
    __syncthreads();
    load_rows<Elem, kD, kCols>(sK, gK, p.sk.t, k0, T, tid);
    load_rows<Elem, kD, kCols>(sV, gV, p.sv.t, k0, T, tid);
    __syncthreads();
    float s[kR][kCols / 4];
    dots8<kD, kR>(s, sQ + r * kLd, sK, sub);
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      const int row = q0 + r + 32 * i;
      float mx = m[i];
#pragma unroll
      for (int c = 0; c < kCols / 4; ++c) {
        const int kg = k0 + sub + 4 * c;
        if (kg >= T || (p.causal && kg > row)) s[i][c] = -INFINITY;
        mx = fmaxf(mx, s[i][c]);
      }
      mx = quad_max(mx);
      const float mx_safe = mx == -INFINITY ? 0.0f : mx;
      const float corr = expf((m[i] - mx_safe) * p.scale);
      m[i] = mx;
      float rs = 0.0f;
#pragma unroll
      for (int c = 0; c < kCols / 4; ++c) {
        const float pv = expf((s[i][c] - mx_safe) * p.scale);
        sP[(r + 32 * i) * kPLd + sub + 4 * c] = pv;
        rs += pv;
      }
      l[i] = l[i] * corr + rs;
#pragma unroll
      for (int mm = 0; mm < kD / 16; ++mm) {
        o[i][mm].x *= corr;
        o[i][mm].y *= corr;
        o[i][mm].z *= corr;
        o[i][mm].w *= corr;
      }
    }
    __syncwarp();
    accum_rows<kD, kR>(o, sP + r * kPLd, sV, sub);
  }
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    const int row = q0 + r + 32 * i;
    const float li = quad_sum(l[i]);
    if (row < T) {
      const float inv = li > 0.0f ? 1.0f / li : 0.0f;
      Elem* gO =
          static_cast<Elem*>(p.o) + b * p.so.b + h * p.so.h + static_cast<int64_t>(row) * p.so.t;
      store_cols<Elem, kD>(gO, o[i], inv, sub);
      if (sub == 0) {
        p.lse[(static_cast<int64_t>(b) * p.heads + h) * T + row] = m[i] * p.scale + logf(li);
      }
    }
  }
}

template <typename Elem, int kD>
__global__ void __launch_bounds__(kThreads, 1) simt_attn_bwd_dkdv_kernel(const Params p) {
  constexpr int kR = rows_per_thread<kD>(), kN = 32 * kR;
  constexpr int kLd = ld_of<kD>();
  extern __shared__ float smem[];
  float* sK = smem;               // [kN][kLd]
  float* sV = sK + kN * kLd;      // [kN][kLd]
  float* sQ = sV + kN * kLd;      // [kCols][kLd]
  float* sdO = sQ + kCols * kLd;  // [kCols][kLd]
  float* sP = sdO + kCols * kLd;  // [kN][kPLd]
  float* sdS = sP + kN * kPLd;    // [kN][kPLd]
  float* sL = sdS + kN * kPLd;    // [kCols]
  float* sD = sL + kCols;         // [kCols]

  const int tid = threadIdx.x, r = tid >> 2, sub = tid & 3;
  const int T = p.seq_len;
  const int k0 = blockIdx.x * kN;
  const int h = blockIdx.y, b = blockIdx.z;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;
  const Elem* gQ = static_cast<const Elem*>(p.q) + b * p.sq.b + h * p.sq.h;
  const Elem* gK = static_cast<const Elem*>(p.k) + b * p.sk.b + h * p.sk.h;
  const Elem* gV = static_cast<const Elem*>(p.v) + b * p.sv.b + h * p.sv.h;
  const Elem* gdO = static_cast<const Elem*>(p.d_o) + b * p.sdo.b + h * p.sdo.h;
  load_rows<Elem, kD, kN>(sK, gK, p.sk.t, k0, T, tid);
  load_rows<Elem, kD, kN>(sV, gV, p.sv.t, k0, T, tid);

  float4 dk[kR][kD / 16], dv[kR][kD / 16];
  zero4<kD, kR>(dk);
  zero4<kD, kR>(dv);
  const int nqb = (T + kCols - 1) / kCols;
  const int i0 = p.causal ? k0 / kCols : 0;
  for (int qb = i0; qb < nqb; ++qb) {
    const int qs = qb * kCols;
    __syncthreads();
    load_rows<Elem, kD, kCols>(sQ, gQ, p.sq.t, qs, T, tid);
    load_rows<Elem, kD, kCols>(sdO, gdO, p.sdo.t, qs, T, tid);
    for (int c = tid; c < kCols; c += kThreads) {
      sL[c] = qs + c < T ? p.lse[bh * T + qs + c] : 0.0f;
      sD[c] = qs + c < T ? p.delta[bh * T + qs + c] : 0.0f;
    }
    __syncthreads();
    float s[kR][kCols / 4], dp[kR][kCols / 4];
    dots8<kD, kR>(s, sK + r * kLd, sQ, sub);
    dots8<kD, kR>(dp, sV + r * kLd, sdO, sub);
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      const int key = k0 + r + 32 * i;
#pragma unroll
      for (int c = 0; c < kCols / 4; ++c) {
        const int qi = sub + 4 * c, q = qs + qi;
        const float pv =
            (q >= T || (p.causal && key > q)) ? 0.0f : expf(s[i][c] * p.scale - sL[qi]);
        sP[(r + 32 * i) * kPLd + qi] = pv;
        sdS[(r + 32 * i) * kPLd + qi] = pv * (dp[i][c] - sD[qi]);
      }
    }
    __syncwarp();
    accum_rows<kD, kR>(dv, sP + r * kPLd, sdO, sub);
    accum_rows<kD, kR>(dk, sdS + r * kPLd, sQ, sub);
  }
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    const int key = k0 + r + 32 * i;
    if (key < T) {
      Elem* gdK = static_cast<Elem*>(p.dk) + b * p.sdk.b + h * p.sdk.h +
                  static_cast<int64_t>(key) * p.sdk.t;
      Elem* gdV = static_cast<Elem*>(p.dv) + b * p.sdv.b + h * p.sdv.h +
                  static_cast<int64_t>(key) * p.sdv.t;
      store_cols<Elem, kD>(gdK, dk[i], p.scale, sub);
      store_cols<Elem, kD>(gdV, dv[i], 1.0f, sub);
    }
  }
}

template <typename Elem, int kD>
__global__ void __launch_bounds__(kThreads, 1) simt_attn_bwd_dq_kernel(const Params p) {
  constexpr int kR = rows_per_thread<kD>(), kN = 32 * kR;
  constexpr int kLd = ld_of<kD>();
  extern __shared__ float smem[];
  float* sQ = smem;               // [kN][kLd]
  float* sdO = sQ + kN * kLd;     // [kN][kLd]
  float* sK = sdO + kN * kLd;     // [kCols][kLd]
  float* sV = sK + kCols * kLd;   // [kCols][kLd]
  float* sdS = sV + kCols * kLd;  // [kN][kPLd]

  const int tid = threadIdx.x, r = tid >> 2, sub = tid & 3;
  const int T = p.seq_len;
  const int nqb = (T + kN - 1) / kN;
  const int q0 = (nqb - 1 - static_cast<int>(blockIdx.x)) * kN;
  const int h = blockIdx.y, b = blockIdx.z;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;
  const Elem* gQ = static_cast<const Elem*>(p.q) + b * p.sq.b + h * p.sq.h;
  const Elem* gK = static_cast<const Elem*>(p.k) + b * p.sk.b + h * p.sk.h;
  const Elem* gV = static_cast<const Elem*>(p.v) + b * p.sv.b + h * p.sv.h;
  const Elem* gdO = static_cast<const Elem*>(p.d_o) + b * p.sdo.b + h * p.sdo.h;
  load_rows<Elem, kD, kN>(sQ, gQ, p.sq.t, q0, T, tid);
  load_rows<Elem, kD, kN>(sdO, gdO, p.sdo.t, q0, T, tid);

  float lr[kR], dr[kR];
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    const int row = q0 + r + 32 * i;
    lr[i] = row < T ? p.lse[bh * T + row] : 0.0f;
    dr[i] = row < T ? p.delta[bh * T + row] : 0.0f;
  }
  float4 dq[kR][kD / 16];
  zero4<kD, kR>(dq);
  const int n_kv = p.causal ? (min(T, q0 + kN) + kCols - 1) / kCols : (T + kCols - 1) / kCols;
  for (int j = 0; j < n_kv; ++j) {
    const int k0 = j * kCols;
    __syncthreads();
    load_rows<Elem, kD, kCols>(sK, gK, p.sk.t, k0, T, tid);
    load_rows<Elem, kD, kCols>(sV, gV, p.sv.t, k0, T, tid);
    __syncthreads();
    float s[kR][kCols / 4], dp[kR][kCols / 4];
    dots8<kD, kR>(s, sQ + r * kLd, sK, sub);
    dots8<kD, kR>(dp, sdO + r * kLd, sV, sub);
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      const int row = q0 + r + 32 * i;
#pragma unroll
      for (int c = 0; c < kCols / 4; ++c) {
        const int key = sub + 4 * c, kg = k0 + key;
        const float pv =
            (kg >= T || (p.causal && kg > row)) ? 0.0f : expf(s[i][c] * p.scale - lr[i]);
        sdS[(r + 32 * i) * kPLd + key] = pv * (dp[i][c] - dr[i]);
      }
    }
    __syncwarp();
    accum_rows<kD, kR>(dq, sdS + r * kPLd, sK, sub);
  }
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    const int row = q0 + r + 32 * i;
    if (row < T) {
      Elem* gdQ = static_cast<Elem*>(p.dq) + b * p.sdq.b + h * p.sdq.h +
                  static_cast<int64_t>(row) * p.sdq.t;
      store_cols<Elem, kD>(gdQ, dq[i], p.scale, sub);
    }
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
  constexpr int kN = 32 * rows_per_thread<kD>();
  const dim3 grid((p.seq_len + kN - 1) / kN, p.heads, p.batch);
  return launch(simt_attn_fwd_kernel<Elem, kD>, grid, fwd_smem_bytes<kD>(), p, stream,
                "simt_attn_fwd");
}

template <typename Elem, int kD>
Status bwd(const Params& p, cudaStream_t stream) {
  constexpr int kN = 32 * rows_per_thread<kD>();
  const dim3 grid((p.seq_len + kN - 1) / kN, p.heads, p.batch);
  BLUBLAS_RETURN_IF_ERROR(launch(simt_attn_bwd_dkdv_kernel<Elem, kD>, grid, dkdv_smem_bytes<kD>(),
                                 p, stream, "simt_attn_bwd_dkdv"));
  return launch(simt_attn_bwd_dq_kernel<Elem, kD>, grid, dq_smem_bytes<kD>(), p, stream,
                "simt_attn_bwd_dq");
}

}  // namespace

Status simt_attn_fwd(const Params& p, int head_dim, bool bf16, cudaStream_t stream) {
  if (bf16) {
    return head_dim == 64 ? fwd<__nv_bfloat16, 64>(p, stream) : fwd<__nv_bfloat16, 128>(p, stream);
  }
  return head_dim == 64 ? fwd<float, 64>(p, stream) : fwd<float, 128>(p, stream);
}

Status simt_attn_bwd(const Params& p, int head_dim, bool bf16, cudaStream_t stream) {
  if (bf16) {
    return head_dim == 64 ? bwd<__nv_bfloat16, 64>(p, stream) : bwd<__nv_bfloat16, 128>(p, stream);
  }
  return head_dim == 64 ? bwd<float, 64>(p, stream) : bwd<float, 128>(p, stream);
}

}  // namespace blublas::attn

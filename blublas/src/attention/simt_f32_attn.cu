// simt_f32_attn.cu: the CUDA-core attention family: forward, dK/dV pass and dQ pass with fp32
// FMA arithmetic (accurate expf/logf, no tensor cores, no tf32 rounding anywhere). It is the
// strict-fp32 mode and the fallback for bf16 views whose strides or pointers are not 16-byte
// aligned (elements are loaded one at a time and converted to fp32).
//
// Note [SIMT attention tiles]
// A CTA of 128 threads owns 32 rows (queries in the forward and dq pass, keys in the dkdv pass)
// and walks blocks of 32 of the other side. Thread (r = tid/4, sub = tid%4) owns row r: it computes
// 8 scores (columns sub + 4c) and the output columns sub + 4i, so a row's softmax reductions stay
// in one quad of lanes. Tiles are fp32 in shared memory with rows padded to kD+1 floats, so the
// eight rows a warp touches at once fall in eight different banks. The backward is the same
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
template <typename Elem, int kD>
__device__ __forceinline__ void load_rows(float* s, const Elem* g, int64_t st, int row0, int T,
                                          int tid) {
  constexpr int kLd = kD + 1;
  for (int idx = tid; idx < kRows * kD; idx += kThreads) {
    const int rr = idx / kD, c = idx % kD;
    const int row = row0 + rr;
    s[rr * kLd + c] = row < T ? load_f(g + static_cast<int64_t>(row) * st + c) : 0.0f;
  }
}

template <int kD>
__device__ __forceinline__ float dot_rows(const float* a, const float* b) {
  float acc = 0.0f;
#pragma unroll 16
  for (int i = 0; i < kD; ++i) acc = fmaf(a[i], b[i], acc);
  return acc;
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
  return (3 * kRows * (kD + 1) + kRows * (kCols + 1)) * sizeof(float);
}
template <int kD>
constexpr size_t dkdv_smem_bytes() {
  return (4 * kRows * (kD + 1) + 2 * kRows * (kCols + 1) + 2 * kCols) * sizeof(float);
}
template <int kD>
constexpr size_t dq_smem_bytes() {
  return (4 * kRows * (kD + 1) + kRows * (kCols + 1)) * sizeof(float);
}

template <typename Elem, int kD>
__global__ void __launch_bounds__(kThreads, 1) simt_attn_fwd_kernel(const Params p) {
  constexpr int kLd = kD + 1;
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
  float o[kD / 4];
#pragma unroll
  for (int i = 0; i < kD / 4; ++i) o[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  for (int j = 0; j < n_kv; ++j) {
    const int k0 = j * kCols;
    __syncthreads();
    load_rows<Elem, kD>(sK, gK, p.sk.t, k0, T, tid);
    load_rows<Elem, kD>(sV, gV, p.sv.t, k0, T, tid);
    __syncthreads();
    float s[kCols / 4];
    float mx = m;
#pragma unroll
    for (int c = 0; c < kCols / 4; ++c) {
      const int key = sub + 4 * c, kg = k0 + key;
      const float acc = dot_rows<kD>(sQ + r * kLd, sK + key * kLd);
      s[c] = (kg >= T || (p.causal && kg > row)) ? -INFINITY : acc;
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
    for (int i = 0; i < kD / 4; ++i) {
      float acc = o[i] * corr;
#pragma unroll 8
      for (int c = 0; c < kCols; ++c)
        acc = fmaf(sP[r * (kCols + 1) + c], sV[c * kLd + sub + 4 * i], acc);
      o[i] = acc;
    }
  }
  l = quad_sum(l);
  if (row < T) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    Elem* gO =
        static_cast<Elem*>(p.o) + b * p.so.b + h * p.so.h + static_cast<int64_t>(row) * p.so.t;
#pragma unroll
    for (int i = 0; i < kD / 4; ++i) store_f(gO + sub + 4 * i, o[i] * inv);
    if (sub == 0) p.lse[(static_cast<int64_t>(b) * p.heads + h) * T + row] = m * p.scale + logf(l);
  }
}

template <typename Elem, int kD>
__global__ void __launch_bounds__(kThreads, 1) simt_attn_bwd_dkdv_kernel(const Params p) {
  constexpr int kLd = kD + 1;
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
  float dk[kD / 4], dv[kD / 4];
#pragma unroll
  for (int i = 0; i < kD / 4; ++i) dk[i] = dv[i] = 0.0f;
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
#pragma unroll
    for (int c = 0; c < kCols / 4; ++c) {
      const int qi = sub + 4 * c, q = qs + qi;
      const float s = dot_rows<kD>(sK + r * kLd, sQ + qi * kLd);
      const float dp = dot_rows<kD>(sV + r * kLd, sdO + qi * kLd);
      const float pv = (q >= T || (p.causal && key > q)) ? 0.0f : expf(s * p.scale - sL[qi]);
      sP[r * (kCols + 1) + qi] = pv;
      sdS[r * (kCols + 1) + qi] = pv * (dp - sD[qi]);
    }
    __syncwarp();
#pragma unroll
    for (int d = 0; d < kD / 4; ++d) {
      float a = dv[d], bb = dk[d];
#pragma unroll 8
      for (int c = 0; c < kCols; ++c) {
        a = fmaf(sP[r * (kCols + 1) + c], sdO[c * kLd + sub + 4 * d], a);
        bb = fmaf(sdS[r * (kCols + 1) + c], sQ[c * kLd + sub + 4 * d], bb);
      }
      dv[d] = a;
      dk[d] = bb;
    }
  }
  if (key < T) {
    Elem* gdK =
        static_cast<Elem*>(p.dk) + b * p.sdk.b + h * p.sdk.h + static_cast<int64_t>(key) * p.sdk.t;
    Elem* gdV =
        static_cast<Elem*>(p.dv) + b * p.sdv.b + h * p.sdv.h + static_cast<int64_t>(key) * p.sdv.t;
#pragma unroll
    for (int d = 0; d < kD / 4; ++d) {
      store_f(gdK + sub + 4 * d, dk[d] * p.scale);
      store_f(gdV + sub + 4 * d, dv[d]);
    }
  }
}

template <typename Elem, int kD>
__global__ void __launch_bounds__(kThreads, 1) simt_attn_bwd_dq_kernel(const Params p) {
  constexpr int kLd = kD + 1;
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
  float dq[kD / 4];
#pragma unroll
  for (int i = 0; i < kD / 4; ++i) dq[i] = 0.0f;
  const int n_kv = p.causal ? (min(T, q0 + kRows) + kCols - 1) / kCols : (T + kCols - 1) / kCols;
  for (int j = 0; j < n_kv; ++j) {
    const int k0 = j * kCols;
    __syncthreads();
    load_rows<Elem, kD>(sK, gK, p.sk.t, k0, T, tid);
    load_rows<Elem, kD>(sV, gV, p.sv.t, k0, T, tid);
    __syncthreads();
#pragma unroll
    for (int c = 0; c < kCols / 4; ++c) {
      const int key = sub + 4 * c, kg = k0 + key;
      const float s = dot_rows<kD>(sQ + r * kLd, sK + key * kLd);
      const float dp = dot_rows<kD>(sdO + r * kLd, sV + key * kLd);
      const float pv = (kg >= T || (p.causal && kg > row)) ? 0.0f : expf(s * p.scale - lr);
      sdS[r * (kCols + 1) + key] = pv * (dp - dr);
    }
    __syncwarp();
#pragma unroll
    for (int d = 0; d < kD / 4; ++d) {
      float a = dq[d];
#pragma unroll 8
      for (int c = 0; c < kCols; ++c)
        a = fmaf(sdS[r * (kCols + 1) + c], sK[c * kLd + sub + 4 * d], a);
      dq[d] = a;
    }
  }
  if (row < T) {
    Elem* gdQ =
        static_cast<Elem*>(p.dq) + b * p.sdq.b + h * p.sdq.h + static_cast<int64_t>(row) * p.sdq.t;
#pragma unroll
    for (int d = 0; d < kD / 4; ++d) store_f(gdQ + sub + 4 * d, dq[d] * p.scale);
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

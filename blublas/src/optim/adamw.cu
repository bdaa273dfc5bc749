// adamw.cu: multi-tensor AdamW (f32 master weights, m, v; f32 or bf16 grads; optional bf16 copy),
// the bf16 weight copy alone, and the deterministic global gradient norm used for clipping. See
// blublas/adamw.h.
//
// Note [Multi-tensor launch table] The host packs up to kAdamWTensorsPerLaunch tensors into one
// kernel-parameter struct (pointers, sizes, weight decay, a vector-path flag and a prefix of
// block counts; ~15 KB, within the 32 KB kernel-parameter limit of CUDA >= 12.1), so the whole
// GPT-2 parameter list is one launch. Every block owns kElemsPerBlock consecutive elements of one
// tensor and finds it by a binary search over the prefix. The same partition drives the norm:
// one partial sum of squares per block (fixed in-block order) into the workspace, then one block
// adds the partials in order in f64. Nothing depends on the device, so the bits do not either.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "blublas/adamw.h"
#include "blublas/check.h"
#include "elementwise/vector_io.cuh"
#include "reduce/reduce_primitives.cuh"

namespace blublas {
namespace {

using fused::load_f32;
using fused::store_f32;
using fused::to_f32;

constexpr int kThreads = 256;
constexpr int kVec = 4;                 // elements per pack (16 B of f32, 8 B of bf16)
constexpr int kPacksPerThread = 4;
constexpr int64_t kElemsPerBlock = int64_t{kThreads} * kVec * kPacksPerThread;  // 4096
constexpr int kNormFinishThreads = 1024;

struct LaunchTable {
  int count;
  int first_partial;  // index of this launch's first block among all blocks of the call
  int block_start[kAdamWTensorsPerLaunch + 1];
  float* param[kAdamWTensorsPerLaunch];
  const void* grad[kAdamWTensorsPerLaunch];
  float* m[kAdamWTensorsPerLaunch];
  float* v[kAdamWTensorsPerLaunch];
  __nv_bfloat16* param_bf16[kAdamWTensorsPerLaunch];
  int64_t numel[kAdamWTensorsPerLaunch];
  float decay[kAdamWTensorsPerLaunch];  // 1 - lr * weight_decay (static lr)
  float weight_decay[kAdamWTensorsPerLaunch];  // for a device-side lr (AdamWStepScalars)
  unsigned char vec[kAdamWTensorsPerLaunch];
};

struct Scalars {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
  float step_size;     // lr / (1 - beta1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
};

__device__ __forceinline__ int find_tensor(const LaunchTable& tab, int block) {
  int lo = 0, hi = tab.count - 1;  // largest i with block_start[i] <= block
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tab.block_start[mid] <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

__device__ __forceinline__ void adamw_elem(float& p, float& m, float& v, float g, float decay,
                                           const Scalars& s) {
  m = s.beta1 * m + s.one_minus_beta1 * g;
  v = s.beta2 * v + s.one_minus_beta2 * g * g;
  const float denom = sqrtf(v) * s.inv_sqrt_bc2 + s.eps;
  p = p * decay - s.step_size * (m / denom);
}

// dyn: per-step values read at run time (Note [AdamW step scalars on the device]), or null.
template <typename G>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(const __grid_constant__ LaunchTable tab, Scalars s,
                 const float* __restrict__ grad_scale, const AdamWStepScalars* __restrict__ dyn) {
  const int t = find_tensor(tab, static_cast<int>(blockIdx.x));
  float decay = tab.decay[t];
  if (dyn != nullptr) {
    s.step_size = dyn->step_size;
    s.inv_sqrt_bc2 = dyn->inv_sqrt_bc2;
    // The host's float expression 1.0f - lr * wd, rounded the same way (no FMA contraction).
    decay = __fsub_rn(1.0f, __fmul_rn(dyn->lr, tab.weight_decay[t]));
  }
  const int64_t start = static_cast<int64_t>(blockIdx.x - tab.block_start[t]) * kElemsPerBlock;
  const int64_t n = tab.numel[t];
  float* __restrict__ param = tab.param[t];
  const G* __restrict__ grad = static_cast<const G*>(tab.grad[t]);
  float* __restrict__ mm = tab.m[t];
  float* __restrict__ vv = tab.v[t];
  __nv_bfloat16* __restrict__ pb = tab.param_bf16[t];
  const float gs = grad_scale != nullptr ? *grad_scale : 1.0f;
  if (!isfinite(gs)) return;  // a non-finite grad_scale skips the update (adamw.h)
  if (tab.vec[t]) {
    float p[kPacksPerThread][kVec], g[kPacksPerThread][kVec], m[kPacksPerThread][kVec],
        v[kPacksPerThread][kVec];
#pragma unroll
    for (int k = 0; k < kPacksPerThread; ++k) {
      const int64_t e = start + (static_cast<int64_t>(k) * kThreads + threadIdx.x) * kVec;
      if (e < n) {
        load_f32<float, kVec>(param + e, p[k]);
        load_f32<G, kVec>(grad + e, g[k]);
        load_f32<float, kVec>(mm + e, m[k]);
        load_f32<float, kVec>(vv + e, v[k]);
      }
    }
#pragma unroll
    for (int k = 0; k < kPacksPerThread; ++k) {
      const int64_t e = start + (static_cast<int64_t>(k) * kThreads + threadIdx.x) * kVec;
      if (e < n) {
#pragma unroll
        for (int i = 0; i < kVec; ++i) adamw_elem(p[k][i], m[k][i], v[k][i], g[k][i] * gs, decay, s);
        store_f32<float, kVec>(param + e, p[k]);
        store_f32<float, kVec>(mm + e, m[k]);
        store_f32<float, kVec>(vv + e, v[k]);
        if (pb != nullptr) store_f32<__nv_bfloat16, kVec>(pb + e, p[k]);
      }
    }
  } else {
    for (int j = 0; j < kVec * kPacksPerThread; ++j) {
      const int64_t e = start + static_cast<int64_t>(j) * kThreads + threadIdx.x;
      if (e < n) {
        float p = param[e], m = mm[e], v = vv[e];
        adamw_elem(p, m, v, to_f32(grad[e]) * gs, decay, s);
        param[e] = p;
        mm[e] = m;
        vv[e] = v;
        if (pb != nullptr) pb[e] = __float2bfloat16_rn(p);
      }
    }
  }
}

// Block blockIdx.x's share of tensor t (kElemsPerBlock elements from its start), in the order every
// kernel here walks it: pack(e) for each kVec-element pack (vector path), elem(e) for each element
// (scalar path). The order fixes the norm's partial sums, hence their bits.
template <typename Pack, typename Elem>
__device__ __forceinline__ void for_block_elements(const LaunchTable& tab, int t, Pack pack, Elem elem) {
  const int64_t start = static_cast<int64_t>(blockIdx.x - tab.block_start[t]) * kElemsPerBlock;
  const int64_t n = tab.numel[t];
  if (tab.vec[t]) {
#pragma unroll
    for (int k = 0; k < kPacksPerThread; ++k) {
      const int64_t e = start + (static_cast<int64_t>(k) * kThreads + threadIdx.x) * kVec;
      if (e < n) pack(e);
    }
  } else {
    for (int j = 0; j < kVec * kPacksPerThread; ++j) {
      const int64_t e = start + static_cast<int64_t>(j) * kThreads + threadIdx.x;
      if (e < n) elem(e);
    }
  }
}

// bf16_weight_copy: the bf16 stores of adamw_kernel without the update.
__global__ void __launch_bounds__(kThreads) bf16_copy_kernel(const __grid_constant__ LaunchTable tab) {
  const int t = find_tensor(tab, static_cast<int>(blockIdx.x));
  const float* __restrict__ param = tab.param[t];
  __nv_bfloat16* __restrict__ pb = tab.param_bf16[t];
  for_block_elements(
      tab, t,
      [&](int64_t e) {
        float p[kVec];
        load_f32<float, kVec>(param + e, p);
        store_f32<__nv_bfloat16, kVec>(pb + e, p);
      },
      [&](int64_t e) { pb[e] = __float2bfloat16_rn(param[e]); });
}

template <typename G>
__global__ void __launch_bounds__(kThreads)
    grad_sumsq_kernel(const __grid_constant__ LaunchTable tab, float* __restrict__ partial) {
  __shared__ float scratch[32];
  const int t = find_tensor(tab, static_cast<int>(blockIdx.x));
  const G* __restrict__ grad = static_cast<const G*>(tab.grad[t]);
  float s = 0.0f;
  for_block_elements(
      tab, t,
      [&](int64_t e) {
        float g[kVec];
        load_f32<G, kVec>(grad + e, g);
#pragma unroll
        for (int i = 0; i < kVec; ++i) s += g[i] * g[i];
      },
      [&](int64_t e) {
        const float g = to_f32(grad[e]);
        s += g * g;
      });
  const float total = fused::block_sum(s, scratch);
  if (threadIdx.x == 0) partial[tab.first_partial + blockIdx.x] = total;
}

__device__ __forceinline__ double warp_sum_f64(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void __launch_bounds__(kNormFinishThreads)
    grad_norm_finish_kernel(float* norm_out, float* clip_out, float max_norm,
                            const float* __restrict__ partial, int64_t n) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += static_cast<double>(partial[i]);
  s = warp_sum_f64(s);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    double t = threadIdx.x < (blockDim.x >> 5) ? scratch[threadIdx.x] : 0.0;
    t = warp_sum_f64(t);
    if (threadIdx.x == 0) {
      const float norm = static_cast<float>(sqrt(t));
      *norm_out = norm;
      if (clip_out != nullptr) {
        *clip_out = max_norm > 0.0f ? fminf(1.0f, max_norm / (norm + 1e-6f)) : 1.0f;
      }
    }
  }
}

// ---------------------------------------------------------------- host side
bool aligned_to(const void* p, std::uintptr_t a) {
  return (reinterpret_cast<std::uintptr_t>(p) % a) == 0;
}

int64_t blocks_of(int64_t numel) { return (numel + kElemsPerBlock - 1) / kElemsPerBlock; }

Status check_list(const char* op, const AdamWTensor* tensors, int count, Dtype grad_dtype,
                  bool need_state) {
  BLUBLAS_CHECK_ARG(count >= 0, op, ": count=", count, " must be >= 0");
  BLUBLAS_CHECK_ARG(count == 0 || tensors != nullptr, op, ": tensors is null with count=", count);
  BLUBLAS_CHECK_ARG(grad_dtype == Dtype::kF32 || grad_dtype == Dtype::kBF16, op, ": grad dtype ",
                    dtype_name(grad_dtype), " not supported (f32, bf16)");
  int64_t total_blocks = 0;
  for (int i = 0; i < count; ++i) {
    const AdamWTensor& t = tensors[i];
    BLUBLAS_CHECK_ARG(t.numel >= 0, op, ": tensor ", i, " numel=", t.numel, " must be >= 0");
    if (t.numel == 0) continue;
    BLUBLAS_CHECK_ARG(t.grad != nullptr, op, ": tensor ", i, " (numel=", t.numel,
                      ") has a null grad");
    if (need_state) {
      BLUBLAS_CHECK_ARG(t.param && t.m && t.v, op, ": tensor ", i, " (numel=", t.numel,
                        ") has a null param, m or v");
    }
    total_blocks += blocks_of(t.numel);
  }
  BLUBLAS_CHECK_ARG(total_blocks < (int64_t{1} << 31), op, ": ", total_blocks,
                    " blocks of work is too large");
  return Status::success();
}

// Fills launch tables of up to kAdamWTensorsPerLaunch non-empty tensors each.
std::vector<LaunchTable> build_tables(const AdamWTensor* tensors, int count, Dtype grad_dtype,
                                      float lr) {
  std::vector<LaunchTable> tables;
  LaunchTable cur{};
  int blocks = 0, partial_base = 0;
  auto flush = [&]() {
    if (cur.count == 0) return;
    cur.block_start[cur.count] = blocks;
    cur.first_partial = partial_base;
    partial_base += blocks;
    tables.push_back(cur);
    cur = LaunchTable{};
    blocks = 0;
  };
  const std::uintptr_t galign = grad_dtype == Dtype::kF32 ? 16 : 8;
  for (int i = 0; i < count; ++i) {
    const AdamWTensor& t = tensors[i];
    if (t.numel == 0) continue;
    const int k = cur.count;
    cur.block_start[k] = blocks;
    cur.param[k] = t.param;
    cur.grad[k] = t.grad;
    cur.m[k] = t.m;
    cur.v[k] = t.v;
    cur.param_bf16[k] = static_cast<__nv_bfloat16*>(t.param_bf16);
    cur.numel[k] = t.numel;
    cur.decay[k] = 1.0f - lr * t.weight_decay;
    cur.weight_decay[k] = t.weight_decay;
    cur.vec[k] = t.numel % kVec == 0 && aligned_to(t.param, 16) && aligned_to(t.m, 16) &&
                 aligned_to(t.v, 16) && aligned_to(t.grad, galign) &&
                 aligned_to(t.param_bf16, 8);
    blocks += static_cast<int>(blocks_of(t.numel));
    ++cur.count;
    if (cur.count == kAdamWTensorsPerLaunch) flush();
  }
  flush();
  return tables;
}

int total_blocks_of(const std::vector<LaunchTable>& tables) {
  int n = 0;
  for (const auto& t : tables) n += t.block_start[t.count];
  return n;
}

}  // namespace

namespace {

Status check_betas(const char* op, float beta1, float beta2, float eps) {
  BLUBLAS_CHECK_ARG(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f && eps >= 0.0f,
                    op, ": beta1=", beta1, " beta2=", beta2, " eps=", eps,
                    " (need 0 <= beta < 1, eps >= 0)");
  return Status::success();
}

void launch_adamw(const std::vector<LaunchTable>& tables, Dtype grad_dtype, const Scalars& s,
                  const float* grad_scale, const AdamWStepScalars* dyn, cudaStream_t stream) {
  for (const LaunchTable& tab : tables) {
    const unsigned blocks = static_cast<unsigned>(tab.block_start[tab.count]);
    if (grad_dtype == Dtype::kF32) {
      adamw_kernel<float><<<blocks, kThreads, 0, stream>>>(tab, s, grad_scale, dyn);
    } else {
      adamw_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(tab, s, grad_scale, dyn);
    }
  }
}

Scalars base_scalars(float beta1, float beta2, float eps) {
  Scalars s{};
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.one_minus_beta1 = 1.0f - beta1;
  s.one_minus_beta2 = 1.0f - beta2;
  s.eps = eps;
  return s;
}

}  // namespace

Status adamw_update(const AdamWTensor* tensors, int count, Dtype grad_dtype,
                    const AdamWHyper& hyper, const float* grad_scale, cudaStream_t stream) {
  BLUBLAS_RETURN_IF_ERROR(check_list("adamw_update", tensors, count, grad_dtype, true));
  BLUBLAS_CHECK_ARG(hyper.step >= 1, "adamw_update: step=", hyper.step, " must be >= 1");
  BLUBLAS_RETURN_IF_ERROR(check_betas("adamw_update", hyper.beta1, hyper.beta2, hyper.eps));
  BLUBLAS_CHECK_ARG(std::isfinite(hyper.lr), "adamw_update: lr=", hyper.lr, " must be finite");
  const AdamWStepScalars step = adamw_step_scalars(hyper.lr, hyper.beta1, hyper.beta2, hyper.step);
  Scalars s = base_scalars(hyper.beta1, hyper.beta2, hyper.eps);
  s.step_size = step.step_size;
  s.inv_sqrt_bc2 = step.inv_sqrt_bc2;
  launch_adamw(build_tables(tensors, count, grad_dtype, hyper.lr), grad_dtype, s, grad_scale,
               nullptr, stream);
  BLUBLAS_KERNEL_LAUNCH_CHECK("adamw_update");
  return Status::success();
}

AdamWStepScalars adamw_step_scalars(double lr, double beta1, double beta2, int step) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(static_cast<float>(beta1)), step);
  const double bc2 = 1.0 - std::pow(static_cast<double>(static_cast<float>(beta2)), step);
  AdamWStepScalars out;
  out.lr = static_cast<float>(lr);
  out.step_size = static_cast<float>(static_cast<double>(out.lr) / bc1);
  out.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  return out;
}

Status adamw_update_device_scalars(const AdamWTensor* tensors, int count, Dtype grad_dtype,
                                   float beta1, float beta2, float eps,
                                   const AdamWStepScalars* step_scalars, const float* grad_scale,
                                   cudaStream_t stream) {
  const char* op = "adamw_update_device_scalars";
  BLUBLAS_RETURN_IF_ERROR(check_list(op, tensors, count, grad_dtype, true));
  BLUBLAS_RETURN_IF_ERROR(check_betas(op, beta1, beta2, eps));
  BLUBLAS_CHECK_ARG(step_scalars != nullptr, op, ": step_scalars is null");
  // The static lr only fills tab.decay, which the device-scalar kernel ignores.
  launch_adamw(build_tables(tensors, count, grad_dtype, 0.0f), grad_dtype,
               base_scalars(beta1, beta2, eps), grad_scale, step_scalars, stream);
  BLUBLAS_KERNEL_LAUNCH_CHECK(op);
  return Status::success();
}

Status bf16_weight_copy(const AdamWTensor* tensors, int count, cudaStream_t stream) {
  const char* op = "bf16_weight_copy";
  BLUBLAS_CHECK_ARG(count >= 0, op, ": count=", count, " must be >= 0");
  BLUBLAS_CHECK_ARG(count == 0 || tensors != nullptr, op, ": tensors is null with count=", count);
  std::vector<AdamWTensor> with_copy;
  int64_t total_blocks = 0;
  for (int i = 0; i < count; ++i) {
    const AdamWTensor& t = tensors[i];
    BLUBLAS_CHECK_ARG(t.numel >= 0, op, ": tensor ", i, " numel=", t.numel, " must be >= 0");
    if (t.numel == 0 || t.param_bf16 == nullptr) continue;
    BLUBLAS_CHECK_ARG(t.param != nullptr, op, ": tensor ", i, " (numel=", t.numel,
                      ") has a bf16 copy but a null param");
    with_copy.push_back(t);
    total_blocks += blocks_of(t.numel);
  }
  BLUBLAS_CHECK_ARG(total_blocks < (int64_t{1} << 31), op, ": ", total_blocks,
                    " blocks of work is too large");
  for (const LaunchTable& tab :
       build_tables(with_copy.data(), static_cast<int>(with_copy.size()), Dtype::kF32, 0.0f)) {
    bf16_copy_kernel<<<static_cast<unsigned>(tab.block_start[tab.count]), kThreads, 0, stream>>>(tab);
    BLUBLAS_KERNEL_LAUNCH_CHECK(op);
  }
  return Status::success();
}

Status grad_global_norm_workspace_size(const AdamWTensor* tensors, int count, std::size_t* bytes) {
  BLUBLAS_CHECK_ARG(bytes != nullptr, "grad_global_norm_workspace_size: bytes is null");
  BLUBLAS_RETURN_IF_ERROR(
      check_list("grad_global_norm_workspace_size", tensors, count, Dtype::kF32, false));
  int64_t blocks = 0;
  for (int i = 0; i < count; ++i) blocks += blocks_of(std::max<int64_t>(tensors[i].numel, 0));
  *bytes = static_cast<std::size_t>(blocks) * sizeof(float);
  return Status::success();
}

Status grad_global_norm(float* norm_out, float* clip_scale_out, float max_norm,
                        const AdamWTensor* tensors, int count, Dtype grad_dtype, void* workspace,
                        std::size_t workspace_bytes, cudaStream_t stream) {
  BLUBLAS_RETURN_IF_ERROR(check_list("grad_global_norm", tensors, count, grad_dtype, false));
  BLUBLAS_CHECK_ARG(norm_out != nullptr, "grad_global_norm: norm_out must not be null");
  std::size_t need = 0;
  BLUBLAS_RETURN_IF_ERROR(grad_global_norm_workspace_size(tensors, count, &need));
  BLUBLAS_CHECK(workspace_bytes >= need, StatusCode::kWorkspaceTooSmall,
                "grad_global_norm: workspace of ", workspace_bytes, " bytes < ", need,
                " needed for ", count, " tensors");
  BLUBLAS_CHECK_ARG(need == 0 || workspace != nullptr, "grad_global_norm: workspace is null");
  auto* partial = static_cast<float*>(workspace);
  const std::vector<LaunchTable> tables = build_tables(tensors, count, grad_dtype, 0.0f);
  for (const LaunchTable& tab : tables) {
    const unsigned blocks = static_cast<unsigned>(tab.block_start[tab.count]);
    if (grad_dtype == Dtype::kF32) {
      grad_sumsq_kernel<float><<<blocks, kThreads, 0, stream>>>(tab, partial);
    } else {
      grad_sumsq_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(tab, partial);
    }
    BLUBLAS_KERNEL_LAUNCH_CHECK("grad_global_norm (partials)");
  }
  grad_norm_finish_kernel<<<1, kNormFinishThreads, 0, stream>>>(
      norm_out, clip_scale_out, max_norm, partial, total_blocks_of(tables));
  BLUBLAS_KERNEL_LAUNCH_CHECK("grad_global_norm (finish)");
  return Status::success();
}

}  // namespace blublas

// blublas/adamw.h: multi-tensor AdamW and the global gradient norm used for clipping.
//
// One call updates a whole list of parameter tensors: the launcher packs the list into kernel
// parameters (up to kAdamWTensorsPerLaunch tensors per launch, so GPT-2 124M's 148 tensors are
// one launch) and every block finds its tensor by a binary search over a block prefix.
//
// Update (PyTorch AdamW semantics), per element, with g = grad * (*grad_scale if given):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p = p * (1 - lr * wd) - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//   param_bf16 = bf16(p) when the tensor has a bf16 copy.
// Gradient norm: sqrt(sum of g^2 over all tensors), two stages: fixed per-block partials (the
// partition depends only on the tensor sizes), then one block adds them in order (in f64).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "blublas/dtype.h"
#include "blublas/status.h"

namespace blublas {

struct AdamWTensor {
  float* param = nullptr;       // f32 master weights [numel]
  const void* grad = nullptr;   // grad_dtype [numel]
  float* m = nullptr;           // f32 first moment
  float* v = nullptr;           // f32 second moment
  void* param_bf16 = nullptr;   // optional bf16 copy written in the same pass (null: none)
  int64_t numel = 0;
  float weight_decay = 0.0f;
};

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  int step = 1;  // 1-based step count for the bias corrections
};

inline constexpr int kAdamWTensorsPerLaunch = 256;

// tensors: host array of `count` descriptors holding device pointers. grad_scale: device f32
// scalar multiplying every gradient (clip factor from grad_global_norm), or null for 1. A
// non-finite *grad_scale skips the update: nothing is written (the step's skip for a non-finite
// loss or gradient norm decided on the device, without a host read: blutrain Note [Update
// without a host read]). The same holds for adamw_update_device_scalars.
Status adamw_update(const AdamWTensor* tensors, int count, Dtype grad_dtype,
                    const AdamWHyper& hyper, const float* grad_scale, cudaStream_t stream);

// Note [AdamW step scalars on the device]
// A CUDA graph bakes kernel arguments in at capture, but the learning rate and the step count
// change every step. adamw_update_device_scalars reads them from device memory when the kernel
// runs: the caller writes an AdamWStepScalars (from adamw_step_scalars) into device memory before
// each replay (e.g. a captured cudaMemcpyAsync from pinned host memory). The update is bit-for-bit
// the one adamw_update computes for the same lr and step (the kernel rounds 1 - lr * wd exactly
// as the host does).
struct AdamWStepScalars {
  float lr = 0.0f;            // learning rate
  float step_size = 0.0f;     // lr / (1 - beta1^t), rounded once from double
  float inv_sqrt_bc2 = 0.0f;  // 1 / sqrt(1 - beta2^t), rounded once from double
};

// The scalars for learning rate `lr` at 1-based step `step` (the values adamw_update uses).
AdamWStepScalars adamw_step_scalars(double lr, double beta1, double beta2, int step);

// adamw_update with lr and the bias corrections read from `step_scalars` (device memory) at run
// time. Weight decay stays per tensor (AdamWTensor::weight_decay).
Status adamw_update_device_scalars(const AdamWTensor* tensors, int count, Dtype grad_dtype,
                                   float beta1, float beta2, float eps,
                                   const AdamWStepScalars* step_scalars, const float* grad_scale,
                                   cudaStream_t stream);

// param_bf16 = bf16(param) for every tensor of the list that has a bf16 copy (param_bf16 not
// null; the others are skipped); grad, m and v are not read. The rounding is adamw_update's
// (round to nearest even), so a copy refreshed here holds the bits the update would have written:
// a caller may keep part of its bf16 weights out of the update's list and cast them when it needs
// them (blutrain Note [Per-layer bf16 weight copy]).
Status bf16_weight_copy(const AdamWTensor* tensors, int count, cudaStream_t stream);

// Workspace bytes grad_global_norm needs for this tensor list (independent of the device).
Status grad_global_norm_workspace_size(const AdamWTensor* tensors, int count, std::size_t* bytes);

// *norm_out = sqrt(sum g^2) (device f32). When clip_scale_out is not null it receives
// min(1, max_norm / (norm + 1e-6)) (1 when max_norm <= 0), ready to pass as adamw_update's
// grad_scale: clipping without a host sync.
Status grad_global_norm(float* norm_out, float* clip_scale_out, float max_norm,
                        const AdamWTensor* tensors, int count, Dtype grad_dtype, void* workspace,
                        std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace blublas

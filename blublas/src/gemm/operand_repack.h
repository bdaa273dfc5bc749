// operand_repack.h (internal): copies a GEMM operand whose pointer, leading dimension or batch
// stride is not 16-byte aligned into an aligned, packed buffer of the caller's workspace, so kAuto
// can still run a tensor-core path (which load 16-byte chunks with cp.async or TMA) instead of
// falling back to the SIMT kernels. See Note [Repacking misaligned operands] in gemm.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "blublas/dtype.h"
#include "blublas/status.h"

namespace blublas::gemm_detail {

// A batch of `outer` x `inner` matrices (inner contiguous): element (b, o, i) at
// src[b*stride_src + o*ld_src + i]; copied to dst[b*stride_dst + o*ld_dst + i] with
// ld_dst = inner rounded up to 16 bytes and stride_dst = outer * ld_dst.
struct RepackSpec {
  Dtype type = Dtype::kBF16;
  int batch = 1;
  int64_t outer = 0, inner = 0;
  int64_t ld_src = 0, stride_src = 0;
  int64_t ld_dst() const;
  int64_t stride_dst() const { return outer * ld_dst(); }
  std::size_t bytes() const;  // of the packed copy
};

Status repack_operand(const RepackSpec& spec, const void* src, void* dst, cudaStream_t stream);

// dst (rows x cols, row-major, ld_dst) = transpose of src (cols x rows, row-major, ld_src), per
// batch (element strides); f32. Used by the sm90 tf32 pre-pass (tf32 wgmma reads K-major operands
// only) and the SIMT path's NT problems (Note [SIMT NT via a transposed B], simt_gemm.cu).
Status transpose_f32(float* dst, int64_t ld_dst, int64_t stride_dst, const float* src,
                     int64_t ld_src, int64_t stride_src, int rows, int cols, int batch,
                     cudaStream_t stream);

}  // namespace blublas::gemm_detail

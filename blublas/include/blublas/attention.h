// blublas/attention.h: scaled dot-product attention (flash attention), forward and backward.
//
//   S = scale * Q K^T (causal: key > query masked), P = softmax(S), O = P V, L = logsumexp(S)
//
// Every tensor is a [B, T, H, d] view with d contiguous and explicit element strides for batch,
// sequence and head, so a caller can point q, k and v straight into a fused qkv activation
// [B, T, 3, H, d] without a copy (attn_qkv_view). The saved log-sum-exp
// L is fp32 [B, H, T] contiguous, natural log. Backward takes dO, O and L and writes dQ, dK, dV;
// it needs a caller workspace (attention_backward_workspace_size) for D = rowsum(dO * O).
//
// Paths: sm_90a wgmma + TMA (bf16 on Hopper), sm_80 mma.sync (also forcible on Hopper), SIMT.
// Precision is a named mode: bf16 (tensor cores, fp32 accumulation and softmax), strict fp32
// (SIMT FMA, no tf32 anywhere) and tf32 (tensor cores on tf32-rounded fp32 operands).
// Deterministic: dK/dV are computed per key block and dQ per query block in a separate pass, from
// per-key-block partials summed in a fixed order, or (bf16 causal on sm_90, on request) added
// into an fp32 accumulator by the key blocks in key-block order (AttnDqMode): the same bits every
// run. No hidden allocation, no host synchronisation.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "blublas/status.h"

namespace blublas {

enum class AttnPrecision : int {
  kBF16 = 0,           // bf16 storage; tensor cores; fp32 accumulation, softmax and L
  kF32Strict = 1,      // f32 storage; SIMT fp32 FMA only (no tf32 rounding anywhere)
  kF32TF32 = 2,        // f32 storage; tensor cores on tf32-rounded operands; fp32 accumulation
  kF32Split3TF32 = 3,  // f32 storage; tensor cores on split-tf32 operands (3 mma per product:
                       // big*big + big*small + small*big), fp32 accumulation: fp32-level error
};

// Which kernel family runs. kAuto picks the fastest path that takes the arguments.
enum class AttnPath : int {
  kAuto = 0,
  kSimt = 1,       // CUDA-core fp32 kernels (the only path for kF32Strict; fallback for bf16)
  kSm80Mma = 2,    // mma.sync + ldmatrix + cp.async (sm_80 and newer, also what runs on Hopper)
  kSm90Wgmma = 3,  // wgmma + TMA, warp-specialized (sm_90a devices, bf16 only; what kAuto takes
                   // there when views are 16-byte aligned)
};

// How the backward computes dQ. All are deterministic. kPartials and kAccumulate are requests:
// kPartials (Note [dQ partials] in sm80_flash_attn_bwd.cuh) applies to 3xTF32 at head_dim 64 on
// the sm80 path when its workspace (B*H*ceil(T/64)*T*64 floats) is at most 2 GiB; kAccumulate
// (Note [sm90 flash backward: dQ accumulated in order] in sm90_flash_attn_bwd.cuh) to bf16,
// causal, head_dim 64 (workspace B*H*ceil(T/64)*64*64 floats + counters), used on the sm90 path;
// everything else runs two passes. kAuto takes kPartials where it applies unless
// BLUBLAS_ATTN_DQ=twopass, and kAccumulate only with BLUBLAS_ATTN_DQ=accumulate (read once per
// process): on the H200 it measured slower than two passes (0.83x of their backward at GPT-2
// 124M, 0.79x at T=16384; session 31).
enum class AttnDqMode : int {
  kAuto = 0,
  kTwoPass = 1,    // a dK/dV pass and a dQ pass that recomputes S and dP
  kPartials = 2,   // the dK/dV pass also writes per-key-block dQ partials; a reduce sums them
  kAccumulate = 3, // the dK/dV pass adds dQ into an fp32 accumulator, key blocks in order
};

// A read-only [B, T, H, d] view; element (b, t, h, i) is ptr[b*batch + t*seq + h*head + i].
struct AttnInput {
  const void* ptr = nullptr;
  int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;  // in elements
};
// A written [B, T, H, d] view (same addressing).
struct AttnOutput {
  void* ptr = nullptr;
  int64_t batch_stride = 0, seq_stride = 0, head_stride = 0;  // in elements
};

struct AttentionDesc {
  int batch = 0, seq_len = 0, heads = 0, head_dim = 0;  // head_dim: 64 or 128
  float softmax_scale = 0.0f;                           // usually 1/sqrt(head_dim); must be > 0
  bool causal = true;
  AttnPrecision precision = AttnPrecision::kBF16;
  AttnPath path = AttnPath::kAuto;
  AttnDqMode dq_mode = AttnDqMode::kAuto;  // backward only; sizes the workspace too

  AttnInput q, k, v;
  AttnOutput o;          // forward: written; backward: read
  float* lse = nullptr;  // [B, H, T] fp32; forward: written; backward: read
  // Backward only.
  AttnInput d_o;
  AttnOutput dq, dk, dv;
};

// Strides of a dense [B, T, H, d] tensor.
inline void attn_dense_strides(int seq_len, int heads, int head_dim, int64_t* batch_stride,
                               int64_t* seq_stride, int64_t* head_stride) {
  *head_stride = head_dim;
  *seq_stride = static_cast<int64_t>(heads) * head_dim;
  *batch_stride = static_cast<int64_t>(seq_len) * heads * head_dim;
}

// View `which` (0 = q, 1 = k, 2 = v) of a fused qkv activation [B, T, 3, H, d] of `elem_bytes`-byte
// elements starting at `qkv`.
inline AttnInput attn_qkv_view(const void* qkv, int which, int seq_len, int heads, int head_dim,
                               std::size_t elem_bytes) {
  AttnInput in;
  in.ptr = static_cast<const char*>(qkv) +
           static_cast<std::size_t>(which) * heads * head_dim * elem_bytes;
  in.head_stride = head_dim;
  in.seq_stride = 3LL * heads * head_dim;
  in.batch_stride = static_cast<int64_t>(seq_len) * 3 * heads * head_dim;
  return in;
}

// Forward: writes o and lse. Asynchronous on `stream`; argument errors are returned before any
// launch.
Status attention_forward(const AttentionDesc& desc, cudaStream_t stream);

// Bytes of workspace attention_backward needs for this desc: B*H*T floats (rounded up), plus the
// dQ partials or the dQ accumulator when this desc runs in AttnDqMode::kPartials / kAccumulate.
// Size it with the desc (precision, head_dim, causal, dq_mode) the backward will get, after
// BLUBLAS_ATTN_DQ is set.
Status attention_backward_workspace_size(const AttentionDesc& desc, std::size_t* bytes);

// Backward: reads q, k, v, o, lse, d_o; writes dq, dk, dv (fully overwritten, never accumulated).
// workspace: at least attention_backward_workspace_size bytes, 16-byte aligned.
Status attention_backward(const AttentionDesc& desc, void* workspace, std::size_t workspace_bytes,
                          cudaStream_t stream);

// The path kAuto would take for this desc on the current device (for logs and benchmarks).
Status attention_selected_path(const AttentionDesc& desc, AttnPath* path);

const char* attn_path_name(AttnPath path) noexcept;
const char* attn_precision_name(AttnPrecision precision) noexcept;

}  // namespace blublas

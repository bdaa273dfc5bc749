// attention_params.h: the plain parameter block every attention kernel takes (pointers, strides,
// sizes; no framework types) and the internal launch entry points of each kernel family. The
// public launchers (attention.cpp) check arguments and pick a family; the families only launch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "blublas/attention.h"
#include "blublas/device_info.h"
#include "blublas/status.h"

namespace blublas::attn {

struct Strides {
  int64_t b = 0, t = 0, h = 0;  // elements
};

struct Params {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;  // const in backward
  float* lse = nullptr;
  const void* d_o = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  float* delta = nullptr;  // backward workspace: D = rowsum(dO * O), [B, H, T]
  Strides sq, sk, sv, so, sdo, sdq, sdk, sdv;
  int batch = 0, seq_len = 0, heads = 0;
  float scale = 0.0f;       // softmax scale
  float scale_log2 = 0.0f;  // scale * log2(e): scores go to base 2 before exp2
  int causal = 1;
  // Backward workspace in dQ-partials mode, else null (Note [dQ partials]):
  // [B*H][ceil(T/64) key blocks][T][64] fp32.
  float* dq_part = nullptr;
  // Backward workspace in dQ-accumulate mode, else null (Note [sm90 flash backward: dQ
  // accumulated in order]): the fp32 accumulator [B*H][ceil(T/64)][64 x 64] and the chain
  // counters [B*H][ceil(T/64)] + the CTA ticket (zeroed by attn_bwd_delta).
  float* dq_acc = nullptr;
  uint32_t* dq_sem = nullptr;
  // sm90 two-pass backward: heads per group of its CTA order (Note [sm90 flash backward: CTA
  // order]); -1 = chosen by the launcher from the SM count (the default), 0 = all heads in one
  // group, G > 0 = G; BLUBLAS_ATTN_BWD_GROUP sets 0 or G.
  int bwd_group_heads = -1;
};

// The parameter block of a desc; `workspace` (attention_backward_workspace_size bytes, or null for
// the forward) holds delta, then the dQ partials when dq_partials_mode(desc).
Params make_params(const AttentionDesc& desc, void* workspace);
std::size_t backward_workspace_bytes(const AttentionDesc& desc);

// Note [dQ partials]: whether the backward of `desc` runs in dQ-partials mode (requested by
// desc.dq_mode or BLUBLAS_ATTN_DQ, 3xTF32, head_dim 64, partials <= kDqPartialsMaxBytes). The
// workspace size and the launcher both decide through this one function.
constexpr int kDqPartialsKeyBlock = 64;  // keys per dK/dV CTA (sm80 tf32 d64 DkDvTiles::kBc)
constexpr std::size_t kDqPartialsMaxBytes = std::size_t{2} << 30;
std::size_t dq_partials_bytes(const AttentionDesc& desc);
bool dq_partials_mode(const AttentionDesc& desc);
// Whether the backward of `desc` gets the dQ accumulator (requested by desc.dq_mode, or kAuto
// with BLUBLAS_ATTN_DQ=accumulate; bf16, causal, head_dim 64); the sm90 path then uses it.
bool dq_accumulate_mode(const AttentionDesc& desc);
// Chain counters + ticket of dQ-accumulate mode (uint32 each).
int64_t dq_sem_count(int batch, int heads, int seq_len);

// mma.sync families (bf16: m16n8k16; tf32: m16n8k8 on tf32-rounded fp32 storage). Each returns
// kNotSupported when the device's opt-in shared memory is too small for its tiles.
Status sm80_bf16_flash_attn_fwd(const Params& p, int head_dim, const DeviceInfo& dev,
                                cudaStream_t stream);
Status sm80_bf16_flash_attn_bwd(const Params& p, int head_dim, const DeviceInfo& dev,
                                cudaStream_t stream);
// split3: 3xTF32 products (AttnPrecision::kF32Split3TF32), same tiles.
Status sm80_tf32_flash_attn_fwd(const Params& p, int head_dim, bool split3, const DeviceInfo& dev,
                                cudaStream_t stream);
Status sm80_tf32_flash_attn_bwd(const Params& p, int head_dim, bool split3, const DeviceInfo& dev,
                                cudaStream_t stream);

// Note [Attention tile tables]
// The bf16 kernels are compiled in several tile configurations (warps, rows per warp, block
// sizes, operands held in registers, occupancy target). Entry 0 of each table is what the
// launchers run; the benchmark sweeps the others on the device so the default is chosen from
// measurements, not guesses. Backward entries pair a dK/dV configuration with a dQ one.
struct KernelConfig {
  const char* name;
  Status (*launch)(const Params& p, const DeviceInfo& dev, cudaStream_t stream);
};
// The entry a launcher runs: entry `env` names (an index, read per call: BLUBLAS_ATTN_FWD_CFG /
// BLUBLAS_ATTN_BWD_CFG for the sm90 tables, so a whole training run can try an entry without a
// rebuild) where it exists, else entry `fallback` (the launcher's choice for the shape).
const KernelConfig& table_entry(const KernelConfig* table, int count, const char* env,
                                int fallback = 0);
const KernelConfig* sm80_bf16_fwd_table(int head_dim, int* count);
const KernelConfig* sm80_bf16_bwd_table(int head_dim, int* count);
const KernelConfig* sm80_bf16_fwd_d64_table(int* count);
const KernelConfig* sm80_bf16_fwd_d128_table(int* count);
const KernelConfig* sm80_bf16_bwd_d64_table(int* count);
const KernelConfig* sm80_bf16_bwd_d128_table(int* count);

// sm_90a wgmma + TMA family (bf16 only; Note [sm90 flash forward: warp-specialized, P in
// registers], Note [sm90 flash backward]). kUnsupportedArch on other devices; kNotSupported when
// a view cannot be described by a TMA tensor map (an automatic choice then falls back to sm80).
Status sm90_attn_available(const DeviceInfo& dev);  // sm_90 device and sm_90a code in this build
Status sm90_bf16_flash_attn_fwd(const Params& p, int head_dim, const DeviceInfo& dev,
                                cudaStream_t stream);
Status sm90_bf16_flash_attn_bwd(const Params& p, int head_dim, const DeviceInfo& dev,
                                cudaStream_t stream);
const KernelConfig* sm90_bf16_fwd_table(int head_dim, int* count);
const KernelConfig* sm90_bf16_bwd_table(int head_dim, int* count);

// SIMT fp32-arithmetic family; `bf16` selects bf16 storage (the fallback for misaligned views).
Status simt_attn_fwd(const Params& p, int head_dim, bool bf16, cudaStream_t stream);
Status simt_attn_bwd(const Params& p, int head_dim, bool bf16, cudaStream_t stream);

// D[b, h, t] = sum_i dO[b, t, h, i] * O[b, t, h, i] in fp32 (first step of every backward).
Status attn_bwd_delta(const Params& p, int head_dim, bool bf16, cudaStream_t stream);

}  // namespace blublas::attn

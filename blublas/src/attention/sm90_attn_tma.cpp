// sm90_attn_tma.cpp: the 4-D tensor maps of the attention views and the sm90 launch checks
// (sm90_attn_tma.h).
#include "attention/sm90_attn_tma.h"

#include <cstdint>

#include "blublas/check.h"
#include "common/tma_loader.h"

namespace blublas::attn {

Status make_bthd_tensor_map(CUtensorMap* map, const void* ptr, const Strides& s, int batch,
                            int seq_len, int heads, int head_dim, int box_rows, const char* op,
                            const char* name) {
  constexpr uint64_t kElemBytes = 2;  // bf16
  const uint64_t dims[4] = {static_cast<uint64_t>(head_dim), static_cast<uint64_t>(heads),
                            static_cast<uint64_t>(seq_len), static_cast<uint64_t>(batch)};
  // A size-1 dimension's stride is never used; give it a legal value (TMA wants multiples of 16).
  auto stride_or = [](int64_t stride, int extent, uint64_t fallback) {
    return extent > 1 ? static_cast<uint64_t>(stride) * kElemBytes : fallback;
  };
  const uint64_t sh = stride_or(s.h, heads, static_cast<uint64_t>(head_dim) * kElemBytes);
  const uint64_t st = stride_or(s.t, seq_len, sh * static_cast<uint64_t>(heads));
  const uint64_t sb = stride_or(s.b, batch, st * static_cast<uint64_t>(seq_len));
  const uint64_t strides[3] = {sh, st, sb};
  const uint32_t box[4] = {64, 1, static_cast<uint32_t>(box_rows), 1};
  const Status st_enc = blublas::detail::encode_tensor_map_tiled(
      map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, ptr, dims, strides, box,
      CU_TENSOR_MAP_SWIZZLE_128B);
  BLUBLAS_CHECK(st_enc.ok(), StatusCode::kNotSupported, op, ": no TMA tensor map for ", name,
                " (B=", batch, ", T=", seq_len, ", H=", heads, ", d=", head_dim,
                ", strides b/t/h=", s.b, "/", s.t, "/", s.h, "): ", st_enc.to_string());
  return Status::success();
}

Status check_sm90_launch(const DeviceInfo& dev, int smem_bytes, const char* op) {
  BLUBLAS_CHECK(dev.sm_version() == 90, StatusCode::kUnsupportedArch, op,
                ": needs an sm_90a device (wgmma, TMA), device is sm_", dev.sm_version());
  BLUBLAS_CHECK(smem_bytes <= dev.max_smem_per_block_optin, StatusCode::kNotSupported, op,
                ": needs ", smem_bytes, " bytes of shared memory per block, device allows ",
                dev.max_smem_per_block_optin);
  return Status::success();
}

}  // namespace blublas::attn

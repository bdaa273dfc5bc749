// sm90_attn_tma.h (internal, host side): TMA tensor maps of the attention views and the sm90
// launch checks. A [B, T, H, d]
// view with explicit strides becomes a 4-D map with dims {d, H, T, B} (innermost first: for dense
// and fused-qkv layouts the byte strides then grow outward) and a box of 64 columns (128 bytes,
// the 128-byte swizzle span) by `box_rows` sequence rows of one (b, h). Rows past T are
// zero-filled by the hardware and never alias the next head or batch.
#pragma once

#include <cuda.h>

#include "attention/attention_params.h"
#include "blublas/device_info.h"
#include "blublas/status.h"

namespace blublas::attn {

// Returns kNotSupported (never launches anything) when the driver refuses the view, so an
// automatic path choice can fall back to the sm80 kernels.
Status make_bthd_tensor_map(CUtensorMap* map, const void* ptr, const Strides& s, int batch,
                            int seq_len, int heads, int head_dim, int box_rows, const char* op,
                            const char* name);

// The launch preconditions every sm90 attention kernel shares: an sm_90 device and `smem_bytes` of
// opt-in shared memory per block.
Status check_sm90_launch(const DeviceInfo& dev, int smem_bytes, const char* op);

}  // namespace blublas::attn

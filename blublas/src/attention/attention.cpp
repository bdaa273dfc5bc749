// attention.cpp: the public attention launchers (blublas/attention.h): argument checks, path
// selection and dispatch to a kernel family. Every argument error is found before any CUDA call,
// so bad input returns a Status (tested on machines without a GPU) and never reaches a kernel.
//
// Note [Attention path selection]
//   kF32Strict          -> SIMT (the only path that never rounds to tf32)
//   kBF16               -> sm90 wgmma + TMA on an sm_90 device running sm_90a code, when every
//                          pointer is 16-byte aligned and every stride a multiple of 16 bytes
//                          (TMA and cp.async move 16-byte chunks); if the driver refuses a view's
//                          tensor map (kNotSupported, nothing launched) the sm80 path runs instead
//   kBF16 / kF32TF32 / kF32Split3TF32 -> sm80 mma.sync under the same alignment rule (and on
//                          other devices; on Hopper too for the fp32 modes);
//                          otherwise SIMT (fp32 arithmetic on the same storage: slower, at least
//                          as accurate).
// A forced path that cannot take the arguments returns an error instead of falling back; the
// sm80 path stays forcible on Hopper (that is how it is tested there).
#include "blublas/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "attention/attention_params.h"
#include "blublas/check.h"
#include "blublas/device_info.h"

namespace blublas {
namespace {

constexpr std::size_t kWorkspaceAlign = 256;

bool is_bf16(AttnPrecision p) {
  return p == AttnPrecision::kBF16;
}
bool split3(AttnPrecision p) {
  return p == AttnPrecision::kF32Split3TF32;
}
std::size_t elem_bytes(AttnPrecision p) {
  return is_bf16(p) ? 2 : 4;
}

bool aligned(const void* ptr, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(ptr) % bytes == 0;
}
template <typename View>
bool view_vector_ok(const View& v, std::size_t eb) {
  const int64_t chunk = static_cast<int64_t>(16 / eb);
  return aligned(v.ptr, 16) && v.batch_stride % chunk == 0 && v.seq_stride % chunk == 0 &&
         v.head_stride % chunk == 0;
}
template <typename View>
Status check_view(const View& v, const char* op, const char* name, std::size_t eb) {
  BLUBLAS_CHECK_ARG(v.ptr != nullptr, op, ": ", name, " is null");
  BLUBLAS_CHECK_ARG(v.batch_stride >= 0 && v.seq_stride >= 0 && v.head_stride >= 0, op, ": ", name,
                    " has a negative stride (batch=", v.batch_stride, ", seq=", v.seq_stride,
                    ", head=", v.head_stride, ")");
  BLUBLAS_CHECK(aligned(v.ptr, eb), StatusCode::kMisaligned, op, ": ", name,
                " is not aligned to its ", eb, "-byte element");
  return Status::success();
}

Status check_desc(const AttentionDesc& d, bool backward, const char* op) {
  BLUBLAS_CHECK_ARG(d.batch >= 0 && d.seq_len >= 0 && d.heads >= 0, op,
                    ": negative size (B=", d.batch, ", T=", d.seq_len, ", H=", d.heads, ")");
  BLUBLAS_CHECK_ARG(d.batch <= 65535 && d.heads <= 65535, op, ": B=", d.batch, " or H=", d.heads,
                    " exceeds 65535");
  BLUBLAS_CHECK(d.head_dim == 64 || d.head_dim == 128, StatusCode::kNotSupported, op,
                ": head_dim=", d.head_dim, " not supported (64 or 128)");
  BLUBLAS_CHECK_ARG(std::isfinite(d.softmax_scale) && d.softmax_scale > 0.0f, op,
                    ": softmax_scale=", d.softmax_scale, " must be finite and > 0");
  const int prec = static_cast<int>(d.precision);
  BLUBLAS_CHECK_ARG(prec >= 0 && prec <= 3, op, ": unknown precision ", prec);
  const int path = static_cast<int>(d.path);
  BLUBLAS_CHECK_ARG(path >= 0 && path <= 3, op, ": unknown path ", path);
  const int dq_mode = static_cast<int>(d.dq_mode);
  BLUBLAS_CHECK_ARG(dq_mode >= 0 && dq_mode <= 3, op, ": unknown dq_mode ", dq_mode);
  BLUBLAS_CHECK(!(d.path == AttnPath::kSm90Wgmma && d.precision != AttnPrecision::kBF16),
                StatusCode::kNotSupported, op, ": the sm90 wgmma path takes bf16 only (precision ",
                attn_precision_name(d.precision), "; use kSm80Mma or kAuto)");
  BLUBLAS_CHECK_ARG(!(d.precision == AttnPrecision::kF32Strict && d.path == AttnPath::kSm80Mma), op,
                    ": strict fp32 runs on the SIMT path only (kSm80Mma would round to tf32; "
                    "use precision kF32TF32)");
  BLUBLAS_CHECK_ARG(
      !((d.precision == AttnPrecision::kF32TF32 || d.precision == AttnPrecision::kF32Split3TF32) &&
        d.path == AttnPath::kSimt),
      op, ": precision ", attn_precision_name(d.precision),
      " needs tensor cores; the SIMT path computes strict fp32 (use precision "
      "kF32Strict)");
  const std::size_t eb = elem_bytes(d.precision);
  BLUBLAS_RETURN_IF_ERROR(check_view(d.q, op, "q", eb));
  BLUBLAS_RETURN_IF_ERROR(check_view(d.k, op, "k", eb));
  BLUBLAS_RETURN_IF_ERROR(check_view(d.v, op, "v", eb));
  BLUBLAS_RETURN_IF_ERROR(check_view(d.o, op, "o", eb));
  BLUBLAS_CHECK_ARG(d.lse != nullptr, op, ": lse is null");
  BLUBLAS_CHECK(aligned(d.lse, 4), StatusCode::kMisaligned, op, ": lse is not 4-byte aligned");
  if (backward) {
    BLUBLAS_RETURN_IF_ERROR(check_view(d.d_o, op, "d_o", eb));
    BLUBLAS_RETURN_IF_ERROR(check_view(d.dq, op, "dq", eb));
    BLUBLAS_RETURN_IF_ERROR(check_view(d.dk, op, "dk", eb));
    BLUBLAS_RETURN_IF_ERROR(check_view(d.dv, op, "dv", eb));
  }
  return Status::success();
}

bool vector_ok(const AttentionDesc& d, bool backward) {
  const std::size_t eb = elem_bytes(d.precision);
  bool ok = view_vector_ok(d.q, eb) && view_vector_ok(d.k, eb) && view_vector_ok(d.v, eb) &&
            view_vector_ok(d.o, eb);
  if (backward) {
    ok = ok && view_vector_ok(d.d_o, eb) && view_vector_ok(d.dq, eb) && view_vector_ok(d.dk, eb) &&
         view_vector_ok(d.dv, eb);
  }
  return ok;
}

// Picks the path after the argument checks (needs the device's compute capability).
Status select_path(const AttentionDesc& d, bool backward, const DeviceInfo& dev, const char* op,
                   AttnPath* out) {
  BLUBLAS_CHECK(dev.sm_version() >= 80, StatusCode::kUnsupportedArch, op,
                ": needs sm_80 or newer, device is sm_", dev.sm_version());
  if (d.precision == AttnPrecision::kF32Strict || d.path == AttnPath::kSimt) {
    *out = AttnPath::kSimt;
    return Status::success();
  }
  const bool vec = vector_ok(d, backward);
  if (d.path == AttnPath::kSm90Wgmma) {
    BLUBLAS_CHECK(vec, StatusCode::kMisaligned, op,
                  ": the sm90 wgmma path needs 16-byte aligned pointers and strides that are "
                  "multiples of 16 bytes (TMA)");
    BLUBLAS_RETURN_IF_ERROR(attn::sm90_attn_available(dev));
    *out = AttnPath::kSm90Wgmma;
    return Status::success();
  }
  if (d.path == AttnPath::kAuto && vec && d.precision == AttnPrecision::kBF16 &&
      attn::sm90_attn_available(dev).ok()) {
    *out = AttnPath::kSm90Wgmma;
    return Status::success();
  }
  if (d.path == AttnPath::kSm80Mma) {
    BLUBLAS_CHECK(vec, StatusCode::kMisaligned, op,
                  ": the sm80 mma path needs 16-byte aligned pointers and strides that are "
                  "multiples of 16 bytes (precision ",
                  attn_precision_name(d.precision), ")");
    *out = AttnPath::kSm80Mma;
    return Status::success();
  }
  *out = vec ? AttnPath::kSm80Mma : AttnPath::kSimt;
  return Status::success();
}

attn::Strides strides_of(int64_t b, int64_t t, int64_t h) {
  attn::Strides s;
  s.b = b;
  s.t = t;
  s.h = h;
  return s;
}

std::size_t round_up(std::size_t n) {
  return (n + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

std::size_t delta_bytes(const AttentionDesc& d) {
  return round_up(static_cast<std::size_t>(d.batch) * d.heads * d.seq_len * sizeof(float));
}

// The backward workspace is D = rowsum(dO * O), B*H*T fp32. In two-pass mode the dQ pass
// recomputes S and dP instead of accumulating dQ across key blocks, so there is no dQ buffer; in
// dQ-partials mode the per-key-block partials follow D (Note [dQ partials]).
// In dQ-accumulate mode the fp32 accumulator and the chain counters follow D (Note [sm90 flash
// backward: dQ accumulated in order]).
std::size_t dq_acc_bytes(const AttentionDesc& d) {
  const std::size_t nqb = (static_cast<std::size_t>(d.seq_len) + 63) / 64;
  return round_up(static_cast<std::size_t>(d.batch) * d.heads * nqb * 64 * 64 * sizeof(float));
}
std::size_t dq_sem_bytes(const AttentionDesc& d) {
  return round_up(static_cast<std::size_t>(attn::dq_sem_count(d.batch, d.heads, d.seq_len)) *
                  sizeof(uint32_t));
}

std::size_t workspace_bytes(const AttentionDesc& d) {
  const std::size_t part = attn::dq_partials_mode(d) ? round_up(attn::dq_partials_bytes(d)) : 0;
  const std::size_t acc = attn::dq_accumulate_mode(d) ? dq_acc_bytes(d) + dq_sem_bytes(d) : 0;
  return delta_bytes(d) + part + acc;
}

// BLUBLAS_ATTN_DQ=partials|twopass|accumulate, read once per process. Unset or anything but
// "twopass": partials for 3xTF32 (the default since session 7's measurement, Note [dQ
// partials]). "accumulate": the bf16 dQ accumulator (Note [sm90 flash backward: dQ accumulated
// in order]); not the default: measured slower than two passes (session 31).
const char* dq_env() {
  static const char* v = [] {
    const char* e = std::getenv("BLUBLAS_ATTN_DQ");
    return e == nullptr ? "" : e;
  }();
  return v;
}
bool dq_partials_env() {
  return std::strcmp(dq_env(), "twopass") != 0;
}
bool dq_accumulate_env() {
  return std::strcmp(dq_env(), "accumulate") == 0;
}

bool empty(const AttentionDesc& d) {
  return d.batch == 0 || d.heads == 0 || d.seq_len == 0;
}

}  // namespace

namespace attn {

const KernelConfig& table_entry(const KernelConfig* table, int count, const char* env,
                                int fallback) {
  const char* v = std::getenv(env);
  if (v != nullptr && *v != '\0') {  // an index in range; anything else: the launcher's choice
    char* end = nullptr;
    const long i = std::strtol(v, &end, 10);
    if (*end == '\0' && i >= 0 && i < count) return table[i];
  }
  return table[fallback > 0 && fallback < count ? fallback : 0];
}

std::size_t backward_workspace_bytes(const AttentionDesc& desc) {
  return workspace_bytes(desc);
}

std::size_t dq_partials_bytes(const AttentionDesc& d) {
  if (d.batch <= 0 || d.heads <= 0 || d.seq_len <= 0) return 0;
  const std::size_t nkb =
      (static_cast<std::size_t>(d.seq_len) + kDqPartialsKeyBlock - 1) / kDqPartialsKeyBlock;
  return static_cast<std::size_t>(d.batch) * d.heads * nkb * d.seq_len * 64 * sizeof(float);
}

bool dq_partials_mode(const AttentionDesc& d) {
  const bool requested =
      d.dq_mode == AttnDqMode::kPartials || (d.dq_mode == AttnDqMode::kAuto && dq_partials_env());
  return requested && d.precision == AttnPrecision::kF32Split3TF32 && d.head_dim == 64 &&
         dq_partials_bytes(d) <= kDqPartialsMaxBytes;
}

bool dq_accumulate_mode(const AttentionDesc& d) {
  const bool requested = d.dq_mode == AttnDqMode::kAccumulate ||
                         (d.dq_mode == AttnDqMode::kAuto && dq_accumulate_env());
  return requested && d.precision == AttnPrecision::kBF16 && d.head_dim == 64 && d.causal &&
         d.batch > 0 && d.heads > 0 && d.seq_len > 0;
}

int64_t dq_sem_count(int batch, int heads, int seq_len) {
  return static_cast<int64_t>(batch) * heads * ((seq_len + 63) / 64) + 1;
}

Params make_params(const AttentionDesc& d, void* workspace) {
  Params p;
  p.q = d.q.ptr;
  p.k = d.k.ptr;
  p.v = d.v.ptr;
  p.o = d.o.ptr;
  p.lse = d.lse;
  p.d_o = d.d_o.ptr;
  p.dq = d.dq.ptr;
  p.dk = d.dk.ptr;
  p.dv = d.dv.ptr;
  p.sq = strides_of(d.q.batch_stride, d.q.seq_stride, d.q.head_stride);
  p.sk = strides_of(d.k.batch_stride, d.k.seq_stride, d.k.head_stride);
  p.sv = strides_of(d.v.batch_stride, d.v.seq_stride, d.v.head_stride);
  p.so = strides_of(d.o.batch_stride, d.o.seq_stride, d.o.head_stride);
  p.sdo = strides_of(d.d_o.batch_stride, d.d_o.seq_stride, d.d_o.head_stride);
  p.sdq = strides_of(d.dq.batch_stride, d.dq.seq_stride, d.dq.head_stride);
  p.sdk = strides_of(d.dk.batch_stride, d.dk.seq_stride, d.dk.head_stride);
  p.sdv = strides_of(d.dv.batch_stride, d.dv.seq_stride, d.dv.head_stride);
  p.batch = d.batch;
  p.seq_len = d.seq_len;
  p.heads = d.heads;
  p.scale = d.softmax_scale;
  p.scale_log2 = d.softmax_scale * 1.4426950408889634f;
  p.causal = d.causal ? 1 : 0;
  p.delta = static_cast<float*>(workspace);
  // Note [sm90 flash backward: CTA order]: read per call so tests can compare orders.
  if (const char* g = std::getenv("BLUBLAS_ATTN_BWD_GROUP"); g != nullptr) {
    p.bwd_group_heads = std::max(0, std::atoi(g));
  }
  if (workspace != nullptr && dq_partials_mode(d)) {
    p.dq_part = reinterpret_cast<float*>(static_cast<char*>(workspace) + delta_bytes(d));
  }
  if (workspace != nullptr && dq_accumulate_mode(d)) {
    char* acc = static_cast<char*>(workspace) + delta_bytes(d);
    p.dq_acc = reinterpret_cast<float*>(acc);
    p.dq_sem = reinterpret_cast<uint32_t*>(acc + dq_acc_bytes(d));
  }
  return p;
}

}  // namespace attn

const char* attn_path_name(AttnPath path) noexcept {
  switch (path) {
    case AttnPath::kAuto:
      return "auto";
    case AttnPath::kSimt:
      return "simt";
    case AttnPath::kSm80Mma:
      return "sm80_mma";
    case AttnPath::kSm90Wgmma:
      return "sm90_wgmma";
  }
  return "unknown";
}

const char* attn_precision_name(AttnPrecision precision) noexcept {
  switch (precision) {
    case AttnPrecision::kBF16:
      return "bf16";
    case AttnPrecision::kF32Strict:
      return "f32";
    case AttnPrecision::kF32TF32:
      return "tf32";
    case AttnPrecision::kF32Split3TF32:
      return "f32_3xtf32";
  }
  return "unknown";
}

Status attention_selected_path(const AttentionDesc& desc, AttnPath* path) {
  BLUBLAS_CHECK_ARG(path != nullptr, "attention_selected_path: path is null");
  BLUBLAS_RETURN_IF_ERROR(check_desc(desc, false, "attention_selected_path"));
  DeviceInfo dev;
  BLUBLAS_RETURN_IF_ERROR(current_device_info(&dev));
  return select_path(desc, false, dev, "attention_selected_path", path);
}

Status attention_forward(const AttentionDesc& desc, cudaStream_t stream) {
  constexpr const char* kOp = "attention_forward";
  BLUBLAS_RETURN_IF_ERROR(check_desc(desc, false, kOp));
  if (empty(desc)) return Status::success();
  DeviceInfo dev;
  BLUBLAS_RETURN_IF_ERROR(current_device_info(&dev));
  AttnPath path = AttnPath::kAuto;
  BLUBLAS_RETURN_IF_ERROR(select_path(desc, false, dev, kOp, &path));
  const attn::Params p = attn::make_params(desc, nullptr);
  const bool bf16 = is_bf16(desc.precision);
  if (path == AttnPath::kSimt) return attn::simt_attn_fwd(p, desc.head_dim, bf16, stream);
  if (path == AttnPath::kSm90Wgmma) {
    const Status st = attn::sm90_bf16_flash_attn_fwd(p, desc.head_dim, dev, stream);
    // kNotSupported: a tensor map was refused before any launch; kAuto falls back to sm80.
    if (st.code() != StatusCode::kNotSupported || desc.path == AttnPath::kSm90Wgmma) return st;
  }
  return bf16 ? attn::sm80_bf16_flash_attn_fwd(p, desc.head_dim, dev, stream)
              : attn::sm80_tf32_flash_attn_fwd(p, desc.head_dim, split3(desc.precision), dev,
                                               stream);
}

Status attention_backward_workspace_size(const AttentionDesc& desc, std::size_t* bytes) {
  BLUBLAS_CHECK_ARG(bytes != nullptr, "attention_backward_workspace_size: bytes is null");
  BLUBLAS_CHECK_ARG(desc.batch >= 0 && desc.seq_len >= 0 && desc.heads >= 0,
                    "attention_backward_workspace_size: negative size (B=", desc.batch,
                    ", T=", desc.seq_len, ", H=", desc.heads, ")");
  *bytes = attn::backward_workspace_bytes(desc);
  return Status::success();
}

Status attention_backward(const AttentionDesc& desc, void* workspace, std::size_t workspace_bytes,
                          cudaStream_t stream) {
  constexpr const char* kOp = "attention_backward";
  BLUBLAS_RETURN_IF_ERROR(check_desc(desc, true, kOp));
  const std::size_t need = attn::backward_workspace_bytes(desc);
  BLUBLAS_CHECK(workspace_bytes >= need, StatusCode::kWorkspaceTooSmall, kOp, ": workspace of ",
                workspace_bytes, " bytes, needs ", need, " (B=", desc.batch, ", H=", desc.heads,
                ", T=", desc.seq_len, ")");
  if (empty(desc)) return Status::success();
  BLUBLAS_CHECK_ARG(workspace != nullptr, kOp, ": workspace is null");
  BLUBLAS_CHECK(aligned(workspace, 16), StatusCode::kMisaligned, kOp,
                ": workspace is not 16-byte aligned");
  DeviceInfo dev;
  BLUBLAS_RETURN_IF_ERROR(current_device_info(&dev));
  AttnPath path = AttnPath::kAuto;
  BLUBLAS_RETURN_IF_ERROR(select_path(desc, true, dev, kOp, &path));
  const attn::Params p = attn::make_params(desc, workspace);
  const bool bf16 = is_bf16(desc.precision);
  BLUBLAS_RETURN_IF_ERROR(attn::attn_bwd_delta(p, desc.head_dim, bf16, stream));
  if (path == AttnPath::kSimt) return attn::simt_attn_bwd(p, desc.head_dim, bf16, stream);
  if (path == AttnPath::kSm90Wgmma) {
    const Status st = attn::sm90_bf16_flash_attn_bwd(p, desc.head_dim, dev, stream);
    if (st.code() != StatusCode::kNotSupported || desc.path == AttnPath::kSm90Wgmma) return st;
  }
  return bf16 ? attn::sm80_bf16_flash_attn_bwd(p, desc.head_dim, dev, stream)
              : attn::sm80_tf32_flash_attn_bwd(p, desc.head_dim, split3(desc.precision), dev,
                                               stream);
}

}  // namespace blublas

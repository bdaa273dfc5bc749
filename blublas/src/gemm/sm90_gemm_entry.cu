// sm90_gemm_entry.cu: the sm_90a GEMM path's entry points (sm90_gemm_supports / _workspace_bytes
// / _run, declared in gemm_problem.h): what the path accepts, the workspace plan, and the launch
// sequence (tf32 transposes -> [stream-K flags' memset] wgmma kernel -> split-K reduction ->
// bias-gradient pass).
//
// Note [sm90 path: what it takes]
// - An sm_90 device running sm_90a machine code (checked once with cudaFuncGetAttributes on a
//   probe kernel of this file: a build without 90a would JIT compute_80 PTX, whose ptxVersion < 90).
// - bf16/f16 inputs with f32/bf16/f16 C/D; f32 inputs with ComputeMode::kTF32 (f32 C/D).
// - Operands read by TMA: base 16-byte aligned, leading dimension and batch stride multiples of 16
//   bytes, batch stride not overlapping (else kMisaligned, so kAuto falls back to mma.sync/SIMT).
//   An MN-major tf32 operand is first transposed into the workspace (Note [tf32 operand plan]),
//   so only its K-major copy meets TMA and the original may have any alignment.
// - Every epilogue: per-element ones in the kernel (or in the split-K reduction), bias gradients
//   through the shared deterministic pass (bias_grad_run, epilogue.cuh), except kBiasGradA of an
//   MN-major 16-bit A, which the kernel sums to the same bits (Note [sm90 fused bias gradient]).
//
// Note [tf32 operand plan]
// tf32 wgmma has no transpose bits, so both operands must sit K-major in shared memory. An
// MN-major f32 operand (dX's W, dW's dY^T and X) is copied K-major by a 32x32 smem-tiled transpose
// into the caller's workspace (rows padded to a multiple of 4 floats), then read by TMA as usual.
// Cost: one read + one write of that operand (~2 x 50 MB for a 16384 x 768 activation, ~35 us on
// H100), reported by sm90_gemm_workspace_bytes. An in-kernel transpose (ldmatrix.trans-like pass
// in shared memory, or A from registers) would remove it; not done yet.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>

#include "gemm/splitk_reduce.h"
#include "blublas/check.h"
#include "gemm/epilogue.cuh"
#include "gemm/gemm_problem.h"
#include "gemm/operand_repack.h"
#include "gemm/sm90_gemm_launch.h"
#include "gemm/sm90_heuristics.h"

namespace blublas::gemm_detail {
namespace sm90 {
namespace {

// Compiled like every kernel of the path; its attributes tell whether this binary holds sm_90a code.
__global__ void sm90_probe_kernel() {}

struct BinaryCheck {
  bool ok = false;
  std::string reason;
};

// Cached per device (the attribute query needs the device's context).
Status check_binary(const DeviceInfo& dev) {
  static std::mutex mutex;
  static BinaryCheck cache[64];
  static bool cached[64] = {};
  BLUBLAS_CHECK(dev.device >= 0 && dev.device < 64, StatusCode::kInvalidArgument,
                "sm90_wgmma: device index ", dev.device, " out of range");
  std::lock_guard<std::mutex> lock(mutex);
  if (!cached[dev.device]) {
    cudaFuncAttributes attr{};
    cudaError_t err = cudaFuncGetAttributes(&attr, sm90_probe_kernel);
    BinaryCheck c;
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      c.reason = std::string("sm90_wgmma: no kernel image for this device (") +
                 cudaGetErrorName(err) + "): build with BLU_CUDA_ARCHS containing 90a";
    } else if (attr.ptxVersion < 90 || attr.binaryVersion < 90) {
      std::ostringstream os;
      os << "sm90_wgmma: this build has no sm_90a machine code (probe binaryVersion="
         << attr.binaryVersion << ", ptxVersion=" << attr.ptxVersion
         << "): build with BLU_CUDA_ARCHS containing 90a-real";
      c.reason = os.str();
    } else {
      c.ok = true;
    }
    cache[dev.device] = c;
    cached[dev.device] = true;
  }
  if (!cache[dev.device].ok) return Status(StatusCode::kUnsupportedArch, cache[dev.device].reason);
  return Status::success();
}

constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }
int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Byte offsets of each workspace region (npos when absent).
struct WorkspaceLayout {
  static constexpr std::size_t npos = ~std::size_t{0};
  std::size_t a_t = npos, b_t = npos, partial = npos, bias_grad = npos, sk_partial = npos, sk_flags = npos;
  std::size_t total = 0;
  int64_t k_pad = 0;       // row length of the transposed tf32 copies (floats)
  int64_t partial_ld = 0;  // floats per partial row
};

bool is_tf32(const GemmProblem& p) { return p.ab_type == Dtype::kF32; }

WorkspaceLayout layout_for(const GemmProblem& p, const DeviceInfo& dev, const Sm90Plan& plan) {
  WorkspaceLayout w;
  std::size_t off = 0;
  w.k_pad = round_up(p.k, 4);
  if (is_tf32(p) && !p.a_k_major) {
    w.a_t = off;
    off = align_up(off + static_cast<std::size_t>(p.batch) * p.m * w.k_pad * 4);
  }
  if (is_tf32(p) && !p.b_k_major) {
    w.b_t = off;
    off = align_up(off + static_cast<std::size_t>(p.batch) * p.n * w.k_pad * 4);
  }
  if (plan.splits > 1) {
    w.partial_ld = round_up(p.n, 4);
    w.partial = off;
    off = align_up(off + static_cast<std::size_t>(plan.splits) * p.batch * p.m * w.partial_ld * 4);
  }
  if (plan.stream_k) {  // Note [sm90 stream-K]: a tile of fp32 and three flags per partition CTA,
                        // one partition CTA per SM (the launcher may keep fewer)
    w.sk_partial = off;
    off = align_up(off + static_cast<std::size_t>(dev.sm_count) * sm90_tile_m(plan.tile) *
                             sm90_tile_n(plan.tile) * 4);
    w.sk_flags = off;
    off = align_up(off + static_cast<std::size_t>(dev.sm_count) * 3 * sizeof(uint32_t));
  }
  const std::size_t bg = bias_grad_workspace_bytes(p, dev);
  if (bg > 0) {
    w.bias_grad = off;
    off = align_up(off + bg);
  }
  w.total = off;
  return w;
}

Status check_operand(const char* name, const void* ptr, int64_t ld, int64_t stride, int batch,
                     int64_t outer, std::size_t elem) {
  BLUBLAS_CHECK(aligned16(ptr), StatusCode::kMisaligned, "sm90_wgmma: operand ", name, " at ", ptr,
                " is not 16-byte aligned (TMA needs it)");
  BLUBLAS_CHECK((ld * static_cast<int64_t>(elem)) % 16 == 0, StatusCode::kMisaligned,
                "sm90_wgmma: ld", name, "=", ld, " (", ld * static_cast<int64_t>(elem),
                " bytes) is not a multiple of 16 bytes (TMA needs it)");
  if (batch > 1 && stride != 0) {
    BLUBLAS_CHECK((stride * static_cast<int64_t>(elem)) % 16 == 0, StatusCode::kMisaligned,
                  "sm90_wgmma: stride_", name, "=", stride,
                  " elements is not a multiple of 16 bytes (TMA needs it)");
    BLUBLAS_CHECK(stride >= outer * ld, StatusCode::kMisaligned, "sm90_wgmma: stride_", name, "=",
                  stride, " < ", outer * ld, " (batch matrices overlap; TMA needs disjoint ones)");
  }
  return Status::success();
}

}  // namespace

const char* sm90_tile_name(Sm90Tile t) {
  switch (t) {
    case Sm90Tile::k128x128_1c: return "128x128_1c";
    case Sm90Tile::k128x256_2c: return "128x256_2c";
    case Sm90Tile::k128x128_2c: return "128x128_2c";
    case Sm90Tile::k128x256_2c_cl2: return "128x256_2c_cl2";
    case Sm90Tile::k64x256_pp: return "64x256_pp";
    case Sm90Tile::k192x192_3c: return "192x192_3c";
    case Sm90Tile::kCount: break;
  }
  return "invalid";
}
int sm90_tile_m(Sm90Tile t) {
  return t == Sm90Tile::k64x256_pp ? 64 : t == Sm90Tile::k192x192_3c ? 192 : 128;
}
int sm90_tile_n(Sm90Tile t) {
  if (t == Sm90Tile::k192x192_3c) return 192;
  return t == Sm90Tile::k128x256_2c || t == Sm90Tile::k128x256_2c_cl2 ||
                 t == Sm90Tile::k64x256_pp
             ? 256
             : 128;
}
int sm90_tile_k(Sm90Tile, Dtype ab_type) {
  return ab_type == Dtype::kF32 ? 32 : dtype_is_fp8(ab_type) ? 128 : 64;
}

LaunchFn find_launcher(Dtype a_type, Dtype b_type, Sm90Tile tile, bool a_k_major, bool b_k_major) {
  if (dtype_is_fp8(a_type)) {
    switch (tile) {
      case Sm90Tile::k128x256_2c: return launcher_fp8_128x256_2c(a_type, b_type, a_k_major, b_k_major);
      case Sm90Tile::k64x256_pp: return launcher_fp8_64x256_pp(a_type, b_type, a_k_major, b_k_major);
      case Sm90Tile::k128x128_2c: return launcher_fp8_128x128_2c(a_type, b_type, a_k_major, b_k_major);
      default: return nullptr;  // not compiled for FP8
    }
  }
  switch (a_type) {
    case Dtype::kBF16:
      switch (tile) {
        case Sm90Tile::k128x128_1c: return launcher_bf16_128x128_1c(a_k_major, b_k_major);
        case Sm90Tile::k128x256_2c: return launcher_bf16_128x256_2c(a_k_major, b_k_major);
        case Sm90Tile::k128x128_2c: return launcher_bf16_128x128_2c(a_k_major, b_k_major);
        case Sm90Tile::k128x256_2c_cl2: return launcher_bf16_128x256_2c_cl2(a_k_major, b_k_major);
        case Sm90Tile::k64x256_pp: return launcher_bf16_64x256_pp(a_k_major, b_k_major);
        case Sm90Tile::k192x192_3c: return launcher_bf16_192x192_3c(a_k_major, b_k_major);
        case Sm90Tile::kCount: break;
      }
      break;
    case Dtype::kF16:
      switch (tile) {
        case Sm90Tile::k128x128_1c: return launcher_f16_128x128_1c(a_k_major, b_k_major);
        case Sm90Tile::k128x256_2c: return launcher_f16_128x256_2c(a_k_major, b_k_major);
        case Sm90Tile::k128x128_2c: return launcher_f16_128x128_2c(a_k_major, b_k_major);
        case Sm90Tile::k128x256_2c_cl2: return launcher_f16_128x256_2c_cl2(a_k_major, b_k_major);
        case Sm90Tile::k64x256_pp: return launcher_f16_64x256_pp(a_k_major, b_k_major);
        case Sm90Tile::k192x192_3c: return launcher_f16_192x192_3c(a_k_major, b_k_major);
        case Sm90Tile::kCount: break;
      }
      break;
    case Dtype::kF32:
      switch (tile) {
        case Sm90Tile::k128x128_1c: return launcher_tf32_128x128_1c(a_k_major, b_k_major);
        case Sm90Tile::k128x256_2c: return launcher_tf32_128x256_2c(a_k_major, b_k_major);
        case Sm90Tile::k128x128_2c: return launcher_tf32_128x128_2c(a_k_major, b_k_major);
        case Sm90Tile::k128x256_2c_cl2: return launcher_tf32_128x256_2c_cl2(a_k_major, b_k_major);
        case Sm90Tile::k64x256_pp: return launcher_tf32_64x256_pp(a_k_major, b_k_major);
        case Sm90Tile::k192x192_3c: return launcher_tf32_192x192_3c(a_k_major, b_k_major);
        case Sm90Tile::kCount: break;
      }
      break;
    case Dtype::kE4M3:
    case Dtype::kE5M2: break;  // above
  }
  return nullptr;
}

std::size_t workspace_bytes_with(const GemmProblem& p, const DeviceInfo& dev,
                                 const Sm90Override& force) {
  return layout_for(p, dev, choose_plan(p, dev, force)).total;
}

namespace {

// BLUBLAS_SM90_LOG=1: one stderr line per problem whose plan differs from the previous call's
// (benchmarks and sweeps read which tile / split kAuto took; repeated calls print nothing).
void log_plan(const GemmProblem& p, const Sm90Plan& plan) {
  static const bool on = [] {
    const char* v = std::getenv("BLUBLAS_SM90_LOG");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  if (!on) return;
  static std::mutex mu;
  static std::string last;
  std::ostringstream line;
  line << "blublas sm90 plan: m=" << p.m << " n=" << p.n << " k=" << p.k << " batch=" << p.batch
       << " a_k_major=" << p.a_k_major << " b_k_major=" << p.b_k_major << " tile=" << sm90_tile_name(plan.tile)
       << " splits=" << plan.splits << " stream_k=" << plan.stream_k << " grid=" << plan.grid
       << " group_m=" << plan.group_m;
  std::lock_guard<std::mutex> lock(mu);
  if (line.str() == last) return;
  last = line.str();
  std::fprintf(stderr, "%s\n", last.c_str());
}

}  // namespace

Status run_with(const GemmProblem& p, const DeviceInfo& dev, const Sm90Override& force,
                void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  BLUBLAS_RETURN_IF_ERROR(sm90_gemm_supports(p, dev));
  const Sm90Plan plan = choose_plan(p, dev, force);
  const WorkspaceLayout ws = layout_for(p, dev, plan);
  BLUBLAS_CHECK(workspace_bytes >= ws.total && (ws.total == 0 || workspace != nullptr),
                StatusCode::kWorkspaceTooSmall, "sm90_wgmma: needs ", ws.total,
                " workspace bytes, got ", workspace_bytes);
  BLUBLAS_CHECK(ws.total == 0 || reinterpret_cast<std::uintptr_t>(workspace) % kAlign == 0,
                StatusCode::kMisaligned, "sm90_wgmma: workspace ", workspace, " is not ", kAlign,
                "-byte aligned");
  uint8_t* wsb = static_cast<uint8_t*>(workspace);

  LaunchArgs args;
  args.p = &p;
  args.a = p.a; args.lda = p.lda; args.stride_a = p.stride_a; args.a_k_major = p.a_k_major;
  args.b = p.b; args.ldb = p.ldb; args.stride_b = p.stride_b; args.b_k_major = p.b_k_major;
  if (ws.a_t != WorkspaceLayout::npos) {
    // A' (m x k) is stored a[k*lda + i]: K-major copy at[i*k_pad + k].
    float* at = reinterpret_cast<float*>(wsb + ws.a_t);
    const int64_t stride_t = static_cast<int64_t>(p.m) * ws.k_pad;
    BLUBLAS_RETURN_IF_ERROR(transpose_f32(at, ws.k_pad, stride_t, static_cast<const float*>(p.a),
                                          p.lda, p.stride_a, p.m, p.k, p.batch, stream));
    args.a = at; args.lda = ws.k_pad; args.stride_a = p.batch > 1 ? stride_t : 0;
    args.a_k_major = true;
  }
  if (ws.b_t != WorkspaceLayout::npos) {
    // B' (k x n) is stored b[k*ldb + j]: K-major copy bt[j*k_pad + k].
    float* bt = reinterpret_cast<float*>(wsb + ws.b_t);
    const int64_t stride_t = static_cast<int64_t>(p.n) * ws.k_pad;
    BLUBLAS_RETURN_IF_ERROR(transpose_f32(bt, ws.k_pad, stride_t, static_cast<const float*>(p.b),
                                          p.ldb, p.stride_b, p.n, p.k, p.batch, stream));
    args.b = bt; args.ldb = ws.k_pad; args.stride_b = p.batch > 1 ? stride_t : 0;
    args.b_k_major = true;
  }
  args.splits = plan.splits;
  args.group_m = plan.group_m;
  args.grid = plan.grid;
  args.max_smem_optin = dev.max_smem_per_block_optin;
  const char* generic_env = std::getenv("BLUBLAS_SM90_GENERIC_EPILOGUE");
  args.generic_epilogue =
      force.generic_epilogue || (generic_env != nullptr && std::strcmp(generic_env, "1") == 0);
  const char* c_tma_env = std::getenv("BLUBLAS_SM90_C_TMA");
  // On unless BLUBLAS_SM90_C_TMA=0 or the override says otherwise (Note [sm90 C through TMA]).
  args.c_through_tma = force.c_through_tma >= 0 ? force.c_through_tma == 1
                                                : !(c_tma_env != nullptr && std::strcmp(c_tma_env, "0") == 0);
  const char* ahead_env = std::getenv("BLUBLAS_SM90_EPI_AHEAD");  // Note [sm90 epilogue loads ahead]
  args.epi_ahead = force.epi_ahead >= 0 ? force.epi_ahead == 1
                                        : !(ahead_env != nullptr && std::strcmp(ahead_env, "0") == 0);
  if (plan.splits > 1) {
    args.partial = reinterpret_cast<float*>(wsb + ws.partial);
    args.partial_ld = ws.partial_ld;
  }
  if (plan.stream_k) {
    args.sk_ctas = dev.sm_count;
    args.sk_partial = reinterpret_cast<float*>(wsb + ws.sk_partial);
    args.sk_flags = reinterpret_cast<uint32_t*>(wsb + ws.sk_flags);
  }
  // Note [sm90 fused bias gradient]: kBiasGradA summed by the kernel where its tiles allow, every
  // split boundary on a 128-k chunk boundary (two 64-deep k-blocks), and not switched off.
  const int bg_chunks = bias_grad_col_chunks(p.k);
  bool fused_bgrad = force.fused_bias_grad != 0 && sm90_fuses_bias_grad(p, plan.tile, plan.splits, args.a_k_major, plan.stream_k);
  if (fused_bgrad && force.fused_bias_grad < 0) {
    const char* env = std::getenv("BLUBLAS_SM90_FUSED_BGRAD");
    fused_bgrad = !(env != nullptr && std::strcmp(env, "0") == 0);
  }
  if (fused_bgrad) {
    BLUBLAS_CHECK(bg_chunks == 1 || ws.bias_grad != WorkspaceLayout::npos, StatusCode::kNotSupported,
                  "sm90_wgmma: no workspace for the fused bias gradient's ", bg_chunks, " chunks");
    args.bgrad = bg_chunks > 1 ? reinterpret_cast<float*>(wsb + ws.bias_grad) : p.bias_grad;
  }
  const LaunchFn launch =
      find_launcher(p.ab_type, p.b_type, plan.tile, args.a_k_major, args.b_k_major);
  BLUBLAS_CHECK(launch != nullptr, StatusCode::kNotSupported, "sm90_wgmma: no kernel for a=",
                dtype_name(p.ab_type), " b=", dtype_name(p.b_type), " tile ", sm90_tile_name(plan.tile), " a_k_major=",
                args.a_k_major, " b_k_major=", args.b_k_major);
  log_plan(p, plan);
  BLUBLAS_RETURN_IF_ERROR(launch(args, stream));
  if (plan.splits > 1) {
    BLUBLAS_RETURN_IF_ERROR(splitk_reduce(p, args.partial, args.partial_ld, plan.splits, stream));
  }
  if (fused_bgrad) {
    if (bg_chunks > 1) {
      BLUBLAS_RETURN_IF_ERROR(bias_grad_finish(args.bgrad, bg_chunks, p.m, p.bias_grad, stream));
    }
  } else if (epilogue_is_bias_grad(p.epilogue)) {
    const std::size_t bg_bytes = ws.bias_grad == WorkspaceLayout::npos ? 0 : ws.total - ws.bias_grad;
    void* bg = ws.bias_grad == WorkspaceLayout::npos ? nullptr : wsb + ws.bias_grad;
    BLUBLAS_RETURN_IF_ERROR(bias_grad_run(p, dev, bg, bg_bytes, stream));
  }
  return Status::success();
}

}  // namespace sm90

Status sm90_gemm_supports(const GemmProblem& p, const DeviceInfo& dev) {
  BLUBLAS_CHECK(dev.sm_major == 9 && dev.sm_minor == 0, StatusCode::kUnsupportedArch,
                "sm90_wgmma: needs an sm_90 (Hopper) device, this one is sm_", dev.sm_major,
                dev.sm_minor);
  BLUBLAS_RETURN_IF_ERROR(sm90::check_binary(dev));
  const bool in16 = p.ab_type == Dtype::kBF16 || p.ab_type == Dtype::kF16;
  const bool fp8 = dtype_is_fp8(p.ab_type);
  if (fp8) {  // Note [FP8 GEMM]; gemm.cpp validated types, majors and epilogue already
    BLUBLAS_CHECK(dtype_is_fp8(p.b_type) && p.a_k_major && p.b_k_major, StatusCode::kNotSupported,
                  "sm90_wgmma: FP8 needs FP8 A and B, both K-major");
  } else if (p.ab_type == Dtype::kF32) {
    BLUBLAS_CHECK(p.compute == ComputeMode::kTF32, StatusCode::kNotSupported,
                  "sm90_wgmma: f32 inputs need compute=tf32 (strict fp32 runs on the SIMT path)");
    BLUBLAS_CHECK(p.cd_type == Dtype::kF32, StatusCode::kNotSupported,
                  "sm90_wgmma: tf32 takes f32 C/D only");
  } else {
    BLUBLAS_CHECK(in16, StatusCode::kNotSupported, "sm90_wgmma: unsupported input dtype");
  }
  BLUBLAS_CHECK(p.cd_type == Dtype::kF32 || p.cd_type == Dtype::kBF16 || p.cd_type == Dtype::kF16,
                StatusCode::kNotSupported, "sm90_wgmma: unsupported output dtype");
  const std::size_t es = dtype_size(p.ab_type), es_b = dtype_size(p.b_type);
  // tf32 MN-major operands are transposed into the workspace first (Note [tf32 operand plan]).
  const bool a_direct = in16 || fp8 || p.a_k_major;
  const bool b_direct = in16 || fp8 || p.b_k_major;
  // Rows of A' stored: K-major -> m rows of lda; MN-major -> k rows of lda (per batch matrix).
  if (a_direct) {
    BLUBLAS_RETURN_IF_ERROR(sm90::check_operand("a", p.a, p.lda, p.stride_a, p.batch,
                                                p.a_k_major ? p.m : p.k, es));
  }
  if (b_direct) {
    BLUBLAS_RETURN_IF_ERROR(sm90::check_operand("b", p.b, p.ldb, p.stride_b, p.batch,
                                                p.b_k_major ? p.n : p.k, es_b));
  }
  return Status::success();
}

std::size_t sm90_gemm_workspace_bytes(const GemmProblem& p, const DeviceInfo& dev) {
  return sm90::workspace_bytes_with(p, dev, sm90::Sm90Override{});
}

Status sm90_gemm_run(const GemmProblem& p, const DeviceInfo& dev, void* workspace,
                     std::size_t workspace_bytes, cudaStream_t stream) {
  return sm90::run_with(p, dev, sm90::Sm90Override{}, workspace, workspace_bytes, stream);
}

}  // namespace blublas::gemm_detail

// sm90_gemm_launch.h (internal, host side): what the sm_90a entry (sm90_gemm_entry.cu) hands to
// one compiled kernel configuration, and the table of configurations. Each configuration lives in
// its own translation unit (sm90_<type>_gemm_<tile>.cu) so the heavy wgmma templates compile in
// parallel and a change to one tile does not rebuild the others.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "blublas/status.h"
#include "gemm_problem.h"

namespace blublas::gemm_detail::sm90 {

// The tile configurations compiled in (CTA tile M x N, consumer warpgroups, stages). K per stage
// is one 128-byte swizzle row: 64 for 16-bit inputs, 32 for tf32.
enum class Sm90Tile : int {
  k128x128_1c = 0,  // the simple one: 1 consumer warpgroup (two m64 wgmmas), 4 stages
  k128x256_2c = 1,  // 2 consumer warpgroups, m64n256 each, 4 stages (bf16/f16 workhorse)
  k128x128_2c = 2,  // 2 consumer warpgroups, m64n128 each, 6 stages
  k128x256_2c_cl2 = 3,  // as k128x256_2c in clusters of 2 CTAs along M sharing B (multicast)
  k64x256_pp = 4,   // ping-pong: 2 consumer warpgroups, each owns whole 64x256 tiles, 4 stages
  k192x192_3c = 5,  // 3 consumer warpgroups, m64n192 each, 4 stages (not FP8; Note [sm90 192x192 tile])
  kCount = 6,
};
const char* sm90_tile_name(Sm90Tile t);
// Whether find_launcher has kernels of `tile` for inputs of `ab_type` (host side, no CUDA): FP8
// has 128x256_2c, 64x256_pp and 128x128_2c; bf16, f16 and tf32 have every tile.
bool sm90_tile_compiled(Sm90Tile t, Dtype ab_type);
int sm90_tile_m(Sm90Tile t);
int sm90_tile_n(Sm90Tile t);
int sm90_tile_k(Sm90Tile t, Dtype ab_type);  // 32 tf32, 64 bf16/f16, 128 FP8

// One launch of the main kernel: operands already K-major where the type needs it (tf32).
struct LaunchArgs {
  const GemmProblem* p = nullptr;  // sizes, epilogue, C/D/aux/bias (operands below override)
  const void* a = nullptr;  int64_t lda = 0, stride_a = 0;  bool a_k_major = true;
  const void* b = nullptr;  int64_t ldb = 0, stride_b = 0;  bool b_k_major = true;
  int splits = 1;
  int group_m = 8;
  int grid = 1;                    // CTAs (persistent: at most the SM count)
  float* partial = nullptr;        // splits > 1: fp32 partials [split][batch][m][partial_ld]
  int64_t partial_ld = 0;
  int max_smem_optin = 0;          // device limit, bytes
  bool generic_epilogue = false;   // force the staged generic epilogue (tests / debugging)
  bool c_through_tma = false;      // beta != 0 may take the TMA-store epilogue (Note [sm90 C through TMA])
  bool epi_ahead = true;           // C / aux loaded at the unit's start (Note [sm90 epilogue loads ahead])
  // kBiasGradA summed inside the kernel (Note [sm90 fused bias gradient]): [chunk][m] partials
  // when K has more than one 128-k chunk, else the m sums; null: the separate pass. Only where
  // sm90_fuses_bias_grad.
  float* bgrad = nullptr;
  // Note [sm90 stream-K] (cooperative tiles without a cluster, splits == 1): sk_ctas > 0
  // partition CTAs share the k-iterations, run by `grid` CTAs; sk_partial holds sk_ctas x BM x BN
  // floats, sk_flags sk_ctas x 3 words (zeroed by the launcher). 0: strided units.
  int sk_ctas = 0;
  float* sk_partial = nullptr;
  uint32_t* sk_flags = nullptr;
};

// Whether the kernel sums p's kBiasGradA itself (Note [sm90 fused bias gradient]): the tile's
// kernels have it (KernelConfig::kFusedBiasGrad: MN-major 16-bit A, no cluster), one batch, and
// every split boundary on a 128-k chunk boundary (stream-K: an even k-block count). Host only, no CUDA (CPU-tested).
bool sm90_fuses_bias_grad(const GemmProblem& p, Sm90Tile tile, int splits, bool a_k_major,
                          bool stream_k = false);

using LaunchFn = Status (*)(const LaunchArgs& args, cudaStream_t stream);

// The launcher for (A's and B's input types, tile, operand majors), or null when not compiled in.
LaunchFn find_launcher(Dtype a_type, Dtype b_type, Sm90Tile tile, bool a_k_major, bool b_k_major);

// Per-file registration: each sm90_<type>_gemm_<tile>.cu defines one of these.
LaunchFn launcher_bf16_128x128_1c(bool a_k_major, bool b_k_major);
LaunchFn launcher_bf16_128x256_2c(bool a_k_major, bool b_k_major);
LaunchFn launcher_bf16_128x128_2c(bool a_k_major, bool b_k_major);
LaunchFn launcher_f16_128x128_1c(bool a_k_major, bool b_k_major);
LaunchFn launcher_f16_128x256_2c(bool a_k_major, bool b_k_major);
LaunchFn launcher_f16_128x128_2c(bool a_k_major, bool b_k_major);
LaunchFn launcher_tf32_128x128_1c(bool a_k_major, bool b_k_major);
LaunchFn launcher_tf32_128x256_2c(bool a_k_major, bool b_k_major);
LaunchFn launcher_tf32_128x128_2c(bool a_k_major, bool b_k_major);
LaunchFn launcher_bf16_128x256_2c_cl2(bool a_k_major, bool b_k_major);
LaunchFn launcher_f16_128x256_2c_cl2(bool a_k_major, bool b_k_major);
LaunchFn launcher_tf32_128x256_2c_cl2(bool a_k_major, bool b_k_major);
LaunchFn launcher_bf16_64x256_pp(bool a_k_major, bool b_k_major);
LaunchFn launcher_f16_64x256_pp(bool a_k_major, bool b_k_major);
LaunchFn launcher_tf32_64x256_pp(bool a_k_major, bool b_k_major);
LaunchFn launcher_bf16_192x192_3c(bool a_k_major, bool b_k_major);
LaunchFn launcher_f16_192x192_3c(bool a_k_major, bool b_k_major);
LaunchFn launcher_tf32_192x192_3c(bool a_k_major, bool b_k_major);
// FP8 (sm90_fp8_gemm_<tile>.cu): the four e4m3/e5m2 pairs of one tile, K-major operands only.
LaunchFn launcher_fp8_128x256_2c(Dtype a, Dtype b, bool a_k_major, bool b_k_major);
LaunchFn launcher_fp8_64x256_pp(Dtype a, Dtype b, bool a_k_major, bool b_k_major);
LaunchFn launcher_fp8_128x128_2c(Dtype a, Dtype b, bool a_k_major, bool b_k_major);

// The split-K reduction is gemm_detail::splitk_reduce (splitk_reduce.h); the tf32 transpose
// pre-pass is gemm_detail::transpose_f32 (operand_repack.h).

}  // namespace blublas::gemm_detail::sm90

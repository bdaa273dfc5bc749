// sm90_heuristics.h (internal): the tile / split-K / tile-order plan of the sm_90a GEMM path,
// chosen from the shape and the device and kept apart from the kernels.
#pragma once

#include "blublas/device_info.h"
#include "gemm_problem.h"
#include "sm90_gemm_launch.h"

namespace blublas::gemm_detail::sm90 {

struct Sm90Plan {
  Sm90Tile tile = Sm90Tile::k128x256_2c;
  int splits = 1;   // K splits (>1: fp32 partials in the workspace + a fixed-order reduction)
  int group_m = 8;  // tile rows per group of the L2-friendly tile order
  int grid = 1;     // persistent CTAs
  bool stream_k = false;  // the CTAs share k-iterations (Note [sm90 stream-K]); splits is 1,
                          // the partition is the SM count's whatever the grid
};

// Forced choices (tests, benchmarks, debugging); negative / zero fields mean "let the heuristic
// choose". The environment variables BLUBLAS_SM90_TILE (a tile name, e.g. "128x128_1c") and
// BLUBLAS_SM90_SPLITS override the heuristic too,
// BLUBLAS_SM90_GROUP_M sets the tile rows per group of the L2-friendly tile order,
// BLUBLAS_SM90_PINGPONG=0 keeps the heuristic off the ping-pong tiles,
// BLUBLAS_SM90_GENERIC_EPILOGUE=1 disables the TMA-store epilogue (for the benchmark and for
// bisecting a failure), and BLUBLAS_SM90_C_TMA=0 keeps beta != 0 and kGeluGrad off it (Note
// [sm90 C through TMA]; on by default), BLUBLAS_SM90_EPI_AHEAD=0 keeps the ping-pong tiles' C / aux
// loads in the epilogue (Note [sm90 epilogue loads ahead]; on by default), and BLUBLAS_SM90_LOG=1
// prints each new plan (tile, splits, grid) to stderr; BLUBLAS_SM90_STREAMK=1 takes stream-K
// wherever the tile allows (Note [sm90 stream-K]; off by default).
struct Sm90Override {
  int tile = -1;
  int splits = 0;
  bool generic_epilogue = false;  // never the TMA-store epilogue
  int c_through_tma = -1;         // beta != 0 on the TMA-store epilogue: -1 default (on), 0 off, 1 on
  int epi_ahead = -1;             // C / aux loads ahead: -1 default (on), 0 off, 1 on
  int fused_bias_grad = -1;       // kBiasGradA in the kernel: -1 default (on unless
                                  // BLUBLAS_SM90_FUSED_BGRAD=0), 0 off, 1 on where it applies
  int stream_k = -1;              // -1 the environment's (default off), 0 off, 1 wherever the tile allows
};

// Tile rows per group of the tile order: 8, or 2048 rows' worth when B is over 16 MiB and there
// are 16+ column tiles (Note [Tile groups for a large B] in sm90_heuristics.cpp).
int sm90_group_m(const GemmProblem& p, Sm90Tile tile);

// Whether a tile can run stream-K: bf16 / f16 inputs, cooperative consumers, no cluster (host
// only, the launcher checks it against KernelConfig::kStreamK).
bool sm90_stream_k_tile(Sm90Tile t, Dtype ab_type);

Sm90Plan choose_plan(const GemmProblem& p, const DeviceInfo& dev, const Sm90Override& force);

}  // namespace blublas::gemm_detail::sm90

namespace blublas::gemm_detail::sm90 {

// The entry points with forced choices (tests exercise the simple tile and split-K on small
// shapes with these; sm90_gemm_* call them with an empty override).
std::size_t workspace_bytes_with(const GemmProblem& p, const DeviceInfo& dev,
                                 const Sm90Override& force);
Status run_with(const GemmProblem& p, const DeviceInfo& dev, const Sm90Override& force,
                void* workspace, std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace blublas::gemm_detail::sm90

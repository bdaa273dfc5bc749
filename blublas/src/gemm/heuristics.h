// heuristics.h (internal): how the GEMM dispatcher picks a kernel path and a tile configuration
// from the shape, dtypes and the device, kept apart from the kernels so that tuning one does not
// touch the other. The kernels only read the decisions (SimtConfig, Sm80Config).
#pragma once

#include <cstddef>
#include <cstdint>

#include "blublas/device_info.h"
#include "blublas/gemm.h"
#include "gemm_problem.h"  // relative: tests include this header without src/ on the path

namespace blublas::gemm_detail {

// The path kAuto prefers for p on dev, before asking the path whether it accepts p (the
// dispatcher then falls back: kSm90Wgmma -> kSm80Mma -> kSimt).
//  strict fp32 -> kSimt; 16-bit or tf32 on sm_90 -> kSm90Wgmma; on sm_80/86/89 -> kSm80Mma.
GemmPath preferred_path(const GemmProblem& p, const DeviceInfo& dev);

// The order in which kAuto tries paths for p (first accepted wins); count written to *n.
void auto_path_order(const GemmProblem& p, const DeviceInfo& dev, GemmPath order[3], int* n);

// SIMT tile: the register-blocked fp32 kernel (big) or the generic any-alignment kernel.
enum class SimtKernel : int { kTiled128 = 0, kTiled64 = 1, kGeneric = 2 };
struct SimtPlan {
  SimtKernel kernel = SimtKernel::kTiled128;
  int splits = 1;   // split-K factor (1: none); partial tiles go to the workspace
  int k_split = 0;  // k per split (multiple of 8) when splits > 1
  bool transpose_b = false;  // NT: run on an N-major copy of B (Note [SIMT NT via a transposed B])
};
SimtPlan choose_simt_plan(const GemmProblem& p, const DeviceInfo& dev);
// The cap on SIMT split-K factors (BLUBLAS_SIMT_SPLIT_MAX, read once; 64 when unset).
int64_t simt_split_cap();
// Split-K for a problem of one to four waves whose last wave is mostly empty (Note [SIMT split-K
// for wave fill]); leaves *plan alone otherwise.
void split_for_wave_fill(const GemmProblem& p, int64_t tiles, int64_t slots, SimtPlan* plan);
// Whether the SIMT path runs NT problem p on an N-major copy of B (Note [SIMT NT via a transposed B]).
bool simt_transpose_b(const GemmProblem& p);

// mma.sync tile shapes (CTA tile M x N; warps; pipeline stages).
enum class Sm80Tile : int { k128x128 = 0, k128x64 = 1, k64x64 = 2 };
Sm80Tile choose_sm80_tile(const GemmProblem& p, const DeviceInfo& dev);
// The mma.sync path's launch: tile and split-K (Note [sm80 split-K] in heuristics.cpp).
struct Sm80Plan {
  Sm80Tile tile = Sm80Tile::k128x128;
  int splits = 1;        // 1: no split; else fp32 partials in the workspace + splitk_reduce
  int kt_per_split = 0;  // k slices (64 bytes of k each) per split when splits > 1
};
// BLUBLAS_SM80_SPLITS=N forces N splits (clamped to the k slices; tests), read at every call.
Sm80Plan choose_sm80_plan(const GemmProblem& p, const DeviceInfo& dev);
// Floats per row of the split-K partial tiles: n rounded up to 4 (16-byte rows).
inline int64_t sm80_partial_ld(const GemmProblem& p) { return (static_cast<int64_t>(p.n) + 3) / 4 * 4; }
// Workspace bytes of the partials of `plan` (0 without split-K).
inline std::size_t sm80_partial_bytes(const GemmProblem& p, const Sm80Plan& plan) {
  return plan.splits > 1 ? static_cast<std::size_t>(plan.splits) * static_cast<std::size_t>(p.batch) *
                               static_cast<std::size_t>(p.m) * static_cast<std::size_t>(sm80_partial_ld(p)) * 4
                         : 0;
}

}  // namespace blublas::gemm_detail

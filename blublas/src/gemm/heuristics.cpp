// heuristics.cpp: path and tile choice for the GEMM dispatcher (see heuristics.h). Decisions use
// only the problem and the DeviceInfo queried at run time (SM count, arch), never constants of
// one GPU.
//
// Note [Tile choice by waves]
// A CTA tile that leaves most SMs idle loses more than a smaller tile loses in reuse. For each
// candidate tile (largest first) we count CTAs = ceil(M/BM) * ceil(N/BN) * batch and take the first
// one that fills at least one wave of SMs; when none does, the smallest tile.
#include "gemm/heuristics.h"

#include <cstdint>

namespace blublas::gemm_detail {
namespace {

int64_t ctas(const GemmProblem& p, int bm, int bn) {
  return ((static_cast<int64_t>(p.m) + bm - 1) / bm) * ((static_cast<int64_t>(p.n) + bn - 1) / bn) *
         p.batch;
}

bool is_16bit(Dtype t) { return t == Dtype::kBF16 || t == Dtype::kF16; }

}  // namespace

GemmPath preferred_path(const GemmProblem& p, const DeviceInfo& dev) {
  const bool tensor_core = is_16bit(p.ab_type) || p.compute == ComputeMode::kTF32;
  if (!tensor_core) return GemmPath::kSimt;
  if (dev.sm_major == 9) return GemmPath::kSm90Wgmma;
  if (dev.sm_version() >= 80) return GemmPath::kSm80Mma;
  return GemmPath::kSimt;
}

void auto_path_order(const GemmProblem& p, const DeviceInfo& dev, GemmPath order[3], int* n) {
  int count = 0;
  const GemmPath first = preferred_path(p, dev);
  if (first == GemmPath::kSm90Wgmma) order[count++] = GemmPath::kSm90Wgmma;
  if (first == GemmPath::kSm90Wgmma || first == GemmPath::kSm80Mma) order[count++] = GemmPath::kSm80Mma;
  order[count++] = GemmPath::kSimt;
  *n = count;
}

// Note [SIMT split-K]
// The weight-gradient shapes (M x N = 768 x 768 .. 3072 x 768, K = 16384) have 36-144 tiles of
// 128 x 128: far fewer than the 2 CTAs per SM the SIMT kernel runs. With K >= 2048 we cut K into
// `splits` ranges so that tiles * splits >= 4 CTAs per SM, each range >= 512 deep; each split
// writes its fp32 partial tile to the workspace and a second kernel sums the splits in order
// (deterministic) and applies the epilogue. Smaller-K problems short of one wave take 64 x 64
// tiles instead.
SimtPlan choose_simt_plan(const GemmProblem& p, const DeviceInfo& dev) {
  SimtPlan plan;
  if (p.ab_type != Dtype::kF32) {
    plan.kernel = SimtKernel::kGeneric;
    return plan;
  }
  const int64_t sms = dev.sm_count > 0 ? dev.sm_count : 1;
  const int64_t tiles = ctas(p, 128, 128);
  if (tiles >= 2 * sms) return plan;
  if (p.k >= 2048) {
    const int64_t want = (4 * sms + tiles - 1) / tiles;
    const int64_t max_by_depth = p.k / 512;
    const int64_t splits = want < max_by_depth ? want : max_by_depth;
    if (splits >= 2 && splits * p.batch <= 65535) {
      const int64_t per = (p.k + splits - 1) / splits;
      plan.k_split = static_cast<int>((per + 7) / 8 * 8);
      plan.splits = static_cast<int>((p.k + plan.k_split - 1) / plan.k_split);
      return plan;
    }
  }
  if (tiles < sms) plan.kernel = SimtKernel::kTiled64;
  return plan;
}

Sm80Tile choose_sm80_tile(const GemmProblem& p, const DeviceInfo& dev) {
  const int64_t sms = dev.sm_count > 0 ? dev.sm_count : 1;
  if (ctas(p, 128, 128) >= sms) return Sm80Tile::k128x128;
  if (ctas(p, 128, 64) >= sms) return Sm80Tile::k128x64;
  return Sm80Tile::k64x64;
}

}  // namespace blublas::gemm_detail

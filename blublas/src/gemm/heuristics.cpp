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

SimtKernel choose_simt_kernel(const GemmProblem& p, const DeviceInfo& dev) {
  if (p.ab_type != Dtype::kF32) return SimtKernel::kGeneric;
  const int64_t sms = dev.sm_count > 0 ? dev.sm_count : 1;
  if (ctas(p, 128, 128) >= sms) return SimtKernel::kTiled128;
  return SimtKernel::kTiled64;
}

Sm80Tile choose_sm80_tile(const GemmProblem& p, const DeviceInfo& dev) {
  const int64_t sms = dev.sm_count > 0 ? dev.sm_count : 1;
  if (ctas(p, 128, 128) >= sms) return Sm80Tile::k128x128;
  if (ctas(p, 128, 64) >= sms) return Sm80Tile::k128x64;
  return Sm80Tile::k64x64;
}

}  // namespace blublas::gemm_detail

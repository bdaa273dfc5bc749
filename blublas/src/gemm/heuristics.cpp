// heuristics.cpp: path and tile choice for the GEMM dispatcher (see heuristics.h). Decisions use
// only the problem and the DeviceInfo queried at run time (SM count, arch), never constants of
// one GPU.
//
// Note [Tile choice by waves]
// A CTA tile that leaves most SMs idle loses more than a smaller tile loses in reuse. For each
// candidate tile (largest first) we count CTAs = ceil(M/BM) * ceil(N/BN) * batch and take the first
// one that fills at least one wave of SMs; when none does, the smallest tile.
#include "gemm/heuristics.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace blublas::gemm_detail {
namespace {

int64_t ctas(const GemmProblem& p, int bm, int bn) {
  return ((static_cast<int64_t>(p.m) + bm - 1) / bm) * ((static_cast<int64_t>(p.n) + bn - 1) / bn) *
         p.batch;
}

bool is_16bit(Dtype t) { return t == Dtype::kBF16 || t == Dtype::kF16; }

// An A/B switch that is on unless the variable is "0".
bool env_on_unless_zero(const char* name) {
  const char* env = std::getenv(name);
  return env == nullptr || std::strcmp(env, "0") != 0;
}

// K cut into about `want` ranges, each a multiple of 8 deep (the last one may be shorter).
struct KSplit {
  int64_t splits, k_split;
};
KSplit k_split_of(int64_t k, int64_t want) {
  const int64_t per = (k + want - 1) / want;
  const int64_t k_split = (per + 7) / 8 * 8;
  return {(k + k_split - 1) / k_split, k_split};
}

// The share of the CTA slots its waves offer that `ctas` CTAs fill.
double wave_fill(int64_t ctas, int64_t slots) {
  return static_cast<double>(ctas) / static_cast<double>((ctas + slots - 1) / slots * slots);
}

}  // namespace

GemmPath preferred_path(const GemmProblem& p, const DeviceInfo& dev) {
  if (dtype_is_fp8(p.ab_type)) {  // Note [FP8 GEMM]: wgmma on Hopper, mma.sync on Ada (sm_89)
    return dev.sm_major == 9 ? GemmPath::kSm90Wgmma : GemmPath::kSm80Mma;
  }
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
  // FP8 on Hopper: wgmma or nothing (the mma.sync FP8 kernels are a forced test path there).
  if (dtype_is_fp8(p.ab_type) && first == GemmPath::kSm90Wgmma) {
    *n = count;
    return;
  }
  if (first == GemmPath::kSm90Wgmma || first == GemmPath::kSm80Mma) order[count++] = GemmPath::kSm80Mma;
  order[count++] = GemmPath::kSimt;
  *n = count;
}

// Note [SIMT NT via a transposed B]
// The strict-fp32 kernels stage both operands through registers into k-major shared slabs; an
// operand that is K-contiguous in memory (A of every GEMM here, B of an NT product) needs a
// transposing scatter into shared memory, a B that is N-contiguous does not. On an H200 (session 7
// sweep, same process as cuBLAS) the NT forwards ran at 0.86-0.93 of cuBLAS where the same shapes
// as NN products (the dX pass: A K-contiguous, B N-contiguous, 16-deep slabs) ran at 0.93-1.01:
// fc_proj.dX NN 16384x3072x768 0.969 against fc.fwd NT 16384x3072x768 0.901. So an NT problem
// whose B is small next to the product (the weight of x W^T: N x K against M x N x K FMAs, M >=
// 2048) first copies B N-major into the workspace (N * K floats; 2 * N * K * 4 bytes of traffic,
// ~0.07 ms for GPT-2's 154 MB tied embedding, nothing next to its 30 ms product) and runs the NN
// kernel. BLUBLAS_SIMT_TRANSPOSE_B=0 turns it off (A/B runs). Each output is still one FMA chain
// over k ascending, but which kernel runs may differ in tiling and split-K, so the tests hold it
// to the strict float64 bound, not to the NT kernel's bits. Deterministic either way.
bool simt_transpose_b(const GemmProblem& p) {
  static const bool enabled = env_on_unless_zero("BLUBLAS_SIMT_TRANSPOSE_B");
  constexpr std::size_t kMaxBytes = std::size_t{512} << 20;
  return enabled && p.ab_type == Dtype::kF32 && p.a_k_major && p.b_k_major && p.batch == 1 &&
         p.m >= 2048 && static_cast<std::size_t>(p.n) * static_cast<std::size_t>(p.k) * 4 <= kMaxBytes;
}

// A positive integer from the environment variable `name`, else `fallback` (unset, not a number, < 1).
static int64_t env_positive(const char* name, int64_t fallback) {
  const char* env = std::getenv(name);
  const long v = env != nullptr ? std::strtol(env, nullptr, 10) : 0;
  return v >= 1 ? static_cast<int64_t>(v) : fallback;
}

// BLUBLAS_SIMT_SPLIT_MAX=<n> caps the split-K factor of the SIMT plans (read once; default: no
// cap). For A/B runs of the weight-gradient splits, which fill the GPU alone but share it with the
// data-gradient GEMMs in the trainer's step (Note [Weight gradients on a side stream]: the dW
// kernels ran ~10% slower there than alone, session 7).
int64_t simt_split_cap() {
  static const int64_t cap = env_positive("BLUBLAS_SIMT_SPLIT_MAX", 64);
  return cap;
}

// The last-wave fill the SIMT split-K plan for problems short of two waves aims for (Note [SIMT
// split-K]): 0.97, or BLUBLAS_SIMT_SPLIT_FILL=<f> in (0, 1] (read once; for A/B runs). At 0.97
// the fc / fc_proj dW (144 tiles x 16384) take 9 splits (4.91 waves of 264 slots), qkv dW 12,
// attn_proj dW 22 (3 full waves): cuBLAS's own split counts for the first two (its cuBLASLt
// algorithm strings, session 36). Measured in session 37 (H200, gemm_bench fp32 vs cuBLAS in the
// same process; raw bench/results/h200/raw/session37/call1_simt_sweep): fc / fc_proj / qkv /
// attn_proj dW 0.863 / 0.857 / 0.914 / 0.907 at 0.9 (5 / 5 / 7 / 14 splits) -> 0.926 / 0.923 /
// 0.928 / 0.940 at 0.97, dW GPT-2 step time 87.8 -> 84.4 ms; 0.95 in between (85.9 ms).
double simt_split_fill() {
  static const double fill = [] {
    const char* env = std::getenv("BLUBLAS_SIMT_SPLIT_FILL");
    const double v = env != nullptr ? std::strtod(env, nullptr) : 0.0;
    return v > 0.0 && v <= 1.0 ? v : 0.97;
  }();
  return fill;
}

// BLUBLAS_SIMT_MIN_WAVES=<n> (read once; default 1): the SIMT split-K plan also needs at least n
// waves of 2-CTA-per-SM slots, i.e. more and shorter splits (A/B runs: does a split-K problem gain
// from finer units at equal fill? Note [SIMT split-K]).
int64_t simt_min_waves() {
  static const int64_t waves = env_positive("BLUBLAS_SIMT_MIN_WAVES", 1);
  return waves;
}

// The fill split_for_wave_fill aims for. It stays at 0.9: the lm head's dX at 8192 rows fills
// 2 splits to 768 / 792 = 0.9697, just short of 0.97, and would go unsplit (0.73) under it.
constexpr double kWaveSplitFill = 0.9;

// Note [SIMT split-K for wave fill]
// A problem of one to four waves of 128 x 128 tiles (2 CTAs per SM) can lose a quarter of the
// GPU to its last wave: the lm head's dX with 8192-row logits chunks (M 8192, N 768, K 50304) is
// 384 tiles = 1.45 waves of 264 slots, 73% filled. With K >= 8192 the partial tiles cost nothing
// next to the product (2 x M x N floats written and read against M x N x K FMAs), so such a
// problem takes the fewest splits (2..4, each >= 2048 deep) that fill its waves to >= 90% (384 x 2
// = 768 tiles: 97%). BLUBLAS_SIMT_WAVE_SPLIT=0 turns it off (A/B runs).
void split_for_wave_fill(const GemmProblem& p, int64_t tiles, int64_t slots, SimtPlan* plan) {
  static const bool enabled = env_on_unless_zero("BLUBLAS_SIMT_WAVE_SPLIT");
  if (!enabled || p.k < 8192 || tiles >= 4 * slots || wave_fill(tiles, slots) >= kWaveSplitFill) return;
  for (int64_t want = 2; want <= std::min<int64_t>(4, simt_split_cap()); ++want) {
    const KSplit ks = k_split_of(p.k, want);
    if (ks.k_split < 2048 || ks.splits * p.batch > 65535) return;
    if (wave_fill(tiles * ks.splits, slots) >= kWaveSplitFill) {
      plan->splits = static_cast<int>(ks.splits);
      plan->k_split = static_cast<int>(ks.k_split);
      return;
    }
  }
}

// Note [SIMT split-K]
// The weight-gradient shapes (M x N = 768 x 768 .. 3072 x 768, K = 16384) have 36-144 tiles of
// 128 x 128: far fewer than the 2 CTAs per SM the SIMT kernel runs. With K >= 2048 we cut K into
// `splits` ranges (the fewest that fill the last wave of 2-CTA-per-SM slots to >= simt_split_fill()
// = 97%, each range >= 512 deep: 768 x 768 x 16384 on 132 SMs takes 22 splits = 3 full waves,
// 3072 x 768 x 16384 9 splits = 4.91 waves); each split
// writes its fp32 partial tile to the workspace and a second kernel sums the splits in order
// (deterministic) and applies the epilogue. Smaller-K problems short of one wave take 64 x 64
// tiles instead.
SimtPlan choose_simt_plan(const GemmProblem& p, const DeviceInfo& dev) {
  SimtPlan plan;
  if (p.ab_type != Dtype::kF32) {
    plan.kernel = SimtKernel::kGeneric;
    return plan;
  }
  plan.transpose_b = simt_transpose_b(p);
  const int64_t sms = dev.sm_count > 0 ? dev.sm_count : 1;
  const int64_t tiles = ctas(p, 128, 128);
  if (tiles >= 2 * sms) {
    split_for_wave_fill(p, tiles, 2 * sms, &plan);
    return plan;
  }
  if (p.k >= 2048) {
    // The fewest splits whose CTAs fill their last wave of 2-per-SM slots to >= simt_split_fill()
    // (else the best fill), each split at least 512 deep.
    const int64_t slots = 2 * sms;
    const int64_t max_splits = std::min<int64_t>({p.k / 512, 64, simt_split_cap()});
    int best_splits = 0, best_k = 0;
    double best_fill = 0.0;
    for (int64_t want = 2; want <= max_splits; ++want) {
      const KSplit ks = k_split_of(p.k, want);
      const int64_t total = tiles * ks.splits;
      if (ks.splits * p.batch > 65535) break;
      const double fill = wave_fill(total, slots);
      if (total >= slots * simt_min_waves() && fill >= simt_split_fill()) {
        best_splits = static_cast<int>(ks.splits);
        best_k = static_cast<int>(ks.k_split);
        break;
      }
      if (fill > best_fill + 1e-9) {
        best_fill = fill;
        best_splits = static_cast<int>(ks.splits);
        best_k = static_cast<int>(ks.k_split);
      }
    }
    if (best_splits >= 2) {
      plan.splits = best_splits;
      plan.k_split = best_k;
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

// Note [sm80 split-K]
// A problem whose tiles leave most of the resident-CTA slots empty (the weight gradients: fc dW
// 3072 x 768 is 144 tiles of 128 x 128 for 264 slots on an H100, attn_proj dW 36) or fill a last
// wave badly runs its K in splits: split y of every tile sums k slices [y * per, (y + 1) * per)
// into fp32 partials in the workspace, and splitk_reduce (one pass, splits added in order: the same
// bits every run) applies the epilogue. The split count minimises a time estimate in units of one
// wave's k slice: waves(tiles * s) * ceil(slices / s), plus the partials' traffic (written once,
// read once) at ~2.5 TB/s against a wave slice of resident x 2 BM BN BK flops at ~3 TFLOP/s per SM
// (mma.sync, bf16; tf32 is half the rate per byte of k, the same per slice). Each split keeps at
// least 8 slices; up to 8 splits; a split must beat no split by 10%. Slots per SM = the smaller of
// the register limit (2 CTAs of 128 x 128, 3 of 128 x 64, 5 of 64 x 64: ptxas's counts) and the
// shared-memory limit (dev.max_smem_per_sm over the tile's 4 stages: 1 CTA of 128 x 128 on Ada).
Sm80Plan choose_sm80_plan(const GemmProblem& p, const DeviceInfo& dev) {
  Sm80Plan plan;
  // FP8 on Hopper (the forced mma.sync test path) has the 64x64 tile only (sm80_gemm_kernel.cuh).
  plan.tile = dtype_is_fp8(p.ab_type) && dev.sm_major >= 9 ? Sm80Tile::k64x64 : choose_sm80_tile(p, dev);
  const int bm = plan.tile == Sm80Tile::k64x64 ? 64 : 128;
  const int bn = plan.tile == Sm80Tile::k128x128 ? 128 : 64;
  const int64_t bk = 64 / static_cast<int64_t>(dtype_size(p.ab_type));
  const int64_t slices = (static_cast<int64_t>(p.k) + bk - 1) / bk;
  const int64_t max_splits = std::min<int64_t>(65535 / std::max<int64_t>(p.batch, 1), slices);
  // About s splits of the slices: {the splits there are once each has ceil(slices / s), that count}.
  auto split_of = [&](int64_t s) {
    const int64_t per = (slices + s - 1) / s;
    return std::pair<int64_t, int64_t>{(slices + per - 1) / per, per};
  };
  auto with_splits = [&](int64_t s) {
    const auto [n, per] = split_of(s);
    plan.splits = static_cast<int>(n);
    plan.kt_per_split = n > 1 ? static_cast<int>(per) : 0;
    return plan;
  };
  if (const char* env = std::getenv("BLUBLAS_SM80_SPLITS"); env != nullptr && std::atoi(env) > 0) {
    return with_splits(std::min<int64_t>(std::atoi(env), std::max<int64_t>(max_splits, 1)));
  }
  const int64_t sms = dev.sm_count > 0 ? dev.sm_count : 1;
  const int64_t smem_tile = 4LL * (bm + bn) * 80;
  const int64_t by_smem = dev.max_smem_per_sm > 0 ? std::max<int64_t>(dev.max_smem_per_sm / smem_tile, 1) : 1;
  const int64_t by_regs = plan.tile == Sm80Tile::k128x128 ? 2 : plan.tile == Sm80Tile::k128x64 ? 3 : 5;
  const int64_t per_sm = std::min<int64_t>(by_regs, by_smem);
  const int64_t slots = sms * per_sm;
  const int64_t tiles = ctas(p, bm, bn);
  const double wave_slice_us = static_cast<double>(per_sm) * 2.0 * bm * bn * 32 / 3.0e6;
  const double partial_us_per_split =
      2.0 * static_cast<double>(p.batch) * p.m * static_cast<double>(sm80_partial_ld(p)) * 4 / 2.5e6;
  auto cost = [&](int64_t s) {
    const auto [n_splits, per] = split_of(s);
    const int64_t waves = (tiles * n_splits + slots - 1) / slots;
    return static_cast<double>(waves * per) * wave_slice_us + (n_splits > 1 ? n_splits * partial_us_per_split : 0.0);
  };
  const double base = cost(1);
  int64_t best = 1;
  double best_cost = base;
  for (int64_t s = 2; s <= std::min<int64_t>(8, max_splits) && slices / s >= 8; ++s) {
    const double c = cost(s);
    if (c < best_cost) {
      best_cost = c;
      best = s;
    }
  }
  return with_splits(best_cost < 0.9 * base ? best : 1);
}

}  // namespace blublas::gemm_detail

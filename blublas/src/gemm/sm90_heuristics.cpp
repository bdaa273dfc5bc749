// sm90_heuristics.cpp: the sm_90a plan (tile, schedule, split-K, grouped order, grid) from a
// small cost model (Note [sm90 cost model]): time ~ units per CTA * (per-unit main loop + the
// epilogue the schedule leaves exposed) (+ the split-K partial traffic and its reduction kernel).
// It is what makes the skinny weight-gradient shapes (M, N <= ~3072, K = 16384) fill the GPU,
// and what picks the ping-pong tiles where K is short (the epilogue is then a large share).
#include "gemm/sm90_heuristics.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace blublas::gemm_detail::sm90 {
namespace {

// Note [sm90 cost model]
// time = (units per CTA) * (per-unit main loop + the per-unit time the schedule does not hide)
//        (+ split-K partial traffic and the reduction launch).
// - Main loop: 2*BM*BN*BK flops per k-block at the per-SM tensor rate measured on the long-K
//   shapes (lm_head dX: ~716 TFLOP/s bf16, ~330 tf32 on 132 SMs), times the tile's relative speed.
// - Cooperative tiles (both consumer warpgroups on one tile) expose the whole epilogue and the
//   restart of the pipeline: ~2.5 us per 128x256 bf16 tile (fc fwd, K = 768: 11.8 us per unit
//   against 9.3 us of main loop, H200), ~3.3 us with f32 output.
// - Ping-pong tiles hide a warpgroup's epilogue behind the other's main loop; only the part
//   longer than one main loop shows.
// - Clusters of two CTAs (k128x256_2c_cl2): a work unit is a pair of vertically adjacent tiles on
//   a pair of SMs, so units and SMs are both counted in pairs; each CTA's time is its own tile's.
struct TileModel {
  Sm90Tile tile;
  double relative_speed;  // main-loop throughput relative to the 128x256 cooperative tile
  bool ping_pong;
  int cluster = 1;        // CTAs per cluster (along M)
  bool forced_only = false;  // never kAuto's choice; modelled so a forced tile gets its splits
};

int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

// kAuto considers the ping-pong tiles up to this many k-blocks per tile (see choose_plan).
constexpr int kPingPongMaxKBlocks = 24;

double estimate_seconds(const GemmProblem& p, const DeviceInfo& dev, const TileModel& t,
                        int splits) {
  const int bm = sm90_tile_m(t.tile), bn = sm90_tile_n(t.tile), bk = sm90_tile_k(t.tile, p.ab_type);
  const int64_t tiles =
      static_cast<int64_t>(ceil_div(ceil_div(p.m, bm), t.cluster)) * ceil_div(p.n, bn) * p.batch;
  const int64_t units = tiles * splits;
  const int kblocks = ceil_div(p.k, bk);
  const int kb_per_unit = ceil_div(kblocks, splits);
  const int64_t sms = std::max(1, dev.sm_count / t.cluster);
  const int64_t per_cta = (units + sms - 1) / sms;
  const bool tf32 = p.ab_type == Dtype::kF32;
  // FP8: twice the bf16 tensor rate (H100 datasheet, dense), not yet measured here.
  const double rate = tf32 ? 330e12 : dtype_is_fp8(p.ab_type) ? 2.0 * 716e12 : 716e12;
  const double sm_flops = rate / 132.0 * t.relative_speed;
  const double main_seconds = (2.0 * bm * bn * bk * kb_per_unit) / sm_flops;
  // Epilogue: a fixed part plus a part proportional to the tile's output bytes (64 KB for a
  // 128x256 16-bit tile). Split-K units write fp32 partials.
  const double out_bytes = static_cast<double>(bm) * bn *
                           (splits > 1 ? 4.0 : static_cast<double>(dtype_size(p.cd_type)));
  double epi_seconds = 1.7e-6 + 0.8e-6 * out_bytes / 65536.0;
  // C (beta != 0) or kGeluGrad's aux read in the epilogue: the cooperative tiles wait for each
  // pass's load (~1 us each, two passes); the ping-pong tiles load them ahead, during the main
  // loop (Note [sm90 epilogue loads ahead] in sm90_gemm_kernel.cuh).
  const bool loads = splits == 1 && (p.beta != 0.0f || p.epilogue == Epilogue::kGeluGrad);
  if (loads && !t.ping_pong) epi_seconds += 2.0e-6 * out_bytes / 65536.0;
  const double exposed =
      t.ping_pong ? std::max(0.0, epi_seconds - main_seconds) + 0.1e-6 : epi_seconds;
  double seconds = static_cast<double>(per_cta) * (main_seconds + exposed);
  if (t.ping_pong) seconds += epi_seconds;  // the last unit's epilogue
  if (splits > 1) {
    // Partials written by the GEMM and read back by the reduction, plus the reduction launch.
    const double bytes = 2.0 * splits * 4.0 * p.m * p.n * p.batch;
    seconds += bytes / 2.5e12 + 4e-6;
  }
  return seconds;
}

// The kernel's stream-K arithmetic is 32-bit: tiles * kblocks * SMs < 2^31.
bool stream_k_fits(const GemmProblem& p, const DeviceInfo& dev, Sm90Tile tile) {
  const int64_t iters = static_cast<int64_t>(ceil_div(p.m, sm90_tile_m(tile))) * ceil_div(p.n, sm90_tile_n(tile)) *
                        p.batch * ceil_div(p.k, sm90_tile_k(tile, p.ab_type));
  return iters * std::max(1, dev.sm_count) < (int64_t{1} << 31);
}

bool stream_k_from_env() {
  const char* v = std::getenv("BLUBLAS_SM90_STREAMK");
  return v != nullptr && std::atoi(v) != 0;
}

int tile_from_env() {
  const char* v = std::getenv("BLUBLAS_SM90_TILE");
  if (v == nullptr || *v == '\0') return -1;
  for (int t = 0; t < static_cast<int>(Sm90Tile::kCount); ++t) {
    if (std::strcmp(v, sm90_tile_name(static_cast<Sm90Tile>(t))) == 0) return t;
  }
  return -1;
}

// A tile family kAuto may take unless `name`=0 (A/B measurements): BLUBLAS_SM90_PINGPONG for the
// ping-pong tiles, BLUBLAS_SM90_192 for the 192x192 one.
bool allowed_by_env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' || std::atoi(v) != 0;
}

int splits_from_env() {
  const char* v = std::getenv("BLUBLAS_SM90_SPLITS");
  if (v == nullptr || *v == '\0') return 0;
  return std::max(0, std::atoi(v));
}

}  // namespace

// Note [Tile groups for a large B]
// The persistent kernels walk the tiles in groups of group_m tile rows, column by column inside a
// group (sm90_work_units.h): a group reads its A rows once (they stay in L2) and all of B, so B
// comes from DRAM once per group when it does not fit in L2. With 8 rows of 64-row ping-pong
// tiles, the lm head's forward (B = the 50304 x 768 bf16 embedding, 77 MB, over the H200's 60 MB
// L2) read B 32 times at 16384 rows: 2.5 GB, a quarter of the kernel's time at 4.8 TB/s.
// Measured (session 38, blublas-profiler --variants, H200, ratio to cuBLAS in one process;
// BLUBLAS_SM90_GROUP_M = 8 / 16 / 32 / 64): lm head fwd 16384 rows 0.906 / 0.964 / 0.994 / 0.913,
// 8192 rows 0.898 / 0.961 / 1.008 / 0.947; fc fwd (B 4.7 MB) and lm head dX (3 column tiles)
// unchanged within noise. So when B is over 16 MiB and a group walks at least 16 column tiles
// (the weight-gradient shapes, N = 768, have 3-4: their order stays as measured) the groups span
// 2048 rows (32 ping-pong tile rows, 16 of 128, 10 of 192); else 8 tile rows as before. The order
// does not change a tile's sums (split-K units keep their k ranges), except under stream-K (opt-in,
// Note [sm90 stream-K]), whose cut points follow the tile order: still one order per problem. The
// cluster tile (forced only) counts tile pairs, so its groups span twice the rows.
int sm90_group_m(const GemmProblem& p, Sm90Tile tile) {
  const double b_bytes = static_cast<double>(p.n) * p.k * dtype_size(p.ab_type);
  if (b_bytes <= 16.0 * 1024 * 1024 || ceil_div(p.n, sm90_tile_n(tile)) < 16) return 8;
  return std::max(8, 2048 / sm90_tile_m(tile));
}

bool sm90_stream_k_tile(Sm90Tile t, Dtype ab_type) {
  if (ab_type != Dtype::kBF16 && ab_type != Dtype::kF16) return false;
  return t == Sm90Tile::k128x128_1c || t == Sm90Tile::k128x256_2c || t == Sm90Tile::k128x128_2c ||
         t == Sm90Tile::k192x192_3c;
}

bool sm90_fuses_bias_grad(const GemmProblem& p, Sm90Tile tile, int splits, bool a_k_major,
                          bool stream_k) {
  if (p.epilogue != Epilogue::kBiasGradA || p.batch != 1 || a_k_major) return false;
  if (tile == Sm90Tile::k128x256_2c_cl2 || (p.ab_type != Dtype::kBF16 && p.ab_type != Dtype::kF16)) return false;
  // A unit's k-blocks are [s * kblocks / splits, (s + 1) * kblocks / splits) (sm90_work_units.h);
  // a chunk is two 64-deep k-blocks, so every inner boundary must be even.
  const int kblocks = (p.k + 63) / 64;
  // Stream-K cuts at multiples of two k-blocks when kblocks is even (Note [sm90 stream-K]).
  if (stream_k) return kblocks % 2 == 0;
  for (int s = 1; s < splits; ++s) {
    if ((static_cast<int64_t>(s) * kblocks / splits) % 2 != 0) return false;
  }
  return true;
}

bool sm90_tile_compiled(Sm90Tile t, Dtype ab_type) {
  if (t == Sm90Tile::kCount) return false;
  if (dtype_is_fp8(ab_type)) {
    return t == Sm90Tile::k128x256_2c || t == Sm90Tile::k64x256_pp || t == Sm90Tile::k128x128_2c;
  }
  return true;
}

Sm90Plan choose_plan(const GemmProblem& p, const DeviceInfo& dev, const Sm90Override& force) {
  Sm90Plan plan;
  int forced_tile = force.tile >= 0 ? force.tile : tile_from_env();
  // A forced tile with no kernel for these inputs is ignored (kAuto's choice runs instead).
  if (forced_tile >= 0 && !sm90_tile_compiled(static_cast<Sm90Tile>(forced_tile), p.ab_type)) {
    forced_tile = -1;
  }
  const int forced_splits = force.splits > 0 ? force.splits : splits_from_env();
  const bool stream_k_on = force.stream_k >= 0 ? force.stream_k == 1 : stream_k_from_env();
  // The cluster-of-2 tile (k128x256_2c_cl2, B multicast) is correct; measured slower on H200
  // in every GPT-2 shape until session 28's fix (Note [Cluster arrive scope]), since then even
  // with 128x256_2c on single-split shapes, so kAuto does not pick it; it stays selectable
  // (BLUBLAS_SM90_TILE=128x256_2c_cl2, tests) for further work. It is modelled so that a forced
  // run gets split-K like the others: before session 29 a forced tile outside this list ran with
  // one split, which is what made "split-K in clusters" look 1.4-4x slow in session 28 (attn_proj
  // dW: 9 cluster units for 132 SMs).
  // Relative speeds of 128x128_2c and 192x192_3c fitted to session 32's interleaved table of the
  // GPT-2 d48 set (C = 1600, raw/session32/call3_d48_tile_variants.md): with wave counts from
  // the model, qkv / fc / fc_proj dW give 0.73-0.76 and 0.96-1.02 of 128x256_2c's per-SM rate
  // (they were guesses, 0.9 and 0.95: kAuto took 128x128_2c for every d48 dW at 0.75-0.77 of
  // cuBLAS where 192x192_3c ran 0.87 on qkv dW and 128x256_2c 0.84 on fc / fc_proj dW).
  const TileModel candidates[] = {
      {Sm90Tile::k128x256_2c, 1.0, false},
      {Sm90Tile::k64x256_pp, 0.93, true},
      {Sm90Tile::k128x128_2c, 0.76, false},
      // Note [sm90 192x192 tile]: not compiled for FP8.
      {Sm90Tile::k192x192_3c, 1.0, false},
      {Sm90Tile::k128x256_2c_cl2, 1.0, false, 2, true},
  };
  double best = 1e30;
  for (const TileModel& t : candidates) {
    if (forced_tile >= 0 && static_cast<int>(t.tile) != forced_tile) continue;
    if (t.forced_only && forced_tile < 0) continue;
    if (t.ping_pong && forced_tile < 0 && !allowed_by_env("BLUBLAS_SM90_PINGPONG")) continue;
    if (t.tile == Sm90Tile::k192x192_3c &&
        (dtype_is_fp8(p.ab_type) || (forced_tile < 0 && !allowed_by_env("BLUBLAS_SM90_192")))) {
      continue;
    }
    // The 192x192 tile has no staged C / aux loads (three consumers fill its shared memory), so
    // beta != 0 or kGeluGrad would run its generic epilogue (sm90_gemm_launch.cuh tma_store_ok):
    // kAuto leaves those problems to the others.
    if (t.tile == Sm90Tile::k192x192_3c && forced_tile < 0 &&
        (p.beta != 0.0f || p.epilogue == Epilogue::kGeluGrad)) {
      continue;
    }
    const int kblocks = ceil_div(p.k, sm90_tile_k(t.tile, p.ab_type));
    // Ping-pong was measured (run4-0105) on K = 768 (12 k-blocks) only; past that the cooperative
    // tile matches cuBLAS (lm head dX/dW 0.99), so kAuto keeps it to short K.
    if (t.ping_pong && forced_tile < 0 && kblocks > kPingPongMaxKBlocks) continue;
    const int max_splits = forced_splits > 0 ? forced_splits : std::min(16, kblocks);
    const int min_splits = forced_splits > 0 ? forced_splits : 1;
    for (int s = min_splits; s <= max_splits; ++s) {
      // Splits below 4 k-blocks each are not worth a reduction pass.
      if (s > 1 && forced_splits == 0 && kblocks / s < 4) break;
      const double sec = estimate_seconds(p, dev, t, s);
      if (sec < best * 0.97) {  // prefer fewer splits / the earlier tile on near-ties
        best = sec;
        plan.tile = t.tile;
        plan.splits = s;
        plan.stream_k = false;
      }
    }
  }
  // Stream-K only when asked (BLUBLAS_SM90_STREAMK=1 / force.stream_k = 1), wherever the chosen
  // tile allows it: measured slower than the strided units on every GPT-2 shape (Note [sm90
  // stream-K]: the CTAs' staggered k offsets defeat the L2 reuse of the shared A / B panels).
  if (stream_k_on && forced_splits == 0 && sm90_stream_k_tile(plan.tile, p.ab_type) &&
      stream_k_fits(p, dev, plan.tile)) {
    plan.splits = 1;
    plan.stream_k = true;
  }
  if (forced_tile >= 0 && best == 1e30) {  // a tile outside the model's candidates
    plan.tile = static_cast<Sm90Tile>(forced_tile);
    plan.splits = forced_splits > 0 ? forced_splits : 1;
  }
  const int bk = sm90_tile_k(plan.tile, p.ab_type);
  plan.splits = std::max(1, std::min(plan.splits, ceil_div(p.k, bk)));
  plan.group_m = sm90_group_m(p, plan.tile);
  if (const char* g = std::getenv("BLUBLAS_SM90_GROUP_M"); g != nullptr && std::atoi(g) > 0) {
    plan.group_m = std::atoi(g);  // tile rows per group of the tile order (sweeps)
  }
  const int64_t units = static_cast<int64_t>(ceil_div(p.m, sm90_tile_m(plan.tile))) *
                        ceil_div(p.n, sm90_tile_n(plan.tile)) * p.batch * plan.splits;
  // Note [GEMM CTA budget] (gemm.h): only the grid, so the units and their sums stay the same.
  const int64_t ctas = p.max_ctas > 0 ? std::min<int64_t>(p.max_ctas, dev.sm_count) : dev.sm_count;
  // Stream-K: the partition is the whole device's (sm90_gemm_entry.cu), the grid the budget's.
  plan.grid = static_cast<int>(std::max<int64_t>(1, plan.stream_k ? ctas : std::min<int64_t>(units, ctas)));
  return plan;
}

}  // namespace blublas::gemm_detail::sm90

// exp2_bench.cu: throughput of the base-2 exponentials the attention forward can use, per SM and
// clock: the MUFU's ex2.approx.ftz.f32, the packed ex2.approx.f16x2 and ex2.approx.ftz.bf16x2
// (two results per instruction: do they cost one MUFU slot or two?), blublas's FMA-pipe 2^x
// (attn::sm90::ex2_fma, Note [sm90 forward: exponentials on two pipes]) and MUFU/FMA mixes. The
// question it answers: what share of the exponentials to move off the MUFU at d = 64.
// Each thread runs 8 independent chains v <- 2^(-v) (v stays in [0.5, 1]); one CTA of 1024
// threads per SM; cycles from clock64 around the loop, so clock boosts do not blur the rate.
// Also checks ex2_fma against exp2 in double over [-130, 0] (max relative error, NaN kept).
//   exp2_bench [--blu_out=DIR]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../blublas/src/attention/sm90_attn_primitives.cuh"
#include "bench_common.h"

namespace {

using blublas::attn::sm90::ex2;
using blublas::attn::sm90::ex2_fma;

constexpr int kChains = 8;
constexpr int kThreads = 1024;

enum Variant : int { kMufu, kFma, kMix1of4, kMix1of3, kMix1of2, kF16x2, kBf16x2, kVariants };
const char* const kNames[kVariants] = {"mufu f32",     "fma poly f32", "mix 1/4 fma",
                                       "mix 1/3 fma",  "mix 1/2 fma",  "mufu f16x2",
                                       "mufu bf16x2"};
// Results per instruction-chain step (the packed forms give two).
constexpr int kResultsPerStep[kVariants] = {1, 1, 1, 1, 1, 2, 2};

__device__ __forceinline__ uint32_t ex2_f16x2_neg(uint32_t v) {
  uint32_t y;
  asm("{\n .reg .b32 n;\n neg.f16x2 n, %1;\n ex2.approx.f16x2 %0, n;\n}" : "=r"(y) : "r"(v));
  return y;
}
__device__ __forceinline__ uint32_t ex2_bf16x2_neg(uint32_t v) {
  uint32_t y;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("{\n .reg .b32 n;\n neg.bf16x2 n, %1;\n ex2.approx.ftz.bf16x2 %0, n;\n}" : "=r"(y) : "r"(v));
#else
  y = v;
#endif
  return y;
}

template <int kV>
__global__ void __launch_bounds__(kThreads, 1)
    exp_chain_kernel(int iters, float* sink, long long* cycles) {
  float v[kChains];
  uint32_t h[kChains];
#pragma unroll
  for (int i = 0; i < kChains; ++i) {
    v[i] = 0.5f + 0.05f * static_cast<float>(i) + 1e-6f * static_cast<float>(threadIdx.x);
    h[i] = kV == kBf16x2 ? 0x3f403f00u + i : 0x3a003800u + i;  // bf16 (0.5, 0.75) / f16 (0.5, 0.75)
  }
  __syncthreads();
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < kChains; ++i) {
      if constexpr (kV == kMufu) v[i] = ex2(-v[i]);
      if constexpr (kV == kFma) v[i] = ex2_fma(-v[i]);
      if constexpr (kV == kMix1of4) v[i] = (i % 4 == 3) ? ex2_fma(-v[i]) : ex2(-v[i]);
      if constexpr (kV == kMix1of3) v[i] = (i % 3 == 2) ? ex2_fma(-v[i]) : ex2(-v[i]);
      if constexpr (kV == kMix1of2) v[i] = (i % 2 == 1) ? ex2_fma(-v[i]) : ex2(-v[i]);
      if constexpr (kV == kF16x2) h[i] = ex2_f16x2_neg(h[i]);
      if constexpr (kV == kBf16x2) h[i] = ex2_bf16x2_neg(h[i]);
    }
  }
  __syncthreads();
  const long long t1 = clock64();
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < kChains; ++i) acc += v[i] + __uint_as_float(h[i]);
  sink[blockIdx.x * kThreads + threadIdx.x] = acc;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

// ex2_fma against exp2 in double at n points of [-130, 0] and NaN: max relative error over the
// normal results, the largest result where double says < 2^-126 (must be 0), NaN in -> NaN out.
__global__ void ex2_fma_accuracy_kernel(int n, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = ex2_fma(-130.0f * static_cast<float>(i) / static_cast<float>(n - 1));
  if (i == n) out[i] = ex2_fma(__int_as_float(0x7fc00000));
}

using Launch = void (*)(int, int, float*, long long*);
template <int kV>
void launch(int grid, int iters, float* sink, long long* cycles) {
  exp_chain_kernel<kV><<<grid, kThreads>>>(iters, sink, cycles);
}
const Launch kLaunch[kVariants] = {launch<kMufu>,    launch<kFma>,   launch<kMix1of4>,
                                   launch<kMix1of3>, launch<kMix1of2>, launch<kF16x2>,
                                   launch<kBf16x2>};

}  // namespace

int main(int argc, char** argv) {
  const blu::bench::Options opt = blu::bench::parse_options(&argc, argv);
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    std::fprintf(stderr, "exp2_bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  BLU_BENCH_CUDA(cudaGetDeviceProperties(&prop, dev));
  const int sms = prop.multiProcessorCount;
  blu::bench::Report report("exp2_bench");

  // Accuracy of the FMA-pipe exponential.
  {
    const int n = 1 << 20;
    float* d = nullptr;
    BLU_BENCH_CUDA(cudaMalloc(&d, (n + 1) * sizeof(float)));
    ex2_fma_accuracy_kernel<<<(n + 256) / 256, 256>>>(n, d);
    std::vector<float> h(n + 1);
    BLU_BENCH_CUDA(cudaMemcpy(h.data(), d, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
    BLU_BENCH_CUDA(cudaFree(d));
    double max_rel = 0.0, max_tiny = 0.0;
    for (int i = 0; i < n; ++i) {
      const double x = -130.0 * static_cast<double>(static_cast<float>(i) / static_cast<float>(n - 1));
      const double ref = std::exp2(static_cast<double>(static_cast<float>(x)));
      if (ref >= std::ldexp(1.0, -125)) {
        max_rel = std::fmax(max_rel, std::fabs(h[i] - ref) / ref);
      } else if (ref < std::ldexp(1.0, -127)) {
        max_tiny = std::fmax(max_tiny, std::fabs(static_cast<double>(h[i])));
      }
    }
    const bool nan_kept = std::isnan(h[n]);
    std::printf("ex2_fma over [-130, 0]: max relative error %.3g (normal results), largest result "
                "below 2^-127: %g, NaN in -> %s\n",
                max_rel, max_tiny, nan_kept ? "NaN" : "NOT NaN");
    report.metric("exp2.fma_poly.max_rel_err", max_rel);
    report.metric("exp2.fma_poly.nan_kept", nan_kept ? 1.0 : 0.0);
  }

  float* sink = nullptr;
  long long* cycles = nullptr;
  BLU_BENCH_CUDA(cudaMalloc(&sink, static_cast<size_t>(sms) * kThreads * sizeof(float)));
  BLU_BENCH_CUDA(cudaMalloc(&cycles, sms * sizeof(long long)));
  const int iters = opt.quick ? 2048 : 8192;
  std::printf("\n| variant | results / clock / SM | ns (kernel) | Gresults/s (GPU) |\n|---|---|---|---|\n");
  for (int v = 0; v < kVariants; ++v) {
    kLaunch[v](sms, 64, sink, cycles);  // warm-up
    BLU_BENCH_CUDA(cudaGetLastError());
    cudaEvent_t a, b;
    BLU_BENCH_CUDA(cudaEventCreate(&a));
    BLU_BENCH_CUDA(cudaEventCreate(&b));
    BLU_BENCH_CUDA(cudaEventRecord(a));
    kLaunch[v](sms, iters, sink, cycles);
    BLU_BENCH_CUDA(cudaEventRecord(b));
    BLU_BENCH_CUDA(cudaEventSynchronize(b));
    float ms = 0.0f;
    BLU_BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
    std::vector<long long> cyc(sms);
    BLU_BENCH_CUDA(cudaMemcpy(cyc.data(), cycles, sms * sizeof(long long), cudaMemcpyDeviceToHost));
    long long worst = 0;
    for (long long c : cyc) worst = c > worst ? c : worst;
    const double per_sm = static_cast<double>(kThreads) * kChains * iters * kResultsPerStep[v];
    const double per_clk = per_sm / static_cast<double>(worst);
    const double gps = per_sm * sms / (ms * 1e-3) / 1e9;
    std::printf("| %s | %.2f | %.0f | %.1f |\n", kNames[v], per_clk, ms * 1e6, gps);
    report.row(blu::bench::Row()
                   .str("variant", kNames[v])
                   .num("results_per_clock_per_sm", per_clk)
                   .num("ms", ms)
                   .num("gresults_per_s", gps));
    BLU_BENCH_CUDA(cudaEventDestroy(a));
    BLU_BENCH_CUDA(cudaEventDestroy(b));
  }
  BLU_BENCH_CUDA(cudaFree(sink));
  BLU_BENCH_CUDA(cudaFree(cycles));
  report.write(opt.out_dir);
  return 0;
}

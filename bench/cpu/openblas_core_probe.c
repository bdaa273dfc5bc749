// openblas_core_probe.c: GFLOP/s of the tiny GPT-2 CPU run's GEMM shapes through cblas_sgemm (the
// tied lm head's forward, dX and dW at 256 tokens, and two layer shapes), best of 3 calls each, and
// the OpenBLAS core in use. For A/B runs of OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS (Note
// [OpenBLAS core on AVX-512] in scripts/run.sh; bench/NOTES.md "CPU first run").
//   gcc -O2 bench/cpu/openblas_core_probe.c -o /tmp/ob -lopenblas
//   /tmp/ob; OPENBLAS_CORETYPE=SkylakeX /tmp/ob; OPENBLAS_NUM_THREADS=1 /tmp/ob
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// C (M x N) = op(A) op(B), row-major; ta: A stored K x M, tb: B stored N x K.
static double gflops(int ta, int tb, int m, int n, int k) {
  float* a = malloc(sizeof(float) * (size_t)m * k);
  float* b = malloc(sizeof(float) * (size_t)k * n);
  float* c = malloc(sizeof(float) * (size_t)m * n);
  for (long i = 0; i < (long)m * k; i++) a[i] = 1e-3f * (float)(i % 7);
  for (long i = 0; i < (long)k * n; i++) b[i] = 1e-3f * (float)(i % 5);
  double best = 1e30;
  for (int r = 0; r < 3; r++) {
    const double t0 = seconds();
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, 1.0f, a, ta ? m : k, b, tb ? k : n, 0.0f, c, n);
    const double t = seconds() - t0;
    if (t < best) best = t;
  }
  free(a);
  free(b);
  free(c);
  return 2.0 * m * n * k / best / 1e9;
}

int main(void) {
  printf("core %s: lm head fwd %.0f, dX %.0f, dW %.0f; layer 256x512x128 %.0f, 256x128x512 %.0f GFLOP/s\n",
         openblas_get_corename(), gflops(0, 1, 256, 50257, 128), gflops(0, 0, 256, 128, 50257),
         gflops(1, 0, 50257, 128, 256), gflops(0, 1, 256, 512, 128), gflops(0, 0, 256, 128, 512));
  return 0;
}

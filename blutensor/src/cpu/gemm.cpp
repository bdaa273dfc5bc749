// CPU GEMM: out[b] (+)= a[b] @ bm[b] for f64/f32 (bf16/f16 through f32 copies).
//
// Note [CPU GEMM]
// Goto-style blocking: K in KC slices, N in NC blocks whose B panel is packed once ([NR] columns
// interleaved per k), M in MC blocks packed per task ([MR] rows interleaved per k); a MR x NR
// register tile (GCC vector extensions) does the multiply. The micro-kernel is compiled twice,
// generic and with target("avx2,fma"), and chosen once at run time (__builtin_cpu_supports), so
// one binary is fast where AVX2 exists and correct where it does not. Tasks (MC block x NC/4
// column slice) run under OpenMP; small batched problems parallelise over the batch instead.
// Packing reads through arbitrary strides, so transposed views cost nothing extra.
// With OpenBLAS present (BLU_HAVE_CBLAS) and unit-stride operands, f32/f64 call cblas instead
// (env BLU_CPU_GEMM=builtin keeps the built-in path, so tests can check both).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/cpu_loops.h"
#include "cpu/cpu_ops.h"
#include "cpu/dtype_switch.h"

#ifdef BLU_HAVE_CBLAS
#include <cblas.h>
#endif

namespace blu::cpu_ops {

namespace {

template <typename T> struct Tile;
template <> struct Tile<float> {
  static constexpr int kMR = 6, kLanes = 8, kNV = 2, kNR = 16;
  typedef float V __attribute__((vector_size(32)));
};
template <> struct Tile<double> {
  static constexpr int kMR = 6, kLanes = 4, kNV = 2, kNR = 8;
  typedef double V __attribute__((vector_size(32)));
};

constexpr int64_t kMC = 96;
constexpr int64_t kKC = 256;
constexpr int64_t kNC = 3072;

// tile[MR][NR] = sum_k ap[k][MR] * bp[k][NR], stored to c (row stride ldc): c = tile when
// overwrite, else c += tile. Edge tiles pass a scratch c (ldc = NR, overwrite) and copy out.
template <typename T>
__attribute__((always_inline)) inline void micro_body(int64_t kc, const T* __restrict ap, const T* __restrict bp,
                                                      T* __restrict c, int64_t ldc, bool overwrite) {
  using TL = Tile<T>;
  using V = typename TL::V;
  V acc[TL::kMR][TL::kNV];
  for (int i = 0; i < TL::kMR; ++i)
    for (int v = 0; v < TL::kNV; ++v) acc[i][v] = V{};
  for (int64_t k = 0; k < kc; ++k) {
    V b[TL::kNV];
    for (int v = 0; v < TL::kNV; ++v) std::memcpy(&b[v], bp + k * TL::kNR + v * TL::kLanes, sizeof(V));
    for (int i = 0; i < TL::kMR; ++i) {
      // x - 0 is x for every x (-0 included), so GCC folds it to a broadcast straight from
      // memory; the former V{} + x kept an add on the FMA ports (x + 0 is not x for x = -0).
      V a = ap[k * TL::kMR + i] - V{};
      for (int v = 0; v < TL::kNV; ++v) acc[i][v] += a * b[v];
    }
  }
  for (int i = 0; i < TL::kMR; ++i) {
    for (int v = 0; v < TL::kNV; ++v) {
      T* dst = c + i * ldc + v * TL::kLanes;
      if (!overwrite) {
        V old;
        std::memcpy(&old, dst, sizeof(V));
        acc[i][v] += old;
      }
      std::memcpy(dst, &acc[i][v], sizeof(V));
    }
  }
}

template <typename T>
void micro_generic(int64_t kc, const T* ap, const T* bp, T* c, int64_t ldc, bool overwrite) {
  micro_body<T>(kc, ap, bp, c, ldc, overwrite);
}

template <typename T>
__attribute__((target("avx2,fma"))) void micro_avx2(int64_t kc, const T* ap, const T* bp, T* c, int64_t ldc,
                                                     bool overwrite) {
  micro_body<T>(kc, ap, bp, c, ldc, overwrite);
}

bool has_avx2() {
  static const bool v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return v;
}

template <typename T>
struct Matrix {  // element (r, c) at p[r * rs + c * cs]
  const T* p;
  int64_t rs, cs;
};

template <typename T>
void pack_b(const Matrix<T>& b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, T* out) {
  constexpr int NR = Tile<T>::kNR;
  const int64_t panels = (nc + NR - 1) / NR;
  cpu::parallel_for(panels, kc * NR, [&](int64_t pnl) {
    T* dst = out + pnl * kc * NR;
    int64_t jb = j0 + pnl * NR;
    int64_t w = std::min<int64_t>(NR, j0 + nc - jb);
    for (int64_t k = 0; k < kc; ++k) {
      const T* src = b.p + (k0 + k) * b.rs + jb * b.cs;
      T* d = dst + k * NR;
      if (b.cs == 1) {
        for (int64_t j = 0; j < w; ++j) d[j] = src[j];
      } else {
        for (int64_t j = 0; j < w; ++j) d[j] = src[j * b.cs];
      }
      for (int64_t j = w; j < NR; ++j) d[j] = T(0);
    }
  });
}

template <typename T>
void pack_a(const Matrix<T>& a, int64_t i0, int64_t mc, int64_t k0, int64_t kc, T* out) {
  constexpr int MR = Tile<T>::kMR;
  const int64_t panels = (mc + MR - 1) / MR;
  for (int64_t pnl = 0; pnl < panels; ++pnl) {
    T* dst = out + pnl * kc * MR;
    int64_t ib = i0 + pnl * MR;
    int64_t h = std::min<int64_t>(MR, i0 + mc - ib);
    if (a.cs == 1) {
      for (int64_t i = 0; i < h; ++i) {
        const T* src = a.p + (ib + i) * a.rs + k0;
        for (int64_t k = 0; k < kc; ++k) dst[k * MR + i] = src[k];
      }
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        const T* src = a.p + ib * a.rs + (k0 + k) * a.cs;
        for (int64_t i = 0; i < h; ++i) dst[k * MR + i] = src[i * a.rs];
      }
    }
    for (int64_t i = h; i < MR; ++i)
      for (int64_t k = 0; k < kc; ++k) dst[k * MR + i] = T(0);
  }
}

// One GEMM C[M, N] (ldc = N, contiguous) (+)= A[M, K] B[K, N]. threads: 1 = serial.
template <typename T>
void gemm_one(T* c, const Matrix<T>& a, const Matrix<T>& b, int64_t m, int64_t n, int64_t k,
              bool accumulate, bool parallel) {
  constexpr int MR = Tile<T>::kMR, NR = Tile<T>::kNR;
  if (k == 0) {
    if (!accumulate) std::fill(c, c + m * n, T(0));
    return;
  }
  auto micro = has_avx2() ? &micro_avx2<T> : &micro_generic<T>;
  std::vector<T> bpack(static_cast<std::size_t>(kKC * ((std::min(kNC, n) + NR - 1) / NR) * NR));
  for (int64_t k0 = 0; k0 < k; k0 += kKC) {
    const int64_t kc = std::min(kKC, k - k0);
    const bool overwrite = k0 == 0 && !accumulate;
    for (int64_t j0 = 0; j0 < n; j0 += kNC) {
      const int64_t nc = std::min(kNC, n - j0);
      pack_b(b, k0, kc, j0, nc, bpack.data());
      const int64_t mblocks = (m + kMC - 1) / kMC;
      const int64_t npanels = (nc + NR - 1) / NR;
      // Column slices per M block so that small M still feeds every thread.
      const int64_t slices = std::max<int64_t>(1, std::min<int64_t>(npanels, parallel && m * nc * kc >= (int64_t{1} << 21) ? 8 : 1));
      const int64_t panels_per_slice = (npanels + slices - 1) / slices;
      const int64_t tasks = mblocks * slices;
      auto run_task = [&](int64_t task, std::vector<T>& apack, int64_t& packed_block) {
        const int64_t mb = task / slices, sl = task % slices;
        const int64_t i0 = mb * kMC, mc = std::min(kMC, m - i0);
        if (packed_block != mb) {
          pack_a(a, i0, mc, k0, kc, apack.data());
          packed_block = mb;
        }
        T acc[MR * NR];
        const int64_t p_begin = sl * panels_per_slice, p_end = std::min(npanels, p_begin + panels_per_slice);
        for (int64_t pnl = p_begin; pnl < p_end; ++pnl) {
          const int64_t jb = j0 + pnl * NR, w = std::min<int64_t>(NR, n - jb);
          for (int64_t ip = 0; ip * MR < mc; ++ip) {
            const int64_t ib = i0 + ip * MR, h = std::min<int64_t>(MR, m - ib);
            if (h == MR && w == NR) {
              micro(kc, apack.data() + ip * kc * MR, bpack.data() + pnl * kc * NR, c + ib * n + jb, n, overwrite);
              continue;
            }
            micro(kc, apack.data() + ip * kc * MR, bpack.data() + pnl * kc * NR, acc, NR, true);
            for (int64_t i = 0; i < h; ++i) {
              T* crow = c + (ib + i) * n + jb;
              const T* arow = acc + i * NR;
              if (overwrite) {
                for (int64_t j = 0; j < w; ++j) crow[j] = arow[j];
              } else {
                for (int64_t j = 0; j < w; ++j) crow[j] += arow[j];
              }
            }
          }
        }
      };
      const bool go_parallel = parallel && tasks > 1 && m * nc * kc >= (int64_t{1} << 21);
      if (!go_parallel) {
        std::vector<T> apack(static_cast<std::size_t>(kMC * kc + MR * kc));
        int64_t packed = -1;
        for (int64_t t = 0; t < tasks; ++t) run_task(t, apack, packed);
      } else {
#ifdef _OPENMP
#pragma omp parallel
        {
          std::vector<T> apack(static_cast<std::size_t>(kMC * kc + MR * kc));
          int64_t packed = -1;
#pragma omp for schedule(dynamic, 1)
          for (int64_t t = 0; t < tasks; ++t) run_task(t, apack, packed);
        }
#else
        std::vector<T> apack(static_cast<std::size_t>(kMC * kc + MR * kc));
        int64_t packed = -1;
        for (int64_t t = 0; t < tasks; ++t) run_task(t, apack, packed);
#endif
      }
    }
  }
}

#ifdef BLU_HAVE_CBLAS
}  // namespace
}  // namespace blu::cpu_ops
// Declared by OpenBLAS's cblas.h too; repeated so that another cblas.h on the include path (the
// reference one from libblas-dev) cannot hide them. BLU_HAVE_CBLAS is only set for OpenBLAS.
extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
}
namespace blu::cpu_ops {
namespace {

// Note [OpenBLAS threads]
// OpenBLAS keeps a thread pool of its own, sized once when the library loads (from
// OPENBLAS_NUM_THREADS, else OMP_NUM_THREADS, else all cores), beside blutensor's OpenMP pool that
// runs every other CPU op. Two things follow. (1) `blutrain --threads N` sets OMP_NUM_THREADS
// after OpenBLAS has read it, so the GEMM would still use every core: the first BLAS call sizes
// OpenBLAS's pool to OpenMP's (cpu::max_threads()), one number for both, unless the user set
// OPENBLAS_NUM_THREADS (then that wins). (2) The two pools never
// run at once (a GEMM is called from the main thread, outside OpenMP regions), so on 2 cores two
// OpenBLAS threads and two OpenMP threads take turns rather than oversubscribe, provided idle
// threads of either pool sleep instead of spinning: OMP_WAIT_POLICY=passive (scripts/run.sh) for
// OpenMP; OpenBLAS's pthread workers spin only briefly before sleeping. Measured on the 2-core
// machine (bench/NOTES.md, "CPU first run (issue 15)").
void size_blas_threads_once() {
  static const bool sized = [] {
    if (std::getenv("OPENBLAS_NUM_THREADS") != nullptr) return true;  // the user's explicit choice
    const int want = std::max(1, cpu::max_threads());
    if (openblas_get_num_threads() != want) openblas_set_num_threads(want);
    return true;
  }();
  (void)sized;
}

// BLU_CPU_GEMM=builtin forces the built-in GEMM (tests run both paths where OpenBLAS exists).
bool use_blas() {
  const char* e = std::getenv("BLU_CPU_GEMM");  // read per call: cheap next to a GEMM
  return e == nullptr || std::string(e) != "builtin";
}

bool blas_layout(int64_t rs, int64_t cs, int64_t rows, int64_t cols, bool& trans, int64_t& ld) {
  if (cs == 1 && rs >= std::max<int64_t>(1, cols)) { trans = false; ld = rs; return true; }
  if (rs == 1 && cs >= std::max<int64_t>(1, rows)) { trans = true; ld = cs; return true; }
  return false;
}
#endif

template <typename T>
void gemm_typed(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate) {
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  T* cp = static_cast<T*>(out.data_ptr());
  const T* ap = static_cast<const T*>(a.data_ptr());
  const T* bp = static_cast<const T*>(b.data_ptr());
  const int64_t sab = a.stride(0), sbb = b.stride(0);
  Matrix<T> am{ap, a.stride(1), a.stride(2)};
  Matrix<T> bm{bp, b.stride(1), b.stride(2)};
#ifdef BLU_HAVE_CBLAS
  {
    bool ta, tb;
    int64_t lda, ldb;
    if (use_blas() && m > 0 && n > 0 && k > 0 && blas_layout(am.rs, am.cs, m, k, ta, lda) &&
        blas_layout(bm.rs, bm.cs, k, n, tb, ldb)) {
      size_blas_threads_once();
      for (int64_t bi = 0; bi < batch; ++bi) {
        const T* A = ap + bi * sab;
        const T* B = bp + bi * sbb;
        T* C = cp + bi * m * n;
        if constexpr (std::is_same_v<T, float>) {
          cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                      (int)k, 1.0f, A, (int)lda, B, (int)ldb, accumulate ? 1.0f : 0.0f, C, (int)n);
        } else {
          cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                      (int)k, 1.0, A, (int)lda, B, (int)ldb, accumulate ? 1.0 : 0.0, C, (int)n);
        }
      }
      return;
    }
  }
#endif
  const bool small = m * n * k < 128 * 128 * 64;
  if (batch > 1 && small) {
    cpu::parallel_for(batch, m * n * k / 16 + 1, [&](int64_t bi) {
      Matrix<T> ai{ap + bi * sab, am.rs, am.cs}, bi_m{bp + bi * sbb, bm.rs, bm.cs};
      gemm_one<T>(cp + bi * m * n, ai, bi_m, m, n, k, accumulate, false);
    });
    return;
  }
  for (int64_t bi = 0; bi < batch; ++bi) {
    Matrix<T> ai{ap + bi * sab, am.rs, am.cs}, bi_m{bp + bi * sbb, bm.rs, bm.cs};
    gemm_one<T>(cp + bi * m * n, ai, bi_m, m, n, k, accumulate, true);
  }
}

}  // namespace

void gemm(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate) {
  const auto half = [](DType t) { return t == DType::BF16 || t == DType::F16; };
  if (a.dtype() != out.dtype() || b.dtype() != out.dtype()) {
    // bf16/f16 inputs, f32 output (linear_cross_entropy's weight gradient accumulated in fp32):
    // f32 copies of the inputs, the product in float into the f32 output.
    BLU_CHECK(out.dtype() == DType::F32 && a.dtype() == b.dtype() && half(a.dtype()), "gemm: inputs ",
              a.describe(), " and ", b.describe(), " with output ", out.describe(),
              ": mixed dtypes are bf16 or f16 inputs (both the same) with an f32 output only");
    Tensor a32 = empty(a.sizes(), kFloat32), b32 = empty(b.sizes(), kFloat32);
    copy_(a32, a);
    copy_(b32, b);
    gemm_typed<float>(out, a32, b32, accumulate);
    return;
  }
  switch (out.dtype()) {
    case DType::F32: gemm_typed<float>(out, a, b, accumulate); return;
    case DType::F64: gemm_typed<double>(out, a, b, accumulate); return;
    case DType::BF16:
    case DType::F16: {
      // Compute in float: f32 copies of the operands (and of out when accumulating).
      Tensor a32 = empty(a.sizes(), kFloat32), b32 = empty(b.sizes(), kFloat32);
      copy_(a32, a);
      copy_(b32, b);
      Tensor c32 = empty(out.sizes(), kFloat32);
      if (accumulate) copy_(c32, out);
      gemm_typed<float>(c32, a32, b32, accumulate);
      copy_(out, c32);
      return;
    }
    default: BLU_THROW("gemm: unsupported dtype ", dtype_name(out.dtype()));
  }
}

}  // namespace blu::cpu_ops

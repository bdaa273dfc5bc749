// gemm_vs_cublas_gpu_test.cu: blublas::gemm against cuBLAS at the GPT-2 124M shapes (B*T = 16384,
// C = 768: forward NT, dX NN, dW TN) and a few odd ones (tight misaligned leading dimensions, a
// single row, a strided batch, column-major, alpha/beta with C), in bf16, tf32 and strict fp32,
// for kAuto and every path the device can be forced onto.
//
// Note [An elementwise bound from the GPU]
// Every element must satisfy |ours - cuBLAS| <= tol * S(i, j) with
//   S(i, j) = |alpha| * sum_k |op(A)(i,k)| |op(B)(k,j)| + |beta| |C(i,j)|,
// the scale of the rounding error of any summation order (a norm alone would hide a wrong edge
// tile). At these sizes (16384 x 50304 x 768) S is computed on the GPU by a small register-tiled
// fp32 kernel of this file (absolute values, no cancellation, so fp32 is ample for a bound).
// Both results carry rounding error, so tol is about twice the one-sided tolerance of the dtype.
// Outputs are poisoned with NaN first; a NaN or an unwritten element fails the bound.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "blublas/blublas.h"
#include "blublas/gemm.h"
#include "common/gpu_test.h"
#include "../../blublas/tools/cublas_reference.h"  // references only (never in libblublas)

namespace {

using blublas::ComputeMode;
using blublas::Dtype;
using blublas::GemmDesc;
using blublas::GemmPath;
using blublas::Layout;
using blublas::Op;
using blublas::StatusCode;

// ---- cases -----------------------------------------------------------------------------------------
struct Case {
  std::string name;
  int m, n, k;
  Op op_a, op_b;
  int batch = 1;
  Layout layout = Layout::kRowMajor;
  int ld_pad = 8;  // leading dimensions rounded up to a multiple of this (1: tight)
  float alpha = 1.0f, beta = 0.0f;
};

struct Prec {
  const char* name;
  Dtype ab, cd;
  ComputeMode compute;
  double tol;
};
const Prec kPrecs[] = {
    {"bf16", Dtype::kBF16, Dtype::kBF16, ComputeMode::kDefault, 1e-2},
    {"bf16_f32out", Dtype::kBF16, Dtype::kF32, ComputeMode::kDefault, 4e-3},
    {"tf32", Dtype::kF32, Dtype::kF32, ComputeMode::kTF32, 4e-3},
    {"fp32", Dtype::kF32, Dtype::kF32, ComputeMode::kStrictF32, 2e-6},
};

// Readable test parameters in gtest's output.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name << " M=" << c.m << " N=" << c.n << " K=" << c.k << " batch=" << c.batch << " "
      << (c.op_a == Op::kT ? "T" : "N") << (c.op_b == Op::kT ? "T" : "N")
      << (c.layout == Layout::kRowMajor ? " row" : " col") << "-major ld_pad=" << c.ld_pad;
}
void PrintTo(const Prec& p, std::ostream* os) { *os << p.name; }

std::vector<Case> gpt2_cases() {
  struct L { const char* name; int out, in; };
  const L layers[] = {{"qkv", 2304, 768}, {"attn_proj", 768, 768}, {"fc", 3072, 768},
                      {"fc_proj", 768, 3072}, {"lm_head", 50304, 768}};
  std::vector<Case> v;
  for (const L& l : layers) {
    v.push_back({std::string(l.name) + "_fwd", 16384, l.out, l.in, Op::kN, Op::kT});
    v.push_back({std::string(l.name) + "_dX", 16384, l.in, l.out, Op::kN, Op::kN});
    v.push_back({std::string(l.name) + "_dW", l.out, l.in, 16384, Op::kT, Op::kN});
  }
  return v;
}
std::vector<Case> odd_cases() {
  std::vector<Case> v;
  v.push_back({"odd_tight_NT", 1000, 1027, 771, Op::kN, Op::kT, 1, Layout::kRowMajor, 1});
  v.push_back({"odd_tight_TN", 999, 513, 1031, Op::kT, Op::kN, 1, Layout::kRowMajor, 1});
  v.push_back({"deep_k_TN", 17, 129, 4099, Op::kT, Op::kN});
  v.push_back({"one_row_NN", 1, 2305, 768, Op::kN, Op::kN});
  v.push_back({"batched_NT", 129, 257, 200, Op::kN, Op::kT, 3});
  v.push_back({"colmajor_TT", 515, 333, 1029, Op::kT, Op::kT, 1, Layout::kColMajor});
  v.push_back({"alpha_beta_NN", 640, 480, 320, Op::kN, Op::kN, 1, Layout::kRowMajor, 8, 0.5f, -1.25f});
  return v;
}

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Stored shapes (rows x cols as they lie, before op) and the leading dimension of each matrix.
struct Geometry {
  int64_t lda, ldb, ldd, stride_a, stride_b, stride_d;
  size_t elems_a, elems_b, elems_d;
};
Geometry geometry(const Case& c) {
  const bool row = c.layout == Layout::kRowMajor;
  const int64_t a_rows = c.op_a == Op::kN ? c.m : c.k, a_cols = c.op_a == Op::kN ? c.k : c.m;
  const int64_t b_rows = c.op_b == Op::kN ? c.k : c.n, b_cols = c.op_b == Op::kN ? c.n : c.k;
  Geometry g;
  g.lda = round_up(row ? a_cols : a_rows, c.ld_pad);
  g.ldb = round_up(row ? b_cols : b_rows, c.ld_pad);
  g.ldd = round_up(row ? c.n : c.m, c.ld_pad);
  g.stride_a = g.lda * (row ? a_rows : a_cols);
  g.stride_b = g.ldb * (row ? b_rows : b_cols);
  g.stride_d = g.ldd * (row ? c.m : c.n);
  g.elems_a = size_t(g.stride_a) * c.batch;
  g.elems_b = size_t(g.stride_b) * c.batch;
  g.elems_d = size_t(g.stride_d) * c.batch;
  return g;
}

// ---- device kernels -----------------------------------------------------------------------------------
__device__ __forceinline__ float ld_f32(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld_f32(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void st_f32(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st_f32(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

template <typename T>
__global__ void fill_kernel(T* p, size_t n, uint64_t seed, int nan) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 33; x *= 0xFF51AFD7ED558CCDull; x ^= x >> 33; x *= 0xC4CEB9FE1A85EC53ull; x ^= x >> 33;
    const float mag = 0.0625f + 0.9375f * (static_cast<float>(x >> 40) * (1.0f / 16777216.0f));
    st_f32(p, int64_t(i), nan ? __int_as_float(0x7fc00000) : ((x & 1u) ? -mag : mag));
  }
}

// Offset of element (i, j) of a stored-or-op'd matrix: `trans` says op = T, `row` the layout.
struct Acc {
  int64_t ld, stride;
  int trans, row;
  __device__ __forceinline__ int64_t at(int64_t i, int64_t j, int64_t b) const {
    const int64_t r = trans ? j : i, c = trans ? i : j;  // stored (row, col)
    return b * stride + (row ? r * ld + c : r + c * ld);
  }
  // Is the second index (j) the contiguous one in memory?
  __device__ __forceinline__ bool second_contiguous() const { return (row != 0) != (trans != 0); }
};

// S = |alpha| * |op(A)| |op(B)| + |beta| |C|: 64 x 64 tile per block, 4 x 4 per thread, fp32.
constexpr int kT = 64, kTK = 16;
template <typename T>
__global__ void abs_bound_kernel(const T* a, Acc aa, const T* b, Acc ba, const float* c, Acc da,
                                 float* s, int m, int n, int k, float abs_alpha, float abs_beta) {
  __shared__ float as[kTK][kT + 1], bs[kTK][kT + 1];
  const int bat = blockIdx.z, i0 = blockIdx.y * kT, j0 = blockIdx.x * kT;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < k; k0 += kTK) {
    // Consecutive threads walk the operand's contiguous dimension (coalesced loads).
    for (int e = threadIdx.x; e < kT * kTK; e += 256) {
      const bool a_k_fast = aa.second_contiguous();  // op(A)(i, k): k contiguous
      const int ra = a_k_fast ? e / kTK : e % kT, ka = a_k_fast ? e % kTK : e / kT;
      const int i = i0 + ra, kga = k0 + ka;
      as[ka][ra] = (i < m && kga < k) ? fabsf(ld_f32(a, aa.at(i, kga, bat))) : 0.f;
      const bool b_j_fast = ba.second_contiguous();  // op(B)(k, j): j contiguous
      const int rb = b_j_fast ? e % kT : e / kTK, kb = b_j_fast ? e / kT : e % kTK;
      const int j = j0 + rb, kgb = k0 + kb;
      bs[kb][rb] = (j < n && kgb < k) ? fabsf(ld_f32(b, ba.at(kgb, j, bat))) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTK; ++kk)
#pragma unroll
      for (int x = 0; x < 4; ++x)
#pragma unroll
        for (int y = 0; y < 4; ++y) acc[x][y] += as[kk][ty + 16 * x] * bs[kk][tx + 16 * y];
    __syncthreads();
  }
#pragma unroll
  for (int x = 0; x < 4; ++x)
#pragma unroll
    for (int y = 0; y < 4; ++y) {
      const int i = i0 + ty + 16 * x, j = j0 + tx + 16 * y;
      if (i >= m || j >= n) continue;
      const int64_t o = da.at(i, j, bat);
      s[o] = abs_alpha * acc[x][y] + (c ? abs_beta * fabsf(c[o]) : 0.f);
    }
}

// Counts elements with !(|d - ref| <= tol * s); the worst |d - ref| / s; the first bad index.
struct CheckOut {
  unsigned long long bad;
  unsigned long long first_bad;  // linear (b, i, j) index, ~0 when none
  unsigned worst_bits;           // float bits of max |d - ref| / s
};
template <typename T>
__global__ void check_kernel(const T* d, const T* ref, const float* s, Acc da, int m, int n,
                             int batch, float tol, CheckOut* out) {
  const int64_t total = int64_t(m) * n * batch;
  unsigned long long bad = 0;
  float worst = 0.f;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = t / (int64_t(m) * n), r = t % (int64_t(m) * n), i = r / n, j = r % n;
    const int64_t o = da.at(i, j, b);
    const float diff = fabsf(ld_f32(d, o) - ld_f32(ref, o)), bound = tol * s[o];
    if (!(diff <= bound)) {
      ++bad;
      atomicMin(&out->first_bad, static_cast<unsigned long long>(t));
    }
    const float q = diff / s[o];
    worst = (q > worst || q != q) ? q : worst;
  }
  if (bad) atomicAdd(&out->bad, bad);
  atomicMax(&out->worst_bits, __float_as_uint(fabsf(worst)));
}

// Counts elements outside the M x N matrices (leading-dimension padding) that are no longer NaN:
// writes past an edge tile. `outer` x `ld` elements per batch; (r, c) = (slow, fast) index.
template <typename T>
__global__ void stray_kernel(const T* d, int64_t ld, int64_t slow_valid, int64_t fast_valid,
                             int64_t per_batch, int64_t total, unsigned long long* stray) {
  unsigned long long n = 0;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = t % per_batch, r = o / ld, c = o % ld;
    if (r < slow_valid && c < fast_valid) continue;
    const float v = ld_f32(d, t);
    if (v == v) ++n;
  }
  if (n) atomicAdd(stray, n);
}

int grid_for(size_t n) { return static_cast<int>(std::min<size_t>((n + 255) / 256, 8192)); }

// ---- the fixture ----------------------------------------------------------------------------------------
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&p, std::max<size_t>(bytes, 256)) != cudaSuccess) { (void)cudaGetLastError(); p = nullptr; }
  }
  ~DeviceBuffer() { if (p) cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

void fill(void* p, Dtype t, size_t n, uint64_t seed, bool nan = false) {
  if (t == Dtype::kBF16)
    fill_kernel<<<grid_for(n), 256>>>(static_cast<__nv_bfloat16*>(p), n, seed, nan ? 1 : 0);
  else
    fill_kernel<<<grid_for(n), 256>>>(static_cast<float*>(p), n, seed, nan ? 1 : 0);
}

const char* status_name(StatusCode c) { return blublas::status_code_name(c); }

class GemmVsCublas : public ::testing::TestWithParam<std::tuple<Case, Prec>> {};

TEST_P(GemmVsCublas, WithinBoundOfCublas) {
  BLU_REQUIRE_GPU();
  const Case& c = std::get<0>(GetParam());
  const Prec& p = std::get<1>(GetParam());
  const Geometry g = geometry(c);
  const size_t ab = blublas::dtype_size(p.ab), cd = blublas::dtype_size(p.cd);
  const bool row = c.layout == Layout::kRowMajor;

  DeviceBuffer a(g.elems_a * ab), b(g.elems_b * ab), cbuf(c.beta != 0 ? g.elems_d * cd : 0);
  DeviceBuffer d(g.elems_d * cd), ref(g.elems_d * cd), s(g.elems_d * sizeof(float));
  DeviceBuffer out(sizeof(CheckOut));
  ASSERT_TRUE(a.p && b.p && cbuf.p && d.p && ref.p && s.p && out.p) << "cudaMalloc failed";
  fill(a.p, p.ab, g.elems_a, 11);
  fill(b.p, p.ab, g.elems_b, 22);
  if (c.beta != 0) fill(cbuf.p, p.cd, g.elems_d, 33);
  BLU_CUDA_TEST_CHECK(cudaGetLastError());

  // S on the GPU (C's magnitude enters only when beta != 0; C is read as fp32 or bf16).
  const Acc aa{g.lda, g.stride_a, c.op_a == Op::kT, row}, ba{g.ldb, g.stride_b, c.op_b == Op::kT, row};
  const Acc da{g.ldd, g.stride_d, 0, row};
  DeviceBuffer c_f32(c.beta != 0 ? g.elems_d * sizeof(float) : 0);
  if (c.beta != 0) {
    // C as fp32 for the bound: regenerate the same values in fp32 (same seed, rounded like C).
    if (p.cd == Dtype::kF32) {
      BLU_CUDA_TEST_CHECK(cudaMemcpy(c_f32.p, cbuf.p, g.elems_d * 4, cudaMemcpyDeviceToDevice));
    } else {
      fill(c_f32.p, Dtype::kF32, g.elems_d, 33);  // |bf16(x)| <= |x| (1 + 2^-8): covered by tol
    }
  }
  const dim3 grid((c.n + kT - 1) / kT, (c.m + kT - 1) / kT, c.batch);
  const float* cptr = c.beta != 0 ? static_cast<const float*>(c_f32.p) : nullptr;
  if (p.ab == Dtype::kBF16)
    abs_bound_kernel<<<grid, 256>>>(static_cast<const __nv_bfloat16*>(a.p), aa, static_cast<const __nv_bfloat16*>(b.p), ba,
                                    cptr, da, static_cast<float*>(s.p), c.m, c.n, c.k, std::fabs(c.alpha), std::fabs(c.beta));
  else
    abs_bound_kernel<<<grid, 256>>>(static_cast<const float*>(a.p), aa, static_cast<const float*>(b.p), ba,
                                    cptr, da, static_cast<float*>(s.p), c.m, c.n, c.k, std::fabs(c.alpha), std::fabs(c.beta));
  BLU_CUDA_TEST_CHECK(cudaGetLastError());

  // The problem as a blublas desc; cuBLAS computes it into ref (blublas/tools/cublas_reference.h:
  // a row-major problem is handed over as D^T = op(B)^T op(A)^T, A and B swapped).
  GemmDesc base;
  base.m = c.m; base.n = c.n; base.k = c.k; base.batch = c.batch;
  base.op_a = c.op_a; base.op_b = c.op_b; base.layout = c.layout;
  base.ab_type = p.ab; base.cd_type = p.cd; base.compute = p.compute;
  base.a = a.p; base.lda = g.lda; base.stride_a = g.stride_a;
  base.b = b.p; base.ldb = g.ldb; base.stride_b = g.stride_b;
  base.c = c.beta != 0 ? cbuf.p : nullptr; base.ldc = g.ldd; base.stride_c = g.stride_d;
  base.ldd = g.ldd; base.stride_d = g.stride_d;
  base.alpha = c.alpha; base.beta = c.beta;
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  struct HandleGuard { cublasHandle_t h; ~HandleGuard() { cublasDestroy(h); } } guard{h};
  ASSERT_EQ(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_SUCCESS);
  if (c.beta != 0) BLU_CUDA_TEST_CHECK(cudaMemcpy(ref.p, cbuf.p, g.elems_d * cd, cudaMemcpyDeviceToDevice));
  GemmDesc ref_desc = base;
  ref_desc.d = ref.p;  // cuBLAS reads C from D
  const cublasStatus_t cst = blublas::cublas_ref::gemm_ex(h, ref_desc);
  ASSERT_EQ(cst, CUBLAS_STATUS_SUCCESS) << "cuBLAS: " << cublasGetStatusString(cst);
  BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());

  blublas::DeviceInfo dev;
  ASSERT_TRUE(blublas::current_device_info(&dev).ok());
  std::vector<GemmPath> paths{GemmPath::kAuto, GemmPath::kSimt};
  if (dev.sm_version() >= 80) paths.push_back(GemmPath::kSm80Mma);
  if (dev.sm_version() == 90) paths.push_back(GemmPath::kSm90Wgmma);

  int ran = 0;
  for (GemmPath path : paths) {
    GemmDesc desc = base;
    desc.d = d.p;
    desc.path = path;
    const char* pname = blublas::gemm_path_name(path);
    GemmPath taken = path;
    blublas::Status st = blublas::gemm_selected_path(desc, &taken);
    size_t ws_bytes = 0;
    if (st.ok()) (void)(st = blublas::gemm_workspace_size(desc, &ws_bytes));
    DeviceBuffer ws(ws_bytes);
    if (st.ok()) {
      fill(d.p, p.cd, g.elems_d, 0, /*nan=*/true);
      (void)(st = blublas::gemm(desc, ws_bytes ? ws.p : nullptr, ws_bytes, nullptr));
    }
    if (!st.ok()) {
      const bool may_refuse = path != GemmPath::kAuto &&
                              (st.code() == StatusCode::kNotSupported || st.code() == StatusCode::kUnsupportedArch ||
                               st.code() == StatusCode::kMisaligned);
      std::printf("  [%s %s] path %s refused: %s\n", c.name.c_str(), p.name, pname, st.to_string().c_str());
      if (!may_refuse) ADD_FAILURE() << "path " << pname << ": " << status_name(st.code()) << ": " << st.to_string();
      continue;
    }
    BLU_CUDA_TEST_CHECK(cudaDeviceSynchronize());
    CheckOut init{0, ~0ull, 0};
    BLU_CUDA_TEST_CHECK(cudaMemcpy(out.p, &init, sizeof(init), cudaMemcpyHostToDevice));
    const size_t total = size_t(c.m) * c.n * c.batch;
    auto* o = static_cast<CheckOut*>(out.p);
    if (p.cd == Dtype::kBF16)
      check_kernel<<<grid_for(total), 256>>>(static_cast<const __nv_bfloat16*>(d.p), static_cast<const __nv_bfloat16*>(ref.p),
                                             static_cast<const float*>(s.p), da, c.m, c.n, c.batch, float(p.tol), o);
    else
      check_kernel<<<grid_for(total), 256>>>(static_cast<const float*>(d.p), static_cast<const float*>(ref.p),
                                             static_cast<const float*>(s.p), da, c.m, c.n, c.batch, float(p.tol), o);
    BLU_CUDA_TEST_CHECK(cudaGetLastError());
    CheckOut res;
    BLU_CUDA_TEST_CHECK(cudaMemcpy(&res, out.p, sizeof(res), cudaMemcpyDeviceToHost));
    float worst;
    std::memcpy(&worst, &res.worst_bits, 4);
    ++ran;
    std::printf("  [%s %s] path %s (ran %s): max |d-ref|/S = %.3e (tol %.1e), %llu of %zu out of bound\n",
                c.name.c_str(), p.name, pname, blublas::gemm_path_name(taken), worst, p.tol, res.bad, total);
    // Nothing written into the padding of the leading dimension.
    if (g.ldd != (row ? c.n : c.m)) {
      BLU_CUDA_TEST_CHECK(cudaMemset(out.p, 0, sizeof(unsigned long long)));
      auto* stray = static_cast<unsigned long long*>(out.p);
      const int64_t slow = row ? c.m : c.n, fast = row ? c.n : c.m;
      if (p.cd == Dtype::kBF16)
        stray_kernel<<<grid_for(g.elems_d), 256>>>(static_cast<const __nv_bfloat16*>(d.p), g.ldd, slow, fast, g.stride_d, int64_t(g.elems_d), stray);
      else
        stray_kernel<<<grid_for(g.elems_d), 256>>>(static_cast<const float*>(d.p), g.ldd, slow, fast, g.stride_d, int64_t(g.elems_d), stray);
      BLU_CUDA_TEST_CHECK(cudaGetLastError());
      unsigned long long n_stray = 0;
      BLU_CUDA_TEST_CHECK(cudaMemcpy(&n_stray, stray, sizeof(n_stray), cudaMemcpyDeviceToHost));
      EXPECT_EQ(n_stray, 0ull) << c.name << " " << p.name << " path " << pname << ": " << n_stray
                               << " elements written in the leading-dimension padding of D (ldd=" << g.ldd << ")";
    }
    if (res.bad == 0) continue;
    // The first bad element, with its neighbourhood of values, for a log-only diagnosis.
    const int64_t t = static_cast<int64_t>(res.first_bad);
    const int64_t bi = t / (int64_t(c.m) * c.n), r = t % (int64_t(c.m) * c.n), i = r / c.n, j = r % c.n;
    const int64_t off = bi * g.stride_d + (row ? i * g.ldd + j : i + j * g.ldd);
    float got = 0, want = 0, bound = 0;
    if (p.cd == Dtype::kBF16) {
      __nv_bfloat16 x, y;
      BLU_CUDA_TEST_CHECK(cudaMemcpy(&x, static_cast<char*>(d.p) + off * 2, 2, cudaMemcpyDeviceToHost));
      BLU_CUDA_TEST_CHECK(cudaMemcpy(&y, static_cast<char*>(ref.p) + off * 2, 2, cudaMemcpyDeviceToHost));
      got = __bfloat162float(x);
      want = __bfloat162float(y);
    } else {
      BLU_CUDA_TEST_CHECK(cudaMemcpy(&got, static_cast<char*>(d.p) + off * 4, 4, cudaMemcpyDeviceToHost));
      BLU_CUDA_TEST_CHECK(cudaMemcpy(&want, static_cast<char*>(ref.p) + off * 4, 4, cudaMemcpyDeviceToHost));
    }
    BLU_CUDA_TEST_CHECK(cudaMemcpy(&bound, static_cast<char*>(s.p) + off * 4, 4, cudaMemcpyDeviceToHost));
    ADD_FAILURE() << c.name << " " << p.name << " path " << pname << " (ran " << blublas::gemm_path_name(taken)
                  << "): " << res.bad << " of " << total << " elements out of bound; max |d-ref|/S = " << worst
                  << "; first bad at batch " << bi << " (i=" << i << ", j=" << j << "): got " << got
                  << ", cuBLAS " << want << ", S " << bound << ", tol*S " << p.tol * bound
                  << " (M=" << c.m << " N=" << c.n << " K=" << c.k << ")";
  }
  EXPECT_GE(ran, 1) << "no path ran " << c.name << " " << p.name;
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<Case, Prec>>& info) {
  return std::get<0>(info.param).name + "_" + std::get<1>(info.param).name;
}

std::vector<Prec> main_precs() { return {kPrecs[0], kPrecs[2], kPrecs[3]}; }
std::vector<Prec> all_precs() { return {kPrecs[0], kPrecs[1], kPrecs[2], kPrecs[3]}; }

INSTANTIATE_TEST_SUITE_P(Gpt2, GemmVsCublas,
                         ::testing::Combine(::testing::ValuesIn(gpt2_cases()), ::testing::ValuesIn(main_precs())),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Odd, GemmVsCublas,
                         ::testing::Combine(::testing::ValuesIn(odd_cases()), ::testing::ValuesIn(all_precs())),
                         case_name);

}  // namespace

// CUDA batched GEMM for blutensor's matmul/linear: out[b] (+)= a[b] @ bm[b].
//
// Note [CUDA matmul paths]
// f32, bf16 and f16 go to blublas::gemm (row-major description; each operand is passed as stored:
// a row-major view as op N with its row stride as leading dimension, a transposed view (stride 1
// on the row dim) as op T; a batch stride of 0 broadcasts). f32 runs strict fp32 or TF32 by
// blu::matmul_precision() (Note [Matmul precision] in cuda_stream.h). f64, operands that are
// neither row- nor column-major (e.g. both strides > 1), and anything blublas refuses run
// blutensor's own tiled SIMT kernel, which takes any strides directly and accumulates in the
// compute type (double for f64) in k order: deterministic, like every path here.
#include "blublas/gemm.h"
#include "blutensor/cuda_stream.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernel_utils.cuh"

namespace blu::cuda_ops {
namespace {

using namespace detail;

constexpr int kTile = 64;     // output tile kTile x kTile
constexpr int kTileK = 16;    // k step
constexpr int kPerThread = 4; // each of 16 x 16 threads computes 4 x 4 outputs

struct MatStrides {
  int64_t batch, row, col;
};

// out [B, M, N] contiguous; a element (b, m, k) at a[b*sa.batch + m*sa.row + k*sa.col].
template <typename T>
__global__ void gemm_generic_kernel(T* out, const T* a, const T* bm, MatStrides sa, MatStrides sb,
                                    int m_size, int n_size, int k_size, bool accumulate) {
  using C = compute_t<T>;
  __shared__ C as[kTileK][kTile];
  __shared__ C bs[kTileK][kTile];
  const int batch = blockIdx.z;
  const int m0 = blockIdx.y * kTile, n0 = blockIdx.x * kTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const T* ab = a + static_cast<int64_t>(batch) * sa.batch;
  const T* bb = bm + static_cast<int64_t>(batch) * sb.batch;
  C acc[kPerThread][kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) acc[i][j] = C(0);
  }
  for (int k0 = 0; k0 < k_size; k0 += kTileK) {
    // 256 threads load 64 x 16 of A and 16 x 64 of B (4 elements each).
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const int idx = threadIdx.x + l * 256;
      const int am = idx / kTileK, ak = idx % kTileK;  // A tile: rows m, cols k
      const int gm = m0 + am, gk = k0 + ak;
      as[ak][am] = (gm < m_size && gk < k_size)
                       ? load_c(ab[static_cast<int64_t>(gm) * sa.row + static_cast<int64_t>(gk) * sa.col])
                       : C(0);
      const int bk = idx / kTile, bn = idx % kTile;  // B tile: rows k, cols n
      const int hk = k0 + bk, hn = n0 + bn;
      bs[bk][bn] = (hk < k_size && hn < n_size)
                       ? load_c(bb[static_cast<int64_t>(hk) * sb.row + static_cast<int64_t>(hn) * sb.col])
                       : C(0);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      C av[kPerThread], bv[kPerThread];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) av[i] = as[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) bv[j] = bs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) acc[i][j] += av[i] * bv[j];
      }
    }
    __syncthreads();
  }
  T* ob = out + static_cast<int64_t>(batch) * m_size * n_size;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int gm = m0 + ty + 16 * i;
    if (gm >= m_size) continue;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int gn = n0 + tx + 16 * j;
      if (gn >= n_size) continue;
      T* o = ob + static_cast<int64_t>(gm) * n_size + gn;
      C v = acc[i][j];
      if (accumulate) v += load_c(*o);
      *o = store_c<T>(v);
    }
  }
}

template <typename T>
void gemm_generic(const Tensor& out, const Tensor& a, const Tensor& bm, bool accumulate) {
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  auto strides = [](const Tensor& t) {
    return MatStrides{t.size(0) == 1 ? 0 : t.stride(0), t.stride(1), t.stride(2)};
  };
  dim3 grid(static_cast<unsigned>((n + kTile - 1) / kTile),
            static_cast<unsigned>((m + kTile - 1) / kTile), static_cast<unsigned>(batch));
  BLU_CHECK(grid.y <= 65535 && grid.z <= 65535, "gemm (CUDA): ", out.describe(),
            " is too large for the generic kernel");
  gemm_generic_kernel<T><<<grid, 256, 0, stream_of(out)>>>(
      static_cast<T*>(out.data_ptr()), static_cast<const T*>(a.data_ptr()),
      static_cast<const T*>(bm.data_ptr()), strides(a), strides(bm), static_cast<int>(m),
      static_cast<int>(n), static_cast<int>(k), accumulate);
  BLU_KERNEL_LAUNCH_CHECK("gemm_generic_kernel");
}

// How blublas sees one stored operand of `rows` x `cols` per batch (row-major description).
struct Operand {
  bool ok = false;
  blublas::Op op = blublas::Op::kN;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

Operand describe_operand(const Tensor& t) {
  Operand o;
  const int64_t rows = t.size(1), cols = t.size(2);
  const int64_t s_row = t.stride(1), s_col = t.stride(2);
  o.batch_stride = t.size(0) == 1 ? 0 : t.stride(0);
  if ((cols == 1 || s_col == 1) && (rows == 1 || s_row >= cols)) {
    o.ok = true;
    o.op = blublas::Op::kN;
    o.ld = rows == 1 ? cols : s_row;
  } else if ((rows == 1 || s_row == 1) && (cols == 1 || s_col >= rows)) {
    o.ok = true;
    o.op = blublas::Op::kT;
    o.ld = cols == 1 ? rows : s_col;
  }
  return o;
}

bool to_blublas_dtype(DType t, blublas::Dtype* out) {
  switch (t) {
    case DType::F32: *out = blublas::Dtype::kF32; return true;
    case DType::BF16: *out = blublas::Dtype::kBF16; return true;
    case DType::F16: *out = blublas::Dtype::kF16; return true;
    default: return false;
  }
}

bool gemm_blublas(const Tensor& out, const Tensor& a, const Tensor& bm, bool accumulate) {
  blublas::Dtype dt, cdt;  // A's and B's dtype; C's and D's (f32 for bf16/f16 inputs, or the same)
  if (!to_blublas_dtype(a.dtype(), &dt) || !to_blublas_dtype(out.dtype(), &cdt)) return false;
  const Operand oa = describe_operand(a), ob = describe_operand(bm);
  if (!oa.ok || !ob.ok) return false;
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  constexpr int64_t kIntMax = 2147483647;
  if (batch > kIntMax || m > kIntMax || n > kIntMax || k > kIntMax) return false;
  blublas::GemmDesc d;
  d.m = static_cast<int>(m);
  d.n = static_cast<int>(n);
  d.k = static_cast<int>(k);
  d.batch = static_cast<int>(batch);
  d.op_a = oa.op;
  d.op_b = ob.op;
  d.layout = blublas::Layout::kRowMajor;
  d.ab_type = dt;
  d.cd_type = cdt;
  d.max_ctas = cuda::gemm_cta_budget();  // Note [GEMM CTA budget]
  if (dt == blublas::Dtype::kF32) {
    d.compute = matmul_precision() == MatmulPrecision::kHighest ? blublas::ComputeMode::kStrictF32
                                                                : blublas::ComputeMode::kTF32;
  }
  d.a = a.data_ptr();
  d.lda = oa.ld;
  d.stride_a = oa.batch_stride;
  d.b = bm.data_ptr();
  d.ldb = ob.ld;
  d.stride_b = ob.batch_stride;
  d.d = out.data_ptr();
  d.ldd = n;
  d.stride_d = m * n;
  if (accumulate) {
    d.c = out.data_ptr();
    d.ldc = n;
    d.stride_c = m * n;
    d.beta = 1.0f;
  }
  std::size_t ws_bytes = 0;
  if (!blublas_ok(blublas::gemm_workspace_size(d, &ws_bytes), "gemm")) return false;
  cudaStream_t stream = stream_of(out);
  DeviceBuffer ws(ws_bytes, out.device().index, stream);
  return blublas_ok(blublas::gemm(d, ws.get(), ws_bytes, stream), "gemm");
}

}  // namespace

void gemm(const Tensor& out, const Tensor& a, const Tensor& bm, bool accumulate) {
  BLU_CHECK(out.dim() == 3 && a.dim() == 3 && bm.dim() == 3 && out.is_contiguous() &&
                a.size(1) == out.size(1) && bm.size(2) == out.size(2) && a.size(2) == bm.size(1),
            "gemm (CUDA): bad operands out ", out.describe(), ", a ", a.describe(), ", b ",
            bm.describe());
  if (out.numel() == 0) return;
  if (a.size(2) == 0) {
    if (!accumulate) fill_(out, 0.0);
    return;
  }
  if (a.dtype() != out.dtype() || bm.dtype() != out.dtype()) {
    // bf16/f16 inputs with an f32 output (linear_cross_entropy's weight gradient): blublas only.
    BLU_CHECK(out.dtype() == DType::F32 && a.dtype() == bm.dtype() &&
                  (a.dtype() == DType::BF16 || a.dtype() == DType::F16),
              "gemm (CUDA): inputs ", a.describe(), " and ", bm.describe(), " with output ", out.describe(),
              ": mixed dtypes are bf16 or f16 inputs (both the same) with an f32 output only");
    BLU_CHECK(gemm_blublas(out, a, bm, accumulate), "gemm (CUDA): blublas refused the mixed-dtype problem out ",
              out.describe(), ", a ", a.describe(), ", b ", bm.describe());
    return;
  }
  if (gemm_blublas(out, a, bm, accumulate)) return;
  BLU_CUDA_SWITCH_FLOAT(out.dtype(), T, "gemm", gemm_generic<T>(out, a, bm, accumulate));
}

}  // namespace blu::cuda_ops

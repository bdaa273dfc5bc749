// gemm_reference.cu: the float64 GEMM reference kernels of the blublas GEMM tests (see
// gemm_reference.h). Deliberately naive: one thread per sampled output, a plain k loop in double,
// operand addressing written from the GemmDesc definition (not from the library's normalization),
// so that a mistake in blublas's layout folding cannot hide in the reference.
#include "support/gemm_reference.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <random>
#include <set>
#include <utility>

namespace blu::test {
namespace {

struct OperandView {
  const void* p;
  int dtype;  // blublas::Dtype
  int64_t ld, stride;
  int col_major;  // layout
  int transposed;  // op == kT
};

__device__ double load_elem(const OperandView& v, int batch, int64_t r, int64_t c) {
  // Stored element (r, c) of the stored (not op'd) matrix.
  const int64_t off = batch * v.stride + (v.col_major ? c * v.ld + r : r * v.ld + c);
  switch (v.dtype) {
    case 1: return static_cast<double>(__bfloat162float(static_cast<const __nv_bfloat16*>(v.p)[off]));
    case 2: return static_cast<double>(__half2float(static_cast<const __half*>(v.p)[off]));
    default: return static_cast<double>(static_cast<const float*>(v.p)[off]);
  }
}

// op(A)(i, k): A stored M x K (kN) or K x M (kT).
__device__ double op_a(const OperandView& a, int batch, int i, int k) {
  return a.transposed ? load_elem(a, batch, k, i) : load_elem(a, batch, i, k);
}
// op(B)(k, j): B stored K x N (kN) or N x K (kT).
__device__ double op_b(const OperandView& b, int batch, int k, int j) {
  return b.transposed ? load_elem(b, batch, j, k) : load_elem(b, batch, k, j);
}

__global__ void reference_kernel(OperandView a, OperandView b, int k, const GemmSample* samples,
                                 int count, GemmRefValue* out) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= count) return;
  const GemmSample smp = samples[s];
  double acc = 0.0, abs_sum = 0.0;
  for (int kk = 0; kk < k; ++kk) {
    const double x = op_a(a, smp.batch, smp.i, kk), y = op_b(b, smp.batch, kk, smp.j);
    acc += x * y;
    abs_sum += fabs(x) * fabs(y);
  }
  out[s] = GemmRefValue{acc, abs_sum};
}

__global__ void operand_sums_kernel(OperandView v, bool is_a, int len, int k, double* out) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= len) return;
  double s = 0.0;
  for (int kk = 0; kk < k; ++kk) s += is_a ? op_a(v, 0, r, kk) : op_b(v, 0, kk, r);
  out[r] = s;
}

OperandView view(const void* p, blublas::Dtype t, int64_t ld, int64_t stride, blublas::Layout l,
                 blublas::Op op) {
  return OperandView{p, static_cast<int>(t), ld, stride, l == blublas::Layout::kColMajor ? 1 : 0,
                     op == blublas::Op::kT ? 1 : 0};
}

std::string cuda_msg(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}

}  // namespace

std::vector<GemmSample> gemm_samples(int batch, int m, int n, int64_t max_full, int count,
                                     uint64_t seed) {
  std::vector<GemmSample> out;
  if (static_cast<int64_t>(batch) * m * n <= max_full) {
    out.reserve(static_cast<size_t>(batch) * m * n);
    for (int b = 0; b < batch; ++b) {
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) out.push_back({b, i, j});
      }
    }
    return out;
  }
  std::set<std::pair<int64_t, int>> seen;
  auto add = [&](int b, int i, int j) {
    const int64_t key = (static_cast<int64_t>(b) * m + i);
    if (seen.insert({key, j}).second) out.push_back({b, i, j});
  };
  for (int b = 0; b < batch; ++b) {
    for (int j = 0; j < n; j += std::max(1, n / 512)) add(b, m - 1, j);
    for (int i = 0; i < m; i += std::max(1, m / 512)) add(b, i, n - 1);
    add(b, 0, 0);
    add(b, 0, n - 1);
    add(b, m - 1, 0);
    add(b, m - 1, n - 1);
  }
  std::mt19937_64 rng(seed);
  for (int s = 0; s < count; ++s) {
    add(static_cast<int>(rng() % batch), static_cast<int>(rng() % m), static_cast<int>(rng() % n));
  }
  return out;
}

std::string gemm_reference(const blublas::GemmDesc& d, const std::vector<GemmSample>& samples,
                           std::vector<GemmRefValue>* out) {
  out->assign(samples.size(), GemmRefValue{});
  if (samples.empty()) return "";
  GemmSample* dev_samples = nullptr;
  GemmRefValue* dev_out = nullptr;
  cudaError_t e = cudaMalloc(&dev_samples, samples.size() * sizeof(GemmSample));
  if (e != cudaSuccess) return cuda_msg("cudaMalloc samples", e);
  e = cudaMalloc(&dev_out, samples.size() * sizeof(GemmRefValue));
  if (e != cudaSuccess) {
    cudaFree(dev_samples);
    return cuda_msg("cudaMalloc ref", e);
  }
  std::string err;
  e = cudaMemcpy(dev_samples, samples.data(), samples.size() * sizeof(GemmSample),
                 cudaMemcpyHostToDevice);
  if (e == cudaSuccess) {
    const int count = static_cast<int>(samples.size());
    reference_kernel<<<(count + 127) / 128, 128>>>(
        view(d.a, d.ab_type, d.lda, d.batch > 1 ? d.stride_a : 0, d.layout, d.op_a),
        view(d.b, d.ab_type, d.ldb, d.batch > 1 ? d.stride_b : 0, d.layout, d.op_b), d.k,
        dev_samples, count, dev_out);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e == cudaSuccess) {
      e = cudaMemcpy(out->data(), dev_out, samples.size() * sizeof(GemmRefValue),
                     cudaMemcpyDeviceToHost);
    }
  }
  if (e != cudaSuccess) err = cuda_msg("gemm_reference", e);
  cudaFree(dev_samples);
  cudaFree(dev_out);
  return err;
}

std::string gemm_operand_sums(const blublas::GemmDesc& d, bool which_a, std::vector<double>* out) {
  const int len = which_a ? d.m : d.n;
  out->assign(len, 0.0);
  double* dev_out = nullptr;
  cudaError_t e = cudaMalloc(&dev_out, len * sizeof(double));
  if (e != cudaSuccess) return cuda_msg("cudaMalloc sums", e);
  const OperandView v = which_a ? view(d.a, d.ab_type, d.lda, 0, d.layout, d.op_a)
                                : view(d.b, d.ab_type, d.ldb, 0, d.layout, d.op_b);
  operand_sums_kernel<<<(len + 127) / 128, 128>>>(v, which_a, len, d.k, dev_out);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaMemcpy(out->data(), dev_out, len * sizeof(double), cudaMemcpyDeviceToHost);
  cudaFree(dev_out);
  return e == cudaSuccess ? "" : cuda_msg("gemm_operand_sums", e);
}

}  // namespace blu::test

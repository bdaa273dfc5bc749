// The outside consumer of blublas: prints the version and, with a GPU, runs a small GEMM and
// checks it against a CPU reference. Exits 0 without a GPU (nothing to run), 1 on a wrong result.
#include <blublas/blublas.h>
#include <blublas/gemm.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

namespace {

// D (M x N, row-major) = A (M x K) * B (K x N) in fp32 on the default path, compared with a CPU
// loop in double. Returns 0 when every element is within 1e-5 of the reference scale.
int gemm_self_check() {
  const int m = 37, n = 29, k = 53;
  std::vector<float> a(m * k), b(k * n), d(m * n, 0.0f);
  for (int i = 0; i < m * k; ++i) a[i] = static_cast<float>((i * 7 % 13) - 6) / 8.0f;
  for (int i = 0; i < k * n; ++i) b[i] = static_cast<float>((i * 5 % 11) - 5) / 4.0f;

  float *da = nullptr, *db = nullptr, *dd = nullptr;
  if (cudaMalloc(&da, a.size() * 4) != cudaSuccess || cudaMalloc(&db, b.size() * 4) != cudaSuccess ||
      cudaMalloc(&dd, d.size() * 4) != cudaSuccess) {
    std::printf("cudaMalloc failed\n");
    return 1;
  }
  cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice);

  blublas::GemmDesc desc;
  desc.m = m; desc.n = n; desc.k = k;
  desc.a = da; desc.lda = k;
  desc.b = db; desc.ldb = n;
  desc.d = dd; desc.ldd = n;
  std::size_t ws = 0;
  blublas::Status st = blublas::gemm_workspace_size(desc, &ws);
  if (st.ok()) st = blublas::gemm(desc, nullptr, ws, nullptr);  // ws is 0 for this problem
  int rc = 0;
  if (!st.ok()) {
    std::printf("gemm failed: %s\n", st.to_string().c_str());
    rc = 1;
  } else if (cudaDeviceSynchronize() != cudaSuccess ||
             cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
    std::printf("CUDA error after gemm\n");
    rc = 1;
  } else {
    double max_err = 0.0;
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double ref = 0.0, scale = 0.0;
        for (int kk = 0; kk < k; ++kk) {
          ref += static_cast<double>(a[i * k + kk]) * b[kk * n + j];
          scale += std::fabs(static_cast<double>(a[i * k + kk]) * b[kk * n + j]);
        }
        const double err = std::fabs(d[i * n + j] - ref);
        max_err = std::fmax(max_err, err);
        if (err > 1e-5 * scale + 1e-6) rc = 1;
      }
    }
    std::printf("gemm %dx%dx%d f32: max error %.3g vs CPU: %s\n", m, n, k, max_err,
                rc == 0 ? "ok" : "WRONG");
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);
  return rc;
}

}  // namespace

int main() {
  std::printf("blublas %s\n", BLUBLAS_VERSION_STRING);
  if (blublas::device_count() == 0) {
    std::printf("no CUDA device: linked and loaded fine, nothing to run\n");
    return 0;
  }
  blublas::DeviceInfo info;
  blublas::Status st = blublas::current_device_info(&info);
  if (!st.ok()) {
    std::printf("%s\n", st.to_string().c_str());
    return 1;
  }
  std::printf("device %d: sm_%d, %d SMs\n", info.device, info.sm_version(), info.sm_count);
  return gemm_self_check();
}

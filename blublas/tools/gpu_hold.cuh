// gpu_hold.cuh: hold the stream on the GPU while the host enqueues timed calls, so that event
// pairs measure the kernels and not the host's launch path (Note [Timing behind a hold]).
//
// Note [Timing behind a hold]
// A timed loop (event, call, event) on an idle GPU measures max(GPU time, host time per call):
// when the host takes longer to prepare a call than the GPU takes to run the previous one, the
// GPU waits between the start event and the kernel and the wait is counted. For a 30 us GEMM that
// was ~10 us (session 29, H200: the same plan timed 0.66 and 0.88 of cuBLAS depending on whether
// it followed cuBLAS's cheaper host path in the round). A one-thread kernel that spins for longer
// than the host needs to enqueue the whole loop runs first; the timed calls then start back to
// back from the queue. The host time per call is reported apart.
#pragma once

#include <cuda_runtime.h>

namespace blublas::profiler {

__global__ inline void hold_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// Enqueues a hold of about `ms` milliseconds on `stream` (SM clock from the device attribute).
inline cudaError_t hold_gpu(cudaStream_t stream, double ms) {
  int dev = 0, khz = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev);
  if (e != cudaSuccess) return e;
  hold_kernel<<<1, 1, 0, stream>>>(static_cast<long long>(ms * khz));
  return cudaGetLastError();
}

}  // namespace blublas::profiler

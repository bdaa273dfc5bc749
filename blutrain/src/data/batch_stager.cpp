// batch_stager.cpp: double-buffered pinned host staging of token batches with async copies on a
// dedicated copy stream (Note [Double-buffered staging] in blutrain/data.h).
#include <cuda_runtime.h>

#include "blutensor/error.h"
#include "blutrain/data.h"

namespace blu::train {

bool cuda_device_present() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

struct BatchStager::Impl {
  int64_t tokens = 0;
  int32_t* pinned[2] = {nullptr, nullptr};  // each: inputs then targets (2 * tokens int32)
  cudaEvent_t copied[2] = {nullptr, nullptr};
  cudaEvent_t compute_reached = nullptr;  // the copy waits for work queued before it (WAR safety)
  bool in_flight[2] = {false, false};
  cudaStream_t copy_stream = nullptr;
  int current = 0;

  void wait_reusable(int i) {
    if (in_flight[i]) {
      BLU_CUDA_CHECK(cudaEventSynchronize(copied[i]));
      in_flight[i] = false;
    }
  }
};

BatchStager::BatchStager(int64_t tokens_per_batch) : impl_(std::make_unique<Impl>()) {
  BLU_CHECK(tokens_per_batch > 0, "BatchStager: tokens per batch ", tokens_per_batch, " must be positive");
  BLU_CHECK(cuda_device_present(), "BatchStager: no CUDA device (the CPU path reads batches directly)");
  impl_->tokens = tokens_per_batch;
  const size_t bytes = static_cast<size_t>(2 * tokens_per_batch) * sizeof(int32_t);
  for (int i = 0; i < 2; ++i) {
    BLU_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&impl_->pinned[i]), bytes));
    BLU_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->copied[i], cudaEventDisableTiming));
  }
  BLU_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->compute_reached, cudaEventDisableTiming));
  BLU_CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->copy_stream, cudaStreamNonBlocking));
}

BatchStager::~BatchStager() {
  if (!impl_) return;
  for (int i = 0; i < 2; ++i) {
    if (impl_->in_flight[i]) (void)cudaEventSynchronize(impl_->copied[i]);
    if (impl_->copied[i] != nullptr) (void)cudaEventDestroy(impl_->copied[i]);
    if (impl_->pinned[i] != nullptr) (void)cudaFreeHost(impl_->pinned[i]);
  }
  if (impl_->compute_reached != nullptr) (void)cudaEventDestroy(impl_->compute_reached);
  if (impl_->copy_stream != nullptr) (void)cudaStreamDestroy(impl_->copy_stream);
}

std::span<int32_t> BatchStager::host_inputs() {
  impl_->wait_reusable(impl_->current);
  return {impl_->pinned[impl_->current], static_cast<size_t>(impl_->tokens)};
}

std::span<int32_t> BatchStager::host_targets() {
  impl_->wait_reusable(impl_->current);
  return {impl_->pinned[impl_->current] + impl_->tokens, static_cast<size_t>(impl_->tokens)};
}

void BatchStager::stage(int32_t* device_inputs, int32_t* device_targets, void* compute_stream) {
  Impl& s = *impl_;
  const int i = s.current;
  const size_t bytes = static_cast<size_t>(s.tokens) * sizeof(int32_t);
  // The device buffers may still be read by kernels queued on the compute stream.
  BLU_CUDA_CHECK(cudaEventRecord(s.compute_reached, static_cast<cudaStream_t>(compute_stream)));
  BLU_CUDA_CHECK(cudaStreamWaitEvent(s.copy_stream, s.compute_reached, 0));
  BLU_CUDA_CHECK(cudaMemcpyAsync(device_inputs, s.pinned[i], bytes, cudaMemcpyHostToDevice, s.copy_stream));
  BLU_CUDA_CHECK(cudaMemcpyAsync(device_targets, s.pinned[i] + s.tokens, bytes, cudaMemcpyHostToDevice,
                                 s.copy_stream));
  BLU_CUDA_CHECK(cudaEventRecord(s.copied[i], s.copy_stream));
  BLU_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(compute_stream), s.copied[i], 0));
  s.in_flight[i] = true;
  s.current = 1 - i;
}

}  // namespace blu::train

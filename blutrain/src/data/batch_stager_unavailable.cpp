// batch_stager_unavailable.cpp: BatchStager in a CPU-only build (Note [CPU-only build] in the
// top-level CMakeLists.txt). No CUDA device can exist there: cuda_device_present() is false, so
// the trainer reads batches directly, and constructing a stager throws, as it does on a CUDA
// build without a device. batch_stager.cpp is the real one.
#include "blutensor/error.h"
#include "blutrain/data.h"

namespace blu::train {

bool cuda_device_present() {
  return false;
}

struct BatchStager::Impl {};

BatchStager::BatchStager(int64_t) {
  BLU_THROW(
      "BatchStager: this build of BluTrain was built without CUDA (BLU_WITH_CUDA=OFF); "
      "the CPU path reads batches directly");
}
BatchStager::~BatchStager() = default;
std::span<int32_t> BatchStager::host_inputs() {
  return {};
}
std::span<int32_t> BatchStager::host_targets() {
  return {};
}
void BatchStager::stage(int32_t*, int32_t*, void*) {
  BLU_THROW("BatchStager::stage: built without CUDA (BLU_WITH_CUDA=OFF)");
}

}  // namespace blu::train

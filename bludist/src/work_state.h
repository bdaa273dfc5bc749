// Internal: the state behind a bludist::Work (a CUDA completion event, or nothing for the CPU).
#pragma once

#include "bludist/process_group.h"
#include "blutensor/cuda_fwd.h"

namespace bludist {

struct Work::State {
  cudaEvent_t event = nullptr;  // recorded on the communication stream after the collective
  int device = -1;
  bool recorded = false;        // false while inside an open NCCL group
  ~State() {
#if BLU_WITH_CUDA  // a CPU-only build never creates an event
    if (event) cudaEventDestroy(event);  // safe while pending: released when it completes
#endif
  }
};

}  // namespace bludist

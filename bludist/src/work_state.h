// Internal: the state behind a bludist::Work (a CUDA completion event, or nothing for the CPU),
// and the CUDA events that time an NCCL collective (Note [Communication timing] in process_group.h).
#pragma once

#include <memory>

#include "bludist/process_group.h"
#include "blutensor/cuda_fwd.h"

namespace bludist {

#if BLU_WITH_CUDA
// One timing event (timing enabled), destroyed with the last owner.
struct TimingEvent {
  cudaEvent_t e = nullptr;
  TimingEvent() { BLU_CUDA_CHECK(cudaEventCreate(&e)); }
  ~TimingEvent() { if (e) cudaEventDestroy(e); }
  TimingEvent(const TimingEvent&) = delete;
  TimingEvent& operator=(const TimingEvent&) = delete;
};

// The events of one timed collective: `ref` (shared by a window's collectives, recorded on the
// compute stream before the first of them), `start` / `end` on the communication stream around
// it, `wait` on the stream that first waited for it. in_graph: recorded while the streams were
// captured into a CUDA graph, as external event nodes that every replay records again (Note
// [Communication timing in graphs] in nccl_process_group.cpp).
struct TimedOp {
  std::shared_ptr<TimingEvent> ref;
  TimingEvent start, end;
  std::unique_ptr<TimingEvent> wait;
  bool in_graph = false;
  // Records e on s: a plain record, or under capture an external event node (a graph op only).
  void record(const TimingEvent& e, cudaStream_t s) const {
    if (in_graph) {
      BLU_CUDA_CHECK(cudaEventRecordWithFlags(e.e, s, cudaEventRecordExternal));
    } else {
      BLU_CUDA_CHECK(cudaEventRecord(e.e, s));
    }
  }
  void mark_wait(cudaStream_t s) {
    if (wait) return;  // the first wait is where the compute stream stalls
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &capture) != cudaSuccess) return;
    if ((capture != cudaStreamCaptureStatusNone) != in_graph) return;  // a wait outside the op's own world
    wait = std::make_unique<TimingEvent>();
    record(*wait, s);
  }
};
#else
struct TimedOp {};
#endif

struct Work::State {
  cudaEvent_t event = nullptr;  // recorded on the communication stream after the collective
  int device = -1;
  bool recorded = false;        // false while inside an open NCCL group
  std::shared_ptr<TimedOp> timed;  // null unless the group times its collectives
  ~State() {
#if BLU_WITH_CUDA  // a CPU-only build never creates an event
    if (event) cudaEventDestroy(event);  // safe while pending: released when it completes
#endif
  }
};

}  // namespace bludist

// fused_step_unavailable.cpp: FusedGPT2Step in a CPU-only build (Note [CPU-only build] in the
// top-level CMakeLists.txt). The fused engine is a sequence of blublas launches, and blublas is
// not built there; constructing the step throws a clear error (the trainer only builds it for
// --engine fused, whose device is CUDA). fused_step.cpp is the real one.
#include "blutensor/error.h"
#include "blutrain/fused_step.h"

namespace blu::train {
namespace {
[[noreturn]] void no_fused_engine() {
  BLU_THROW(
      "--engine fused: this build of BluTrain was built without CUDA (BLU_WITH_CUDA=OFF); "
      "the CPU trains with --engine autograd");
}
}  // namespace

struct FusedGPT2Step::Impl {};

FusedGPT2Step::FusedGPT2Step(GPT2&, AdamW&, const FusedStepOptions&) {
  no_fused_engine();
}
FusedGPT2Step::~FusedGPT2Step() = default;
FusedStepResult FusedGPT2Step::step(const StageFn&, double) {
  no_fused_engine();
}
void FusedGPT2Step::sync_weights_from_model() {
  no_fused_engine();
}
Tensor FusedGPT2Step::gradient(int) const {
  no_fused_engine();
}
std::vector<std::string> FusedGPT2Step::dump_names() const {
  no_fused_engine();
}
std::map<std::string, Tensor> FusedGPT2Step::dump(const std::vector<std::string>&) const {
  no_fused_engine();
}
void FusedGPT2Step::time_next_step() {
  no_fused_engine();
}
const std::string& FusedGPT2Step::timing_json() const {
  no_fused_engine();
}
cudaStream_t FusedGPT2Step::stream() const {
  no_fused_engine();
}
std::string FusedGPT2Step::describe() const {
  no_fused_engine();
}
int64_t FusedGPT2Step::launches_per_step() const {
  no_fused_engine();
}
HostMarks FusedGPT2Step::host_marks() const {
  no_fused_engine();
}

}  // namespace blu::train

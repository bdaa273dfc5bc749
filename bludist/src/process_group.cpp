// ProcessGroup's backend-independent parts: Work, the Tensor forms (checks), sub-groups, meshes.
#include "bludist/process_group.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "blutensor/cuda_stream.h"
#include "blutensor/error.h"
#include "work_state.h"

namespace bludist {

const char* reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

const char* backend_name(Backend b) noexcept { return b == Backend::kGloo ? "gloo" : "nccl"; }

Milliseconds ProcessGroupOptions::default_timeout() {
  if (const char* v = std::getenv("BLUDIST_TIMEOUT_S")) {
    double s = std::atof(v);
    if (s > 0) return Milliseconds(static_cast<int64_t>(s * 1000));
  }
  return std::chrono::seconds(300);
}

bool ProcessGroupOptions::default_time_comm() {
  const char* v = std::getenv("BLUDIST_COMM_TIMING");
  return !(v && std::string(v) == "0");
}

// ---------------------------------------------------------------- Work
// Only NCCL works carry an event; a CPU-only build (Note [CPU-only build]) has none, so every
// Work there is complete and these are no-ops.
#if BLU_WITH_CUDA
void Work::wait(std::optional<cudaStream_t> stream) const {
  if (!state_ || !state_->event) return;
  BLU_CHECK(state_->recorded, "bludist: Work::wait() inside the open group that issued it (call group_end() first)");
  blu::cuda::DeviceGuard g(state_->device);
  cudaStream_t s = stream ? *stream : blu::cuda::current_stream(state_->device);
  if (state_->timed) state_->timed->mark_wait(s);  // Note [Communication timing]
  BLU_CUDA_CHECK(cudaStreamWaitEvent(s, state_->event, 0));
}

bool Work::is_completed() const {
  if (!state_ || !state_->event) return true;
  if (!state_->recorded) return false;
  blu::cuda::DeviceGuard g(state_->device);
  cudaError_t e = cudaEventQuery(state_->event);
  if (e == cudaErrorNotReady) return false;
  BLU_CUDA_CHECK(e);
  return true;
}

void Work::synchronize() const {
  if (!state_ || !state_->event) return;
  BLU_CHECK(state_->recorded, "bludist: Work::synchronize() inside the open group that issued it");
  blu::cuda::DeviceGuard g(state_->device);
  BLU_CUDA_CHECK(cudaEventSynchronize(state_->event));
}
#else
void Work::wait(std::optional<cudaStream_t>) const {}
bool Work::is_completed() const { return true; }
void Work::synchronize() const {}
#endif

// ---------------------------------------------------------------- ProcessGroup
ProcessGroup::ProcessGroup(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options)
    : store_(std::move(store)), rank_(rank), size_(size), options_(std::move(options)) {
  BLU_CHECK(size >= 1 && rank >= 0 && rank < size, "bludist: rank ", rank, " of a group of size ", size);
}

ProcessGroup::~ProcessGroup() = default;

std::string ProcessGroup::describe() const {
  return blu::detail::str_cat(backend_name(backend()), " group (rank ", rank_, " of ", size_, ")");
}

void ProcessGroup::check_tensor(const char* op, const Tensor& t) const {
  BLU_CHECK(t.defined(), "bludist ", op, ": undefined tensor");
  BLU_CHECK(t.is_contiguous(), "bludist ", op, ": tensor ", t.describe(), " is not contiguous");
  BLU_CHECK(t.device() == device(), "bludist ", op, ": tensor ", t.describe(), " is not on the ",
            describe(), "'s device ", device().str(),
            backend() == Backend::kGloo ? " (the Gloo backend takes CPU tensors; use NCCL for CUDA)"
                                        : " (the NCCL backend takes CUDA tensors of its device)");
}

Work ProcessGroup::all_reduce(const Tensor& t, ReduceOp op, const CommOptions& o) {
  check_tensor("all_reduce", t);
  if (o.async_op) record_async_use(t);
  Work w = all_reduce(t.data_ptr(), static_cast<std::size_t>(t.numel()), t.dtype(), op, o);
  t.bump_version();
  return w;
}

Work ProcessGroup::reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op, const CommOptions& o) {
  check_tensor("reduce_scatter", out);
  check_tensor("reduce_scatter", in);
  BLU_CHECK(out.dtype() == in.dtype(), "bludist reduce_scatter: output ", out.describe(), " and input ",
            in.describe(), " differ in dtype");
  BLU_CHECK(in.numel() == out.numel() * size_, "bludist reduce_scatter: input ", in.describe(),
            " must have group size (", size_, ") x the output's ", out.numel(), " elements");
  if (o.async_op) { record_async_use(out); record_async_use(in); }
  Work w = reduce_scatter(out.data_ptr(), in.data_ptr(), static_cast<std::size_t>(out.numel()), out.dtype(), op, o);
  out.bump_version();
  return w;
}

Work ProcessGroup::all_gather(const Tensor& out, const Tensor& in, const CommOptions& o) {
  check_tensor("all_gather", out);
  check_tensor("all_gather", in);
  BLU_CHECK(out.dtype() == in.dtype(), "bludist all_gather: output ", out.describe(), " and input ",
            in.describe(), " differ in dtype");
  BLU_CHECK(out.numel() == in.numel() * size_, "bludist all_gather: output ", out.describe(),
            " must have group size (", size_, ") x the input's ", in.numel(), " elements");
  if (o.async_op) { record_async_use(out); record_async_use(in); }
  Work w = all_gather(out.data_ptr(), in.data_ptr(), static_cast<std::size_t>(in.numel()), in.dtype(), o);
  out.bump_version();
  return w;
}

Work ProcessGroup::broadcast(const Tensor& t, int root, const CommOptions& o) {
  check_tensor("broadcast", t);
  if (o.async_op) record_async_use(t);
  Work w = broadcast(t.data_ptr(), static_cast<std::size_t>(t.numel()), t.dtype(), root, o);
  t.bump_version();
  return w;
}

Work ProcessGroup::send(const Tensor& t, int dst, const CommOptions& o) {
  check_tensor("send", t);
  if (o.async_op) record_async_use(t);
  return send(t.data_ptr(), static_cast<std::size_t>(t.numel()), t.dtype(), dst, o);
}

Work ProcessGroup::recv(const Tensor& t, int src, const CommOptions& o) {
  check_tensor("recv", t);
  if (o.async_op) record_async_use(t);
  Work w = recv(t.data_ptr(), static_cast<std::size_t>(t.numel()), t.dtype(), src, o);
  t.bump_version();
  return w;
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(const std::vector<int>& ranks) {
  BLU_CHECK(!ranks.empty(), "bludist new_group: empty rank list");
  std::set<int> seen;
  for (int r : ranks) {
    BLU_CHECK(r >= 0 && r < size_, "bludist new_group: rank ", r, " is not in the ", describe());
    BLU_CHECK(seen.insert(r).second, "bludist new_group: rank ", r, " listed twice");
  }
  // Every member numbers its sub-groups the same way (all call new_group in the same order), so
  // the key space "sub<n>" is the same on every member; non-members count too.
  int id = next_subgroup_++;
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) return nullptr;
  std::string key = blu::detail::str_cat("sub", id);
  for (int r : ranks) key += blu::detail::str_cat("_", r);
  auto store = std::make_shared<PrefixStore>(key, store_);
  return make_subgroup(store, static_cast<int>(it - ranks.begin()), static_cast<int>(ranks.size()));
}

Mesh2D make_mesh_2d(ProcessGroup& world, int rows, int cols) {
  BLU_CHECK(rows >= 1 && cols >= 1 && rows * cols == world.size(), "bludist make_mesh_2d: ", rows, " x ", cols,
            " does not match the world size ", world.size());
  Mesh2D m;
  m.rows = rows;
  m.cols = cols;
  m.row = world.rank() / cols;
  m.col = world.rank() % cols;
  for (int r = 0; r < rows; ++r) {
    std::vector<int> ranks;
    for (int c = 0; c < cols; ++c) ranks.push_back(r * cols + c);
    auto g = world.new_group(ranks);
    if (g) m.row_group = g;
  }
  for (int c = 0; c < cols; ++c) {
    std::vector<int> ranks;
    for (int r = 0; r < rows; ++r) ranks.push_back(r * cols + c);
    auto g = world.new_group(ranks);
    if (g) m.col_group = g;
  }
  return m;
}

}  // namespace bludist

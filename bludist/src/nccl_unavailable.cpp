// Stand-in for the NCCL backend in builds where nccl.h / libnccl were not found.
#include "bludist/process_group.h"
#include "blutensor/error.h"

namespace bludist {

bool nccl_available() noexcept { return false; }

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store>, int, int, int, ProcessGroupOptions) {
  BLU_THROW("bludist: this build has no NCCL backend (nccl.h / libnccl were not found at configure time)");
}

}  // namespace bludist

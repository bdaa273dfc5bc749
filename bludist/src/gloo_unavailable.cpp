// Stand-in for the Gloo backend in builds without libgloo (the GPU device has none): the
// factory throws a clear error; NCCL groups are unaffected.
#include "bludist/process_group.h"
#include "blutensor/error.h"

namespace bludist {

bool gloo_available() noexcept { return false; }

std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store>, int, int, ProcessGroupOptions) {
  BLU_THROW("bludist: this build has no Gloo backend (libgloo-dev was not found at configure time); "
            "install it (scripts/setup-deps.sh) and reconfigure, or use the NCCL backend");
}

}  // namespace bludist

// The outside consumer of blublas: prints the version and, with a GPU, runs a small GEMM and
// checks it against a CPU reference. Exits 0 without a GPU (nothing to run), 1 on a wrong result.
#include <blublas/blublas.h>

#include <cmath>
#include <cstdio>
#include <vector>

#if 0  // enabled once the GEMM self-check exists (issue 3)
#include <blublas/gemm.h>
#define CONSUMER_HAS_GEMM 1
#endif

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
#ifdef CONSUMER_HAS_GEMM
  return blublas::gemm_self_check(std::printf) ? 0 : 1;
#else
  return 0;
#endif
}

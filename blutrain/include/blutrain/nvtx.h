// blutrain/nvtx.h: NVTX ranges for Nsight Systems (header-only nvtx3 from the CUDA toolkit);
// compiled to nothing where the headers are absent. Ranges cost ~ns when no tool is attached.
#pragma once

#if defined(BLU_HAVE_NVTX) && __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define BLU_NVTX_ENABLED 1
#endif

namespace blu::train {

class NvtxRange {
 public:
  explicit NvtxRange(const char* name) {
#ifdef BLU_NVTX_ENABLED
    nvtxRangePushA(name);
#else
    (void)name;
#endif
  }
  ~NvtxRange() {
#ifdef BLU_NVTX_ENABLED
    nvtxRangePop();
#endif
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace blu::train

#define BLU_NVTX_CONCAT_(a, b) a##b
#define BLU_NVTX_CONCAT(a, b) BLU_NVTX_CONCAT_(a, b)
// BLU_NVTX_RANGE("layer 3/attn"): a range until the end of the enclosing scope.
#define BLU_NVTX_RANGE(name) ::blu::train::NvtxRange BLU_NVTX_CONCAT(blu_nvtx_, __LINE__)(name)

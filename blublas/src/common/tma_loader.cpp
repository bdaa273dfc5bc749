// tma_loader.cpp: cuTensorMapEncodeTiled through cudaGetDriverEntryPointByVersion (never link
// libcuda). The entry point is looked up once (thread-safe static) and cached.
#include "common/tma_loader.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <sstream>
#include <string>

#include "blublas/check.h"

namespace blublas::detail {
namespace {

struct EncodeFn {
  PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  std::string error;
};

const EncodeFn& encode_fn() {
  static const EncodeFn cached = [] {
    EncodeFn e;
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSymbolNotFound;
    // 12000: the ABI version of the typedef above (cuTensorMapEncodeTiled appeared in CUDA 12.0).
    cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000,
                                                       cudaEnableDefault, &query);
    if (err != cudaSuccess || query != cudaDriverEntryPointSuccess || ptr == nullptr) {
      (void)cudaGetLastError();
      std::ostringstream os;
      os << "cuTensorMapEncodeTiled not available from the driver (" << cudaGetErrorName(err)
         << ", query result " << static_cast<int>(query) << ")";
      e.error = os.str();
    } else {
      e.fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
    }
    return e;
  }();
  return cached;
}

}  // namespace

Status encode_tensor_map_tiled(CUtensorMap* map, CUtensorMapDataType dtype, int rank,
                               const void* base, const uint64_t* dims,
                               const uint64_t* strides_bytes, const uint32_t* box,
                               CUtensorMapSwizzle swizzle) {
  BLUBLAS_CHECK_ARG(map != nullptr && rank >= 1 && rank <= 5, "tensor map: bad rank ", rank);
  const EncodeFn& e = encode_fn();
  BLUBLAS_CHECK(e.fn != nullptr, StatusCode::kUnsupportedArch, e.error);
  cuuint64_t gdim[5];
  cuuint64_t gstride[4];
  cuuint32_t bdim[5];
  cuuint32_t estride[5];
  for (int i = 0; i < rank; ++i) {
    gdim[i] = dims[i];
    bdim[i] = box[i];
    estride[i] = 1;
    if (i + 1 < rank) gstride[i] = strides_bytes[i];
  }
  CUresult r = e.fn(map, dtype, static_cast<cuuint32_t>(rank), const_cast<void*>(base), gdim,
                    gstride, bdim, estride, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::ostringstream os;
    os << "cuTensorMapEncodeTiled failed (CUresult " << static_cast<int>(r) << ") for base=" << base
       << " rank=" << rank << " dims=[";
    for (int i = 0; i < rank; ++i) os << (i ? "," : "") << dims[i];
    os << "] strides_bytes=[";
    for (int i = 0; i + 1 < rank; ++i) os << (i ? "," : "") << strides_bytes[i];
    os << "] box=[";
    for (int i = 0; i < rank; ++i) os << (i ? "," : "") << box[i];
    os << "]";
    return Status(StatusCode::kInvalidArgument, os.str());
  }
  return Status::success();
}

}  // namespace blublas::detail

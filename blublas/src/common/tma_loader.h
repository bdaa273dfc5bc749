// tma_loader.h (internal): the driver's cuTensorMapEncodeTiled, fetched at run time through the
// runtime's cudaGetDriverEntryPointByVersion, so blublas never links libcuda (binaries start on
// machines without a driver and report "no device"). Used by the sm_90a kernels (TMA) to build
// tensor maps on the host per call; a map is a 128-byte value passed as a __grid_constant__
// kernel parameter.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only; no libcuda symbol is referenced)

#include <cstdint>

#include "blublas/status.h"

namespace blublas::detail {

// A tiled tensor map of `rank` (1..5) dimensions, innermost first. dims in elements, strides_bytes
// for dimensions 1..rank-1 (byte distance between consecutive indices of that dimension; each a
// multiple of 16), box in elements per dimension (box[0] * element size <= the swizzle span when
// swizzled). Out-of-bounds reads fill zeros. Returns kCudaError/kInvalidArgument with the driver's
// reason and the arguments on failure; kUnsupportedArch when the driver lacks the entry point.
Status encode_tensor_map_tiled(CUtensorMap* map, CUtensorMapDataType dtype, int rank,
                               const void* base, const uint64_t* dims,
                               const uint64_t* strides_bytes, const uint32_t* box,
                               CUtensorMapSwizzle swizzle);

}  // namespace blublas::detail

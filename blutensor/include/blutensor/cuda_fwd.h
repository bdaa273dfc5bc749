// blutensor/cuda_fwd.h: the CUDA runtime's handle types, for headers that name a stream or an
// event. With CUDA (BLU_WITH_CUDA=1) it is <cuda_runtime.h>; in a CPU-only build (Note [CPU-only
// build] in the top-level CMakeLists.txt) the handles are declared as the runtime declares them,
// opaque pointers that nothing in that build can create, so the same headers compile there.
#pragma once

#ifndef BLU_WITH_CUDA
#error "BLU_WITH_CUDA is not defined: link the blu::tensor target (it defines BLU_WITH_CUDA=0 or 1)"
#endif

#if BLU_WITH_CUDA
#include <cuda_runtime.h>
#else
// Same spelling as cuda_runtime_api.h / driver_types.h, so code written against either agrees.
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;
#endif

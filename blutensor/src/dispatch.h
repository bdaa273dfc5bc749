// blutensor/src/dispatch.h: picks the kernel-level backend by device: blu::cpu_ops for CPU tensors,
// blu::cuda_ops (src/cuda/cuda_ops.h, tensorcuda) for CUDA tensors, with the device made current.
// Note [Backend mirror] in backend_ops.def: both namespaces declare the same functions.
#pragma once

#include "blutensor/device.h"
#include "blutensor/error.h"
#include "capture/capture_hooks.h"
#include "cpu/cpu_ops.h"

#if __has_include("cuda/cuda_ops.h") && !defined(BLU_TENSOR_NO_CUDA_BACKEND)
#include "cuda/cuda_ops.h"
#define BLU_HAVE_CUDA_OPS 1
#else
#define BLU_HAVE_CUDA_OPS 0
#endif

// Note [Step capture] (blutensor/capture.h): every dispatched call is also recorded while a
// capture Scope is open on this thread.
#define BLU_CAPTURE_RECORD(dev, fn, ...) \
  ::blu::capture::detail::RecordAs<decltype(&::blu::cpu_ops::fn)>::run(#fn, dev, __VA_ARGS__)

#if BLU_HAVE_CUDA_OPS
#define BLU_DISPATCH(device, fn, ...)                 \
  do {                                                \
    ::blu::Device blu_dev_ = (device);                \
    BLU_CAPTURE_RECORD(blu_dev_, fn, __VA_ARGS__);    \
    if (blu_dev_.is_cuda()) {                         \
      ::blu::DeviceGuard blu_guard_(blu_dev_);        \
      ::blu::cuda_ops::fn(__VA_ARGS__);               \
    } else {                                          \
      ::blu::cpu_ops::fn(__VA_ARGS__);                \
    }                                                 \
  } while (0)
#else
#define BLU_DISPATCH(device, fn, ...)                                                 \
  do {                                                                                \
    ::blu::Device blu_dev_ = (device);                                                \
    BLU_CAPTURE_RECORD(blu_dev_, fn, __VA_ARGS__);                                    \
    if (blu_dev_.is_cuda()) {                                                         \
      BLU_THROW(#fn ": this build of blutensor has no CUDA ops (src/cuda/cuda_ops.h)"); \
    } else {                                                                          \
      ::blu::cpu_ops::fn(__VA_ARGS__);                                                \
    }                                                                                 \
  } while (0)
#endif

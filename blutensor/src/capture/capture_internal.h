// blutensor/src/capture/capture_internal.h: byte-level tensors over storages, shared by the
// recorder (input snapshots) and replay (Note [Step capture]).
#pragma once

#include <memory>

#include "blutensor/capture.h"

namespace blu::capture::detail {

// A 1-D tensor over a storage's first nbytes: i32 elements, or u16 when nbytes % 4 != 0 (an odd
// byte count is an error: no backend dtype has one-byte elements).
Tensor byte_view(const std::shared_ptr<Storage>& s, std::size_t nbytes);
// byte_view of a new storage of nbytes on device.
Tensor byte_tensor(std::size_t nbytes, Device device);
// The strided view r of storage s.
Tensor view_of(const std::shared_ptr<Storage>& s, const TensorRef& r);

}  // namespace blu::capture::detail

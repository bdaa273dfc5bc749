// capture_record.h (test support): the pieces of a hand-built capture::Graph that the planning
// tests share (capture_side_stream_test, capture_ln_residual_test): a buffer on a device and a
// tensor argument viewing one densely.
#pragma once

#include <string>
#include <utility>

#include "blutensor/capture.h"

namespace blu::test {

// A new buffer of g (its id) on `device`.
inline int add_buffer(capture::Graph& g, Device device, std::size_t nbytes, bool written = false) {
  capture::Buffer b;
  b.id = static_cast<int>(g.buffers.size());
  b.nbytes = nbytes;
  b.device = device;
  b.written = written;
  g.buffers.push_back(b);
  return b.id;
}

// A tensor argument `name` viewing buffer `buf` row-major dense with `sizes`.
inline capture::Arg tensor_arg(const std::string& name, int buf, bool read, bool write, DType dtype, Shape sizes) {
  capture::Arg a;
  a.name = name;
  a.kind = capture::Arg::Kind::kTensor;
  a.read = read;
  a.write = write;
  capture::TensorRef r;
  r.buffer = buf;
  r.dtype = dtype;
  r.strides.assign(sizes.size(), 1);
  for (std::size_t d = sizes.size(); d-- > 1;) r.strides[d - 1] = r.strides[d] * sizes[d];
  r.sizes = std::move(sizes);
  a.tensors.push_back(r);
  return a;
}

}  // namespace blu::test

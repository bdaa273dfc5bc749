// safetensors_roundtrip_tool: reads a safetensors file with blutensor and writes every tensor (and
// the metadata) back with blutensor: `safetensors_roundtrip_tool IN OUT`. Driven by
// tests/interop/torch_safetensors_roundtrip.py on the device, which writes IN with PyTorch and
// checks that PyTorch reads OUT back bitwise equal (written by one, read by the other, both ways).
#include <cstdio>
#include <exception>

#include "blutensor/safetensors.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s IN.safetensors OUT.safetensors\n", argv[0]);
    return 2;
  }
  try {
    blu::SafetensorsData data = blu::load_safetensors(argv[1]);
    blu::save_safetensors(argv[2], data.tensors, data.metadata);
    std::printf("round-tripped %zu tensors\n", data.tensors.size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "safetensors_roundtrip_tool: %s\n", e.what());
    return 1;
  }
}

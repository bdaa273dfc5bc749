// safetensors_fuzz.cpp: libFuzzer target for blu::parse_safetensors (header length, header JSON,
// dtypes, shapes, data_offsets, the CRC-32C metadata). Any input must either parse or throw
// blu::Error; what parses must serialize and parse back to the same tensors (a round trip that
// catches a reader accepting what the writer cannot express).
#include <cstring>

#include "blutensor/error.h"
#include "blutensor/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  blu::SafetensorsData parsed;
  try {
    parsed = blu::parse_safetensors(bytes, "<fuzz>");
  } catch (const blu::Error&) {
    return 0;  // a clear error is the expected outcome for most inputs
  }
  const std::string again = blu::serialize_safetensors(parsed.tensors, parsed.metadata);
  const blu::SafetensorsData back = blu::parse_safetensors(again, "<round trip>");
  if (back.tensors.size() != parsed.tensors.size() || back.metadata != parsed.metadata) __builtin_trap();
  for (const auto& [name, t] : parsed.tensors) {
    const blu::Tensor& u = back.tensors.at(name);
    if (u.dtype() != t.dtype() || u.sizes() != t.sizes() ||
        (t.nbytes() > 0 && std::memcmp(u.data_ptr(), t.data_ptr(), t.nbytes()) != 0))
      __builtin_trap();
  }
  return 0;
}

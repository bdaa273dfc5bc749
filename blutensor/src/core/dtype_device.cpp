// dtype and device helpers: names, the software binary16 conversion, device parsing and guards.
#include <cmath>
#include <cstring>

#include "blutensor/device.h"
#include "blutensor/dtype.h"
#include "blutensor/error.h"
#if BLU_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace blu {

const char* dtype_name(DType t) noexcept {
  switch (t) {
    case DType::F64: return "f64";
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U16: return "u16";
  }
  return "?";
}

const char* dtype_torch_name(DType t) noexcept {
  switch (t) {
    case DType::F64: return "float64";
    case DType::F32: return "float32";
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U16: return "uint16";
  }
  return "?";
}

uint16_t Half::from_float(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return sign | (absx > 0x7f800000u ? 0x7e00 : 0x7c00);
  if (absx >= 0x477ff000u) return sign | 0x7c00;  // rounds to >= 65520: infinity
  if (absx < 0x38800000u) {                       // below 2^-14: subnormal half
    float af;
    std::memcpy(&af, &absx, 4);
    return sign | static_cast<uint16_t>(std::nearbyint(af * 16777216.0f));
  }
  uint32_t exponent = (absx >> 23) - 127 + 15;
  uint32_t mantissa = absx & 0x7fffffu;
  uint32_t h = (exponent << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

float Half::to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    float v = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  uint32_t bits;
  if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    type = DeviceType::CPU;
    index = 0;
    return;
  }
  if (spec == "cuda") {
    type = DeviceType::CUDA;
    index = 0;
    return;
  }
  if (spec.rfind("cuda:", 0) == 0 && spec.size() > 5) {
    int v = 0;
    for (std::size_t i = 5; i < spec.size(); ++i) {
      BLU_CHECK(spec[i] >= '0' && spec[i] <= '9' && v < 100000, "Device: bad spec '", spec,
                "' (expected cpu, cuda or cuda:N)");
      v = v * 10 + (spec[i] - '0');
    }
    type = DeviceType::CUDA;
    index = v;
    return;
  }
  BLU_THROW("Device: bad spec '", spec, "' (expected cpu, cuda or cuda:N)");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

#if BLU_WITH_CUDA
int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

DeviceGuard::DeviceGuard(Device device) {
  if (!device.is_cuda()) return;
  int current = 0;
  BLU_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device.index) {
    BLU_CUDA_CHECK(cudaSetDevice(device.index));
    previous_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}
#else   // a CPU-only build (Note [CPU-only build]): no CUDA device can exist
int cuda_device_count() { return 0; }

DeviceGuard::DeviceGuard(Device device) {
  BLU_CHECK(!device.is_cuda(), "DeviceGuard: ", device.str(),
            " requested but this build of BluTrain was built without CUDA (BLU_WITH_CUDA=OFF)");
}

DeviceGuard::~DeviceGuard() = default;
#endif

}  // namespace blu

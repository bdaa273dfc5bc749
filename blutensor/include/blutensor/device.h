// blutensor/device.h: where a tensor lives: the CPU or CUDA device n. Parsed from "cpu", "cuda",
// "cuda:1" (CLI flags); printed the same way.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace blu {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::CPU ? 0 : i) {}
  explicit Device(const std::string& spec);  // "cpu" | "cuda" | "cuda:N"; throws blu::Error

  static constexpr Device cpu() { return Device(DeviceType::CPU, 0); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::CUDA, index); }
  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;  // "cpu", "cuda:0"

  friend constexpr bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.index == b.index;
  }
  friend constexpr bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

inline constexpr Device kCPU = Device::cpu();
inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

// Number of usable CUDA devices (0 when there is no driver or device; never throws).
int cuda_device_count();
inline bool cuda_is_available() { return cuda_device_count() > 0; }

// RAII: makes `device` current for CUDA calls within the scope (no-op for the CPU).
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  [[maybe_unused]] int previous_ = -1;  // unused without CUDA
};

}  // namespace blu

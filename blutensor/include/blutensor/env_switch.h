// blutensor/env_switch.h: the on/off switches read from the environment for A/B runs
// (BLU_CAPTURE_ARENA, BLU_CAPTURE_INPLACE, BLU_CAPTURE_SIDE_STREAM, BLU_CAPTURE_CHUNKED_CLASSIFIER,
// BLU_LINEAR_CROSS_ENTROPY):
// unset or anything but 0/off/false is on.
#pragma once

#include <cstdlib>
#include <cstring>

namespace blu {

inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || !(std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0 || std::strcmp(v, "false") == 0);
}

}  // namespace blu

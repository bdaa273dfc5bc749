// Test support: the tiny-model CPU training configuration the trainer tests share (pattern
// shards in data_dir, outputs in out_dir, 30 steps, validation every 10, no sample; resolved).
#pragma once

#include <string>

#include "blutrain/config.h"

namespace blu::train::test {

TrainConfig tiny_config(const std::string& data_dir, const std::string& out_dir);

}  // namespace blu::train::test

// capture_tiny: `blutrain capture` of the tiny GPT-2 (run_capture in-process) and its parsed
// graph, for capture_step_test.cpp and capture_step_gpu_test.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "blutensor/capture.h"

namespace blu::train::test {

struct Captured {
  int status = -1;
  std::string log;
  blu::capture::Graph graph;
};

// B=2, T=seq_len, synthetic tokens, on `device` ("cpu" or "cuda"); out-dir in a temp dir (removed).
Captured capture_tiny(const std::string& name, int64_t seq_len, const std::string& device = "cpu");
// The "key ..." line of the log ("" when absent).
std::string key_line(const std::string& log);

}  // namespace blu::train::test

// metrics_losses.h: what the multi-rank trainer tests (data_parallel_test, tensor_parallel_test)
// share: the Gloo skip macro (their programs.cmake entries define BLUTRAIN_TEST_HAVE_GLOO when
// bludist has Gloo) and the losses of a run's metrics.jsonl.
#pragma once

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

// CPU ranks talk through bludist's Gloo backend (Debian's libgloo-dev).
#if BLUTRAIN_TEST_HAVE_GLOO
#define REQUIRE_GLOO() \
  do {                 \
  } while (0)
#else
#define REQUIRE_GLOO() GTEST_SKIP() << "built without Gloo (libgloo-dev): no CPU ranks"
#endif

namespace blu::test {

// The values of `field` in the records of `event`, in file order (records without it skipped).
inline std::vector<double> field_in(const std::string& metrics_path, const std::string& event,
                                    const std::string& field) {
  std::vector<double> out;
  std::ifstream f(metrics_path);
  std::string line;
  const std::string tag = "{\"event\":\"" + event + "\"";
  const std::string key = "\"" + field + "\":";
  while (std::getline(f, line)) {
    if (line.rfind(tag, 0) != 0) continue;
    const size_t at = line.find(key);
    if (at != std::string::npos) out.push_back(std::strtod(line.c_str() + at + key.size(), nullptr));
  }
  return out;
}

// The loss of every record of `event` ("train" or "val") in a metrics.jsonl, in order.
inline std::vector<double> losses_in(const std::string& metrics_path, const std::string& event) {
  return field_in(metrics_path, event, event == "val" ? "val_loss" : "loss");
}

}  // namespace blu::test

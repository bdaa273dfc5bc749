// rank_runs.h: the fixture the multi-rank trainer tests share (data_parallel_test,
// tensor_parallel_test, context_parallel_test): a temporary folder per test process with the
// pattern shards, the blutrain / blurun command lines and the paths of a run's outputs. Needs
// BLUTRAIN_EXE and BLURUN_EXE (tests/blutrain/programs.cmake).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "support/pattern_shards.h"

namespace blu::train::test {

class RankRuns : public ::testing::Test {
 protected:
  // prefix: the temporary folder's name ("blu_<prefix>_<pid>").
  explicit RankRuns(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / ("blu_" + prefix_ + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(root_);
    write_pattern_shards((root_ / "data").string());
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // blutrain train on the pattern shards, out-dir root/out: `common` (the test's shared flags),
  // then `flags`.
  std::string program(const std::string& out, const std::string& common, const std::string& flags) const {
    return std::string(BLUTRAIN_EXE) + " train --data " + (root_ / "data").string() + " " + common + " --out-dir " +
           (root_ / out).string() + " " + flags;
  }
  static std::string blurun(int ranks, const std::string& program) {
    return std::string(BLURUN_EXE) + " --nproc-per-node " + std::to_string(ranks) + " -- " + program;
  }
  std::string metrics(const std::string& out) const { return (root_ / out / "metrics.jsonl").string(); }
  std::string checkpoint(const std::string& out, int step) const {
    char name[32];
    std::snprintf(name, sizeof(name), "step_%08d", step);
    return (root_ / out / name).string();
  }

  std::string prefix_;
  std::filesystem::path root_;
};

}  // namespace blu::train::test

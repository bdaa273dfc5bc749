// train_output_test.cpp: what a run prints and writes besides checkpoints: MFU arithmetic and
// GPU peaks, the progress line, the JSONL metrics log and the loss-curve image.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>

#include "blutrain/files.h"
#include "blutensor/json.h"
#include "blutrain/metrics.h"

using namespace blu::train;
namespace fs = std::filesystem;

TEST(Mfu, FlopsPerTokenAndPeaks) {
  // GPT-2 124M: N = 124,475,904 (vocab 50304), L 12, C 768, T 1024.
  EXPECT_DOUBLE_EQ(flops_per_token(124475904, 12, 768, 1024), 6.0 * 124475904 + 12.0 * 12 * 768 * 1024);
  EXPECT_DOUBLE_EQ(dense_peak_flops("NVIDIA H100 80GB HBM3", "bf16"), 989e12);
  EXPECT_DOUBLE_EQ(dense_peak_flops("NVIDIA H100 80GB HBM3", "tf32"), 495e12);
  EXPECT_DOUBLE_EQ(dense_peak_flops("NVIDIA H200", "fp32"), 67e12);
  EXPECT_DOUBLE_EQ(dense_peak_flops("NVIDIA H100 PCIe", "bf16"), 756e12);
  EXPECT_DOUBLE_EQ(dense_peak_flops("Some Future GPU", "bf16"), 0.0);
}

TEST(Progress, LineHasEveryField) {
  ProgressInfo p;
  p.step = 12;
  p.max_steps = 1000;
  p.loss = 5.43219;
  p.lr = 6e-4;
  p.grad_norm = 1.2345;
  p.step_ms = 123.45;
  p.tokens_per_s = 132800;
  std::string cpu = format_progress_line(p);
  EXPECT_EQ(cpu, "step   12/1000 | loss 5.4322 | lr 6.00e-04 | norm 1.234 | 123.5 ms | 132.8K tok/s");
  p.mfu = 0.412;
  p.mem_allocated_gib = 3.21;
  p.mem_reserved_gib = 4.0;
  p.mem_peak_gib = 3.5;
  p.device_used_gib = 5.1;
  EXPECT_EQ(format_progress_line(p),
            cpu + " | MFU 41.2% | mem 3.21/4.00 GiB (peak 3.50) | dev 5.10 GiB");
  const std::string single = format_progress_line(p);
  p.dp_ranks = 2;
  p.rank_mem_gib = 3.5;
  p.tp_ranks = 2;
  p.comm_ms = 12.34;  // host-timed (Gloo) or no exposure measured: the time alone
  EXPECT_EQ(format_progress_line(p), single + " | dp 2: rank mem 3.50 GiB | tp 2, comm 12.3 ms");
  p.comm_exposed_ms = 4.1;  // Note [Communication timing]: 1 - 4.1 / 12.34 = 66.8% hidden
  EXPECT_EQ(format_progress_line(p), single + " | dp 2: rank mem 3.50 GiB | tp 2, comm 12.3 ms (exposed 4.1 ms, 67% hidden)");
}

TEST(MetricsLog, WritesOneJsonObjectPerLine) {
  fs::path dir = fs::temp_directory_path() / ("blu_metrics_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string path = (dir / "sub" / "metrics.jsonl").string();
  {
    MetricsLog log(path);
    log.write("train", {{"step", 1}, {"loss", 10.5}, {"lr", 1e-4}});
    log.write("val", {{"step", 1}, {"loss", 1.0 / 0.0}});
  }
  {
    MetricsLog log(path);  // appends
    log.write("train", {{"step", 2}, {"loss", 9.25}});
  }
  std::istringstream lines(read_file(path, "test"));
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    blu::json::Value v = blu::json::parse(line);
    ++n;
    if (n == 1) {
      EXPECT_EQ(v.find("event")->as_string(), "train");
      EXPECT_DOUBLE_EQ(v.find("loss")->as_number(), 10.5);
    }
    if (n == 2) {
      EXPECT_TRUE(v.find("loss")->is_null());
    }
  }
  EXPECT_EQ(n, 3);
  fs::remove_all(dir);
}

TEST(LossCurve, WritesAnImage) {
  fs::path dir = fs::temp_directory_path() / ("blu_plot_" + std::to_string(::getpid()));
  std::vector<LossPoint> train, val;
  for (int s = 1; s <= 200; ++s) train.push_back({s, 10.0 / (1 + 0.05 * s) + 0.01 * (s % 7)});
  for (int s = 50; s <= 200; s += 50) val.push_back({s, 10.0 / (1 + 0.05 * s) + 0.2});
  std::string written = write_loss_curve((dir / "loss.png").string(), train, val, "test run");
  std::string bytes = read_file(written, "test");
  if (fs::path(written).extension() == ".png") {  // built with libpng
    ASSERT_GT(bytes.size(), 1000u);
    EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  } else {
    EXPECT_EQ(fs::path(written).extension(), ".svg");
    EXPECT_NE(bytes.find("<svg"), std::string::npos);
  }
  fs::remove_all(dir);
}

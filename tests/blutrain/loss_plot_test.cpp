// loss_plot_test.cpp: the gnuplot loss curve (Note [Loss plot through gnuplot]): the script's
// content, a real gnuplot run where gnuplot is installed (a PNG, the data file with train and
// val blocks) and the fallback to the built-in plot, with its reason, when gnuplot is missing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "blutrain/files.h"
#include "blutrain/metrics.h"
#include "common/scoped_env.h"

namespace blu::train {
namespace {

namespace fs = std::filesystem;

struct Curves {
  std::vector<LossPoint> train, val;
  Curves() {
    for (int s = 1; s <= 300; ++s) train.push_back({s, 10.9 / (1 + 0.01 * s) + 0.05 * (s % 5)});
    for (int s = 0; s <= 300; s += 25) val.push_back({s, 10.9 / (1 + 0.01 * s) + 0.3});
  }
};

fs::path fresh_dir(const std::string& tag) {
  fs::path d =
      fs::temp_directory_path() / ("blu_lossplot_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

using blu::test::ScopedEnv;

TEST(LossPlot, ScriptHasTitlesAxesAndBothCurves) {
  const std::string gp = loss_plot_script("/o/loss.png", "/o/loss.dat", true, "run \"x\" lr 2e-3");
  EXPECT_NE(gp.find("set terminal pngcairo"), std::string::npos);
  EXPECT_NE(gp.find("set output \"/o/loss.png\""), std::string::npos);
  EXPECT_NE(gp.find("set title \"run \\\"x\\\" lr 2e-3\""), std::string::npos)
      << gp;  // quotes escaped
  EXPECT_NE(gp.find("set xlabel \"step"), std::string::npos);
  EXPECT_NE(gp.find("set ylabel \"cross-entropy loss"), std::string::npos);
  EXPECT_NE(gp.find("index 0 using 1:2 with lines"), std::string::npos);
  EXPECT_NE(gp.find("index 1 using 1:2 with linespoints"), std::string::npos);
  EXPECT_EQ(loss_plot_script("/o/loss.png", "/o/loss.dat", false, "t").find("index 1"),
            std::string::npos);
  // A two-line title keeps its line break as gnuplot's \n escape, inside the one quoted string.
  EXPECT_NE(
      loss_plot_script("/o/loss.png", "/o/loss.dat", false, "a\nb").find("set title \"a\\nb\"\n"),
      std::string::npos);
}

TEST(LossPlot, GnuplotDrawsThePngWhereInstalled) {
  const fs::path dir = fresh_dir("gnuplot");
  Curves c;
  const LossPlot p = plot_loss_curve((dir / "loss.png").string(), c.train, c.val, "test run");
  if (p.tool != "gnuplot") GTEST_SKIP() << "gnuplot unavailable here: " << p.note;
  EXPECT_EQ(p.path, fs::absolute(dir / "loss.png").string());
  EXPECT_TRUE(p.note.empty()) << p.note;
  const std::string bytes = read_file(p.path, "test");
  ASSERT_GT(bytes.size(), 5000u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  const std::string dat = read_file((dir / "loss.dat").string(), "test");
  EXPECT_NE(dat.find("\n\n\n# step loss (val)\n0 "), std::string::npos) << dat.substr(0, 200);
  EXPECT_TRUE(fs::exists(dir / "loss.gp"));
  EXPECT_FALSE(fs::exists(dir / "loss.png.tmp.png"));
  EXPECT_FALSE(fs::exists(dir / "loss.gp.log"));
  fs::remove_all(dir);
}

TEST(LossPlot, MissingGnuplotFallsBackToTheBuiltInPlotAndSaysWhy) {
  const fs::path dir = fresh_dir("fallback");
  Curves c;
  ScopedEnv env("BLU_GNUPLOT", "/nonexistent/gnuplot");
  const LossPlot p = plot_loss_curve((dir / "loss.png").string(), c.train, c.val, "test run");
  EXPECT_EQ(p.tool, "built-in");
  EXPECT_NE(p.note.find("not found"), std::string::npos) << p.note;
  EXPECT_NE(p.note.find("gnuplot-nox"), std::string::npos) << p.note;
  EXPECT_TRUE(fs::exists(p.path)) << p.path;  // loss.png (or .svg without libpng)
  EXPECT_TRUE(fs::exists(dir / "loss.gp"));   // kept: redraw later with gnuplot
  EXPECT_FALSE(fs::exists(dir / "loss.png.tmp.png"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace blu::train

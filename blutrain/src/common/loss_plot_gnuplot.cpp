// loss_plot_gnuplot.cpp: the loss curve drawn by gnuplot (Debian's gnuplot-nox), from a data file
// and a script written beside the image (loss.dat, loss.gp); the built-in bitmap plot of
// loss_curve.cpp is the fallback where gnuplot is missing or fails.
//
// Note [Loss plot through gnuplot]
// A plot a newcomer reads at a glance needs a real font, round ticks (1-2-5 steps), axis titles
// and the run's configuration in the title; the hand-drawn 5x7 bitmap had none of them. gnuplot
// does all of it and runs as a separate process, so blutrain links no plotting library and the
// script stays on disk: `gnuplot out/tiny/loss.gp` redraws the curve (after editing it, or on a
// machine that has gnuplot when the training machine did not). The process is spawned directly
// (posix_spawnp, no shell: paths need no quoting); its stderr goes to loss.gp.log. BLU_GNUPLOT
// names the program ("none" skips it: the built-in plot is drawn).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "blutensor/error.h"
#include "blutrain/files.h"
#include "blutrain/metrics.h"
#include "common/run_program.h"

namespace blu::train {
namespace {

// A double-quoted gnuplot string: backslashes and quotes escaped (titles are user text), a
// newline kept as gnuplot's "\n" (a two-line title).
std::string gp_quote(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '\n') {
      q += "\\n";
      continue;
    }
    if (c == '"' || c == '\\') q += '\\';
    q += c;
  }
  return q + "\"";
}

std::string data_block(const std::vector<LossPoint>& pts) {
  std::ostringstream os;
  os.precision(8);
  for (const LossPoint& p : pts) {
    if (std::isfinite(p.loss)) os << p.step << " " << p.loss << "\n";
  }
  return os.str();
}

}  // namespace

std::string loss_plot_script(const std::string& png_path, const std::string& data_path,
                             bool have_val, const std::string& title) {
  std::ostringstream gp;
  gp << "# The loss curve of a blutrain run (Note [Loss plot through gnuplot]); redraw: gnuplot "
        "<this file>\n"
     << "set terminal pngcairo size 960,600 font \"DejaVu Sans,11\" noenhanced\n"
     << "set output " << gp_quote(png_path) << "\n"
     << "set title " << gp_quote(title) << "\n"
     << "set xlabel \"step (optimizer updates)\"\n"
     << "set ylabel \"cross-entropy loss (nats per token)\"\n"
     << "set grid xtics ytics lc rgb \"#dddddd\"\n"
     << "set key top right box opaque\n"
     << "set border 3\nset tics nomirror\nset xrange [0:*]\nset format y \"%.1f\"\n"
     << "set style line 1 lw 2 lc rgb \"#1f77b4\"\n"
     << "set style line 2 lw 2 lc rgb \"#ff7f0e\" pt 7 ps 0.8\n"
     << "plot " << gp_quote(data_path) << " index 0 using 1:2 with lines ls 1 title \"train\"";
  if (have_val)
    gp << ", \\\n     " << gp_quote(data_path)
       << " index 1 using 1:2 with linespoints ls 2 title \"val\"";
  gp << "\n";
  return gp.str();
}

LossPlot plot_loss_curve(const std::string& png_path, const std::vector<LossPoint>& train,
                         const std::vector<LossPoint>& val, const std::string& title) {
  BLU_CHECK(!train.empty() || !val.empty(), "loss curve: no points to plot");
  namespace fs = std::filesystem;
  const fs::path png = fs::absolute(png_path);
  if (!png.parent_path().empty()) fs::create_directories(png.parent_path());
  const std::string data = fs::path(png).replace_extension(".dat").string();
  const std::string script = fs::path(png).replace_extension(".gp").string();
  // Two data blocks separated by two blank lines: gnuplot's `index 0` (train) and `index 1` (val).
  const std::string val_block = data_block(val);
  write_file_atomic(
      data, "# step loss (train)\n" + data_block(train) + "\n\n# step loss (val)\n" + val_block);
  write_file_atomic(script, loss_plot_script(png.string(), data, !val_block.empty(), title));

  LossPlot result;
  result.script = script;
  const char* env = std::getenv("BLU_GNUPLOT");
  const std::string program = env != nullptr && *env != '\0' ? env : "gnuplot";
  std::string why = "BLU_GNUPLOT=none";
  if (program != "none") {
    const std::string tmp = png.string() + ".tmp.png";
    // Draw into a temporary file, then rename: a failed run never leaves a half-written loss.png.
    const std::string tmp_script = script + ".tmp";
    write_file_atomic(tmp_script, loss_plot_script(tmp, data, !val_block.empty(), title));
    const bool ok = run_program({program, tmp_script}, script + ".log", false,
                                "Debian: apt-get install gnuplot-nox", &why);
    std::error_code ec;
    fs::remove(tmp_script, ec);
    if (ok && fs::exists(tmp) && fs::file_size(tmp) > 0) {
      fs::rename(tmp, png);
      fs::remove(script + ".log", ec);
      result.path = png.string();
      result.tool = "gnuplot";
      return result;
    }
    if (ok) why = program + " wrote no image (see " + script + ".log)";
    fs::remove(tmp, ec);
  }
  result.path = write_loss_curve(png.string(), train, val, title);
  result.tool = "built-in";
  result.note = why + ": drew the built-in plot instead; `gnuplot " + script + "` redraws it";
  return result;
}

}  // namespace blu::train

// loss_curve.cpp: the loss-curve image: a small RGB canvas with axes, grid, tick labels in a
// built-in 5x7 bitmap font, the train curve (blue) and val points/curve (orange), encoded as PNG
// by libpng (Debian libpng-dev). Without libpng an SVG of the same plot is written instead.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <vector>

#include "blutensor/error.h"
#include "blutrain/files.h"
#include "blutrain/metrics.h"

#ifdef BLU_HAVE_PNG
#include <png.h>
#endif

namespace blu::train {
namespace {

struct Rgb {
  uint8_t r, g, b;
};
constexpr Rgb kWhite{255, 255, 255}, kBlack{0, 0, 0}, kGrid{225, 225, 225}, kBlue{31, 119, 180},
    kOrange{255, 127, 14};

// Scale of the axes: data range padded by 5%, and "nice" ticks.
struct Axis {
  double lo, hi;
};
Axis padded(double lo, double hi) {
  if (!(hi > lo)) {
    lo -= 0.5;
    hi += 0.5;
  }
  double pad = 0.05 * (hi - lo);
  return {lo - pad, hi + pad};
}

#ifdef BLU_HAVE_PNG
// 5x7 glyphs, one 5-bit row mask per line (bit 4 = leftmost pixel).
struct Glyph {
  char c;
  uint8_t rows[7];
};
constexpr Glyph kFont[] = {
    {'0', {14, 17, 19, 21, 25, 17, 14}}, {'1', {4, 12, 4, 4, 4, 4, 14}},
    {'2', {14, 17, 1, 2, 4, 8, 31}},     {'3', {31, 2, 4, 2, 1, 17, 14}},
    {'4', {2, 6, 10, 18, 31, 2, 2}},     {'5', {31, 16, 30, 1, 1, 17, 14}},
    {'6', {6, 8, 16, 30, 17, 17, 14}},   {'7', {31, 1, 2, 4, 8, 8, 8}},
    {'8', {14, 17, 17, 14, 17, 17, 14}}, {'9', {14, 17, 17, 15, 1, 2, 12}},
    {'.', {0, 0, 0, 0, 0, 12, 12}},      {'-', {0, 0, 0, 31, 0, 0, 0}},
    {'+', {0, 4, 4, 31, 4, 4, 0}},       {'e', {0, 0, 14, 17, 31, 16, 14}},
    {'a', {0, 0, 14, 1, 15, 17, 15}},    {'i', {4, 0, 12, 4, 4, 4, 14}},
    {'l', {12, 4, 4, 4, 4, 4, 14}},      {'n', {0, 0, 22, 25, 17, 17, 17}},
    {'o', {0, 0, 14, 17, 17, 17, 14}},   {'p', {0, 0, 30, 17, 30, 16, 16}},
    {'r', {0, 0, 22, 25, 16, 16, 16}},   {'s', {0, 0, 14, 16, 14, 1, 30}},
    {'t', {8, 8, 28, 8, 8, 9, 6}},       {'v', {0, 0, 17, 17, 17, 10, 4}},
    {'k', {16, 16, 18, 20, 24, 20, 18}}, {'d', {1, 1, 13, 19, 17, 17, 15}},
};

class Canvas {
 public:
  Canvas(int w, int h) : w_(w), h_(h), px_(static_cast<size_t>(w * h), kWhite) {}
  void set(int x, int y, Rgb c) {
    if (x >= 0 && x < w_ && y >= 0 && y < h_) px_[static_cast<size_t>(y * w_ + x)] = c;
  }
  void line(int x0, int y0, int x1, int y1, Rgb c, int thick = 1) {
    int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
    int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1, err = dx + dy;
    while (true) {
      for (int a = 0; a < thick; ++a) {
        for (int b = 0; b < thick; ++b) set(x0 + a - thick / 2, y0 + b - thick / 2, c);
      }
      if (x0 == x1 && y0 == y1) break;
      int e2 = 2 * err;
      if (e2 >= dy) {
        err += dy;
        x0 += sx;
      }
      if (e2 <= dx) {
        err += dx;
        y0 += sy;
      }
    }
  }
  void text(int x, int y, const std::string& s, Rgb c) {
    for (char ch : s) {
      for (const Glyph& g : kFont) {
        if (g.c != ch) continue;
        for (int r = 0; r < 7; ++r) {
          for (int b = 0; b < 5; ++b) {
            if (g.rows[r] & (1 << (4 - b))) set(x + b, y + r, c);
          }
        }
      }
      x += 6;
    }
  }
  int width() const { return w_; }
  int height() const { return h_; }
  const Rgb* row(int y) const { return px_.data() + static_cast<size_t>(y * w_); }

 private:
  int w_, h_;
  std::vector<Rgb> px_;
};

std::string tick_label(double v, double span) {
  char buf[32];
  if (span >= 20 || std::fabs(v) >= 1e4) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else if (span >= 2) {
    std::snprintf(buf, sizeof(buf), "%.1f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f", v);
  }
  return buf;
}

void write_png(const std::string& path, const Canvas& canvas, const std::string& title) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  BLU_CHECK(f != nullptr, "loss curve: cannot write '", path, "'");
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png != nullptr ? png_create_info_struct(png) : nullptr;
  if (png == nullptr || info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    BLU_THROW("loss curve: libpng failed writing '", path, "'");
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, static_cast<png_uint_32>(canvas.width()), static_cast<png_uint_32>(canvas.height()), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_text text{};
  text.compression = PNG_TEXT_COMPRESSION_NONE;
  text.key = const_cast<char*>("Title");
  text.text = const_cast<char*>(title.c_str());
  png_set_text(png, info, &text, 1);
  png_write_info(png, info);
  for (int y = 0; y < canvas.height(); ++y) {
    png_write_row(png, reinterpret_cast<png_const_bytep>(canvas.row(y)));
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  std::fclose(f);
}
#endif

}  // namespace

std::string write_loss_curve(const std::string& path, const std::vector<LossPoint>& train,
                             const std::vector<LossPoint>& val, const std::string& title) {
  BLU_CHECK(!train.empty() || !val.empty(), "loss curve: no points to plot");
  double x_lo = 1e300, x_hi = -1e300, y_lo = 1e300, y_hi = -1e300;
  for (const auto* pts : {&train, &val}) {
    for (const LossPoint& p : *pts) {
      if (!std::isfinite(p.loss)) continue;
      x_lo = std::min(x_lo, static_cast<double>(p.step));
      x_hi = std::max(x_hi, static_cast<double>(p.step));
      y_lo = std::min(y_lo, p.loss);
      y_hi = std::max(y_hi, p.loss);
    }
  }
  BLU_CHECK(x_lo <= x_hi, "loss curve: no finite losses to plot");
  const Axis xa = padded(x_lo, x_hi), ya = padded(y_lo, y_hi);
  const int W = 800, H = 500, left = 60, right = 20, top = 20, bottom = 45;
  auto px = [&](double step) { return left + static_cast<int>(std::lround((step - xa.lo) / (xa.hi - xa.lo) * (W - left - right))); };
  auto py = [&](double loss) { return H - bottom - static_cast<int>(std::lround((loss - ya.lo) / (ya.hi - ya.lo) * (H - top - bottom))); };
  std::filesystem::path out(path);
  if (!out.parent_path().empty()) std::filesystem::create_directories(out.parent_path());
#ifdef BLU_HAVE_PNG
  Canvas c(W, H);
  for (int i = 0; i <= 5; ++i) {
    double yv = ya.lo + (ya.hi - ya.lo) * i / 5.0, xv = xa.lo + (xa.hi - xa.lo) * i / 5.0;
    c.line(left, py(yv), W - right, py(yv), kGrid);
    c.line(px(xv), top, px(xv), H - bottom, kGrid);
    c.text(4, py(yv) - 3, tick_label(yv, ya.hi - ya.lo), kBlack);
    std::string xl = tick_label(std::max(0.0, xv), xa.hi - xa.lo + 100);
    c.text(px(xv) - 3 * static_cast<int>(xl.size()), H - bottom + 6, xl, kBlack);
  }
  c.line(left, top, left, H - bottom, kBlack);
  c.line(left, H - bottom, W - right, H - bottom, kBlack);
  c.text(W / 2 - 12, H - 14, "step", kBlack);
  c.text(4, 4, "loss", kBlack);
  for (size_t i = 1; i < train.size(); ++i) {
    c.line(px(static_cast<double>(train[i - 1].step)), py(train[i - 1].loss), px(static_cast<double>(train[i].step)),
           py(train[i].loss), kBlue, 2);
  }
  for (size_t i = 0; i < val.size(); ++i) {
    int x = px(static_cast<double>(val[i].step)), y = py(val[i].loss);
    if (i > 0) c.line(px(static_cast<double>(val[i - 1].step)), py(val[i - 1].loss), x, y, kOrange, 2);
    for (int a = -3; a <= 3; ++a) c.line(x - 3, y + a, x + 3, y + a, kOrange);
  }
  c.line(W - right - 90, top + 10, W - right - 70, top + 10, kBlue, 2);
  c.text(W - right - 64, top + 7, "train", kBlack);
  c.line(W - right - 90, top + 25, W - right - 70, top + 25, kOrange, 2);
  c.text(W - right - 64, top + 22, "val", kBlack);
  const std::string written = path;
  const std::string tmp = path + ".tmp";
  write_png(tmp, c, title);
  std::filesystem::rename(tmp, written);
  return written;
#else
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "'>\n"
      << "<title>" << title << "</title><rect width='100%' height='100%' fill='white'/>\n"
      << "<line x1='" << left << "' y1='" << H - bottom << "' x2='" << W - right << "' y2='" << H - bottom << "' stroke='black'/>\n"
      << "<line x1='" << left << "' y1='" << top << "' x2='" << left << "' y2='" << H - bottom << "' stroke='black'/>\n";
  for (int i = 0; i <= 5; ++i) {
    double yv = ya.lo + (ya.hi - ya.lo) * i / 5.0, xv = xa.lo + (xa.hi - xa.lo) * i / 5.0;
    svg << "<text x='4' y='" << py(yv) + 4 << "' font-size='11'>" << yv << "</text>"
        << "<text x='" << px(xv) << "' y='" << H - bottom + 16 << "' font-size='11'>" << std::lround(xv) << "</text>\n";
  }
  for (const auto& [pts, color] : {std::pair{&train, "#1f77b4"}, std::pair{&val, "#ff7f0e"}}) {
    svg << "<polyline fill='none' stroke='" << color << "' stroke-width='2' points='";
    for (const LossPoint& p : *pts) svg << px(static_cast<double>(p.step)) << "," << py(p.loss) << " ";
    svg << "'/>\n";
  }
  svg << "</svg>\n";
  std::string svg_path = out.replace_extension(".svg").string();
  write_file_atomic(svg_path, svg.str());
  return svg_path;
#endif
}

}  // namespace blu::train

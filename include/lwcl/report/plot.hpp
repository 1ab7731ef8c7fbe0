#pragma once
// Line charts for a run's report directory (loss curves, error by depth, memory over time): a chart is
// drawn into an RGB buffer (1-2-5 ticks, grid, legend, an embedded 5x9 bitmap font), encoded by libpng
// and written through a temporary file and a rename, so a report never holds half a PNG. Bad input
// (NaN points, mismatched series, sizes out of range) is refused before anything touches the disk.

#include <png.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"

namespace lwcl::report {

struct rgb {
  std::uint8_t r = 0, g = 0, b = 0;
  bool operator==(const rgb&) const = default;
};

// Series colours: eight hues that stay apart on white, also for the common colour-vision deficiencies.
inline constexpr std::array<rgb, 8> palette = {{{0, 114, 178},
                                                {213, 94, 0},
                                                {0, 158, 115},
                                                {204, 121, 167},
                                                {230, 159, 0},
                                                {86, 180, 233},
                                                {80, 80, 80},
                                                {140, 70, 20}}};

struct series {
  std::string label;  // legend text; a series with an empty label stays out of the legend
  std::vector<double> x, y;
  std::optional<rgb> color;  // default: palette[position of the series in the chart % 8]
  // A band (mean +- sd over seeds, say): when both are given, one value per x, the region between them
  // is shaded in the series' colour under every line.
  std::vector<double> lo, hi;
  bool points = false;  // a dot at each point and no line between them (a scatter)
};

struct chart {
  std::string title, x_label, y_label;
  std::vector<series> lines;
  bool log_y = false;
  bool x_integer = false;  // the x axis counts something (a layer, a step): ticks at whole numbers only
  int width = 800, height = 500;      // pixels, each in [200, 4000]
  std::optional<double> y_min, y_max;  // pin an end of the y axis; lines beyond it are clipped
};

inline constexpr int min_side = 200, max_side = 4000;

inline rgb series_color(const chart& c, std::size_t i) {
  return c.lines.at(i).color.value_or(palette[i % palette.size()]);
}

// Inclusive pixel bounds; (0, 0) is the top-left pixel.
struct rect {
  int left = 0, top = 0, right = 0, bottom = 0;
  int width() const { return right - left + 1; }
  int height() const { return bottom - top + 1; }
  bool contains(int x, int y) const { return x >= left && x <= right && y >= top && y <= bottom; }
};

// Where render puts things: the plot area (inside the axes box, the only place data is drawn), the axis
// ranges and the ticks. px/py map data to pixel coordinates, with pixel centres at integers.
struct frame {
  rect area;
  double x_lo = 0, x_hi = 1;  // x axis range, data units
  double y_lo = 0, y_hi = 1;  // y axis range, in log10 of the data when log_y
  bool log_y = false;
  std::vector<double> x_ticks, y_ticks;  // data units
  std::vector<std::string> x_tick_labels, y_tick_labels;
  int text_scale = 1;  // the font's pixels are drawn as text_scale x text_scale squares

  double px(double x) const { return area.left + (x - x_lo) / (x_hi - x_lo) * (area.right - area.left); }
  double py(double y) const {
    const double t = log_y ? std::log10(y) : y;
    return area.bottom - (t - y_lo) / (y_hi - y_lo) * (area.bottom - area.top);
  }
};

// An RGB image, rows top to bottom, three bytes per pixel.
struct image {
  int width = 0, height = 0;
  std::vector<std::uint8_t> pixels;

  rgb at(int x, int y) const {
    const std::size_t i = (static_cast<std::size_t>(y) * static_cast<std::size_t>(width) + static_cast<std::size_t>(x)) * 3;
    return {pixels[i], pixels[i + 1], pixels[i + 2]};
  }
};

namespace detail {

// ---- font: 5 columns x 9 rows per glyph (rows 0-6 above the baseline, 7-8 for descenders), ASCII 32..126.
inline constexpr int glyph_w = 5, glyph_h = 9, glyph_advance = 6, cap_h = 7;
inline constexpr std::string_view font_sheet[] = {
    // space !     "     #     $     %     &     '     (     )     *     +     ,     -     .     /
    "..... ..#.. .#.#. .#.#. ..#.. ##... .##.. ..#.. ...#. .#... ..... ..... ..... ..... ..... ....#",
    "..... ..#.. .#.#. .#.#. .#### ##..# #..#. ..#.. ..#.. ..#.. ..#.. ..#.. ..... ..... ..... ....#",
    "..... ..#.. ..... ##### #.#.. ...#. #.#.. .#... .#... ...#. #.#.# ..#.. ..... ..... ..... ...#.",
    "..... ..#.. ..... .#.#. .###. ..#.. .#... ..... .#... ...#. .###. ##### ..... .###. ..... ..#..",
    "..... ..#.. ..... ##### ..#.# .#... #.#.# ..... .#... ...#. #.#.# ..#.. ..... ..... ..... .#...",
    "..... ..... ..... .#.#. ####. #..## #..#. ..... ..#.. ..#.. ..#.. ..#.. .##.. ..... .##.. #....",
    "..... ..#.. ..... .#.#. ..#.. ...## .##.# ..... ...#. .#... ..... ..... .##.. ..... .##.. #....",
    "..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..#.. ..... ..... .....",
    "..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... .#... ..... ..... .....",
    // 0     1     2     3     4     5     6     7     8     9     :     ;     <     =     >     ?
    ".###. ..#.. .###. ##### ...#. ##### ..##. ##### .###. .###. ..... ..... ...#. ..... .#... .###.",
    "#...# .##.. #...# ...#. ..##. #.... .#... ....# #...# #...# .##.. .##.. ..#.. ..... ..#.. #...#",
    "#..## ..#.. ....# ..#.. .#.#. ####. #.... ...#. #...# #...# .##.. .##.. .#... ##### ...#. ....#",
    "#.#.# ..#.. ...#. ...#. #..#. ....# ####. ..#.. .###. .#### ..... ..... #.... ..... ....# ...#.",
    "##..# ..#.. ..#.. ....# ##### ....# #...# .#... #...# ....# .##.. .##.. .#... ##### ...#. ..#..",
    "#...# ..#.. .#... #...# ...#. #...# #...# .#... #...# ...#. .##.. .##.. ..#.. ..... ..#.. .....",
    ".###. .###. ##### .###. ...#. .###. .###. .#... .###. .##.. ..... ..#.. ...#. ..... .#... ..#..",
    "..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... .#... ..... ..... ..... .....",
    "..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... .....",
    // @     A     B     C     D     E     F     G     H     I     J     K     L     M     N     O
    ".###. .###. ####. .###. ###.. ##### ##### .###. #...# .###. ..### #...# #.... #...# #...# .###.",
    "#...# #...# #...# #...# #..#. #.... #.... #...# #...# ..#.. ...#. #..#. #.... ##.## #...# #...#",
    "#.### #...# #...# #.... #...# #.... #.... #.... #...# ..#.. ...#. #.#.. #.... #.#.# ##..# #...#",
    "#.#.# ##### ####. #.... #...# ####. ####. #.### ##### ..#.. ...#. ##... #.... #.#.# #.#.# #...#",
    "#.### #...# #...# #.... #...# #.... #.... #...# #...# ..#.. ...#. #.#.. #.... #...# #..## #...#",
    "#.... #...# #...# #...# #..#. #.... #.... #...# #...# ..#.. #..#. #..#. #.... #...# #...# #...#",
    ".#### #...# ####. .###. ###.. ##### #.... .#### #...# .###. .##.. #...# ##### #...# #...# .###.",
    "..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... .....",
    "..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... .....",
    // P     Q     R     S     T     U     V     W     X     Y     Z     [     \     ]     ^     _
    "####. .###. ####. .#### ##### #...# #...# #...# #...# #...# ##### .###. #.... .###. ..#.. .....",
    "#...# #...# #...# #.... ..#.. #...# #...# #...# #...# #...# ....# .#... #.... ...#. .#.#. .....",
    "#...# #...# #...# #.... ..#.. #...# #...# #...# .#.#. .#.#. ...#. .#... .#... ...#. #...# .....",
    "####. #...# ####. .###. ..#.. #...# #...# #.#.# ..#.. ..#.. ..#.. .#... ..#.. ...#. ..... .....",
    "#.... #.#.# #.#.. ....# ..#.. #...# #...# #.#.# .#.#. ..#.. .#... .#... ...#. ...#. ..... .....",
    "#.... #..#. #..#. ....# ..#.. #...# .#.#. #.#.# #...# ..#.. #.... .#... ....# ...#. ..... .....",
    "#.... .##.# #...# ####. ..#.. .###. ..#.. .#.#. #...# ..#.. ##### .###. ....# .###. ..... .....",
    "..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... #####",
    "..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... ..... .....",
    // `     a     b     c     d     e     f     g     h     i     j     k     l     m     n     o
    ".#... ..... #.... ..... ....# ..... ..##. ..... #.... ..#.. ...#. #.... .##.. ..... ..... .....",
    "..#.. ..... #.... ..... ....# ..... .#..# ..... #.... ..... ..... #.... ..#.. ..... ..... .....",
    "..... .###. #.##. .###. .##.# .###. .#... .#### #.##. .##.. ..##. #..#. ..#.. ##.#. #.##. .###.",
    "..... ....# ##..# #.... #..## #...# ###.. #...# ##..# ..#.. ...#. #.#.. ..#.. #.#.# ##..# #...#",
    "..... .#### #...# #.... #...# ##### .#... #...# #...# ..#.. ...#. ##... ..#.. #.#.# #...# #...#",
    "..... #...# #...# #...# #...# #.... .#... #...# #...# ..#.. ...#. #.#.. ..#.. #.#.# #...# #...#",
    "..... .#### ####. .###. .#### .###. .#... .#### #...# .###. ...#. #..#. .###. #.#.# #...# .###.",
    "..... ..... ..... ..... ..... ..... ..... ....# ..... ..... #..#. ..... ..... ..... ..... .....",
    "..... ..... ..... ..... ..... ..... ..... .###. ..... ..... .##.. ..... ..... ..... ..... .....",
    // p     q     r     s     t     u     v     w     x     y     z     {     |     }     ~
    "..... ..... ..... ..... .#... ..... ..... ..... ..... ..... ..... ...## ..#.. ##... .....",
    "..... ..... ..... ..... .#... ..... ..... ..... ..... ..... ..... ..#.. ..#.. ..#.. .....",
    "####. .#### #.##. .#### ###.. #...# #...# #...# #...# #...# ##### ..#.. ..#.. ..#.. .#...",
    "#...# #...# ##..# #.... .#... #...# #...# #...# .#.#. #...# ...#. .#... ..#.. ...#. #.#.#",
    "#...# #...# #.... .###. .#... #...# #...# #.#.# ..#.. #...# ..#.. ..#.. ..#.. ..#.. ...#.",
    "#...# #...# #.... ....# .#..# #..## .#.#. #.#.# .#.#. #...# .#... ..#.. ..#.. ..#.. .....",
    "####. .#### #.... ####. ..##. .##.# ..#.. .#.#. #...# .#### ##### ...## ..#.. ##... .....",
    "#.... ....# ..... ..... ..... ..... ..... ..... ..... ....# ..... ..... ..#.. ..... .....",
    "#.... ....# ..... ..... ..... ..... ..... ..... ..... .###. ..... ..... ..#.. ..... .....",
};

// The sheet decoded at compile time: one byte per glyph row, bit 4 the leftmost column.
inline constexpr auto font = [] {
  std::array<std::array<std::uint8_t, glyph_h>, 95> f{};
  for (int c = 0; c < 95; ++c)
    for (int row = 0; row < glyph_h; ++row) {
      const std::string_view line = font_sheet[(c / 16) * glyph_h + row];
      std::uint8_t bits = 0;
      for (int col = 0; col < glyph_w; ++col)
        if (line[static_cast<std::size_t>((c % 16) * glyph_advance + col)] == '#') bits |= std::uint8_t(0x10 >> col);
      f[static_cast<std::size_t>(c)][static_cast<std::size_t>(row)] = bits;
    }
  return f;
}();

inline const std::array<std::uint8_t, glyph_h>& glyph(char ch) {
  const int c = static_cast<unsigned char>(ch);
  return font[static_cast<std::size_t>(c >= 32 && c <= 126 ? c - 32 : '?' - 32)];
}

inline int text_width(std::string_view s, int scale) {
  return s.empty() ? 0 : static_cast<int>(s.size()) * glyph_advance * scale - scale;
}

// ---- canvas

inline void put(image& img, int x, int y, rgb c) {
  if (x < 0 || y < 0 || x >= img.width || y >= img.height) return;
  const std::size_t i = (static_cast<std::size_t>(y) * static_cast<std::size_t>(img.width) + static_cast<std::size_t>(x)) * 3;
  img.pixels[i] = c.r;
  img.pixels[i + 1] = c.g;
  img.pixels[i + 2] = c.b;
}

inline void blend(image& img, int x, int y, rgb c, float a) {
  if (x < 0 || y < 0 || x >= img.width || y >= img.height || a <= 0.0f) return;
  const std::size_t i = (static_cast<std::size_t>(y) * static_cast<std::size_t>(img.width) + static_cast<std::size_t>(x)) * 3;
  const auto mix = [a](std::uint8_t under, std::uint8_t over) {
    return static_cast<std::uint8_t>(std::lround(under + (static_cast<float>(over) - under) * std::min(a, 1.0f)));
  };
  img.pixels[i] = mix(img.pixels[i], c.r);
  img.pixels[i + 1] = mix(img.pixels[i + 1], c.g);
  img.pixels[i + 2] = mix(img.pixels[i + 2], c.b);
}

inline void fill(image& img, int x0, int y0, int x1, int y1, rgb c) {
  for (int y = std::max(y0, 0); y <= std::min(y1, img.height - 1); ++y)
    for (int x = std::max(x0, 0); x <= std::min(x1, img.width - 1); ++x) put(img, x, y, c);
}

inline void outline(image& img, rect r, rgb c) {
  fill(img, r.left, r.top, r.right, r.top, c);
  fill(img, r.left, r.bottom, r.right, r.bottom, c);
  fill(img, r.left, r.top, r.left, r.bottom, c);
  fill(img, r.right, r.top, r.right, r.bottom, c);
}

// Left to right with the glyphs' top row at y.
inline void text(image& img, int x, int y, std::string_view s, int scale, rgb c) {
  for (std::size_t k = 0; k < s.size(); ++k) {
    const auto& g = glyph(s[k]);
    const int gx = x + static_cast<int>(k) * glyph_advance * scale;
    for (int row = 0; row < glyph_h; ++row)
      for (int col = 0; col < glyph_w; ++col)
        if (g[static_cast<std::size_t>(row)] & (0x10 >> col))
          fill(img, gx + col * scale, y + row * scale, gx + (col + 1) * scale - 1, y + (row + 1) * scale - 1, c);
  }
}

// Bottom to top (turned a quarter counter-clockwise), the glyphs' top row at column x, starting at row y.
inline void text_up(image& img, int x, int y, std::string_view s, int scale, rgb c) {
  for (std::size_t k = 0; k < s.size(); ++k) {
    const auto& g = glyph(s[k]);
    const int gy = y - static_cast<int>(k) * glyph_advance * scale;
    for (int row = 0; row < glyph_h; ++row)
      for (int col = 0; col < glyph_w; ++col)
        if (g[static_cast<std::size_t>(row)] & (0x10 >> col))
          fill(img, x + row * scale, gy - (col + 1) * scale + 1, x + (row + 1) * scale - 1, gy - col * scale, c);
  }
}

// ---- antialiased strokes: coverage in [0, 1] per pixel of the plot area, the maximum over a series'
// segments, so joints between segments are not blended twice.
struct coverage {
  rect area;
  std::vector<float> a;
  explicit coverage(rect r) : area(r), a(static_cast<std::size_t>(r.width()) * static_cast<std::size_t>(r.height()), 0.0f) {}
  float& at(int x, int y) {
    return a[static_cast<std::size_t>(y - area.top) * static_cast<std::size_t>(area.width()) + static_cast<std::size_t>(x - area.left)];
  }
};

// Liang-Barsky: clips the segment to [x0, x1] x [y0, y1]; false when nothing of it is inside. Keeps the
// far-away ends of a pinned axis from reaching the distance arithmetic.
inline bool clip_segment(double& ax, double& ay, double& bx, double& by, double x0, double y0, double x1, double y1) {
  double t0 = 0, t1 = 1;
  const double dx = bx - ax, dy = by - ay;
  const double p[4] = {-dx, dx, -dy, dy};
  const double q[4] = {ax - x0, x1 - ax, ay - y0, y1 - ay};
  for (int i = 0; i < 4; ++i) {
    if (p[i] == 0) {
      if (q[i] < 0) return false;
      continue;
    }
    const double t = q[i] / p[i];
    if (p[i] < 0) t0 = std::max(t0, t);
    else t1 = std::min(t1, t);
  }
  if (t0 > t1) return false;
  const double nax = ax + t0 * dx, nay = ay + t0 * dy;
  bx = ax + t1 * dx;
  by = ay + t1 * dy;
  ax = nax;
  ay = nay;
  return true;
}

inline void stroke(coverage& cov, double ax, double ay, double bx, double by, double half_width) {
  const double m = half_width + 1;
  if (!clip_segment(ax, ay, bx, by, cov.area.left - m, cov.area.top - m, cov.area.right + m, cov.area.bottom + m))
    return;
  const int xs = std::max(cov.area.left, static_cast<int>(std::floor(std::min(ax, bx) - m)));
  const int xe = std::min(cov.area.right, static_cast<int>(std::ceil(std::max(ax, bx) + m)));
  const int ys = std::max(cov.area.top, static_cast<int>(std::floor(std::min(ay, by) - m)));
  const int ye = std::min(cov.area.bottom, static_cast<int>(std::ceil(std::max(ay, by) + m)));
  const double dx = bx - ax, dy = by - ay, len2 = dx * dx + dy * dy;
  for (int y = ys; y <= ye; ++y)
    for (int x = xs; x <= xe; ++x) {
      double t = len2 > 0 ? ((x - ax) * dx + (y - ay) * dy) / len2 : 0.0;
      t = std::clamp(t, 0.0, 1.0);
      const double d = std::hypot(x - (ax + t * dx), y - (ay + t * dy));
      // The area of the pixel under a band of the given half width, exact for horizontal and vertical lines.
      const auto a = static_cast<float>(std::clamp(half_width + 0.5 - d, 0.0, 1.0));
      float& cell = cov.at(x, y);
      cell = std::max(cell, a);
    }
}

inline void disc(coverage& cov, double cx, double cy, double radius) {
  const int m = static_cast<int>(std::ceil(radius)) + 1;
  if (!std::isfinite(cx) || !std::isfinite(cy)) return;
  if (cx < cov.area.left - m || cx > cov.area.right + m || cy < cov.area.top - m || cy > cov.area.bottom + m) return;
  const int x0 = static_cast<int>(std::lround(cx)), y0 = static_cast<int>(std::lround(cy));
  for (int y = std::max(cov.area.top, y0 - m); y <= std::min(cov.area.bottom, y0 + m); ++y)
    for (int x = std::max(cov.area.left, x0 - m); x <= std::min(cov.area.right, x0 + m); ++x) {
      const auto a = static_cast<float>(std::clamp(radius + 0.5 - std::hypot(x - cx, y - cy), 0.0, 1.0));
      float& cell = cov.at(x, y);
      cell = std::max(cell, a);
    }
}

// ---- ticks

inline double power_of_ten(int e) { return std::pow(10.0, e); }

// printf's %.*f without a "-0" for values that round to zero.
inline std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

// v as "m" + "e" + exponent with at most `decimals` decimals in the mantissa and no trailing zeros: 2e5, 1.5e-4.
inline std::string scientific(double v, int decimals) {
  if (v == 0) return "0";
  int e = static_cast<int>(std::floor(std::log10(std::abs(v))));
  double m = v / power_of_ten(e);
  const double unit = power_of_ten(-decimals);
  m = std::round(m / unit) * unit;
  if (std::abs(m) >= 10) {
    m /= 10;
    ++e;
  }
  std::string s = fixed(m, decimals);
  if (s.find('.') != std::string::npos) {
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
  }
  return s + "e" + std::to_string(e);
}

struct axis_choice {
  double lo = 0, hi = 1;  // the axis range (log10 units on a log axis)
  std::vector<double> ticks;
  std::vector<std::string> labels;
  double score = std::numeric_limits<double>::infinity();
};

// Prefers min_count..max_count ticks (nearest six) and little of the axis spent beyond the data.
inline double tick_score(std::size_t n, double axis_span, double data_span, int max_count) {
  const int count = static_cast<int>(n);
  const int min_count = std::min(4, max_count);
  const double outside = count < min_count ? min_count - count : count > max_count ? count - max_count : 0;
  return 100 * outside + (axis_span / data_span - 1) + 0.05 * std::abs(count - 6);
}

// Steps of 1, 2 or 5 x 10^k (at least 1 on an `integer` axis); a free end of the axis is rounded out to a
// multiple of the step.
inline axis_choice linear_axis(double lo, double hi, bool pin_lo, bool pin_hi, int max_count, bool integer = false) {
  const double span = hi - lo;
  const int e0 = static_cast<int>(std::floor(std::log10(span)));
  axis_choice best;
  for (int e = e0 - 2; e <= e0 + 1; ++e)
    for (const double m : {1.0, 2.0, 5.0}) {
      const double step = m * power_of_ten(e);
      if (integer && step < 1) continue;
      axis_choice a;
      a.lo = pin_lo ? lo : std::floor(lo / step) * step;
      a.hi = pin_hi ? hi : std::ceil(hi / step) * step;
      const double k0 = std::ceil(a.lo / step - 1e-9), k1 = std::floor(a.hi / step + 1e-9);
      if (k1 - k0 > 50) continue;
      for (double k = k0; k <= k1; ++k) a.ticks.push_back(k * step);
      a.score = tick_score(a.ticks.size(), a.hi - a.lo, span, max_count);
      if (a.score >= best.score) continue;
      // Labels with as many decimals as the step needs; exponents for very large or small steps.
      const double largest = std::max(std::abs(a.lo), std::abs(a.hi));
      for (const double t : a.ticks) {
        if (largest >= 1e5 || e < -3) {
          const int te = t == 0 ? e : static_cast<int>(std::floor(std::log10(std::abs(t))));
          a.labels.push_back(scientific(t, std::clamp(te - e, 0, 3)));
        } else {
          a.labels.push_back(fixed(t, std::max(0, -e)));
        }
      }
      best = std::move(a);
    }
  return best;
}

// 10^k written exactly: 0.01, 20, 5000, 2e5, 1e-4.
inline std::string decade_label(int mantissa, int k) {
  if (k >= 0 && k <= 4) return std::to_string(mantissa) + std::string(static_cast<std::size_t>(k), '0');
  if (k < 0 && k >= -3) return "0." + std::string(static_cast<std::size_t>(-k - 1), '0') + std::to_string(mantissa);
  return std::to_string(mantissa) + "e" + std::to_string(k);
}

// Log axis (lo, hi in log10 units): ticks at every or every n-th power of ten, or at 1-2-5 or 1..9 times
// them for short ranges. A free end is either rounded out to the next tick or, when that would waste much
// of the axis (a loss curve from 3 to 11 on an axis from 2 to 20), kept a little beyond the data.
// min_gap: the least distance between neighbouring ticks, as a fraction of the axis (label height).
inline axis_choice log_axis(double lo, double hi, bool pin_lo, bool pin_hi, int max_count, double min_gap) {
  struct tick_set {
    std::vector<int> mantissas;
    int stride;
  };
  std::vector<tick_set> sets = {{{1, 2, 3, 4, 5, 6, 7, 8, 9}, 1}, {{1, 2, 5}, 1}, {{1, 3}, 1}};
  for (const int stride : {1, 2, 3, 5, 10, 20, 50, 100}) sets.push_back({{1}, stride});
  const double span = hi - lo;
  const double eps = 1e-9 * std::max(1.0, span);
  axis_choice best;
  for (const tick_set& set : sets) {
    struct tick {
      double t;
      int m, k;
    };
    std::vector<tick> all;  // the set's ticks from below lo to above hi
    const int k_lo = static_cast<int>(std::floor(lo)) - set.stride, k_hi = static_cast<int>(std::ceil(hi)) + set.stride;
    for (int k = k_lo - ((k_lo % set.stride) + set.stride) % set.stride; k <= k_hi; k += set.stride)
      for (const int m : set.mantissas) all.push_back({k + std::log10(static_cast<double>(m)), m, k});
    for (const bool rounded : {true, false}) {
      axis_choice a;
      a.lo = pin_lo ? lo : lo - 0.04 * span;
      a.hi = pin_hi ? hi : hi + 0.04 * span;
      if (rounded) {
        if (!pin_lo)
          for (const tick& t : all)
            if (t.t <= lo + eps) a.lo = t.t;
        if (!pin_hi)
          for (auto it = all.rbegin(); it != all.rend(); ++it)
            if (it->t >= hi - eps) a.hi = it->t;
      }
      double closest = a.hi - a.lo;
      double previous = -std::numeric_limits<double>::infinity();
      for (const tick& t : all)
        if (t.t >= a.lo - eps && t.t <= a.hi + eps) {
          a.ticks.push_back(static_cast<double>(t.m) * power_of_ten(t.k));
          a.labels.push_back(decade_label(t.m, t.k));
          closest = std::min(closest, t.t - previous);
          previous = t.t;
        }
      if (a.ticks.size() > 60) continue;
      const int free_ends = !pin_lo + !pin_hi;
      a.score = tick_score(a.ticks.size(), a.hi - a.lo, span, max_count) + (rounded ? 0.0 : 0.1 * free_ends) +
                (closest < min_gap * (a.hi - a.lo) ? 100.0 : 0.0);
      if (a.score < best.score) best = std::move(a);
    }
  }
  return best;
}

// ---- validation and layout

inline std::string chart_name(const chart& c) {
  return c.title.empty() ? std::string("report chart") : "report chart '" + c.title + "'";
}

inline std::string series_name(const chart& c, std::size_t i) {
  return "series " + std::to_string(i) + (c.lines[i].label.empty() ? "" : " ('" + c.lines[i].label + "')");
}

// A zero-width range is opened up around its value (or away from a pinned end) so the chart still renders.
inline void widen(double& lo, double& hi, bool pin_lo, bool pin_hi, bool log_units) {
  if (hi - lo > 1e-12 * std::max(std::abs(lo), std::abs(hi))) return;
  const double big = std::max(std::abs(lo), std::abs(hi));
  const double d = log_units ? 0.5 : big == 0 ? 1.0 : 0.1 * big;
  if (pin_lo && !pin_hi) {
    hi = lo + 2 * d;
  } else if (pin_hi && !pin_lo) {
    lo = hi - 2 * d;
  } else {
    const double mid = 0.5 * (lo + hi);
    lo = mid - d;
    hi = mid + d;
  }
}

}  // namespace detail

// Checks the chart and computes its geometry with `legend_right` pixels kept free right of the plot
// area (for a legend drawn outside it). Throws lwcl::error for: width or height outside [200, 4000]; a
// series whose x and y differ in length; a NaN or infinite point; y <= 0 on a log_y chart; no points at
// all; a pinned y range that is empty, not finite, or not positive on a log axis.
inline frame frame_within(const chart& c, int legend_right) {
  const std::string who = detail::chart_name(c);
  check(c.width >= min_side && c.width <= max_side && c.height >= min_side && c.height <= max_side, who, ": size ",
        c.width, "x", c.height, " is outside [", min_side, ", ", max_side, "] pixels per side");
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  std::size_t points = 0;
  for (std::size_t i = 0; i < c.lines.size(); ++i) {
    const series& s = c.lines[i];
    check(s.x.size() == s.y.size(), who, ": ", detail::series_name(c, i), " has ", s.x.size(), " x values but ",
          s.y.size(), " y values");
    check(s.lo.size() == s.hi.size() && (s.lo.empty() || s.lo.size() == s.x.size()), who, ": ",
          detail::series_name(c, i), "'s band has ", s.lo.size(), " low and ", s.hi.size(), " high values for ",
          s.x.size(), " points (expected none, or one of each per point)");
    for (std::size_t j = 0; j < s.lo.size(); ++j) {
      check(std::isfinite(s.lo[j]) && std::isfinite(s.hi[j]) && s.lo[j] <= s.hi[j], who, ": ", detail::series_name(c, i),
            "'s band at point ", j, " is [", s.lo[j], ", ", s.hi[j], "] (expected finite values, low <= high)");
      check(!c.log_y || s.lo[j] > 0, who, ": ", detail::series_name(c, i), "'s band at point ", j, " reaches ", s.lo[j],
            ", which a log_y chart cannot show (it needs > 0)");
      y_lo = std::min(y_lo, c.log_y ? std::log10(s.lo[j]) : s.lo[j]);
      y_hi = std::max(y_hi, c.log_y ? std::log10(s.hi[j]) : s.hi[j]);
    }
    for (std::size_t j = 0; j < s.x.size(); ++j) {
      check(std::isfinite(s.x[j]) && std::isfinite(s.y[j]), who, ": ", detail::series_name(c, i), " point ", j,
            " is not finite (x = ", s.x[j], ", y = ", s.y[j], ")");
      check(!c.log_y || s.y[j] > 0, who, ": ", detail::series_name(c, i), " point ", j, " has y = ", s.y[j],
            ", which a log_y chart cannot show (it needs y > 0)");
      const double t = c.log_y ? std::log10(s.y[j]) : s.y[j];
      x_lo = std::min(x_lo, s.x[j]);
      x_hi = std::max(x_hi, s.x[j]);
      y_lo = std::min(y_lo, t);
      y_hi = std::max(y_hi, t);
    }
    points += s.x.size();
  }
  check(points > 0, who, ": no points to plot (", c.lines.size(), " series, all empty)");
  for (const auto& [end, name] : {std::pair{c.y_min, "y_min"}, std::pair{c.y_max, "y_max"}})
    if (end) {
      check(std::isfinite(*end), who, ": ", name, " is not finite");
      check(!c.log_y || *end > 0, who, ": ", name, " = ", *end, " on a log_y chart (it needs > 0)");
    }
  check(!(c.y_min && c.y_max) || *c.y_min < *c.y_max, who, ": y_min ", c.y_min.value_or(0), " is not below y_max ",
        c.y_max.value_or(0));
  if (c.y_min) y_lo = c.log_y ? std::log10(*c.y_min) : *c.y_min;
  if (c.y_max) y_hi = c.log_y ? std::log10(*c.y_max) : *c.y_max;
  detail::widen(x_lo, x_hi, false, false, false);
  detail::widen(y_lo, y_hi, c.y_min.has_value(), c.y_max.has_value(), c.log_y);
  check(std::isfinite(x_hi - x_lo) && std::isfinite(y_hi - y_lo), who, ": the data spans more than a double can hold");

  frame f;
  f.log_y = c.log_y;
  const int s = std::clamp(std::min(c.width, c.height) / 200, 1, 3);
  f.text_scale = s;
  const int pad = 4 * s, tick = 3 * s, gap = 2 * s, line = detail::glyph_h * s;
  const int top = pad + (c.title.empty() ? 0 : line + pad + detail::cap_h * s / 2);  // clear of the top y label
  const int bottom = tick + gap + line + (c.x_label.empty() ? 0 : gap + line) + pad;

  // y ticks: as many as fit one label height plus spacing apart.
  const int area_h = c.height - top - bottom;
  const int y_label_gap = detail::cap_h * s + 6 * s;
  const int y_max_count = std::clamp(area_h / y_label_gap + 1, 2, 8);
  detail::axis_choice y = c.log_y ? detail::log_axis(y_lo, y_hi, c.y_min.has_value(), c.y_max.has_value(), y_max_count,
                                                     static_cast<double>(y_label_gap) / std::max(area_h, 1))
                                  : detail::linear_axis(y_lo, y_hi, c.y_min.has_value(), c.y_max.has_value(), y_max_count);
  int y_label_w = 0;
  for (const auto& l : y.labels) y_label_w = std::max(y_label_w, detail::text_width(l, s));
  const int left = pad + (c.y_label.empty() ? 0 : line + gap) + y_label_w + gap + tick;

  // x ticks: the most (up to eight) whose labels stay two characters apart; the right margin then
  // leaves room for half of the last label.
  detail::axis_choice x;
  int right = 3 * pad;
  for (int pass = 0; pass < 2; ++pass) {
    const int area_w = c.width - left - right - legend_right;
    for (int max_count = 8; max_count >= 2; --max_count) {
      x = detail::linear_axis(x_lo, x_hi, false, false, max_count, c.x_integer);
      int widest = 0;
      for (const auto& l : x.labels) widest = std::max(widest, detail::text_width(l, s));
      const double spacing =
          x.ticks.size() > 1 ? area_w * (x.ticks[1] - x.ticks[0]) / (x.hi - x.lo) : static_cast<double>(area_w);
      if (spacing >= widest + 2 * detail::glyph_advance * s) break;
    }
    right = std::max(3 * pad, detail::text_width(x.labels.back(), s) / 2 + pad);
  }
  right += legend_right;

  f.area = {left, top, c.width - 1 - right, c.height - 1 - bottom};
  f.x_lo = x.lo;
  f.x_hi = x.hi;
  f.y_lo = y.lo;
  f.y_hi = y.hi;
  f.x_ticks = std::move(x.ticks);
  f.x_tick_labels = std::move(x.labels);
  f.y_ticks = std::move(y.ticks);
  f.y_tick_labels = std::move(y.labels);
  return f;
}

namespace detail {

// How much of each pixel of the plot area the series' lines and points cover, at most 1, row by row.
inline std::vector<float> line_coverage(const chart& c, const frame& f) {
  const rect& a = f.area;
  const double half_width = 0.5 * (1 + f.text_scale);
  std::vector<float> covered(static_cast<std::size_t>(a.width()) * static_cast<std::size_t>(a.height()), 0.0f);
  for (const series& sr : c.lines) {
    if (sr.x.empty()) continue;
    coverage cov(a);
    if (sr.x.size() == 1 || sr.points)
      for (std::size_t j = 0; j < sr.x.size(); ++j) disc(cov, f.px(sr.x[j]), f.py(sr.y[j]), 2.0 + f.text_scale);
    else
      for (std::size_t j = 1; j < sr.x.size(); ++j)
        stroke(cov, f.px(sr.x[j - 1]), f.py(sr.y[j - 1]), f.px(sr.x[j]), f.py(sr.y[j]), half_width);
    for (int y = a.top; y <= a.bottom; ++y)
      for (int x = a.left; x <= a.right; ++x) {
        float& all = covered[static_cast<std::size_t>(y - a.top) * static_cast<std::size_t>(a.width()) +
                             static_cast<std::size_t>(x - a.left)];
        all = std::max(all, cov.at(x, y));
      }
  }
  return covered;
}

}  // namespace detail

// Where a chart's legend goes: the frame the chart is drawn in, and the legend's box (empty: no series
// has a label). Inside the plot area, in the corner whose box covers the least of the lines and points;
// where every corner would cover some, outside, right of a plot area narrowed to make room, so that a
// legend never hides data.
struct legend_placement {
  frame f;
  std::optional<rect> box;
  bool outside = false;
};

inline legend_placement place_legend(const chart& c) {
  legend_placement lp{frame_within(c, 0), std::nullopt, false};
  const int s = lp.f.text_scale;
  const int gap = 2 * s, line = detail::glyph_h * s, pad = 4 * s;
  int label_w = 0, rows = 0;
  for (const series& sr : c.lines)
    if (!sr.label.empty()) {
      ++rows;
      label_w = std::max(label_w, detail::text_width(sr.label, s));
    }
  if (rows == 0) return lp;
  const int inner = 3 * s, sample = 16 * s, row = line + 2 * s, inset = 4 * s;
  const int w = 2 * inner + sample + gap * 2 + label_w, h = 2 * inner + rows * row - 2 * s;
  const auto corner = [&](const rect& a) {
    const std::array<rect, 4> corners = {{{a.right - inset - w + 1, a.top + inset, a.right - inset, a.top + inset + h - 1},
                                          {a.left + inset, a.top + inset, a.left + inset + w - 1, a.top + inset + h - 1},
                                          {a.right - inset - w + 1, a.bottom - inset - h + 1, a.right - inset, a.bottom - inset},
                                          {a.left + inset, a.bottom - inset - h + 1, a.left + inset + w - 1, a.bottom - inset}}};
    const std::vector<float> covered = detail::line_coverage(c, lp.f);
    std::pair<rect, double> best{corners[0], std::numeric_limits<double>::infinity()};
    for (const rect& r : corners) {
      double sum = 0;
      for (int y = std::max(r.top, a.top); y <= std::min(r.bottom, a.bottom); ++y)
        for (int x = std::max(r.left, a.left); x <= std::min(r.right, a.right); ++x)
          sum += covered[static_cast<std::size_t>(y - a.top) * static_cast<std::size_t>(a.width()) +
                         static_cast<std::size_t>(x - a.left)];
      if (sum < best.second) best = {r, sum};
    }
    return best;
  };
  const auto inside = corner(lp.f.area);
  const int margin = w + 2 * pad;
  // Outside only while the plot keeps three fifths of the width, and the legend fits its height.
  if (inside.second > 0 && 5 * margin <= 2 * c.width && h <= lp.f.area.height()) {
    lp.f = frame_within(c, margin);
    const rect& a = lp.f.area;
    lp.box = rect{a.right + pad + 1, a.top, a.right + pad + w, a.top + h - 1};
    lp.outside = true;
  } else {
    lp.box = inside.first;
  }
  return lp;
}

// The frame render draws the chart in (frame_within's checks and errors), its legend placed.
inline frame layout(const chart& c) { return place_legend(c).f; }
inline rect plot_area(const chart& c) { return layout(c).area; }

// Draws the chart (after layout's checks): grid, lines, axes box, ticks and labels, title, legend.
inline image render(const chart& c) {
  const legend_placement lp = place_legend(c);
  const frame& f = lp.f;
  const rect& a = f.area;
  const int s = f.text_scale;
  const int pad = 4 * s, tick = 3 * s, gap = 2 * s, line = detail::glyph_h * s;
  constexpr rgb ink{30, 30, 30}, box{70, 70, 70}, grid{228, 228, 228}, legend_edge{170, 170, 170}, white{255, 255, 255};

  image img;
  img.width = c.width;
  img.height = c.height;
  img.pixels.assign(static_cast<std::size_t>(c.width) * static_cast<std::size_t>(c.height) * 3, 255);

  for (const double t : f.x_ticks) {
    const int x = static_cast<int>(std::lround(f.px(t)));
    if (x > a.left && x < a.right) detail::fill(img, x, a.top, x, a.bottom, grid);
  }
  for (const double t : f.y_ticks) {
    const int y = static_cast<int>(std::lround(f.py(t)));
    if (y > a.top && y < a.bottom) detail::fill(img, a.left, y, a.right, y, grid);
  }

  // Bands under every line: each pixel column between two points shaded from the low to the high
  // value, both interpolated linearly on the screen.
  for (std::size_t i = 0; i < c.lines.size(); ++i) {
    const series& sr = c.lines[i];
    if (sr.lo.size() < 2) continue;
    const rgb col = series_color(c, i);
    for (std::size_t j = 1; j < sr.x.size(); ++j) {
      double x0 = f.px(sr.x[j - 1]), x1 = f.px(sr.x[j]);
      double l0 = f.py(sr.lo[j - 1]), l1 = f.py(sr.lo[j]), h0 = f.py(sr.hi[j - 1]), h1 = f.py(sr.hi[j]);
      if (x1 < x0) {
        std::swap(x0, x1);
        std::swap(l0, l1);
        std::swap(h0, h1);
      }
      const bool last = j + 1 == sr.x.size();
      const int first_col = std::max(a.left, static_cast<int>(std::ceil(x0)));
      const int last_col = std::min(a.right, static_cast<int>(last ? std::floor(x1) : std::ceil(x1) - 1));
      for (int x = first_col; x <= last_col; ++x) {
        const double t = x1 > x0 ? (x - x0) / (x1 - x0) : 0.0;
        const double top = h0 + t * (h1 - h0), bottom = l0 + t * (l1 - l0);  // screen y grows downwards
        const int y0 = std::max(a.top, static_cast<int>(std::lround(top)));
        const int y1 = std::min(a.bottom, static_cast<int>(std::lround(bottom)));
        for (int y = y0; y <= y1; ++y) detail::blend(img, x, y, col, 0.18f);
      }
    }
  }

  // Lines and points.
  const double half_width = 0.5 * (1 + s);
  for (std::size_t i = 0; i < c.lines.size(); ++i) {
    const series& sr = c.lines[i];
    if (sr.x.empty()) continue;
    detail::coverage cov(a);
    if (sr.x.size() == 1 || sr.points)
      for (std::size_t j = 0; j < sr.x.size(); ++j) detail::disc(cov, f.px(sr.x[j]), f.py(sr.y[j]), 2.0 + s);
    else
      for (std::size_t j = 1; j < sr.x.size(); ++j)
        detail::stroke(cov, f.px(sr.x[j - 1]), f.py(sr.y[j - 1]), f.px(sr.x[j]), f.py(sr.y[j]), half_width);
    const rgb col = series_color(c, i);
    for (int y = a.top; y <= a.bottom; ++y)
      for (int x = a.left; x <= a.right; ++x) {
        const float v = cov.at(x, y);
        if (v > 0) detail::blend(img, x, y, col, v);
      }
  }

  detail::outline(img, {a.left - 1, a.top - 1, a.right + 1, a.bottom + 1}, box);
  for (std::size_t k = 0; k < f.x_ticks.size(); ++k) {
    const int x = static_cast<int>(std::lround(f.px(f.x_ticks[k])));
    detail::fill(img, x, a.bottom + 2, x, a.bottom + 1 + tick, box);
    const std::string& l = f.x_tick_labels[k];
    detail::text(img, x - detail::text_width(l, s) / 2, a.bottom + 2 + tick + gap, l, s, ink);
  }
  for (std::size_t k = 0; k < f.y_ticks.size(); ++k) {
    const int y = static_cast<int>(std::lround(f.py(f.y_ticks[k])));
    detail::fill(img, a.left - 1 - tick, y, a.left - 2, y, box);
    const std::string& l = f.y_tick_labels[k];
    detail::text(img, a.left - 2 - tick - gap - detail::text_width(l, s), y - detail::cap_h * s / 2, l, s, ink);
  }
  const int mid_x = (a.left + a.right) / 2, mid_y = (a.top + a.bottom) / 2;
  if (!c.x_label.empty())
    detail::text(img, mid_x - detail::text_width(c.x_label, s) / 2, a.bottom + 2 + tick + gap + line + gap, c.x_label, s,
                 ink);
  if (!c.y_label.empty()) detail::text_up(img, pad, mid_y + detail::text_width(c.y_label, s) / 2, c.y_label, s, ink);
  if (!c.title.empty()) {
    // Bold by a second pass one pixel to the right; centred on the plot area but kept inside the image.
    const int w = detail::text_width(c.title, s) + 1;
    const int x = std::clamp(mid_x - w / 2, pad, std::max(pad, c.width - pad - w));
    detail::text(img, x, pad, c.title, s, ink);
    detail::text(img, x + 1, pad, c.title, s, ink);
  }

  // Legend: where place_legend put it.
  std::vector<std::size_t> listed;
  for (std::size_t i = 0; i < c.lines.size(); ++i)
    if (!c.lines[i].label.empty()) listed.push_back(i);
  if (lp.box) {
    const rect best = *lp.box;
    const int inner = 3 * s, sample = 16 * s, row = line + 2 * s;
    detail::fill(img, best.left, best.top, best.right, best.bottom, white);
    detail::outline(img, best, legend_edge);
    for (std::size_t k = 0; k < listed.size(); ++k) {
      const series& sr = c.lines[listed[k]];
      const int y = best.top + inner + static_cast<int>(k) * row;
      const int x = best.left + inner;
      const double cy = y + 0.5 * (detail::cap_h * s - 1);
      const rect sample_area{x, y, x + sample - 1, y + line - 1};
      detail::coverage cov(sample_area);
      if (sr.x.size() == 1 || sr.points) detail::disc(cov, x + 0.5 * (sample - 1), cy, 2.0 + s);
      else detail::stroke(cov, x + 1, cy, x + sample - 2, cy, half_width);
      const rgb col = series_color(c, listed[k]);
      for (int py = sample_area.top; py <= sample_area.bottom; ++py)
        for (int px = sample_area.left; px <= sample_area.right; ++px) detail::blend(img, px, py, col, cov.at(px, py));
      detail::text(img, x + sample + 2 * gap, y, sr.label, s, ink);
    }
  }
  return img;
}

namespace detail {

inline std::vector<unsigned char> encode_png(const image& img, const std::string& who) {
  png_image im{};
  im.version = PNG_IMAGE_VERSION;
  im.width = static_cast<png_uint_32>(img.width);
  im.height = static_cast<png_uint_32>(img.height);
  im.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = PNG_IMAGE_PNG_SIZE_MAX(im);
  std::vector<unsigned char> out(size);
  const int ok = png_image_write_to_memory(&im, out.data(), &size, 0, img.pixels.data(), 0, nullptr);
  const std::string message = im.message;
  png_image_free(&im);
  check(ok != 0, who, ": libpng could not encode the image: ", message);
  out.resize(size);
  return out;
}

}  // namespace detail

// Renders the chart and writes it as an RGB PNG at path, atomically (atomic_file). Any error (those of
// layout, or a file that cannot be written) leaves neither the file nor the temporary behind.
inline void write_png(const chart& c, const std::filesystem::path& path) {
  const std::string who = detail::chart_name(c);
  const std::vector<unsigned char> bytes = detail::encode_png(render(c), who);
  try {
    write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  } catch (const error& e) {
    fail(who, ": ", e.what());
  }
}

}  // namespace lwcl::report

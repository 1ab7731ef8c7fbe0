// report::write_png: files are PNGs of the chart's size that libpng reads back pixel for pixel; lines land
// where the chart's frame says (linear and log axes); ticks follow the 1-2-5 rule; every refused chart
// or path throws lwcl::error and leaves neither the file nor its temporary behind.
#include <doctest/doctest.h>

#include <png.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lwcl/report/plot.hpp"

using namespace lwcl;
using namespace lwcl::report;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
  fs::path path = fs::temp_directory_path() / ("lwcl_test_plot_" + std::to_string(::getpid()));
  temp_dir() { fs::create_directories(path); }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

image read_png(const fs::path& path) {
  png_image im{};
  im.version = PNG_IMAGE_VERSION;
  REQUIRE(png_image_begin_read_from_file(&im, path.c_str()) != 0);
  im.format = PNG_FORMAT_RGB;
  image img;
  img.width = static_cast<int>(im.width);
  img.height = static_cast<int>(im.height);
  img.pixels.resize(PNG_IMAGE_SIZE(im));
  REQUIRE(png_image_finish_read(&im, nullptr, img.pixels.data(), 0, nullptr) != 0);
  return img;
}

series flat(std::string label, double x0, double x1, double y, int n = 50) {
  series s;
  s.label = std::move(label);
  for (int i = 0; i < n; ++i) {
    s.x.push_back(x0 + (x1 - x0) * i / (n - 1));
    s.y.push_back(y);
  }
  return s;
}

// Rows of column x holding exactly colour c.
std::vector<int> rows_with(const image& img, int x, rgb c) {
  std::vector<int> rows;
  for (int y = 0; y < img.height; ++y)
    if (img.at(x, y) == c) rows.push_back(y);
  return rows;
}

std::string joined(const std::vector<std::string>& labels) {
  std::string s;
  for (const auto& l : labels) s += (s.empty() ? "" : " ") + l;
  return s;
}

int px_round(double v) { return static_cast<int>(std::lround(v)); }

bool is_one_two_five_step(double step) {
  const double e = std::floor(std::log10(step) + 1e-9);
  const double m = step / std::pow(10.0, e);
  return std::abs(m - 1) < 1e-6 || std::abs(m - 2) < 1e-6 || std::abs(m - 5) < 1e-6;
}

// Neither the target nor its temporary exists.
bool nothing_at(const fs::path& p) { return !fs::exists(p) && !fs::exists(fs::path(p) += ".tmp"); }

chart example_chart() {
  chart c;
  c.title = "Layer-wise distillation: loss by step";
  c.x_label = "step";
  c.y_label = "loss (nats/token)";
  c.log_y = true;
  const char* labels[] = {"train", "validation", "teacher (ref)"};
  for (int k = 0; k < 3; ++k) {
    series s;
    s.label = labels[k];
    for (int i = 0; i < 100; ++i) {
      const double step = 50.0 * i;
      s.x.push_back(step);
      const double base = k == 2 ? 3.1 : 3.3 + 0.15 * k;
      s.y.push_back(base + 7.5 * std::exp(-step / 600.0) + (k == 0 ? 0.08 * std::sin(i * 1.7) : 0.0));
    }
    c.lines.push_back(std::move(s));
  }
  return c;
}

}  // namespace

TEST_CASE("the font has a distinct glyph for every printable character") {
  std::set<std::array<std::uint8_t, 9>> seen;
  for (int ch = 33; ch <= 126; ++ch) {
    const auto& g = report::detail::glyph(static_cast<char>(ch));
    int lit = 0;
    for (const std::uint8_t row : g) lit += std::popcount(row);
    CHECK_MESSAGE(lit > 0, "glyph '", static_cast<char>(ch), "' is blank");
    seen.insert(g);
  }
  CHECK(seen.size() == 94);
  for (const std::uint8_t row : report::detail::glyph(' ')) CHECK(row == 0);
  CHECK(report::detail::glyph('\x01') == report::detail::glyph('?'));  // unprintable bytes show as '?'
  CHECK(report::detail::text_width("0.5", 2) == 3 * 6 * 2 - 2);
}

TEST_CASE("write_png writes a PNG of the chart's size that reads back as the rendered image") {
  temp_dir dir;
  chart c;
  c.width = 640;
  c.height = 360;
  c.title = "t";
  c.lines.push_back(flat("a", 0, 1, 2));
  c.lines.push_back(flat("b", 0, 1, 5));
  const fs::path p = dir.path / "chart.png";
  write_png(c, p);
  REQUIRE(fs::exists(p));
  CHECK(!fs::exists(fs::path(p) += ".tmp"));

  std::ifstream in(p, std::ios::binary);
  unsigned char head[8] = {};
  in.read(reinterpret_cast<char*>(head), 8);
  const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  CHECK(std::equal(head, head + 8, signature));

  const image img = read_png(p);
  CHECK(img.width == 640);
  CHECK(img.height == 360);
  CHECK(img.at(0, 0) == rgb{255, 255, 255});
  CHECK(img.at(639, 359) == rgb{255, 255, 255});
  CHECK(img.pixels == render(c).pixels);

  // Writing again replaces the file.
  c.lines[1].y.assign(c.lines[1].y.size(), 9.0);
  write_png(c, p);
  CHECK(read_png(p).pixels == render(c).pixels);
}

TEST_CASE("a horizontal line is drawn on the row the frame maps its y to") {
  temp_dir dir;
  chart c;
  c.lines.push_back(flat("level", 0, 10, 3));
  series ramp;
  ramp.label = "ramp";
  for (int i = 0; i <= 10; ++i) {
    ramp.x.push_back(i);
    ramp.y.push_back(i);
  }
  c.lines.push_back(ramp);
  const fs::path p = dir.path / "level.png";
  write_png(c, p);
  const image img = read_png(p);

  const frame f = layout(c);
  const rect a = plot_area(c);
  CHECK(a.left == f.area.left);
  CHECK(a.bottom == f.area.bottom);
  CHECK(a.left > 0);
  CHECK(a.top > 0);
  CHECK(a.right < c.width - 1);
  CHECK(a.bottom < c.height - 1);
  CHECK(f.px(f.x_lo) == doctest::Approx(a.left));
  CHECK(f.px(f.x_hi) == doctest::Approx(a.right));
  CHECK(f.py(f.y_lo) == doctest::Approx(a.bottom));
  CHECK(f.py(f.y_hi) == doctest::Approx(a.top));

  const rgb level = series_color(c, 0);
  const int row = px_round(f.py(3));
  for (const double x : {0.5, 6.0, 8.5}) {  // away from where the ramp crosses
    const int col = px_round(f.px(x));
    CHECK(img.at(col, row) == level);
    CHECK(img.at(col, row - 4 * f.text_scale) != level);
    CHECK(img.at(col, row + 4 * f.text_scale) != level);
  }
  // The ramp passes through (8, 8).
  CHECK(img.at(px_round(f.px(8)), px_round(f.py(8))) == series_color(c, 1));
}

TEST_CASE("a band shades the region between its low and high values, under the line") {
  temp_dir dir;
  chart c;
  series s = flat("mean", 0, 10, 3, 11);
  s.lo.assign(11, 2.0);
  s.hi.assign(11, 4.0);
  c.lines.push_back(s);
  c.lines.push_back(flat("low", 0, 10, 1, 11));  // the y range reaches beyond the band on both sides
  c.lines.push_back(flat("high", 0, 10, 5, 11));
  const fs::path p = dir.path / "band.png";
  write_png(c, p);
  const image img = read_png(p);
  const frame f = layout(c);
  const rgb col = series_color(c, 0), white{255, 255, 255};
  // 18% of the colour over white, as blend computes it.
  auto shade = [](std::uint8_t ch) { return static_cast<int>(std::lround(255 + 0.18 * (ch - 255.0))); };
  const int x = px_round(f.px(5.3));
  for (const double y : {2.25, 3.75}) {  // inside the band, off the line and the grid
    const rgb got = img.at(x, px_round(f.py(y)));
    CHECK(std::abs(got.r - shade(col.r)) <= 1);
    CHECK(std::abs(got.g - shade(col.g)) <= 1);
    CHECK(std::abs(got.b - shade(col.b)) <= 1);
  }
  CHECK(img.at(x, px_round(f.py(3))) == col);         // the line drawn over it
  CHECK(img.at(x, px_round(f.py(4.4))) == white);     // above the band
  CHECK(img.at(x, px_round(f.py(1.6))) == white);     // below it
  // The band's ends count in the y range: a band alone still fits.
  chart only;
  only.lines.push_back(s);
  const frame g = layout(only);
  CHECK(g.y_lo <= 2.0);
  CHECK(g.y_hi >= 4.0);

  chart bad = only;
  bad.lines[0].hi.pop_back();
  CHECK_THROWS_WITH_AS(write_png(bad, dir.path / "bad.png"),
                       doctest::Contains("series 0 ('mean')'s band has 11 low and 10 high values for 11 points"), lwcl::error);
  bad = only;
  bad.lines[0].lo[4] = 5;
  CHECK_THROWS_WITH_AS(write_png(bad, dir.path / "bad.png"),
                       doctest::Contains("band at point 4 is [5, 4] (expected finite values, low <= high)"), lwcl::error);
  CHECK(nothing_at(dir.path / "bad.png"));
}

TEST_CASE("a log_y chart puts 10 halfway between 1 and 100") {
  temp_dir dir;
  chart c;
  c.log_y = true;
  c.lines.push_back(flat("one", 0, 1, 1));
  c.lines.push_back(flat("ten", 0, 1, 10));
  c.lines.push_back(flat("hundred", 0, 1, 100));
  const fs::path p = dir.path / "log.png";
  write_png(c, p);
  const image img = read_png(p);
  const frame f = layout(c);
  CHECK(f.py(10) == doctest::Approx(0.5 * (f.py(1) + f.py(100))));

  // Measured on the image, at a column the legend does not cover.
  const int col = px_round(f.px(0.5));
  const std::vector<int> r1 = rows_with(img, col, series_color(c, 0));
  const std::vector<int> r10 = rows_with(img, col, series_color(c, 1));
  const std::vector<int> r100 = rows_with(img, col, series_color(c, 2));
  REQUIRE(!r1.empty());
  REQUIRE(!r10.empty());
  REQUIRE(!r100.empty());
  const double mid1 = 0.5 * (r1.front() + r1.back()), mid10 = 0.5 * (r10.front() + r10.back()),
               mid100 = 0.5 * (r100.front() + r100.back());
  CHECK(mid1 - mid100 > 100);
  CHECK(std::abs(mid10 - 0.5 * (mid1 + mid100)) <= 1.0);

  // 1-2-5 ticks over two decades, labelled exactly.
  CHECK(joined(f.y_tick_labels) == "1 2 5 10 20 50 100");
}

TEST_CASE("series get different palette colours unless given one") {
  chart c;
  for (int i = 0; i < 10; ++i) {
    std::string label = "s";  // appended rather than "s" + to_string: GCC 12 at -O3 misreads the insert's bound
    label += std::to_string(i);
    c.lines.push_back(flat(label, 0, 1, i + 1));
  }
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = i + 1; j < 8; ++j) CHECK(series_color(c, i) != series_color(c, j));
  CHECK(series_color(c, 8) == series_color(c, 0));  // the palette repeats after eight
  c.lines[3].color = rgb{1, 2, 3};
  CHECK(series_color(c, 3) == rgb{1, 2, 3});

  const image img = render(c);
  const frame f = layout(c);
  const int col = px_round(f.px(0.05));  // left of the legend, which takes the right-hand side
  CHECK(img.at(col, px_round(f.py(1))) == series_color(c, 0));
  CHECK(img.at(col, px_round(f.py(2))) == series_color(c, 1));
  CHECK(img.at(col, px_round(f.py(4))) == rgb{1, 2, 3});
}

TEST_CASE("an axis that counts (x_integer) has ticks at whole numbers only") {
  chart c;
  series s;
  s.label = "err";
  s.x = {0, 1, 2, 3};  // student layers
  s.y = {0.1, 0.2, 0.25, 0.3};
  c.lines.push_back(s);
  // A plain axis puts ticks between the three layers (the 1-2-5 rule prefers 4 to 8 ticks)...
  frame f = layout(c);
  CHECK(std::any_of(f.x_ticks.begin(), f.x_ticks.end(), [](double t) { return t != std::round(t); }));
  // ...a counting one does not.
  c.x_integer = true;
  f = layout(c);
  CHECK(joined(f.x_tick_labels) == "0 1 2 3");
  for (double width : {0.4, 1.0, 2.0, 7.0, 11.0, 250.0}) {
    c.lines[0].x = {3, 3 + width};
    c.lines[0].y = {0, 1};
    f = layout(c);
    CAPTURE(width);
    REQUIRE(!f.x_ticks.empty());
    for (const double t : f.x_ticks) CHECK(t == std::round(t));
    CHECK(f.x_lo <= 3);
    CHECK(f.x_hi >= 3 + width);
  }
}

TEST_CASE("ticks follow the 1-2-5 rule, cover the data and are labelled compactly") {
  chart c;
  series s;
  s.label = "x";
  s.x = {0, 1000};
  s.y = {0, 0.93};
  c.lines.push_back(s);
  frame f = layout(c);
  CHECK(joined(f.x_tick_labels) == "0 200 400 600 800 1000");
  CHECK(joined(f.y_tick_labels) == "0.0 0.2 0.4 0.6 0.8 1.0");

  c.lines[0].x = {0, 3.2e5};
  c.lines[0].y = {-0.0004, 0.0011};
  f = layout(c);
  CHECK(joined(f.x_tick_labels) == "0 5e4 1e5 1.5e5 2e5 2.5e5 3e5 3.5e5");
  CHECK(joined(f.y_tick_labels) == "-5e-4 0 5e-4 1e-3 1.5e-3");

  // A sweep of ranges: 4 to 8 ticks, evenly spaced by a 1-2-5 step, the axis covering the data.
  for (double lo : {-7.3, 0.0, 0.01, 3.0, 123.0, 1e6}) {
    for (double width : {1e-3, 0.37, 1.0, 9.99, 42.0, 1e4}) {
      c.lines[0].x = {lo, lo + width};
      c.lines[0].y = {lo, lo + width};
      f = layout(c);
      for (const auto* t : {&f.x_ticks, &f.y_ticks}) {
        CAPTURE(lo);
        CAPTURE(width);
        REQUIRE(t->size() >= 4);
        CHECK(t->size() <= 8);
        const double step = (*t)[1] - (*t)[0];
        CHECK(is_one_two_five_step(step));
        for (std::size_t k = 2; k < t->size(); ++k) CHECK((*t)[k] - (*t)[k - 1] == doctest::Approx(step));
      }
      CHECK(f.x_lo <= lo);
      CHECK(f.x_hi >= lo + width);
      CHECK(f.y_lo <= lo);
      CHECK(f.y_hi >= lo + width);
      CHECK(f.x_ticks.size() == f.x_tick_labels.size());
    }
  }

  // Pinned ends are kept exactly; the ticks stay inside them.
  c.lines[0].x = {0, 10};
  c.lines[0].y = {0.3, 7.7};
  c.y_min = 0;
  c.y_max = 2.5;
  f = layout(c);
  CHECK(f.y_lo == 0);
  CHECK(f.y_hi == 2.5);
  CHECK(f.y_ticks.front() >= 0);
  CHECK(f.y_ticks.back() <= 2.5);

  // A short log range: 1..9 times a power of ten, the axis a little wider than the data rather than 2 to 20.
  chart l;
  l.log_y = true;
  series loss;
  loss.x = {0, 1};
  loss.y = {3.2, 11};
  l.lines.push_back(loss);
  f = layout(l);
  CHECK(joined(f.y_tick_labels) == "4 5 6 7 8 9 10");
  CHECK(std::pow(10.0, f.y_lo) > 2.9);
  CHECK(std::pow(10.0, f.y_hi) < 12.5);
  l.lines[0].y = {1e-6, 1e6};
  f = layout(l);
  CHECK(f.y_tick_labels.front() == "1e-6");
  CHECK(f.y_tick_labels.back() == "1e6");
  CHECK(f.y_ticks.size() >= 4);
  CHECK(f.y_ticks.size() <= 8);
}

TEST_CASE("a single point is a marker, and zero-width ranges are opened up") {
  chart c;
  series one;
  one.label = "final";
  one.x = {5};
  one.y = {2};
  c.lines.push_back(one);
  const frame f = layout(c);
  CHECK(f.x_lo < 5);
  CHECK(f.x_hi > 5);
  CHECK(f.y_lo < 2);
  CHECK(f.y_hi > 2);
  const image img = render(c);
  const int x = px_round(f.px(5)), y = px_round(f.py(2));
  CHECK(img.at(x, y) == series_color(c, 0));
  CHECK(img.at(x + 2, y) == series_color(c, 0));
  CHECK(img.at(x, y - 2) == series_color(c, 0));
  CHECK(img.at(x + 8 * f.text_scale, y) != series_color(c, 0));

  c.log_y = true;  // one value on a log axis too
  const frame g = layout(c);
  CHECK(g.y_lo < std::log10(2));
  CHECK(g.y_hi > std::log10(2));
  CHECK(render(c).at(px_round(g.px(5)), px_round(g.py(2))) == series_color(c, 0));
}

TEST_CASE("lines are clipped to the plot area") {
  chart c;
  c.y_min = 0;
  c.y_max = 1;
  series wild;
  wild.label = "";  // no legend, so the series colour can only come from the line
  for (int i = 0; i <= 40; ++i) {
    wild.x.push_back(i);
    wild.y.push_back(i % 2 ? 1e6 : -1e6);
  }
  c.lines.push_back(wild);
  const image img = render(c);
  const rect a = plot_area(c);
  const rgb col = series_color(c, 0);
  int inside = 0, outside = 0;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x)
      if (img.at(x, y) == col) ++(a.contains(x, y) ? inside : outside);
  CHECK(inside > 100);
  CHECK(outside == 0);
}

TEST_CASE("the legend goes to the corner of the plot area that hides the least of the lines") {
  chart c;
  series diagonal;  // through the bottom-left and top-right corners
  diagonal.label = "diagonal";
  for (int i = 0; i <= 10; ++i) {
    diagonal.x.push_back(i);
    diagonal.y.push_back(i);
  }
  c.lines.push_back(diagonal);
  const image img = render(c);
  const rect a = plot_area(c);
  const int mid_x = (a.left + a.right) / 2, mid_y = (a.top + a.bottom) / 2;
  int top_left = 0, elsewhere = 0;
  for (int y = a.top; y <= a.bottom; ++y)
    for (int x = a.left; x <= a.right; ++x)
      if (img.at(x, y) == rgb{170, 170, 170}) ++(x < mid_x && y < mid_y ? top_left : elsewhere);
  CHECK(top_left > 100);  // the legend's frame
  CHECK(elsewhere == 0);

  c.lines[0].label.clear();  // nothing to list: no legend
  const image bare = render(c);
  int frame_pixels = 0;
  for (int y = a.top; y <= a.bottom; ++y)
    for (int x = a.left; x <= a.right; ++x) frame_pixels += bare.at(x, y) == rgb{170, 170, 170};
  CHECK(frame_pixels == 0);
}

TEST_CASE("a legend never hides data: where every corner holds some, it goes right of a narrowed plot area") {
  chart c;
  series x_shape;  // both diagonals: every corner of the plot area holds a line
  x_shape.label = "one diagonal";
  series other;
  other.label = "the other diagonal";
  for (int i = 0; i <= 10; ++i) {
    x_shape.x.push_back(i);
    x_shape.y.push_back(i);
    other.x.push_back(i);
    other.y.push_back(10 - i);
  }
  c.lines = {x_shape, other};
  const legend_placement lp = place_legend(c);
  REQUIRE(lp.box);
  CHECK(lp.outside);
  const rect a = lp.f.area, b = *lp.box;
  CHECK(b.left > a.right);  // beside the axes box, not over it
  CHECK(b.right < c.width);
  CHECK(b.top >= 0);
  CHECK(b.bottom < c.height);
  CHECK(a.right < frame_within(c, 0).area.right);  // the plot gave up the room
  CHECK(layout(c).area.right == a.right);            // and render draws in that frame
  // Drawn: the legend's frame colour appears right of the plot area only, and the lines still reach
  // the plot area's right edge.
  const image img = render(c);
  int inside = 0, beside = 0;
  for (int y = 0; y < c.height; ++y)
    for (int x = 0; x < c.width; ++x)
      if (img.at(x, y) == rgb{170, 170, 170}) ++(a.contains(x, y) ? inside : beside);
  CHECK(inside == 0);
  CHECK(beside > 100);
  CHECK(img.at(px_round(lp.f.px(10)), px_round(lp.f.py(10))) == series_color(c, 0));

  // One corner free: the legend stays inside, over no line, and the plot keeps its full width.
  c.lines.pop_back();
  const legend_placement in = place_legend(c);
  REQUIRE(in.box);
  CHECK_FALSE(in.outside);
  CHECK(in.f.area.right == frame_within(c, 0).area.right);
  const std::vector<float> cov = report::detail::line_coverage(c, in.f);
  const rect& ia = in.f.area;
  double under = 0;
  for (int y = in.box->top; y <= in.box->bottom; ++y)
    for (int x = in.box->left; x <= in.box->right; ++x)
      under += cov[static_cast<std::size_t>(y - ia.top) * static_cast<std::size_t>(ia.width()) +
                   static_cast<std::size_t>(x - ia.left)];
  CHECK(under == 0.0);
  CHECK(ia.contains(in.box->left, in.box->top));
  CHECK(ia.contains(in.box->right, in.box->bottom));
}

TEST_CASE("bad charts and paths are refused and leave nothing behind") {
  temp_dir dir;
  const fs::path p = dir.path / "bad.png";
  chart good;
  good.title = "Loss";
  good.lines.push_back(flat("train", 0, 1, 1));

  chart c = good;
  c.lines[0].y.pop_back();
  CHECK_THROWS_WITH_AS(write_png(c, p), doctest::Contains("series 0 ('train') has 50 x values but 49 y values"),
                       lwcl::error);
  CHECK(nothing_at(p));

  c = good;
  c.lines.clear();
  CHECK_THROWS_WITH_AS(write_png(c, p), doctest::Contains("report chart 'Loss': no points to plot"), lwcl::error);
  c.lines.push_back(series{"empty", {}, {}, {}, {}, {}});
  CHECK_THROWS_WITH_AS(write_png(c, p), doctest::Contains("no points to plot"), lwcl::error);
  CHECK(nothing_at(p));

  c = good;
  c.log_y = true;
  c.lines.push_back(flat("val", 0, 1, 2));
  c.lines[1].y[7] = 0;
  CHECK_THROWS_WITH_AS(write_png(c, p), doctest::Contains("series 1 ('val') point 7 has y = 0, which a log_y chart"),
                       lwcl::error);
  c.lines[1].y[7] = -3;
  CHECK_THROWS_WITH_AS(write_png(c, p), doctest::Contains("point 7 has y = -3"), lwcl::error);
  c.lines[1].y[7] = 2;
  c.y_min = -1;
  CHECK_THROWS_WITH_AS(write_png(c, p), doctest::Contains("y_min = -1 on a log_y chart"), lwcl::error);
  c.y_min = 5;
  c.y_max = 5;
  c.log_y = false;
  CHECK_THROWS_WITH_AS(write_png(c, p), doctest::Contains("y_min 5 is not below y_max 5"), lwcl::error);
  CHECK(nothing_at(p));

  for (const auto& [w, h] : {std::pair{199, 500}, std::pair{800, 4001}, std::pair{0, 0}, std::pair{-5, 300}}) {
    c = good;
    c.width = w;
    c.height = h;
    CHECK_THROWS_WITH_AS(write_png(c, p), doctest::Contains("is outside [200, 4000] pixels per side"), lwcl::error);
  }
  c = good;
  c.width = 200;
  c.height = 4000;
  CHECK_NOTHROW(layout(c));
  CHECK(nothing_at(p));

  for (const double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
    c = good;
    c.lines[0].y[13] = bad;
    CHECK_THROWS_WITH_AS(write_png(c, p), doctest::Contains("series 0 ('train') point 13 is not finite"), lwcl::error);
    c = good;
    c.lines[0].x[2] = bad;
    CHECK_THROWS_WITH_AS(write_png(c, p), doctest::Contains("series 0 ('train') point 2 is not finite"), lwcl::error);
  }
  CHECK(nothing_at(p));

  // A directory that does not exist: the message names the path.
  const fs::path missing = dir.path / "no_such_dir" / "loss.png";
  const std::string missing_msg = "cannot write '" + missing.string() + "'";
  CHECK_THROWS_WITH_AS(write_png(good, missing), doctest::Contains(missing_msg.c_str()), lwcl::error);
  CHECK(nothing_at(missing));

  // The target is a directory: the temporary is written, the rename fails, the temporary is removed.
  const fs::path taken = dir.path / "taken.png";
  fs::create_directories(taken / "inside");
  const std::string taken_msg = "cannot write '" + taken.string() + "'";
  CHECK_THROWS_WITH_AS(write_png(good, taken), doctest::Contains(taken_msg.c_str()), lwcl::error);
  CHECK(!fs::exists(fs::path(taken) += ".tmp"));
  CHECK(fs::is_directory(taken / "inside"));

  // And the good chart is fine.
  write_png(good, p);
  CHECK(fs::exists(p));
}

// The file is left in the temporary directory, to be looked at.
TEST_CASE("a realistic chart renders: three series of 100 points, title, axis labels, legend") {
  const chart c = example_chart();
  const fs::path p = fs::temp_directory_path() / "lwcl_plot_example.png";
  write_png(c, p);
  const image img = read_png(p);
  CHECK(img.width == 800);
  CHECK(img.height == 500);
  const frame f = layout(c);
  CHECK(f.y_ticks.size() >= 4);
  CHECK(f.x_ticks.size() >= 4);
  for (std::size_t i = 0; i < c.lines.size(); ++i) {
    std::size_t n = 0;
    for (int y = f.area.top; y <= f.area.bottom; ++y)
      for (int x = f.area.left; x <= f.area.right; ++x) n += img.at(x, y) == series_color(c, i);
    CHECK_MESSAGE(n > 300, "series ", i, " has only ", n, " pixels of its colour");
  }
  // Text left of the plot area (the y label and tick labels) and below it (x ticks and label).
  std::size_t dark_left = 0, dark_below = 0;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) {
      const rgb v = img.at(x, y);
      if (v.r > 60 || v.g > 60 || v.b > 60) continue;
      if (x < f.area.left - 1) ++dark_left;
      if (y > f.area.bottom + 1) ++dark_below;
    }
  CHECK(dark_left > 200);
  CHECK(dark_below > 200);
}

TEST_CASE("plot: a points series puts a dot at each point and draws nothing between them") {
  chart c;
  c.width = 400;
  c.height = 300;
  series sc{"scatter", {0.0, 1.0}, {0.0, 1.0}, rgb{200, 0, 0}, {}, {}};
  sc.points = true;
  c.lines = {sc};
  const image img = render(c);
  const frame f = layout(c);
  const auto pixel = [&](double x, double y) {
    return img.at(static_cast<int>(std::lround(f.px(x))), static_cast<int>(std::lround(f.py(y))));
  };
  CHECK(pixel(0.0, 0.0) == rgb{200, 0, 0});
  CHECK(pixel(1.0, 1.0) == rgb{200, 0, 0});
  CHECK(pixel(0.37, 0.37) == rgb{255, 255, 255});  // a line would pass here (off the grid lines)
  sc.points = false;
  c.lines = {sc};
  CHECK(render(c).at(static_cast<int>(std::lround(f.px(0.37))), static_cast<int>(std::lround(f.py(0.37)))) != rgb{255, 255, 255});
}

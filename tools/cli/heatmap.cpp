// PNG heat map of a tuning sweep (heatmap.h).
#include "tools/cli/heatmap.h"

#include <png.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"

namespace fa3jit::cli {

namespace {

// 5x7 glyphs, one byte per row from the top, bit 4 the leftmost column.
struct Glyph {
  char c;
  std::array<uint8_t, 7> rows;
};
constexpr Glyph kFont[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'a', {0x00, 0x00, 0x0E, 0x01, 0x0F, 0x11, 0x0F}}, {'b', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1E}},
    {'c', {0x00, 0x00, 0x0E, 0x10, 0x10, 0x11, 0x0E}}, {'d', {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F}},
    {'e', {0x00, 0x00, 0x0E, 0x11, 0x1F, 0x10, 0x0E}}, {'f', {0x06, 0x09, 0x08, 0x1C, 0x08, 0x08, 0x08}},
    {'g', {0x00, 0x00, 0x0F, 0x11, 0x0F, 0x01, 0x0E}}, {'h', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'i', {0x04, 0x00, 0x0C, 0x04, 0x04, 0x04, 0x0E}}, {'j', {0x02, 0x00, 0x06, 0x02, 0x02, 0x12, 0x0C}},
    {'k', {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12}}, {'l', {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'m', {0x00, 0x00, 0x1A, 0x15, 0x15, 0x11, 0x11}}, {'n', {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11}},
    {'o', {0x00, 0x00, 0x0E, 0x11, 0x11, 0x11, 0x0E}}, {'p', {0x00, 0x00, 0x1E, 0x11, 0x1E, 0x10, 0x10}},
    {'q', {0x00, 0x00, 0x0F, 0x11, 0x0F, 0x01, 0x01}}, {'r', {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10}},
    {'s', {0x00, 0x00, 0x0E, 0x10, 0x0E, 0x01, 0x1E}}, {'t', {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06}},
    {'u', {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0D}}, {'v', {0x00, 0x00, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'w', {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0A}}, {'x', {0x00, 0x00, 0x11, 0x0A, 0x04, 0x0A, 0x11}},
    {'y', {0x00, 0x00, 0x11, 0x11, 0x0F, 0x01, 0x0E}}, {'z', {0x00, 0x00, 0x1F, 0x02, 0x04, 0x08, 0x1F}},
    {' ', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}}, {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}},
    {'-', {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}}, {'_', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F}},
    {'=', {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00}}, {'/', {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00}},
    {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}}, {'+', {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}},
    {',', {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08}}, {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
    {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}}, {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}},
    {'>', {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08}}, {'"', {0x0A, 0x0A, 0x00, 0x00, 0x00, 0x00, 0x00}},
    {';', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x04, 0x08}}, {'|', {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'?', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04}},
};

const Glyph& glyph(char c) {
  const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const Glyph& g : kFont)
    if (g.c == lower) return g;
  return kFont[std::size(kFont) - 1];  // '?'
}

constexpr int kScale = 2;              // font pixels -> image pixels
constexpr int kCharW = 6 * kScale;     // 5 columns + 1 of spacing
constexpr int kLineH = 10 * kScale;    // 7 rows + 3 of spacing
constexpr int kPad = 8;
constexpr int kCellH = 2 * kLineH;

struct Rgb {
  uint8_t r, g, b;
};

// Five stops of the viridis map (dark violet -> yellow).
Rgb ramp(double t) {
  constexpr std::array<Rgb, 5> stops = {Rgb{68, 1, 84}, Rgb{59, 82, 139}, Rgb{33, 145, 140}, Rgb{94, 201, 98},
                                        Rgb{253, 231, 37}};
  t = std::clamp(t, 0.0, 1.0) * (stops.size() - 1);
  const size_t i = std::min(static_cast<size_t>(t), stops.size() - 2);
  const double f = t - static_cast<double>(i);
  const auto mix = [&](uint8_t a, uint8_t b) { return static_cast<uint8_t>(std::lround(a + (b - a) * f)); };
  return {mix(stops[i].r, stops[i + 1].r), mix(stops[i].g, stops[i + 1].g), mix(stops[i].b, stops[i + 1].b)};
}

struct Canvas {
  Image image;
  Canvas(int w, int h) {
    image.width = w;
    image.height = h;
    image.rgb.assign(static_cast<size_t>(w) * h * 3, 255);
  }
  void fill(int x0, int y0, int w, int h, Rgb c) {
    for (int y = std::max(0, y0); y < std::min(image.height, y0 + h); ++y)
      for (int x = std::max(0, x0); x < std::min(image.width, x0 + w); ++x) {
        uint8_t* p = &image.rgb[(static_cast<size_t>(y) * image.width + x) * 3];
        p[0] = c.r, p[1] = c.g, p[2] = c.b;
      }
  }
  void frame(int x0, int y0, int w, int h, int t, Rgb c) {
    fill(x0, y0, w, t, c);
    fill(x0, y0 + h - t, w, t, c);
    fill(x0, y0, t, h, c);
    fill(x0 + w - t, y0, t, h, c);
  }
  void text(int x, int y, const std::string& s, Rgb c) {
    for (char ch : s) {
      const Glyph& g = glyph(ch);
      for (int row = 0; row < 7; ++row)
        for (int col = 0; col < 5; ++col)
          if (g.rows[row] & (0x10 >> col)) fill(x + col * kScale, y + row * kScale, kScale, kScale, c);
      x += kCharW;
    }
  }
};

int text_width(const std::string& s) { return static_cast<int>(s.size()) * kCharW; }

std::string cell_text(const HeatMap& m, size_t i) {
  if (m.values[i]) return fmt::format("{:.0f}", *m.values[i]);
  return m.notes.empty() ? "-" : (m.notes[i].empty() ? "-" : m.notes[i]);
}

}  // namespace

Image render_heat_map(const HeatMap& m) {
  const size_t cells = m.x_labels.size() * m.y_labels.size();
  if (m.values.size() != cells || (!m.notes.empty() && m.notes.size() != cells))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("heat map of {} x {} cells given {} values and {} notes", m.y_labels.size(),
                            m.x_labels.size(), m.values.size(), m.notes.size()));
  std::optional<double> lo, hi;
  size_t best = cells;
  for (size_t i = 0; i < cells; ++i) {
    if (!m.values[i]) continue;
    if (!lo || *m.values[i] < *lo) lo = m.values[i];
    if (!hi || *m.values[i] > *hi) hi = m.values[i], best = i;
  }
  // Column width: the widest of its label and its cells' texts; the label column: the widest y label or y name.
  int label_w = text_width(m.y_name);
  for (const std::string& y : m.y_labels) label_w = std::max(label_w, text_width(y));
  label_w += 2 * kPad;
  std::vector<int> col_w(m.x_labels.size());
  for (size_t x = 0; x < m.x_labels.size(); ++x) {
    int w = text_width(m.x_labels[x]);
    for (size_t y = 0; y < m.y_labels.size(); ++y) w = std::max(w, text_width(cell_text(m, y * m.x_labels.size() + x)));
    col_w[x] = w + 2 * kPad;
  }
  int grid_w = 0;
  for (int w : col_w) grid_w += w;
  const int header_h = 3 * kLineH + kPad;  // title, subtitle, x axis name
  const int top = header_h + kLineH;       // x labels
  const int grid_h = static_cast<int>(m.y_labels.size()) * kCellH;
  const int width = std::max({label_w + grid_w + kPad, text_width(m.title) + 2 * kPad,
                              text_width(m.subtitle) + 2 * kPad, text_width(m.legend) + 2 * kPad});
  const int height = top + grid_h + kLineH + 2 * kPad;
  Canvas c(width, height);
  const Rgb ink{20, 20, 20}, grey{110, 110, 110};
  c.text(kPad, kPad, m.title, ink);
  c.text(kPad, kPad + kLineH, m.subtitle, grey);
  c.text(label_w, kPad + 2 * kLineH, m.x_name, ink);
  c.text(kPad, top - kLineH + kLineH / 4, m.y_name, ink);
  int x0 = label_w;
  for (size_t x = 0; x < m.x_labels.size(); ++x) {
    c.text(x0 + kPad, top - kLineH + kLineH / 4, m.x_labels[x], grey);
    x0 += col_w[x];
  }
  for (size_t y = 0; y < m.y_labels.size(); ++y) {
    const int cy = top + static_cast<int>(y) * kCellH;
    c.text(kPad, cy + (kCellH - 7 * kScale) / 2, m.y_labels[y], grey);
    int cx = label_w;
    for (size_t x = 0; x < m.x_labels.size(); ++x) {
      const size_t i = y * m.x_labels.size() + x;
      Rgb fill{225, 225, 225};
      if (m.values[i]) fill = ramp(*hi > *lo ? (*m.values[i] - *lo) / (*hi - *lo) : 1.0);
      c.fill(cx, cy, col_w[x], kCellH, fill);
      const double luminance = 0.299 * fill.r + 0.587 * fill.g + 0.114 * fill.b;
      const Rgb text = luminance < 128 ? Rgb{255, 255, 255} : ink;
      const std::string s = cell_text(m, i);
      c.text(cx + (col_w[x] - text_width(s)) / 2, cy + (kCellH - 7 * kScale) / 2, s, text);
      c.frame(cx, cy, col_w[x], kCellH, 1, Rgb{255, 255, 255});
      if (i == best) c.frame(cx, cy, col_w[x], kCellH, 3, Rgb{220, 30, 30});
      cx += col_w[x];
    }
  }
  c.text(kPad, top + grid_h + kPad, m.legend, grey);
  return std::move(c.image);
}

void write_heat_map_png(const HeatMap& map, const std::string& path) {
  const Image image = render_heat_map(map);
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = PNG_FORMAT_RGB;
  if (png_image_write_to_file(&png, path.c_str(), 0, image.rgb.data(), 0, nullptr) == 0)
    throw Error(ErrorCode::kIoError, fmt::format("cannot write the heat map \"{}\": {}", path, png.message));
}

}  // namespace fa3jit::cli

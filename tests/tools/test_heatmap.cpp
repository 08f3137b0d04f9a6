// The tuner's heat map (tools/cli/heatmap.h): the cells' colours follow their values, the best cell is outlined, the
// text is drawn, bad inputs are refused, and the PNG libpng writes reads back as a PNG of the drawn size.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <array>
#include <string>

#include "core/error.h"
#include "tests/jit/temp_dir.h"
#include "tools/cli/heatmap.h"

using fa3jit::Error;
using fa3jit::ErrorCode;
using fa3jit::cli::HeatMap;
using fa3jit::cli::Image;
using Catch::Matchers::Contains;

namespace {

HeatMap two_by_three() {
  HeatMap m;
  m.title = "fa3jit tune: bf16 out=bf16 d=128/128 causal";
  m.subtitle = "batch 2, seqlen_q 8192 | NVIDIA H200 (132 sms)";
  m.x_name = "tile.block_n";
  m.y_name = "stages";
  m.x_labels = {"64", "128", "176"};
  m.y_labels = {"2", "3"};
  m.values = {500.0, 600.0, std::nullopt, 550.0, 650.0, 700.0};
  m.notes = {"", "", "fail", "", "", ""};
  m.legend = "tflops";
  return m;
}

// The RGB pixel at (x, y).
std::array<uint8_t, 3> pixel(const Image& im, int x, int y) {
  const uint8_t* p = &im.rgb[(static_cast<size_t>(y) * im.width + x) * 3];
  return {p[0], p[1], p[2]};
}

}  // namespace

TEST_CASE("heat map: colours follow the values, the best cell is outlined in red", "[tools][heatmap]") {
  const Image im = fa3jit::cli::render_heat_map(two_by_three());
  REQUIRE(im.width > 100);
  REQUIRE(im.height > 100);
  REQUIRE(im.rgb.size() == static_cast<size_t>(im.width) * im.height * 3);
  // Count the ramp's two end colours: the lowest value (500) is drawn in the dark end, the highest (700) in yellow.
  size_t dark = 0, yellow = 0, red = 0, grey_cell = 0;
  for (int y = 0; y < im.height; ++y)
    for (int x = 0; x < im.width; ++x) {
      const auto p = pixel(im, x, y);
      if (p == std::array<uint8_t, 3>{68, 1, 84}) ++dark;
      if (p == std::array<uint8_t, 3>{253, 231, 37}) ++yellow;
      if (p == std::array<uint8_t, 3>{220, 30, 30}) ++red;
      if (p == std::array<uint8_t, 3>{225, 225, 225}) ++grey_cell;
    }
  CHECK(dark > 200);       // one cell's fill, less its text
  CHECK(yellow > 200);
  CHECK(red > 100);        // the outline of the best cell (700)
  CHECK(grey_cell > 200);  // the cell without a value
  // A map whose values are all equal draws every valued cell in the top colour, not a division by zero.
  HeatMap flat = two_by_three();
  flat.values = {1.0, 1.0, 1.0, 1.0, 1.0, 1.0};
  flat.notes.clear();
  CHECK_NOTHROW(fa3jit::cli::render_heat_map(flat));
}

TEST_CASE("heat map: a cell count that does not match the labels is refused", "[tools][heatmap]") {
  HeatMap m = two_by_three();
  m.values.pop_back();
  try {
    (void)fa3jit::cli::render_heat_map(m);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
    CHECK_THAT(e.what(), Contains("2 x 3 cells given 5 values"));
  }
}

TEST_CASE("heat map: the PNG file has the PNG signature and the drawn size", "[tools][heatmap]") {
  fa3jit::test::TempDir dir;
  const std::string path = dir.path + "/map.png";
  const HeatMap m = two_by_three();
  fa3jit::cli::write_heat_map_png(m, path);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 33);
  CHECK(bytes.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  const auto be32 = [&](size_t at) {
    return (static_cast<uint32_t>(static_cast<uint8_t>(bytes[at])) << 24) |
           (static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + 1])) << 16) |
           (static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + 2])) << 8) | static_cast<uint8_t>(bytes[at + 3]);
  };
  const Image im = fa3jit::cli::render_heat_map(m);
  CHECK(bytes.substr(12, 4) == "IHDR");
  CHECK(be32(16) == static_cast<uint32_t>(im.width));
  CHECK(be32(20) == static_cast<uint32_t>(im.height));
  // A path that cannot be written is an I/O error naming it.
  try {
    fa3jit::cli::write_heat_map_png(m, dir.path + "/missing/dir/map.png");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kIoError);
    CHECK_THAT(e.what(), Contains("missing/dir/map.png"));
  }
}

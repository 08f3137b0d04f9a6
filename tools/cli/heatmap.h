// A PNG heat map of a tuning sweep: one axis across, one down, a cell per pair coloured by its value (viridis-like
// ramp from the smallest to the largest), the value written in the cell, the best cell outlined. Text is drawn with
// a built-in 5x7 bitmap font (digits, lower-case letters, a little punctuation; upper case is drawn lower-case).
// The PNG is encoded by libpng (its simplified write API, png_image_write_to_file).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fa3jit::cli {

struct HeatMap {
  std::string title, subtitle;
  std::string x_name, y_name;
  std::vector<std::string> x_labels, y_labels;
  /// Row-major, y_labels.size() x x_labels.size(); empty optional: no value (see notes).
  std::vector<std::optional<double>> values;
  /// What a cell without a value says ("fail", "skip"); same indexing, may be empty.
  std::vector<std::string> notes;
  std::string legend;  // a line under the map
};

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3
};

/// Draws `map`. Error(kInvalidArgument) when values (or notes) do not have one entry per cell.
Image render_heat_map(const HeatMap& map);

/// Draws `map` and writes it as a PNG at `path`. Error(kIoError) naming the path when it cannot be written.
void write_heat_map_png(const HeatMap& map, const std::string& path);

}  // namespace fa3jit::cli

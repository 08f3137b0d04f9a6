// The sweep file of `fa3jit tune` (tools/cli/cmd_tune.cpp): its reader, its axes and the dotted-field setter that
// applies one axis value to the base spec. Apart from the command so that the fuzz harness (tests/fuzz/fuzz_sweep.cpp)
// drives the same code. The file:
//
//   {
//     "base":  { ...a spec, with "problem" when timing on a GPU... },
//     "sweep": { "tile.block_n": [64, 128, 176], "stages": [2, 3], "pingpong": [false, true] }
//   }
// Each key of "sweep" is a spec field, dotted for nested ones ("tile.block_m"); the candidates are the cartesian
// product of the lists, each applied on top of "base".
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fa3jit::cli {

/// The most candidates (the product of the axis lengths) one sweep may have.
inline constexpr size_t kMaxCandidates = 4096;

/// One key of "sweep" and its values, in file order.
struct Axis {
  std::string key;
  std::vector<nlohmann::json> values;
};

/// Reads and shape-checks a sweep file: an object with exactly "base" (an object) and "sweep" (an object).
/// Throws Error(kInvalidSpec) naming the file and the key, or the read error of core/json_fields.h.
nlohmann::json read_sweep(const std::string& path);

/// The axes of a sweep object; throws Error(kInvalidSpec) when a value is not a non-empty list or the product of the
/// lengths exceeds kMaxCandidates.
std::vector<Axis> sweep_axes(const nlohmann::json& sweep);

/// Sets a dotted field ("tile.block_n") in a spec document, creating missing objects; throws Error(kInvalidSpec)
/// when a prefix names a non-object.
void set_field(nlohmann::json& doc, const std::string& dotted, const nlohmann::json& value);

}  // namespace fa3jit::cli

// Chromium's screenshots, read back in the report tests: an 8-bit RGB or RGBA, non-interlaced PNG decoded
// with zlib into 0xRRGGBB pixels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddplab::testing {

struct Image {
  uint32_t width = 0, height = 0;
  std::vector<uint32_t> pixels;  // 0xRRGGBB
  uint32_t at(uint32_t x, uint32_t y) const { return pixels[static_cast<size_t>(y) * width + x]; }
};

// An empty Image for anything else (or a broken file).
Image decode_png(const std::string& png);

}  // namespace ddplab::testing

#include "tests/png.h"

#include <zlib.h>

#include <cstdlib>

namespace ddplab::testing {
namespace {

uint32_t be32(const std::string& s, size_t at) {
  return static_cast<uint32_t>(static_cast<unsigned char>(s[at])) << 24 |
         static_cast<uint32_t>(static_cast<unsigned char>(s[at + 1])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(s[at + 2])) << 8 |
         static_cast<uint32_t>(static_cast<unsigned char>(s[at + 3]));
}

}  // namespace

// An 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes), decoded with zlib.
Image decode_png(const std::string& png) {
  Image img;
  if (png.size() < 33 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return img;
  std::string idat;
  int channels = 0;
  for (size_t p = 8; p + 12 <= png.size();) {
    const uint32_t len = be32(png, p);
    const std::string type = png.substr(p + 4, 4);
    if (p + 12 + len > png.size()) return img;
    if (type == "IHDR") {
      img.width = be32(png, p + 8);
      img.height = be32(png, p + 12);
      const int depth = png[p + 16], colour = png[p + 17], interlace = png[p + 20];
      if (depth != 8 || interlace != 0 || (colour != 2 && colour != 6)) return Image{};
      channels = colour == 2 ? 3 : 4;
    } else if (type == "IDAT") {
      idat += png.substr(p + 8, len);
    }
    p += 12 + len;
  }
  const size_t stride = static_cast<size_t>(img.width) * static_cast<size_t>(channels);
  std::vector<unsigned char> raw((stride + 1) * img.height);
  uLongf raw_len = raw.size();
  if (channels == 0 ||
      uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_len != raw.size()) {
    return Image{};
  }
  std::vector<unsigned char> prev(stride, 0), cur(stride);
  for (uint32_t y = 0; y < img.height; ++y) {
    const unsigned char filter = raw[y * (stride + 1)];
    const unsigned char* in = &raw[y * (stride + 1) + 1];
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= static_cast<size_t>(channels) ? cur[i - channels] : 0, b = prev[i],
                c = i >= static_cast<size_t>(channels) ? prev[i - channels] : 0;
      int pred = 0;
      if (filter == 1) pred = a;
      if (filter == 2) pred = b;
      if (filter == 3) pred = (a + b) / 2;
      if (filter == 4) {
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      cur[i] = static_cast<unsigned char>(in[i] + pred);
    }
    for (uint32_t x = 0; x < img.width; ++x) {
      const unsigned char* px = &cur[x * static_cast<size_t>(channels)];
      img.pixels.push_back(static_cast<uint32_t>(px[0]) << 16 | static_cast<uint32_t>(px[1]) << 8 | px[2]);
    }
    prev = cur;
  }
  return img;
}

}  // namespace ddplab::testing

// libFuzzer target for the safetensors reader (issue 9), outside Bazel (Bazel builds with gcc; libFuzzer
// is clang's). Build and run with tests/manual/libfuzzer_safetensors.sh. Every input must end in a
// FormatError or a successful load: a crash, a sanitizer report or a leak is a finding.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "src/base/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The reader takes a path: an in-memory file (a regular file to stat) rewritten for every input.
  static const int fd = memfd_create("safetensors", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
  try {
    ddplab::safetensors::load(path);
  } catch (const ddplab::safetensors::FormatError&) {
  }
  return 0;
}

// The largest single allocation through operator new (see tests/fuzz.h). Linked whole into each fuzz test
// (alwayslink), so that these replacements are the program's.
#include "tests/fuzz.h"

#include <cstdlib>
#include <new>

// ---- The largest single allocation through operator new, to catch a size taken from the input. ----
// The replacements below pair malloc with free; GCC, seeing operator new's result reach free() after
// inlining, would warn about a mismatch that is none.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
std::atomic<size_t> g_largest{0};

namespace {
void* tracked_alloc(size_t n) noexcept {
  size_t prev = g_largest.load(std::memory_order_relaxed);
  while (n > prev && !g_largest.compare_exchange_weak(prev, n, std::memory_order_relaxed)) {
  }
  return std::malloc(n ? n : 1);
}
}  // namespace

void* operator new(size_t n) {
  if (void* p = tracked_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  if (void* p = tracked_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new(size_t n, const std::nothrow_t&) noexcept { return tracked_alloc(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return tracked_alloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

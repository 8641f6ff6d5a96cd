// A C++ library for dlopen_counted: it allocates 64-byte aligned objects
// and blocks through the aligned forms of operator new, which the test's
// other threads never use, so lowtide's aligned-call counter tells exactly
// whether this library's allocations reached lowtide.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#define DLC_API extern "C" __attribute__((visibility("default")))

namespace {

struct alignas(64) Cell {
  std::uint64_t v[8];
};

constexpr int kCtorCells = 100;
constexpr std::size_t kLarge = 3 * 1024 * 1024 + 4096;

struct Global {
  std::vector<Cell>* cells;  // the vector object: plain new; its storage: aligned new
  unsigned char* large;
  Global() {
    cells = new std::vector<Cell>(kCtorCells);
    for (int i = 0; i < kCtorCells; ++i) (*cells)[static_cast<std::size_t>(i)].v[0] = static_cast<std::uint64_t>(i);
    large = static_cast<unsigned char*>(::operator new(kLarge, std::align_val_t{64}));
    large[0] = 1;
    large[kLarge - 1] = 2;
  }
  ~Global() {
    ::operator delete(large, kLarge, std::align_val_t{64});
    delete cells;
  }
};

Global g;

}  // namespace

// operator new(size_t, align_val_t) as this library's own references to it
// were bound by the dynamic linker (taking its address goes through the same
// GOT entry the calls use).
DLC_API void* dlc_aligned_new_address() {
  return reinterpret_cast<void*>(static_cast<void* (*)(std::size_t, std::align_val_t)>(&::operator new));
}

// Aligned allocations the constructor made (the destructor frees them).
DLC_API int dlc_ctor_allocations() { return 2; }

// n small aligned objects and one large aligned block, built, summed and
// freed; returns the sum (the caller knows what it must be).
DLC_API std::uint64_t dlc_work(int n) {
  std::uint64_t sum = 0;
  for (int i = 0; i < n; ++i) {
    auto c = std::make_unique<Cell>();  // aligned operator new / delete
    asm volatile("" : : "r"(c.get()) : "memory");  // GCC may elide a new/delete pair it can see whole
    c->v[7] = static_cast<std::uint64_t>(i);
    sum += c->v[7];
  }
  auto* big = static_cast<unsigned char*>(::operator new(kLarge, std::align_val_t{64}));
  for (std::size_t i = 0; i < kLarge; i += 4096) big[i] = static_cast<unsigned char>(i >> 12);
  for (std::size_t i = 0; i < kLarge; i += 4096) sum += big[i];
  ::operator delete(big, std::align_val_t{64});
  if ((*g.cells)[5].v[0] != 5 || g.large[0] != 1 || g.large[kLarge - 1] != 2) return 0;
  return sum;
}

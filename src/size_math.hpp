// Size and alignment arithmetic shared by every path. Pure and constexpr so
// the unit tests check it exhaustively around the edges.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lowtide {

// glibc refuses any request above PTRDIFF_MAX (pointer differences inside the
// block must be representable); so do we, before any rounding can wrap.
constexpr std::size_t kMaxRequest = static_cast<std::size_t>(PTRDIFF_MAX);
// Every block is at least this aligned, as glibc's are on x86_64.
constexpr std::size_t kMinAlign = 16;

constexpr bool is_pow2(std::size_t x) { return x != 0 && (x & (x - 1)) == 0; }

// Round up to a multiple of a power of two; caller guarantees no overflow.
constexpr std::size_t round_up(std::size_t x, std::size_t a) { return (x + a - 1) & ~(a - 1); }

// Smallest power of two >= x (x <= 2^63); 1 for 0.
constexpr std::size_t next_pow2(std::size_t x) {
  if (x <= 1) return 1;
  return std::size_t{1} << (64 - __builtin_clzll(x - 1));
}

// n * size without wrapping; false on overflow.
constexpr bool checked_mul(std::size_t n, std::size_t size, std::size_t* out) {
  return !__builtin_mul_overflow(n, size, out);
}

// The size handed to mimalloc so every small block is 16-byte aligned:
// mimalloc's size classes for multiples of 16 are multiples of 16, its
// 8-byte class is not. 0 becomes 16 so malloc(0) is a unique block.
constexpr std::size_t small_request(std::size_t n) { return n <= kMinAlign ? kMinAlign : round_up(n, kMinAlign); }

// memalign/aligned_alloc semantics (glibc): alignment below the minimum is
// raised to it, a non-power-of-two is rounded up to the next power of two.
constexpr std::size_t effective_alignment(std::size_t align) {
  if (align <= kMinAlign) return kMinAlign;
  return is_pow2(align) ? align : next_pow2(align);
}

}  // namespace lowtide

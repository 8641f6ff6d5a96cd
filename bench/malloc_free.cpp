// ns per malloc+free pair on the small path, single thread: what lowtide's
// routing and counters add over the allocator underneath. Sizes cycle
// through 16..512 bytes; a ring of live blocks keeps it from being a pure
// same-slot loop.
#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const long iters = argc > 1 ? std::atol(argv[1]) : 20'000'000;
  constexpr int kRing = 64;
  void* ring[kRing] = {};
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < iters; ++i) {
    int slot = static_cast<int>(i & (kRing - 1));
    std::free(ring[slot]);
    void* volatile p = std::malloc(16 + static_cast<std::size_t>((i * 7) & 31) * 16);
    ring[slot] = p;
  }
  auto t1 = std::chrono::steady_clock::now();
  for (void* p : ring) std::free(p);
  double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(iters);
  std::printf("%.3f\n", ns);
  return 0;
}

// ns per malloc+free pair of a large block (256 KiB, reused from lowtide's
// cache, so no syscall and no fault): the baseline that call-site sampling
// (LOWTIDE_SITES) adds to. Run it with sites off and on; scripts/bench-sites
// interleaves the runs and prints medians.
#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const long iters = argc > 1 ? std::atol(argv[1]) : 2'000'000;
  const std::size_t size = argc > 2 ? static_cast<std::size_t>(std::atol(argv[2])) : std::size_t{256} << 10;
  void* warm = std::malloc(size);  // the first one maps its pages
  std::free(warm);
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < iters; ++i) {
    void* volatile p = std::malloc(size);
    std::free(p);
  }
  auto t1 = std::chrono::steady_clock::now();
  double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(iters);
  std::printf("%.3f\n", ns);
  return 0;
}

// What huge pages give large blocks that are written in full, the case
// LOWTIDE_HUGEPAGES weighs against sparse blocks (bench/sparse_touch.cpp).
// For each size (MiB): `fresh` allocates --hold MiB of blocks of that size
// at once, writes every byte, frees them (first touch of fresh pages: the
// fault cost); `loop` then runs temporaries like numpy's c = a * 2 + b:
// two blocks allocated, written in full, freed, per iteration, until --per
// MiB have been written (from the second iteration on they come back warm
// from lowtide's reuse cache). Prints one JSON line, seconds per phase.
//
// usage: dense_temps [--sizes-mask M] [--hold MiB] [--per MiB]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench_util.hpp"

namespace {
double secs(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

int main(int argc, char** argv) {
  const long hold = bench::opt(argc, argv, "--hold", 256);
  const long per = bench::opt(argc, argv, "--per", 1024);
  const long sizes[] = {2, 8, 32, 64};
  std::printf("{\"allocator\": \"%s\", \"hold_mib\": %ld, \"per_mib\": %ld", bench::allocator().c_str(), hold, per);
  for (long mib : sizes) {
    const std::size_t size = static_cast<std::size_t>(mib) << 20;
    std::vector<char*> held;
    auto t0 = std::chrono::steady_clock::now();
    for (long got = 0; got < hold; got += mib) {
      auto* p = static_cast<char*>(std::malloc(size));
      if (p == nullptr) return 1;
      std::memset(p, 1, size);
      held.push_back(p);
    }
    const double fresh = secs(t0);
    for (char* p : held) std::free(p);
    t0 = std::chrono::steady_clock::now();
    for (long done = 0; done < per; done += 2 * mib) {
      auto* a = static_cast<char*>(std::malloc(size));
      auto* b = static_cast<char*>(std::malloc(size));
      if (a == nullptr || b == nullptr) return 1;
      std::memset(a, 2, size);
      std::memset(b, 3, size);
      std::free(a);
      std::free(b);
    }
    std::printf(", \"fresh_%ldMiB_s\": %.4f, \"loop_%ldMiB_s\": %.4f", mib, fresh, mib, secs(t0));
  }
  std::printf("}\n");
  return 0;
}

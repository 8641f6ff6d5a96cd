// dlopen/dlclose a C++ library 300 times while 4 threads allocate. The
// library allocates 64-byte aligned objects and blocks with the aligned
// forms of operator new (in its global constructor and its work function;
// its destructor frees them); the other threads never use those. So lowtide's aligned-call counter must grow
// by exactly what the library asked for: its operator new/delete come to
// lowtide, not to libstdc++'s allocator or glibc's. The library must really
// unload each time, and at the end the live-byte counters are back at their
// start values.
//
// Usage: dlopen_counted <path to libdlcounted.so>

#include "stress_common.hpp"

#include <sched.h>
#include <thread>
#include <vector>

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace {

constexpr int kLoops = 300;
constexpr int kCells = 50;

std::atomic<bool> g_go{false}, g_stop{false};
std::atomic<long> g_ops{0};

void allocator_thread(unsigned id) {
  const std::size_t c = lt::cutoff();
  const std::size_t sizes[] = {32, 700, 9000, c - 1, c, 2 * c + 77, MiB};
  std::size_t k = id;
  while (!g_go.load()) sched_yield();
  while (!g_stop.load(std::memory_order_relaxed)) {
    lt::Block b = lt::make_block(sizes[k % 7], k);
    ++k;
    auto* v = new std::vector<std::string>(20, std::string(50, 's'));
    void* r = realloc(b.p, opaque(sizes[k % 7]));
    CHECK(r != nullptr);
    b.p = r;
    b.n = sizes[k % 7];
    delete v;
    free(b.p);
    g_ops.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace

int main(int argc, char** argv) {
  lt::arm_watchdog(100, "dlopen_counted");
  CHECK(argc == 2, "usage: dlopen_counted <libdlcounted.so>");
  const char* path = argv[1];

  // The library's references to operator new resolve in the global scope
  // first: the preloaded lowtide must be what they find.
  void* h0 = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  CHECK(h0 != nullptr, "dlopen: %s", dlerror());
  Dl_info info{};
  void* anew = lt::dl_sym<void* (*)()>(h0, "dlc_aligned_new_address")();
  CHECK(anew != nullptr && dladdr(anew, &info) != 0 && info.dli_fname != nullptr &&
            std::strstr(info.dli_fname, "liblowtide") != nullptr,
        "the library's operator new(size_t, align_val_t) resolves to %s, not lowtide",
        info.dli_fname ? info.dli_fname : "?");
  CHECK(dlclose(h0) == 0);
  lt::warm_thread_cache(4);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 4; ++t) threads.emplace_back(allocator_thread, t);
  // Once a process has threads, ld.so keeps a list for deferred frees of
  // scope arrays (allocated at the first dlclose that needs it, then kept):
  // let that happen before counting starts, with the threads waiting.
  for (int i = 0; i < 3; ++i) {
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK(h != nullptr && dlclose(h) == 0, "warm-up dlopen: %s", dlerror());
  }

  const lt::Live start = lt::start_counting("dlopen_counted");
  const std::uint64_t aligned0 = lt::read_stats().aligned_calls;
  g_go = true;
  const double t0 = lt::now_seconds();
  int unloaded = 0;
  std::uint64_t expected = 0;
  // At least kLoops, and on until the other threads have run at all (on a
  // loaded machine the 300 can end before they are scheduled: 0
  // operations, and nothing concurrent was tested), up to a minute.
  int loops = 0;
  for (int i = 0; i < kLoops || (g_ops.load() == 0 && lt::now_seconds() - t0 < 60); ++i, ++loops) {
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK(h != nullptr, "dlopen #%d: %s", i, dlerror());
    auto ctor_allocs = lt::dl_sym<int (*)()>(h, "dlc_ctor_allocations");
    auto work = lt::dl_sym<std::uint64_t (*)(int)>(h, "dlc_work");
    std::uint64_t want = static_cast<std::uint64_t>(kCells) * (kCells - 1) / 2;
    for (std::size_t k = 0; k < 3 * MiB + 4096; k += 4096) want += static_cast<unsigned char>(k >> 12);
    const std::uint64_t got = work(kCells);
    CHECK(got == want, "dlopen #%d: the library's work gave %" PRIu64 ", expected %" PRIu64, i, got, want);
    expected += static_cast<std::uint64_t>(ctor_allocs() + kCells + 1);
    CHECK(dlclose(h) == 0, "dlclose #%d: %s", i, dlerror());
    void* still = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (still == nullptr) ++unloaded;
    else dlclose(still);
  }
  g_stop = true;
  for (auto& t : threads) t.join();
  const std::uint64_t aligned = lt::read_stats().aligned_calls - aligned0;
  std::printf("dlopen_counted: %d dlopen/dlclose (%d really unloaded) in %.1f s, %ld operations on 4 other "
              "threads; aligned operator new calls counted by lowtide: %" PRIu64 ", made by the library: %" PRIu64
              "\n",
              loops, unloaded, lt::now_seconds() - t0, g_ops.load(), aligned, expected);
  CHECK(unloaded == loops, "the library stayed loaded after %d of %d dlclose calls", loops - unloaded, loops);
  CHECK(aligned == expected, "lowtide counted %" PRIu64 " aligned allocations, the library made %" PRIu64, aligned,
        expected);
  CHECK(g_ops.load() > 0);
  lt::check_balanced(start, "dlopen_counted");
  std::printf("PASS dlopen_counted\n");
  return 0;
}

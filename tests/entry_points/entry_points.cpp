// Allocator entry points under glibc 2.36 semantics.
//
// Must pass under plain glibc (no preload) too: it documents the contract the
// shim has to keep. Checks that only make sense for lowtide (its extra exports,
// glibc bugs lowtide is expected not to copy) run only when LOWTIDE_TEST_LIB
// is set.
//
// The whole set runs once single-threaded (clear first failure), then from 4
// threads concurrently in a loop, bounded by iterations and wall time. The
// tests themselves are in entry_*.cpp, one file per family; this file is the
// driver.

#include "entry_points.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace {

using namespace entry;

struct Test {
  const char* name;
  void (*fn)();
};

const Test kTests[] = {
    {"alignment", test_alignment},
    {"malloc_zero", test_malloc_zero},
    {"overflow", test_overflow},
    {"realloc_semantics", test_realloc_semantics},
    {"free_errno", test_free_errno},
    {"aligned_alloc", test_aligned_alloc},
    {"memalign", test_memalign},
    {"posix_memalign", test_posix_memalign},
    {"valloc_pvalloc", test_valloc},
    {"usable_size", test_usable_size},
    {"operator_new_failure", test_operator_new_failure},
    {"new_delete_forms", test_new_delete_forms},
    {"new_bad_alignment", test_new_bad_alignment},
    {"large_aligned", test_large_aligned},
    {"calloc_large", test_calloc_large},
    {"realloc_transitions", test_realloc_transitions},
    {"madvise_split_realloc", [] { test_madvise_split_realloc(false); }},
    {"reallocarray", test_reallocarray},
    {"trim_mallinfo", test_trim_mallinfo},
    {"cross_thread_frees", test_cross_thread_frees},
};

}  // namespace

int main() {
  lt::arm_watchdog(150, "entry_points");
  g_lowtide = lt::under_lowtide();
  g_cutoff = lt::cutoff();
  std::printf("entry_points: %s, cutoff %zu\n", g_lowtide ? "lowtide checks on" : "plain semantics only", g_cutoff);

  // Pass 1: single-threaded, one line per test so a failure is easy to place.
  for (const Test& t : kTests) {
    std::printf("  %-24s ", t.name);
    std::fflush(stdout);
    t.fn();
    std::printf("ok\n");
  }
  test_madvise_split_realloc(true);
  test_kernel_refusal(true);
  std::printf("  %-24s ", "mallinfo_in_use");
  std::fflush(stdout);
  test_mallinfo_in_use();
  std::printf("ok\n");
  if (g_lowtide) {
    std::printf("  %-24s ", "extra_exports");
    std::fflush(stdout);
    test_extra_exports();
    std::printf("ok\n");
  }

  // Pass 2: the whole set from 4 threads concurrently, bounded.
  constexpr int kWorkers = 4;
  constexpr int kMaxRounds = 12;
  constexpr double kMaxSeconds = 25.0;
  const double deadline = lt::now_seconds() + kMaxSeconds;
  std::atomic<int> rounds_done{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      for (int round = 0; round < kMaxRounds && lt::now_seconds() < deadline; ++round) {
        for (std::size_t i = 0; i < sizeof kTests / sizeof kTests[0]; ++i) {
          // rotate the order per worker so different tests overlap
          const Test& t = kTests[(i + static_cast<std::size_t>(w) * 5) % (sizeof kTests / sizeof kTests[0])];
          t.fn();
        }
        if (g_lowtide) test_extra_exports();
        rounds_done.fetch_add(1);
      }
    });
  }
  for (auto& t : workers) t.join();
  std::printf("concurrent: %d rounds over %d threads ok\n", rounds_done.load(), kWorkers);
  CHECK(rounds_done.load() >= kWorkers, "concurrent phase did not complete a single round per thread");
  std::printf("PASS entry_points\n");
  return 0;
}
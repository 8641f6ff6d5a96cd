// fork() while other threads hammer the allocator.
//
// 3 threads continuously malloc/free/realloc small and large blocks (crossing
// the cutoff both ways). The main thread forks 300 times. Each child:
//   - verifies and frees blocks it inherited (small and large, allocated by
//     the parent just before the fork),
//   - mallocs/reallocs/frees small and large blocks of its own,
//   - _exit(0)s.
// A child that deadlocks (allocator lock held by a thread that does not exist
// in the child) is killed after 10 s and the test fails.

#include "lowtide_test.hpp"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include <malloc.h>
#include <sys/resource.h>

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace {

std::atomic<bool> g_stop{false};

// Light marking for the churn threads: head, tail and one byte per 64 KiB.
// (Touching every page of every block makes each fork() copy far more page
// tables and slows the test down without testing anything more.)
void mark(void* p, std::size_t n, unsigned seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n && i < 256; ++i) b[i] = lt::pattern_byte(i, seed);
  for (std::size_t i = 256; i < n; i += 64 * KiB) b[i] = lt::pattern_byte(i, seed);
  b[n - 1] = lt::pattern_byte(n - 1, seed);
}
bool marked(const void* p, std::size_t n, unsigned seed) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n && i < 256; ++i)
    if (b[i] != lt::pattern_byte(i, seed)) return false;
  for (std::size_t i = 256; i < n; i += 64 * KiB)
    if (b[i] != lt::pattern_byte(i, seed)) return false;
  return b[n - 1] == lt::pattern_byte(n - 1, seed);
}
std::atomic<long> g_churn_ops{0};

void churn(unsigned id) {
  const std::size_t c = lt::cutoff();
  const std::size_t sizes[] = {16, 100, 3000, 40 * KiB, c - 16, c, c + 100, 2 * c, 5 * c / 2};
  constexpr int kSlots = 12;
  void* slot[kSlots] = {};
  std::size_t slot_n[kSlots] = {};
  unsigned rng = 12345u + id * 7919u;
  auto next = [&rng] {
    rng = rng * 1103515245u + 12345u;
    return rng >> 8;
  };
  while (!g_stop.load(std::memory_order_relaxed)) {
    const unsigned i = next() % kSlots;
    const std::size_t n = sizes[next() % (sizeof sizes / sizeof sizes[0])];
    if (slot[i] == nullptr) {
      slot[i] = (next() & 1) ? malloc(opaque(n)) : calloc(1, opaque(n));
      CHECK(slot[i] != nullptr, "churn: allocation of %zu failed", n);
      slot_n[i] = n;
      mark(slot[i], n, id);
    } else if (next() & 1) {
      CHECK(marked(slot[i], slot_n[i], id), "churn: block corrupted");
      const std::size_t old_n = slot_n[i];
      void* q = realloc(slot[i], opaque(n));
      CHECK(q != nullptr, "churn: realloc to %zu failed", n);
      // head and the 64 KiB-stride marks below min(old, new) survive realloc
      const std::size_t keep = std::min(old_n, n);
      CHECK(marked(q, std::min(keep, std::size_t{256}), id), "churn: realloc %zu -> %zu lost data",
            old_n, n);
      for (std::size_t k = 256; k < keep && k < old_n - 1; k += 64 * KiB)
        CHECK(static_cast<unsigned char*>(q)[k] == lt::pattern_byte(k, id), "churn: realloc %zu -> %zu lost data",
              old_n, n);
      slot[i] = q;
      slot_n[i] = n;
      mark(q, n, id);
    } else {
      CHECK(marked(slot[i], slot_n[i], id), "churn: block corrupted");
      free(slot[i]);
      slot[i] = nullptr;
    }
    g_churn_ops.fetch_add(1, std::memory_order_relaxed);
  }
  for (void* p : slot) free(p);
}

[[noreturn]] void child_body(void* inherited_small, void* inherited_large, std::size_t large_n, unsigned seed) {
  // Anything going wrong in here must show up as a non-zero exit status.
  alarm(10);  // alarms are not inherited across fork; re-arm for the child
  if (lt::find_pattern_mismatch(inherited_small, 200, seed) != SIZE_MAX) _exit(10);
  if (lt::find_pattern_mismatch(inherited_large, large_n, seed, 4096) != SIZE_MAX) _exit(11);
  free(opaque(inherited_small));
  free(opaque(inherited_large));

  const std::size_t c = lt::cutoff();
  void* s = malloc(opaque(std::size_t{64}));
  void* l = malloc(opaque(3 * c));
  if (s == nullptr || l == nullptr) _exit(12);
  mark(l, 3 * c, 1);
  void* s2 = realloc(s, opaque(2 * c));  // small -> large
  if (s2 == nullptr) _exit(13);
  void* l2 = realloc(l, opaque(c / 8));  // large -> small
  if (l2 == nullptr) _exit(14);
  if (!marked(l2, 256, 1)) _exit(15);
  for (std::size_t k = 256; k < c / 8; k += 64 * KiB)
    if (static_cast<unsigned char*>(l2)[k] != lt::pattern_byte(k, 1)) _exit(15);
  void* z = calloc(opaque(c), 2);
  if (z == nullptr || static_cast<unsigned char*>(z)[2 * c - 1] != 0) _exit(16);
  auto* obj = new std::vector<int>(1000, 7);
  delete obj;
  free(z);
  free(l2);
  free(s2);
  _exit(0);
}

}  // namespace

int main() {
  lt::arm_watchdog(240, "fork_stress");
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);

  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 3; ++t) threads.emplace_back(churn, t);

  const std::size_t large_n = 2 * lt::cutoff() + 300;
  constexpr int kForks = 300;
  int failures = 0;
  double slowest = 0;
  for (int i = 0; i < kForks; ++i) {
    const unsigned seed = static_cast<unsigned>(i);
    void* small = malloc(opaque(std::size_t{200}));
    void* large = malloc(opaque(large_n));
    CHECK(small != nullptr && large != nullptr);
    lt::fill_pattern(small, 200, seed);
    lt::fill_pattern(large, large_n, seed, 4096);

    const double t0 = lt::now_seconds();
    pid_t pid = fork();
    CHECK(pid >= 0, "fork #%d failed: %s", i, std::strerror(errno));
    if (pid == 0) child_body(small, large, large_n, seed);

    // Parent keeps using (and frees) its own copies.
    CHECK(lt::find_pattern_mismatch(large, large_n, seed, 4096) == SIZE_MAX, "parent block damaged by fork");
    free(small);
    free(large);

    int status = 0;
    if (!lt::wait_bounded(pid, 10.0, &status)) {
      std::fprintf(stderr, "FAIL: fork #%d: child %d did not exit within 10 s (deadlock after fork?); killed\n", i,
                   static_cast<int>(pid));
      ++failures;
      break;
    }
    const double dt = lt::now_seconds() - t0;
    if (dt > slowest) slowest = dt;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      char desc[128];
      lt::describe_status(status, desc, sizeof desc);
      std::fprintf(stderr, "FAIL: fork #%d: child %s (10/11: inherited block corrupt, 12-16: alloc failure, "
                   "3: child watchdog fired)\n", i, desc);
      if (++failures >= 5) break;
    }
  }
  g_stop = true;
  for (auto& t : threads) t.join();
  std::printf("fork_stress: %d forks, %ld churn ops, slowest child %.3f s, %d failures\n", kForks,
              g_churn_ops.load(), slowest, failures);
  CHECK(failures == 0, "%d child failures", failures);
  CHECK(g_churn_ops.load() > 0, "churn threads made no progress");
  std::printf("PASS fork_stress\n");
  return 0;
}

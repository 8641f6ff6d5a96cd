// fork, posix_spawn and vfork+exec while 4 threads are inside malloc, free
// and realloc (small, at the cutoff, large, crossing it both ways).
//   - 300 forks. Before each, the main thread allocates 24 checksummed blocks
//     of every size class. The child checks and frees them, checks that its
//     own counters fell by exactly their usable sizes, allocates and reallocs
//     across the cutoff, starts a thread that allocates, and exits 0.
//   - 100 posix_spawn and 100 vfork+execve of this program in child mode:
//     it allocates, frees, and checks that its counters balance.
// Every wait is bounded (10 s per child); a child that hangs (an allocator
// lock held by a thread that does not exist in it) is killed and fails the
// test.

#include "stress_common.hpp"

#include <spawn.h>
#include <thread>
#include <vector>

#include <malloc.h>

using lt::KiB;
using lt::MiB;
using lt::opaque;

extern char** environ;

namespace {

constexpr int kChurners = 4;
constexpr int kForks = 300;
constexpr int kSpawns = 100;
constexpr int kVforks = 100;
constexpr double kChildSeconds = 10;

std::atomic<bool> g_stop{false};
std::atomic<long> g_ops{0};

void churn(unsigned id) {
  const std::size_t c = lt::cutoff();
  const std::size_t sizes[] = {16, 200, 3000, 60 * KiB, c - 16, c, c + 100, 3 * c, MiB + 5};
  constexpr int kHeld = 16;
  lt::Block held[kHeld];
  std::uint64_t x = 88172645463325252ull + id;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  while (!g_stop.load(std::memory_order_relaxed)) {
    lt::Block& b = held[next() % kHeld];
    const std::size_t n = sizes[next() % (sizeof sizes / sizeof sizes[0])];
    if (b.p == nullptr) {
      b = lt::make_block(n, next());
    } else if (next() & 1) {
      lt::verify(b, "churn before realloc");
      const std::size_t keep = n < b.n ? n : b.n;
      const std::uint64_t prefix = lt::checksum(b.p, keep);
      void* q = realloc(b.p, opaque(n));
      CHECK(q != nullptr && lt::checksum(q, keep) == prefix, "churn: realloc %zu -> %zu", b.n, n);
      lt::scribble(q, n, next());
      b = {q, n, lt::checksum(q, n)};
    } else {
      lt::drop(b, "churn");
    }
    g_ops.fetch_add(1, std::memory_order_relaxed);
  }
  for (lt::Block& b : held)
    if (b.p != nullptr) lt::drop(b, "churn end");
}

// Counters without the consistency check: in a forked child another
// thread's update may have been cut in half by the fork.
lt::Live raw_live() {
  const lowtide_stats s = lt::read_stats();
  return {static_cast<std::int64_t>(s.small_out - s.small_freed),
          static_cast<std::int64_t>(s.large_out - s.large_freed)};
}

// Allocation work whose counts must cancel out.
void balanced_work(int rounds) {
  const std::size_t c = lt::cutoff();
  for (int i = 0; i < rounds; ++i) {
    lt::Block a = lt::make_block(64 + static_cast<std::size_t>(i), 7);
    lt::Block l = lt::make_block(3 * c + static_cast<std::size_t>(i), 8);
    const std::uint64_t head = lt::checksum(a.p, 64);
    void* up = realloc(a.p, opaque(2 * c));  // small -> large
    CHECK(up != nullptr && lt::checksum(up, 64) == head, "realloc up lost data");
    const std::uint64_t lhead = lt::checksum(l.p, c / 8);
    void* down = realloc(l.p, opaque(c / 8));  // large -> small
    CHECK(down != nullptr && lt::checksum(down, c / 8) == lhead, "realloc down lost data");
    auto* v = new std::vector<int>(1000, i);
    delete v;
    free(up);
    free(down);
  }
}

[[noreturn]] void fork_child(std::vector<lt::Block>& inherited) {
  alarm(static_cast<unsigned>(kChildSeconds));  // alarms are not inherited across fork
  const lt::Live before = raw_live();
  std::int64_t small_usable = 0, large_usable = 0;
  const std::size_t c = lt::cutoff();
  for (lt::Block& b : inherited) {
    (b.n >= c ? large_usable : small_usable) += static_cast<std::int64_t>(malloc_usable_size(b.p));
    lt::drop(b, "block inherited by the child");
  }
  balanced_work(3);
  const lt::Live after = raw_live();
  CHECK(before.small - after.small == small_usable && before.large - after.large == large_usable,
        "child counters: small fell by %" PRId64 " (freed %" PRId64 "), large by %" PRId64 " (freed %" PRId64 ")",
        before.small - after.small, small_usable, before.large - after.large, large_usable);
  std::thread t([] { balanced_work(2); });
  t.join();
  _exit(0);
}

int wait_child(pid_t pid, const char* what, int i) {
  int status = 0;
  CHECK(lt::wait_bounded(pid, kChildSeconds + 5, &status), "%s #%d: child %d did not finish in time (hang?); killed",
        what, i, static_cast<int>(pid));
  char desc[128];
  lt::describe_status(status, desc, sizeof desc);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s #%d: child %s", what, i, desc);
  return 0;
}

__attribute__((noinline)) pid_t vfork_exec(char* path, char** argv) {
  pid_t pid = vfork();
  if (pid == 0) {
    execve(path, argv, environ);
    _exit(127);
  }
  return pid;
}

int exec_child_main() {
  alarm(static_cast<unsigned>(kChildSeconds));
  balanced_work(1);  // lowtide's lazily created pieces (the decay thread) exist from here on
  const lt::Live start = lt::live_now();
  balanced_work(5);
  const lt::Live end = lt::live_now();
  CHECK(end.small == start.small && end.large == start.large, "exec'd child: counters do not balance");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--exec-child") == 0) return exec_child_main();
  lt::arm_watchdog(200, "fork_busy");
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  CHECK(len > 0);
  self[len] = '\0';
  char mode[] = "--exec-child";
  char* child_argv[] = {self, mode, nullptr};

  const double t0 = lt::now_seconds();
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kChurners; ++t) threads.emplace_back(churn, t);

  const std::size_t c = lt::cutoff();
  const std::size_t sizes[] = {8, 100, 1000, 20 * KiB, c - 1, c, 2 * c, 5 * MiB / 2};
  for (int i = 0; i < kForks; ++i) {
    std::vector<lt::Block> blocks;
    blocks.reserve(24);
    for (int k = 0; k < 24; ++k) blocks.push_back(lt::make_block(sizes[k % 8] + static_cast<std::size_t>(i), static_cast<std::uint64_t>(i * 24 + k)));
    std::fflush(stdout);
    const pid_t pid = fork();
    CHECK(pid >= 0, "fork #%d: %s", i, std::strerror(errno));
    if (pid == 0) fork_child(blocks);
    for (lt::Block& b : blocks) lt::drop(b, "parent's block after fork");
    wait_child(pid, "fork", i);
    if (i % 100 == 99) std::printf("  %d forks, %.1f s\n", i + 1, lt::now_seconds() - t0);
  }
  for (int i = 0; i < kSpawns; ++i) {
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, self, nullptr, nullptr, child_argv, environ);
    CHECK(rc == 0, "posix_spawn #%d: %s", i, std::strerror(rc));
    wait_child(pid, "posix_spawn", i);
  }
  for (int i = 0; i < kVforks; ++i) {
    const pid_t pid = vfork_exec(self, child_argv);
    CHECK(pid > 0, "vfork #%d: %s", i, std::strerror(errno));
    wait_child(pid, "vfork+execve", i);
  }
  g_stop = true;
  for (auto& t : threads) t.join();
  std::printf("fork_busy: %d threads churning (%ld operations), %d forks, %d posix_spawn, %d vfork+execve, "
              "%.1f s\n",
              kChurners, g_ops.load(), kForks, kSpawns, kVforks, lt::now_seconds() - t0);
  CHECK(g_ops.load() > 0, "the churn threads did nothing");
  std::printf("PASS fork_busy\n");
  return 0;
}

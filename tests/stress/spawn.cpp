// posix_spawn and vfork+execve while other threads allocate.
//
// glibc's posix_spawn uses clone(CLONE_VM|CLONE_VFORK): the child runs on the
// parent's memory, and anything the preloaded allocator does in that window
// (or in an atfork handler) can corrupt the parent or deadlock.
//   - 200 x posix_spawn("/bin/true")            -> exit status 0 each
//   - posix_spawn of a nonexistent binary       -> ENOENT returned (glibc 2.36)
//   - posix_spawnp("sh", "-c", "exit 7")         -> exit status 7
//   - 50 x vfork + execve("/bin/true")           -> exit status 0
//   - vfork + execve of a nonexistent binary    -> child _exit(127), parent intact
// Every wait is bounded.

#include "lowtide_test.hpp"

#include <atomic>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <spawn.h>

using lt::KiB;
using lt::opaque;

extern char** environ;

namespace {

std::atomic<bool> g_stop{false};
std::atomic<long> g_ops{0};

void allocator_thread(unsigned id) {
  const std::size_t c = lt::cutoff();
  const std::size_t sizes[] = {8, 64, 512, 4 * KiB, 100 * KiB, c, 2 * c + 8};
  std::vector<std::pair<void*, std::size_t>> live;
  unsigned k = id;
  while (!g_stop.load(std::memory_order_relaxed)) {
    const std::size_t n = sizes[k++ % (sizeof sizes / sizeof sizes[0])];
    void* p = malloc(opaque(n));
    CHECK(p != nullptr, "allocation of %zu failed", n);
    lt::fill_pattern(p, n, id, 4096);
    live.emplace_back(p, n);
    if (live.size() > 12) {
      for (auto& [q, qn] : live) {
        CHECK(lt::find_pattern_mismatch(q, qn, id, 4096) == SIZE_MAX, "block corrupted while spawning");
        free(q);
      }
      live.clear();
    }
    g_ops.fetch_add(1, std::memory_order_relaxed);
  }
  for (auto& [q, qn] : live) free(q);
}

int wait_exit_code(pid_t pid, const char* what, int index) {
  int status = 0;
  CHECK(lt::wait_bounded(pid, 10.0, &status), "%s #%d: child %d did not finish within 10 s", what, index,
        static_cast<int>(pid));
  if (!WIFEXITED(status)) {
    char desc[128];
    lt::describe_status(status, desc, sizeof desc);
    CHECK(false, "%s #%d: child %s", what, index, desc);
  }
  return WEXITSTATUS(status);
}

// The vfork child must never return from the function that called vfork, so
// the whole child side lives here (and keeps -Wclobbered quiet in main).
__attribute__((noinline)) pid_t vfork_exec(char* path, char** argv) {
  pid_t pid = vfork();
  if (pid == 0) {
    execve(path, argv, environ);
    _exit(127);
  }
  return pid;
}

}  // namespace

int main() {
  lt::arm_watchdog(150, "spawn");
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 3; ++t) threads.emplace_back(allocator_thread, t);

  char arg_true[] = "/bin/true";
  char* argv_true[] = {arg_true, nullptr};

  for (int i = 0; i < 200; ++i) {
    // Keep the parent's heap busy across the spawn as well.
    void* before = malloc(opaque(2 * lt::cutoff()));
    CHECK(before != nullptr);
    lt::fill_pattern(before, 2 * lt::cutoff(), 77, 4096);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, "/bin/true", nullptr, nullptr, argv_true, environ);
    CHECK(rc == 0, "posix_spawn #%d failed: %s", i, std::strerror(rc));
    CHECK(wait_exit_code(pid, "posix_spawn /bin/true", i) == 0, "/bin/true #%d exited non-zero", i);
    CHECK(lt::find_pattern_mismatch(before, 2 * lt::cutoff(), 77, 4096) == SIZE_MAX, "block damaged by spawn");
    free(before);
  }

  {
    char missing[] = "/nonexistent/lowtide-no-such-binary";
    char* argv_missing[] = {missing, nullptr};
    pid_t pid = -1;
    int rc = posix_spawn(&pid, missing, nullptr, nullptr, argv_missing, environ);
    CHECK(rc == ENOENT, "posix_spawn(nonexistent) returned %d (%s), expected ENOENT", rc, std::strerror(rc));
  }
  {
    char sh[] = "sh", dash_c[] = "-c", cmd[] = "exit 7";
    char* argv_sh[] = {sh, dash_c, cmd, nullptr};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    int rc = posix_spawnp(&pid, "sh", &fa, nullptr, argv_sh, environ);
    posix_spawn_file_actions_destroy(&fa);
    CHECK(rc == 0, "posix_spawnp(sh) failed: %s", std::strerror(rc));
    CHECK(wait_exit_code(pid, "posix_spawnp sh", 0) == 7, "sh -c 'exit 7' gave the wrong status");
  }

  for (int i = 0; i < 50; ++i) {
    pid_t pid = vfork_exec(arg_true, argv_true);
    CHECK(pid > 0, "vfork #%d failed: %s", i, std::strerror(errno));
    CHECK(wait_exit_code(pid, "vfork+execve /bin/true", i) == 0, "vfork child #%d exited non-zero", i);
  }
  {
    char missing[] = "/nonexistent/lowtide-no-such-binary";
    char* argv_missing[] = {missing, nullptr};
    pid_t pid = vfork_exec(missing, argv_missing);
    CHECK(pid > 0);
    CHECK(wait_exit_code(pid, "vfork+execve nonexistent", 0) == 127, "expected 127 from failed execve");
    void* p = malloc(opaque(3 * lt::cutoff()));  // parent's allocator still fine
    CHECK(p != nullptr);
    free(p);
  }

  g_stop = true;
  for (auto& t : threads) t.join();
  std::printf("spawn: 200 posix_spawn + 51 vfork, %ld allocator ops meanwhile\n", g_ops.load());
  CHECK(g_ops.load() > 0);
  std::printf("PASS spawn\n");
  return 0;
}

// A fork right after the large allocation that starts the live server never
// leaves the child the server's socket. The server makes its listening
// socket on its own thread (src/live.cpp, open_listening: moving it above
// fd 1023 grows the fd table, milliseconds the allocating thread used to
// wait), so it appears a moment after that allocation returns, and a fork in
// that moment must either come before the socket exists or wait until
// lowtide's fork handler knows of it (a window of the fork gate), never copy
// a socket its handler cannot close. Each round is a fresh process (a
// fork of this one, which has no lowtide thread: it makes no large
// allocation): it starts a thread of its own (three rounds in four; the
// fourth is alone, where the allocating thread makes the socket), allocates
// 4 MiB, waits 0-15 ms (the socket is being made then), forks, and its
// child lists /proc/self/fd: any socket there that the round did not have
// before its allocation is lowtide's (this program opens none; one it
// inherited, a runner's stdout that is a socket, is not counted: with it,
// all 200 children failed). Made outside the gate, 108 of the 200 children
// held the socket (an unnamed one while it was being moved high); inside
// it, none. A fork that took 1 s or more (the gate's wait is bounded) is
// counted apart, as in fork_live_fds.
#include "stress_common.hpp"

#include <dirent.h>
#include <sys/wait.h>

namespace {

// The sockets the round had before its large allocation (inherited ones:
// a test runner's stdout may be a socket, e.g. under systemd's journal),
// as readlink names them ("socket:[inode]"): not lowtide's.
char g_before[64][48];
int g_n_before = 0;

void note_sockets_before() {
  g_n_before = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.' || std::atoi(e->d_name) == dirfd(d) || g_n_before == 64) continue;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    const ssize_t n = readlink(path, g_before[g_n_before], sizeof g_before[0] - 1);
    if (n <= 0) continue;
    g_before[g_n_before][n] = '\0';
    if (std::strncmp(g_before[g_n_before], "socket:", 7) == 0) ++g_n_before;
  }
  closedir(d);
}

int child_check() {
  return lt::child_fds_check([](int, const char* target) {
    if (std::strncmp(target, "socket:", 7) != 0) return false;
    for (int i = 0; i < g_n_before; ++i)
      if (std::strcmp(target, g_before[i]) == 0) return false;
    return true;
  });
}

// One round, in a fresh child of the test: 0 clean, 3 a leak, 5 a leak
// after a slow fork, other values an error.
void* idle(void*) {
  const timespec ts{0, 200'000'000};
  nanosleep(&ts, nullptr);
  return nullptr;
}

int round_main(unsigned seed, bool threaded) {
  // With a thread of its own the process's socket is made on the server's
  // thread (the racy path); alone, by the allocating thread before any
  // thread exists (live::prepare), under the start lock a fork waits for.
  pthread_t t{};
  note_sockets_before();
  if (threaded && pthread_create(&t, nullptr, &idle, nullptr) != 0) return 10;
  void* big = std::malloc(std::size_t{4} << 20);  // starts the decay thread and the live server
  if (big == nullptr) return 6;
  const timespec pause{0, static_cast<long>(seed % 15'000) * 1'000};
  nanosleep(&pause, nullptr);
  const double t0 = lt::now_seconds();
  const pid_t pid = fork();
  if (pid < 0) return 7;
  if (pid == 0) _exit(child_check());
  const bool slow = lt::now_seconds() - t0 >= 1.0;
  int status = 0;
  if (!lt::wait_bounded(pid, 10, &status) || !WIFEXITED(status)) return 8;
  std::free(big);
  if (threaded) pthread_join(t, nullptr);
  if (WEXITSTATUS(status) == 3) return slow ? 5 : 3;
  return WEXITSTATUS(status) == 0 ? 0 : 9;
}

}  // namespace

int main() {
  lt::arm_watchdog(150, "fork_live_start");
  constexpr int kRounds = 200;
  int leaked = 0, excused = 0;
  lt::Rng rng{0x5eed1234};
  for (int k = 0; k < kRounds; ++k) {
    const unsigned seed = static_cast<unsigned>(rng.next());
    const pid_t pid = fork();
    CHECK(pid >= 0, "fork: %s", std::strerror(errno));
    if (pid == 0) _exit(round_main(seed, k % 4 != 0));
    int status = 0;
    CHECK(lt::wait_bounded(pid, 30, &status), "round %d did not end", k);
    CHECK(WIFEXITED(status), "round %d ended by signal %d", k, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    const int rc = WEXITSTATUS(status);
    CHECK(rc == 0 || rc == 3 || rc == 5, "round %d: error %d", k, rc);
    leaked += rc == 3;
    excused += rc == 5;
  }
  std::printf("fork_live_start: %d rounds, %d children with the live server's socket after a fast fork, %d after "
              "a slow one\n",
              kRounds, leaked, excused);
  CHECK(leaked == 0, "%d children of a fork under 1 s inherited the live server's socket", leaked);
  return 0;
}

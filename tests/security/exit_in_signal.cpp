// Item 1 of docs/security.md: a signal handler that calls _exit() (which is
// async-signal-safe) while the interrupted code is inside lowtide, with the
// exit-time report on. The report must not wait for a lock the interrupted
// code holds (the reuse cache's, the arena's, the thread registry's) nor
// allocate through them: every child must end, with the status it asked
// for, and its report must be there (marked partial where a lock was held).
//
// Each child first runs a few hundred short-lived threads (so the report has
// many rows, which made its buffers large blocks), then loops on large
// allocations and frees, which take the cache and arena locks, until an
// interval timer's SIGALRM lands; the handler calls _exit(kStatus). The
// parent bounds every wait and fails on a hang.
//
// A second set of children leaves by exit() while two other threads keep
// allocating, freeing and growing large blocks: the exit-time report runs
// while those threads take and release the same locks, and must neither
// wait for them nor stop them.
#include <pthread.h>
#include <sys/time.h>

#include <cstring>
#include <string>
#include <vector>

#include "../lowtide_test.hpp"

namespace {

constexpr int kChildren = 24;
constexpr int kRacers = 8;
constexpr int kThreads = 300;
constexpr int kStatus = 42;

extern "C" void on_alarm(int) { _exit(kStatus); }

void* touch(void*) {
  void* p = malloc(64);
  free(lt::opaque(p));
  return nullptr;
}

[[noreturn]] void child(int i) {
  for (int t = 0; t < kThreads; ++t) {
    pthread_t th;
    CHECK(pthread_create(&th, nullptr, touch, nullptr) == 0);
    CHECK(pthread_join(th, nullptr) == 0);
  }
  struct sigaction sa{};
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  CHECK(sigaction(SIGALRM, &sa, nullptr) == 0);
  // A different phase in each child, so the signal lands at many points.
  itimerval it{};
  it.it_value.tv_usec = 2000 + 397 * i;
  CHECK(setitimer(ITIMER_REAL, &it, nullptr) == 0);
  const std::size_t sizes[] = {200 << 10, 1 << 20, 3 << 20, 640 << 10};
  void* held[8] = {};
  for (unsigned long k = 0;; ++k) {
    unsigned slot = k % 8;
    free(held[slot]);
    held[slot] = malloc(lt::opaque(sizes[k % 4]));
    if (held[slot] != nullptr) static_cast<char*>(held[slot])[0] = 1;
    void* r = realloc(malloc(300 << 10), lt::opaque(std::size_t{900} << 10));
    free(r);
  }
}

void* churn(void*) {
  void* held[4] = {};
  for (unsigned long k = 0;; ++k) {
    unsigned slot = k % 4;
    free(held[slot]);
    held[slot] = malloc(lt::opaque(std::size_t{150} << 10) << (k % 5));
    void* r = realloc(malloc(300 << 10), lt::opaque(std::size_t{700} << 10));
    free(r);
  }
  return nullptr;
}

[[noreturn]] void racer(int i) {
  for (int t = 0; t < 2; ++t) {
    pthread_t th;
    CHECK(pthread_create(&th, nullptr, churn, nullptr) == 0);
  }
  usleep(static_cast<useconds_t>(3000 + 1000 * i));
  std::exit(kStatus);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 && std::strcmp(argv[1], "--child") == 0) child(std::atoi(argv[2]));
  if (argc > 2 && std::strcmp(argv[1], "--racer") == 0) racer(std::atoi(argv[2]));
  const char* dir = argc > 1 ? argv[1] : nullptr;
  CHECK(dir != nullptr, "usage: exit_in_signal DIR");
  int ok = 0, hung = 0;
  for (int i = 0; i < kChildren + kRacers; ++i) {
    const bool race = i >= kChildren;
    std::string file = std::string(dir) + "/report." + std::to_string(i) + ".json";
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      setenv("LOWTIDE_STATS", "json", 1);
      setenv("LOWTIDE_STATS_FILE", file.c_str(), 1);
      execl("/proc/self/exe", argv[0], race ? "--racer" : "--child", std::to_string(i).c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    if (!lt::wait_bounded(pid, 10, &status)) {
      ++hung;
      std::printf("child %d: still running after 10 s (a hang); killed\n", i);
      continue;
    }
    char what[128];
    lt::describe_status(status, what, sizeof what);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == kStatus)) {
      std::printf("child %d: %s, want exit status %d\n", i, what, kStatus);
      continue;
    }
    FILE* f = std::fopen(file.c_str(), "r");
    if (f == nullptr) {
      std::printf("child %d: no report at %s\n", i, file.c_str());
      continue;
    }
    char buf[256] = {};
    std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    if (n == 0 || std::strstr(buf, "\"schema\": \"lowtide-report\"") == nullptr) {
      std::printf("child %d: report does not start as a lowtide report\n", i);
      continue;
    }
    ++ok;
  }
  std::printf("%d of %d children exited with their own status and reported; %d hung\n", ok, kChildren + kRacers,
              hung);
  CHECK(ok == kChildren + kRacers);
  return 0;
}

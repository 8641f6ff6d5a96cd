// The program tests/stats/periodic_test.py runs, with and without lowtide.
// Every wait is bounded by a deadline or alarm().
//
//   spin SECONDS N   allocate and free (small and large, plus short-lived
//                    threads) for SECONDS, then N more mallocs at once, exit
//   live DIR N       two threads malloc and free 64 bytes in a tight loop
//                    while the main thread writes N JSON reports DIR/rI.json
//   twice JSON PROM  a few allocations, then lowtide_write_report to JSON and
//                    to PROM with nothing allocated in between; prints its pid
//   wait             print the dispositions of SIGTERM and SIGINT as
//                    sigaction() and signal() report them, then "ready", then
//                    wait up to 3 s for a signal and exit 0
//   own              install a SIGTERM handler (prints "handled", _exit(7)), then as wait
//   reraise HOW      install a SIGTERM handler that prints "handled", sets
//                    SIG_DFL back (HOW: sigaction or signal) and raises it again;
//                    HOW resethand: installed with SA_RESETHAND and SA_SIGINFO,
//                    every signal blocked, it only raises it again (Node.js's
//                    SignalExit), and sigaction must show it as installed
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <string>

#include "../lowtide_test.hpp"

namespace {

using Clock = std::chrono::steady_clock;

void* touch(void*) {
  void* p = malloc(lt::opaque(std::size_t{64}));
  free(p);
  return nullptr;
}

int spin(double seconds, long extra) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  void* held[8] = {};
  for (unsigned long k = 0; Clock::now() < end; ++k) {
    unsigned slot = k % 8;
    free(held[slot]);
    held[slot] = malloc(lt::opaque(k % 3 == 0 ? std::size_t{300} << 10 : std::size_t{200}));
    if (held[slot] != nullptr) static_cast<char*>(held[slot])[0] = 1;
    if (k % 512 == 0) {  // thread starts and exits take the registry lock
      pthread_t t;
      CHECK(pthread_create(&t, nullptr, touch, nullptr) == 0);
      CHECK(pthread_join(t, nullptr) == 0);
    }
  }
  for (void* p : held) free(p);
  for (long i = 0; i < extra; ++i) free(lt::opaque(malloc(lt::opaque(std::size_t{24}))));
  return 0;
}

using WriteReport = int (*)(const char*, int);

std::atomic<bool> stop_looping{false};

void* tight_loop(void*) {
  while (!stop_looping.load(std::memory_order_relaxed)) free(lt::opaque(malloc(lt::opaque(std::size_t{64}))));
  return nullptr;
}

// Reports taken while threads allocate as fast as they can: each thread's
// call counts and histogram must still agree but for its call in flight.
int live(const char* dir, long n) {
  auto write = reinterpret_cast<WriteReport>(dlsym(RTLD_DEFAULT, "lowtide_write_report"));
  CHECK(write != nullptr, "lowtide is not preloaded");
  pthread_t t[2];
  for (pthread_t& th : t) CHECK(pthread_create(&th, nullptr, tight_loop, nullptr) == 0);
  for (long i = 0; i < n; ++i) {
    std::string path = std::string(dir) + "/r" + std::to_string(i) + ".json";
    CHECK(write(path.c_str(), 2) == 0);
  }
  stop_looping = true;
  for (pthread_t th : t) CHECK(pthread_join(th, nullptr) == 0);
  return 0;
}

int twice(const char* json, const char* prom) {
  auto write = reinterpret_cast<WriteReport>(dlsym(RTLD_DEFAULT, "lowtide_write_report"));
  CHECK(write != nullptr, "lowtide is not preloaded");
  void* big[3];
  for (int i = 0; i < 3; ++i) big[i] = malloc(lt::opaque(std::size_t{1} << 20));
  free(big[1]);
  void* r = realloc(big[0], lt::opaque(std::size_t{3} << 20));
  CHECK(r != nullptr);
  CHECK(write(json, 2) == 0);
  CHECK(write(prom, 4) == 0);
  free(r);
  free(big[2]);
  std::printf("%d\n", static_cast<int>(getpid()));
  return 0;
}

const char* describe(void (*h)(int)) {
  return h == SIG_DFL ? "SIG_DFL" : h == SIG_IGN ? "SIG_IGN" : "handler";
}

void show_dispositions() {
  for (int sig : {SIGTERM, SIGINT}) {
    struct sigaction sa{};
    CHECK(sigaction(sig, nullptr, &sa) == 0);
    void (*h)(int) = signal(sig, SIG_DFL);  // and put the same back
    CHECK(h != SIG_ERR);
    CHECK(signal(sig, h) != SIG_ERR);
    std::printf("%s sigaction=%s signal=%s flags=%#x\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                describe(sa.sa_handler), describe(h), static_cast<unsigned>(sa.sa_flags));
  }
}

int wait_for_signal() {
  std::printf("ready\n");
  std::fflush(stdout);
  const auto end = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < end) {
    // Allocating while waiting: the signal lands in or out of lowtide.
    free(lt::opaque(malloc(lt::opaque(std::size_t{256} << 10))));
    usleep(1000);
  }
  return 0;
}

extern "C" void handled_exit(int) {
  static const char msg[] = "handled\n";
  ssize_t w = write(1, msg, sizeof msg - 1);
  (void)w;
  _exit(7);
}

bool reraise_with_signal = false;

extern "C" void handled_reraise(int sig) {
  static const char msg[] = "handled\n";
  ssize_t w = write(1, msg, sizeof msg - 1);
  (void)w;
  if (reraise_with_signal) {
    signal(sig, SIG_DFL);
  } else {
    struct sigaction dfl{};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
  }
  raise(sig);
}

// Node.js's SIGTERM and SIGINT handler: the kernel's SA_RESETHAND has set
// SIG_DFL back; the raised signal waits (every signal is blocked here) and
// ends the process once the handler returns.
extern "C" void handled_oneshot(int sig, siginfo_t*, void*) {
  static const char msg[] = "handled\n";
  ssize_t w = write(1, msg, sizeof msg - 1);
  (void)w;
  raise(sig);
}

void install_oneshot() {
  struct sigaction sa{};
  sa.sa_sigaction = handled_oneshot;
  sa.sa_flags = SA_RESETHAND | SA_SIGINFO;
  sigfillset(&sa.sa_mask);
  struct sigaction old{};
  CHECK(sigaction(SIGTERM, &sa, &old) == 0);
  CHECK(old.sa_handler == SIG_DFL, "old action %p", reinterpret_cast<void*>(old.sa_handler));
  // Shown as the program gave it, whoever stands in for it.
  struct sigaction now{};
  CHECK(sigaction(SIGTERM, nullptr, &now) == 0);
  CHECK(now.sa_sigaction == handled_oneshot && (now.sa_flags & (SA_RESETHAND | SA_SIGINFO)) == (SA_RESETHAND | SA_SIGINFO) &&
            sigismember(&now.sa_mask, SIGUSR1) == 1,
        "sigaction shows %p flags %#x", reinterpret_cast<void*>(now.sa_sigaction), static_cast<unsigned>(now.sa_flags));
}

}  // namespace

int main(int argc, char** argv) {
  alarm(30);  // nothing here runs that long
  CHECK(argc >= 2, "usage: periodic_prog MODE ...");
  std::string mode = argv[1];
  if (mode == "spin" && argc == 4) return spin(std::atof(argv[2]), std::atol(argv[3]));
  if (mode == "live" && argc == 4) return live(argv[2], std::atol(argv[3]));
  if (mode == "twice" && argc == 4) return twice(argv[2], argv[3]);
  if (mode == "wait") {
    show_dispositions();
    return wait_for_signal();
  }
  if (mode == "own") {
    struct sigaction sa{};
    sa.sa_handler = handled_exit;
    sigemptyset(&sa.sa_mask);
    struct sigaction old{};
    CHECK(sigaction(SIGTERM, &sa, &old) == 0);
    std::printf("old=%s\n", describe(old.sa_handler));
    return wait_for_signal();
  }
  if (mode == "reraise" && argc == 3) {
    reraise_with_signal = std::string(argv[2]) == "signal";
    if (std::string(argv[2]) == "resethand") {
      install_oneshot();
    } else if (reraise_with_signal) {
      CHECK(signal(SIGTERM, handled_reraise) != SIG_ERR);
    } else {
      struct sigaction sa{};
      sa.sa_handler = handled_reraise;
      sigemptyset(&sa.sa_mask);
      CHECK(sigaction(SIGTERM, &sa, nullptr) == 0);
    }
    return wait_for_signal();
  }
  CHECK(false, "unknown mode %s", argv[1]);
}

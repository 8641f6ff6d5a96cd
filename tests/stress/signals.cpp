// Allocation-heavy threads interrupted by signals at a high rate: SIGALRM
// from ITIMER_REAL and SIGPROF from ITIMER_PROF, every 100 us each (one
// handler installed without SA_RESTART, so interruptible calls see EINTR).
// The handlers do not allocate (they must not: malloc is not
// async-signal-safe); they make a syscall, touch errno and put it back, and
// count. Every interrupted allocation, realloc and free must complete with
// its data intact (checksums), calloc memory must read zero, and the
// live-byte counters must balance at the end. 5 threads, 6,000 steps each
// or a 20 s deadline, whichever comes first.

#include "stress_common.hpp"

#include <sys/time.h>
#include <thread>
#include <vector>

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace {

constexpr int kThreads = 5;
constexpr long kSteps = 6000;
constexpr double kSeconds = 20;

volatile sig_atomic_t g_alrm = 0, g_prof = 0;
std::atomic<long> g_steps{0};

extern "C" void on_signal(int sig) {
  const int saved = errno;
  (void)getppid();
  errno = EINTR;  // what an interrupted call may see, put back below
  if (sig == SIGALRM) g_alrm = g_alrm + 1;
  else g_prof = g_prof + 1;
  errno = saved;
}

void install(int sig, bool restart) {
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = restart ? SA_RESTART : 0;
  CHECK(sigaction(sig, &sa, nullptr) == 0);
}

void worker(unsigned id) {
  const std::size_t c = lt::cutoff();
  const std::size_t sizes[] = {8, 48, 512, 4000, 30 * KiB, c - 8, c, c + 8, 3 * c, MiB, 3 * MiB};
  constexpr int kHeld = 24;
  lt::Block held[kHeld];
  std::uint64_t x = 0x2545F4914F6CDD1Dull ^ id;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  const lt::Deadline deadline(kSeconds);
  for (long step = 0; step < kSteps && !deadline.passed(); ++step) {
    lt::Block& b = held[next() % kHeld];
    const std::size_t n = sizes[next() % (sizeof sizes / sizeof sizes[0])];
    if (b.p == nullptr) {
      if (next() & 1) {
        auto* z = static_cast<unsigned char*>(calloc(opaque(n), 1));
        CHECK(z != nullptr, "calloc(%zu) failed: %s", n, std::strerror(errno));
        CHECK(lt::covered_zero(z, n), "calloc(%zu) memory not zero", n);
        lt::scribble(z, n, next());
        b = {z, n, lt::checksum(z, n)};
      } else {
        b = lt::make_block(n, next());
      }
    } else if (next() & 1) {
      lt::verify(b, "before realloc");
      const std::size_t keep = n < b.n ? n : b.n;
      const std::uint64_t prefix = lt::checksum(b.p, keep);
      void* q = realloc(b.p, opaque(n));
      CHECK(q != nullptr && lt::checksum(q, keep) == prefix, "realloc %zu -> %zu interrupted badly", b.n, n);
      lt::scribble(q, n, next());
      b = {q, n, lt::checksum(q, n)};
    } else {
      lt::drop(b, "free");
    }
    g_steps.fetch_add(1, std::memory_order_relaxed);
  }
  for (lt::Block& b : held)
    if (b.p != nullptr) lt::drop(b, "final free");
}

}  // namespace

int main() {
  lt::arm_watchdog(100, "signals");
  // The watchdog owns SIGALRM until the timers start; from then on the
  // alarm() deadline is replaced by the meson timeout and kSeconds.
  lt::Block warm = lt::make_block(3 * lt::cutoff(), 1);
  lt::drop(warm, "warm");
  lt::warm_thread_cache(kThreads - 1);
  const lt::Live start = lt::start_counting("signals");
  alarm(0);
  install(SIGALRM, false);
  install(SIGPROF, true);
  const itimerval every{{0, 100}, {0, 100}};
  CHECK(setitimer(ITIMER_REAL, &every, nullptr) == 0);
  CHECK(setitimer(ITIMER_PROF, &every, nullptr) == 0);

  const double t0 = lt::now_seconds();
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < kThreads; ++t) threads.emplace_back(worker, t);
  worker(0);
  for (auto& t : threads) t.join();

  const itimerval off{};
  setitimer(ITIMER_REAL, &off, nullptr);
  setitimer(ITIMER_PROF, &off, nullptr);
  std::printf("signals: %d threads, %ld steps in %.1f s, %ld SIGALRM and %ld SIGPROF handled\n", kThreads,
              g_steps.load(), lt::now_seconds() - t0, static_cast<long>(g_alrm), static_cast<long>(g_prof));
  CHECK(g_alrm > 0 && g_prof > 0, "the timers delivered no signals");
  lt::check_balanced(start, "signals");
  std::printf("PASS signals\n");
  return 0;
}

#include "periodic.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <ctime>
#include <pthread.h>

#include "log.hpp"
#include "orphan.hpp"
#include "options.hpp"
#include "parse.hpp"
#include "platform.hpp"
#include "report.hpp"
#include "state.hpp"

namespace lowtide::periodic {

namespace {

std::uint64_t interval_ns = 0;
std::atomic<bool> warned{false};

// Wakes at fixed points (start + k * interval, on CLOCK_MONOTONIC), so a
// slow report does not make the next ones drift; one that took longer than
// an interval skips the points it missed rather than writing twice.
void* report_main(void*) {
  pthread_setname_np(pthread_self(), "lowtide-report");
  orphan::own_thread_started();
  timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  const auto add = [&](timespec* t) {
    std::uint64_t ns = static_cast<std::uint64_t>(t->tv_nsec) + interval_ns % 1'000'000'000u;
    t->tv_sec += static_cast<time_t>(interval_ns / 1'000'000'000u + ns / 1'000'000'000u);
    t->tv_nsec = static_cast<long>(ns % 1'000'000'000u);
  };
  const auto before = [](const timespec& a, const timespec& b) {
    return a.tv_sec != b.tv_sec ? a.tv_sec < b.tv_sec : a.tv_nsec < b.tv_nsec;
  };
  for (;;) {
    add(&next);
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    while (before(next, now)) add(&next);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, nullptr) == EINTR) {
    }
    report::write_periodic();
    // Where there is no decay thread (LOWTIDE_DECAY_THREAD=off), this one
    // looks, at its own pace (orphan.hpp).
    orphan::check(pal::now_ns());
  }
  return nullptr;
}

// Detached, every signal blocked (the host's signals never land here, and
// the report is never interrupted by one of ours; pal::start_thread). The
// stack: 512 KiB for report_main beyond the static TLS, as the live
// server's (src/live.cpp): with LOWTIDE_SITES the report symbolizes call
// sites through libdw and demangles their names (symbolize.cpp bounds the
// demangler's share by the length of the names it demangles).
constexpr std::size_t kStack = std::size_t{512} << 10;

void start_thread() {
  const int rc = pal::start_thread(&report_main, nullptr, kStack);
  if (rc != 0 && !warned.exchange(true)) {
    const char* name = strerrorname_np(rc);  // no allocation, unlike strerror
    log::warn("could not start the lowtide-report thread (pthread_create: {}); no periodic report",
              name != nullptr ? name : "error");
  }
}

}  // namespace

void start() {
  const std::uint64_t ms = g.config.get(Opt::stats_interval);
  if (ms == kSizeWord || g.secure) return;
  if (stats_mode(g.config.get(Opt::stats)) == StatsMode::off) {
    char d[32];
    if (!warned.exchange(true))
      log::warn("LOWTIDE_STATS_INTERVAL={} has no effect: LOWTIDE_STATS is off (set it to text, json, both or "
                "prometheus)", format_duration_ms(ms, d, sizeof d));
    return;
  }
  if (!report::this_process_reports()) return;
  interval_ns = ms * 1'000'000u;
  start_thread();
}

void on_fork_child() {
  if (interval_ns == 0 || !report::this_process_reports()) return;
  // A parent that installed a seccomp filter since start (then forked, as
  // sshd does) may be killed at the clone3 (pal::sandbox_since_start).
  if (pal::sandbox_since_start() != pal::Sandbox::as_at_start) {
    if (!warned.exchange(true))
      log::warn("a seccomp filter was installed since start (or /proc/thread-self/status cannot be read): no "
                "lowtide-report thread in this child, lest the filter kill it; no periodic report");
    return;
  }
  start_thread();
}

}  // namespace lowtide::periodic

#include "orphan.hpp"

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <pthread.h>

#include "platform.hpp"
#include "state.hpp"

namespace lowtide::orphan {

namespace {

std::atomic<int> own{0};             // lowtide threads started in this process
std::atomic<bool> leader_left{false};  // the main thread ran its exit destructor
std::atomic<std::uint64_t> exits{0};   // exits noted since it did
std::atomic<bool> ending{false};       // exit(0) is under way
std::atomic<bool> looking{false};      // a check is under way (two threads may check)

// The checker's own (under `looking`).
constexpr std::uint64_t kSoon = 10'000'000;        // 10 ms after an exit
constexpr std::uint64_t kAtMost = 1'000'000'000;   // a second otherwise
std::uint64_t next_ns = 0, interval_ns = kAtMost, exits_seen = 0;

// exit(0) on a thread of glibc's default stack size: it runs the program's
// atexit handlers and destructors and lowtide's exit report, which the
// small stacks of lowtide's threads were not sized for. With no signal
// blocked, as a program thread would run them.
void* exit_main(void*) {
  sigset_t none;
  sigemptyset(&none);
  pthread_sigmask(SIG_SETMASK, &none, nullptr);
  std::exit(0);
}

void end_process() {
  if (ending.exchange(true)) return;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  const int rc = pthread_create(&t, &attr, &exit_main, nullptr);
  pthread_attr_destroy(&attr);
  if (rc != 0) std::exit(0);  // no thread left to make: here, small stack or not
}

}  // namespace

void own_thread_started() { own.fetch_add(1, std::memory_order_seq_cst); }
void own_thread_ending() { own.fetch_sub(1, std::memory_order_seq_cst); }

bool note_exit() {
  if (current_tid() == static_cast<std::uint32_t>(g.pid)) leader_left.store(true, std::memory_order_seq_cst);
  if (!leader_left.load(std::memory_order_seq_cst)) return false;
  exits.fetch_add(1, std::memory_order_seq_cst);
  return true;
}

std::uint64_t check(std::uint64_t now) {
  if (looking.exchange(true, std::memory_order_acquire)) return kAtMost;
  // An exit noted since the last look: look again soon, then less and
  // less often (the thread that noted it is still there when it does).
  // Once a second otherwise, so that a main thread without an exit
  // destructor (it never allocated through lowtide) is noticed too.
  if (const std::uint64_t e = exits.load(std::memory_order_seq_cst); e != exits_seen) {
    exits_seen = e;
    interval_ns = kSoon;
    next_ns = now + kSoon;
  }
  if (now >= next_ns && !ending.load(std::memory_order_relaxed)) {
    long threads = 0;
    // The threads the kernel counts: the exited leader and lowtide's own,
    // and no other. A thread being created is counted from its clone on,
    // by a creator that is itself counted: none can appear once none is
    // left. A lowtide thread not yet at own_thread_started makes `own`
    // low: no exit, the next look sees it.
    if (pal::leader_gone(&threads) && threads <= own.load(std::memory_order_seq_cst) + 1) end_process();
    next_ns = now + interval_ns;
    interval_ns = interval_ns * 2 < kAtMost ? interval_ns * 2 : kAtMost;
  }
  const std::uint64_t left = next_ns > now ? next_ns - now : 0;
  looking.store(false, std::memory_order_release);
  return left;
}

void fork_child() {
  own.store(0, std::memory_order_relaxed);
  leader_left.store(false, std::memory_order_relaxed);
  exits.store(0, std::memory_order_relaxed);
  ending.store(false, std::memory_order_relaxed);
  looking.store(false, std::memory_order_relaxed);
  next_ns = 0;
  interval_ns = kAtMost;
  exits_seen = 0;
}

}  // namespace lowtide::orphan

#include "orphan.hpp"

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <pthread.h>

#include "platform.hpp"
#include "state.hpp"

namespace lowtide::orphan {

namespace {

// lowtide's threads alive in this process, by kernel tid (0: a free
// place), and a generation moved before a thread takes its place and after
// it leaves it: a look whose generation moved while it read the kernel's
// count compares nothing (review: a lowtide thread started between the
// read and the count of lowtide's threads made the one program thread
// read look like that new thread, and the process was ended under it).
constexpr int kMaxOwn = 8;
std::atomic<int> own_tids[kMaxOwn];
std::atomic<std::uint64_t> own_gen{0};
std::atomic<bool> leader_left{false};  // the main thread ran its exit destructor
std::atomic<std::uint64_t> exits{0};   // exits noted since it did
std::atomic<bool> ending{false};       // exit(0) is under way
std::atomic<bool> looking{false};      // a look is under way (two threads may look)

// The looker's own (under `looking`).
constexpr std::uint64_t kSoon = 10'000'000;        // 10 ms after an exit
constexpr std::uint64_t kAtMost = 1'000'000'000;   // a second otherwise
std::uint64_t next_ns = 0, interval_ns = kAtMost, exits_seen = 0;

bool (*read_leader)(int, long*) = &pal::leader_gone;
void (*end_hook)() = nullptr;

// exit(0) on a thread with a stack of glibc's usual default size: it runs the program's
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
  if (end_hook != nullptr) {
    end_hook();
    return;
  }
  // 8 MiB, glibc's usual default, past the static TLS (pal::start_thread).
  if (pal::start_thread(&exit_main, nullptr, std::size_t{8} << 20) != 0)
    std::exit(0);  // no thread left to make: here, small stack or not
}

// lowtide's threads the kernel still has: a place whose thread is gone (a
// thread killed on its own, e.g. by a seccomp filter's kill-thread
// action), or that the kernel will not say of (a sandbox refusing tgkill),
// is not counted; counting fewer can only keep the process alive.
long own_alive() {
  long n = 0;
  for (auto& s : own_tids) {
    const int tid = s.load(std::memory_order_seq_cst);
    if (tid != 0 && pal::thread_state(g.pid, tid) == pal::ThreadState::alive) ++n;
  }
  return n;
}

}  // namespace

void own_thread_started() {
  own_gen.fetch_add(1, std::memory_order_seq_cst);
  const int tid = static_cast<int>(current_tid());
  for (auto& s : own_tids) {
    int free_place = 0;
    if (s.compare_exchange_strong(free_place, tid, std::memory_order_seq_cst)) return;
  }
  // No place (cannot happen: lowtide has three threads): not counted, so
  // the process is never ended while it runs.
}

void own_thread_ending() {
  const int tid = static_cast<int>(current_tid());
  for (auto& s : own_tids) {
    int mine = tid;
    if (s.compare_exchange_strong(mine, 0, std::memory_order_seq_cst)) break;
  }
  own_gen.fetch_add(1, std::memory_order_seq_cst);
}

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
    // The threads the kernel counts: the exited leader, lowtide's own, and
    // no other. A program thread being created is counted from its clone
    // on, by a creator that is itself counted: none can appear once none
    // is left. A lowtide thread not yet in its place, or that has left it,
    // makes the count of lowtide's low: no end, the next look sees it.
    const std::uint64_t gen = own_gen.load(std::memory_order_seq_cst);
    long threads = 0;
    const bool gone = read_leader(g.pid, &threads);
    const long own = own_alive();
    if (gone && own_gen.load(std::memory_order_seq_cst) == gen && threads <= own + 1) end_process();
    next_ns = now + interval_ns;
    interval_ns = interval_ns * 2 < kAtMost ? interval_ns * 2 : kAtMost;
  }
  const std::uint64_t left = next_ns > now ? next_ns - now : 0;
  looking.store(false, std::memory_order_release);
  return left;
}

void fork_child() {
  for (auto& s : own_tids) s.store(0, std::memory_order_relaxed);
  leader_left.store(false, std::memory_order_relaxed);
  exits.store(0, std::memory_order_relaxed);
  ending.store(false, std::memory_order_relaxed);
  looking.store(false, std::memory_order_relaxed);
  next_ns = 0;
  interval_ns = kAtMost;
  exits_seen = 0;
}

void set_for_test(bool (*reader)(int, long*), void (*end)()) {
  read_leader = reader != nullptr ? reader : &pal::leader_gone;
  end_hook = end;
  fork_child();
}

}  // namespace lowtide::orphan

// orphan::check (src/orphan.hpp): a process whose main thread has exited
// is ended once only lowtide's threads are left, and never while a thread
// of the program's is. The leader's state and the kernel's thread count
// come from a fake reader; lowtide's threads are real threads that take
// their places (own_thread_started), so their liveness is the kernel's.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <unistd.h>

#include "orphan.hpp"
#include "state.hpp"

using namespace lowtide;

namespace {

std::atomic<int> ended{0};
void count_end() { ended.fetch_add(1); }

bool fake_gone = true;
long fake_threads = 0;
void (*during_read)() = nullptr;  // runs inside the read (a race, made certain)
bool fake_reader(int, long* threads) {
  *threads = fake_threads;
  if (during_read != nullptr) during_read();
  return fake_gone;
}

// A lowtide thread: takes its place and stays until `stop`.
struct OwnThread {
  std::atomic<bool> in{false}, stop{false};
  std::thread t;
  OwnThread()
      : t([this] {
          orphan::own_thread_started();
          in.store(true);
          while (!stop.load()) usleep(1000);
        }) {
    while (!in.load()) usleep(100);
  }
  ~OwnThread() {
    stop.store(true);
    t.join();
  }
};

std::uint64_t clock_ns = 0;
// One look, past any interval the previous one set.
void look() {
  clock_ns += 10'000'000'000ull;
  orphan::check(clock_ns);
}

void fresh(long threads, bool gone) {
  g.pid = static_cast<int>(getpid());
  ended.store(0);
  fake_threads = threads;
  fake_gone = gone;
  during_read = nullptr;
  orphan::set_for_test(&fake_reader, &count_end);
}

}  // namespace

TEST_CASE("orphan: ended once only lowtide's threads and the exited leader are left") {
  fresh(3, true);
  OwnThread a, b;
  look();
  CHECK(ended.load() == 1);
  orphan::set_for_test(nullptr, nullptr);
}

TEST_CASE("orphan: not while a thread of the program's is left, nor while the leader lives") {
  fresh(4, true);  // leader + 2 lowtide + 1 program thread
  OwnThread a, b;
  look();
  CHECK(ended.load() == 0);
  fresh(3, false);  // the leader itself still runs
  OwnThread c, d;
  look();
  CHECK(ended.load() == 0);
  orphan::set_for_test(nullptr, nullptr);
}

// Review: the kernel's count read, then a lowtide thread started (its place
// taken) before lowtide's threads were counted: the program's one thread
// left was taken for the new lowtide thread, and the process ended.
TEST_CASE("orphan: a lowtide thread started during the look does not stand for a program thread") {
  fresh(2, true);  // leader + 1 program thread, as read
  static OwnThread* late = nullptr;
  during_read = [] {
    if (late == nullptr) late = new OwnThread;
  };
  look();
  CHECK(ended.load() == 0);
  during_read = nullptr;
  delete late;
  late = nullptr;
  orphan::set_for_test(nullptr, nullptr);
}

// A lowtide thread killed on its own (a seccomp filter's kill-thread action)
// never leaves its place: it must not be counted.
TEST_CASE("orphan: a lowtide thread that is gone is not counted") {
  fresh(2, true);  // leader + 1 program thread
  { OwnThread gone_one; }  // took its place, then ended without leaving it
  // (OwnThread's thread returns without own_thread_ending: as if killed.)
  look();
  CHECK(ended.load() == 0);
  orphan::set_for_test(nullptr, nullptr);
}

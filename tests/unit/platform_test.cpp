#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "platform.hpp"

using namespace lowtide;

// read_file runs inside malloc (the memory limit's RSS sample) and at init
// (cgroup files under a root a test may fake): it must never block, so a
// FIFO nobody writes is refused, not waited on (a hang here is a failure
// by meson's timeout).
TEST_CASE("read_file reads regular files and refuses a FIFO without blocking") {
  char dir[] = "/tmp/lt-pal-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string fifo = std::string(dir) + "/fifo";
  const std::string file = std::string(dir) + "/file";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  FILE* f = std::fopen(file.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs("max\n", f);
  std::fclose(f);
  char buf[64];
  CHECK(pal::read_file(fifo.c_str(), buf, sizeof buf) == -1);
  CHECK(pal::read_file(file.c_str(), buf, sizeof buf) == 4);
  CHECK(std::string(buf) == "max\n");
  CHECK(pal::read_file("/proc/self/statm", buf, sizeof buf) > 0);  // /proc files are regular
  unlink(fifo.c_str());
  unlink(file.c_str());
  rmdir(dir);
}

TEST_CASE("thread_state: this thread is alive, a tid that is not ours is gone") {
  CHECK(pal::thread_state(getpid(), pal::current_tid()) == pal::ThreadState::alive);
  // The highest possible pid is never one of our threads (pid_max < 2^22).
  CHECK(pal::thread_state(getpid(), (1 << 22) + 7) == pal::ThreadState::gone);
}

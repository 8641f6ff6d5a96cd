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

// sandbox_since_start compares the seccomp lines of a status file with
// what note_sandbox_at_start read: a filter added since (or a mode raised,
// or, where the kernel shows no filter count, no_new_privs set since) is a
// change for good; an unreadable file is one for now; lines past a long
// Groups line (the file is read in pieces) are found.
TEST_CASE("sandbox_since_start: filters added since start, an unreadable status") {
  using pal::Sandbox;
  char dir[] = "/tmp/lt-pal-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string status = std::string(dir) + "/status";
  const auto write_status = [&](const char* nnp, const char* mode, const char* filters) {
    FILE* f = std::fopen(status.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("Name:\tx\nGroups:\t", f);
    for (int g = 0; g < 200; ++g) std::fprintf(f, "%d ", 100000 + g);
    std::fprintf(f, "\nNoNewPrivs:\t%s\nSeccomp:\t%s\n", nnp, mode);
    if (filters != nullptr) std::fprintf(f, "Seccomp_filters:\t%s\n", filters);
    std::fputs("Speculation_Store_Bypass:\tthread vulnerable\n", f);
    std::fclose(f);
  };
  const auto at_start = [&] {
    pal::set_status_path_for_test(status.c_str());
    pal::note_sandbox_at_start();
  };
  write_status("1", "2", "3");
  at_start();
  CHECK(pal::sandbox_since_start() == Sandbox::as_at_start);
  write_status("1", "2", "4");
  CHECK(pal::sandbox_since_start() == Sandbox::filtered);  // one more filter
  write_status("1", "2", "3");
  CHECK(pal::sandbox_since_start() == Sandbox::filtered);  // for good: filters are never taken away

  // A kernel before Seccomp_filters: the mode, then no_new_privs.
  write_status("0", "0", nullptr);
  at_start();
  CHECK(pal::sandbox_since_start() == Sandbox::as_at_start);
  write_status("1", "2", nullptr);
  CHECK(pal::sandbox_since_start() == Sandbox::filtered);
  write_status("0", "2", nullptr);  // a filter from start (a container runtime's)
  at_start();
  CHECK(pal::sandbox_since_start() == Sandbox::as_at_start);
  write_status("1", "2", nullptr);  // one installed over it by the program
  CHECK(pal::sandbox_since_start() == Sandbox::filtered);
  // With the count shown, no_new_privs alone is no filter (Landlock needs it too).
  write_status("0", "0", "0");
  at_start();
  write_status("1", "0", "0");
  CHECK(pal::sandbox_since_start() == Sandbox::as_at_start);

  write_status("0", "0", "0");
  at_start();
  REQUIRE(std::remove(status.c_str()) == 0);
  CHECK(pal::sandbox_since_start() == Sandbox::unreadable);
  write_status("0", "0", "0");
  CHECK(pal::sandbox_since_start() == Sandbox::as_at_start);  // readable again: not for good

  // Unknown at start: as at start whatever comes.
  REQUIRE(std::remove(status.c_str()) == 0);
  at_start();
  write_status("1", "2", "9");
  CHECK(pal::sandbox_since_start() == Sandbox::as_at_start);

  // The last line without its newline still counts.
  const auto write_raw = [&](const char* text) {
    FILE* f = std::fopen(status.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(text, f);
    std::fclose(f);
  };
  write_raw("Seccomp:\t2\nSeccomp_filters:\t5");
  at_start();
  CHECK(pal::sandbox_since_start() == Sandbox::as_at_start);
  write_raw("Seccomp:\t2\nSeccomp_filters:\t6");
  CHECK(pal::sandbox_since_start() == Sandbox::filtered);
  std::remove(status.c_str());
  rmdir(dir);
  pal::set_status_path_for_test(nullptr);
  pal::note_sandbox_at_start();  // this process's own state again, for the tests after
}

// Processes and exits for the report tests (driven by check_report.py):
//   hello        prints a known line to stdout and one to stderr, allocates.
//   alloc        allocates (small and large) and returns from main.
//   family FILE  forks a child that exits normally and one that leaves with
//                _exit, fork+execs this program ("alloc") and /usr/bin/python3,
//                and vforks a child that _exits at once. Reaps them all
//                (bounded), then prints their pids as JSON. FILE is the
//                expanded report path without %p (or "-"): it must not exist
//                yet once the children are gone (they must not report into it).
//   thread-exit  a worker named "exiter" allocates and calls exit(0) while
//                the main thread waits in pthread_join.
//   quick-exit   allocates, registers a handler with at_quick_exit (it
//                prints a line) and leaves with quick_exit(0).
// Every wait is bounded (alarm(), waitpid polling with a deadline).
#include <malloc.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "../lowtide_test.hpp"

extern char** environ;

namespace {

void* volatile sink;

void allocate_some(std::size_t large) {
  for (int i = 0; i < 100; ++i) {
    void* p = std::malloc(48);
    CHECK(p != nullptr);
    sink = p;
    std::free(p);
  }
  void* p = std::malloc(large);
  CHECK(p != nullptr);
  std::memset(p, 1, large);
  sink = p;
  std::free(p);
}

// waitpid with a deadline: the child must have exited with status 0.
void reap(pid_t pid, int seconds) {
  std::time_t end = std::time(nullptr) + seconds;
  for (;;) {
    int st = 0;
    pid_t r = waitpid(pid, &st, WNOHANG);
    CHECK(r >= 0, "waitpid(%d): %s", static_cast<int>(pid), std::strerror(errno));
    if (r == pid) {
      CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status 0x%x", static_cast<int>(pid), st);
      return;
    }
    CHECK(std::time(nullptr) < end, "child %d did not exit within %d s", static_cast<int>(pid), seconds);
    usleep(10000);
  }
}

pid_t spawn(const char* path, char* const argv[]) {
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    execve(path, argv, environ);
    _exit(127);
  }
  return pid;
}

int run_family(const char* self, const char* no_file) {
  allocate_some(std::size_t{3} << 20);

  pid_t normal = fork();
  CHECK(normal >= 0);
  if (normal == 0) {
    allocate_some(std::size_t{4} << 20);
    std::exit(0);  // destructors run: lowtide's reports (with %p)
  }
  pid_t quick = fork();
  CHECK(quick >= 0);
  if (quick == 0) {
    allocate_some(std::size_t{5} << 20);
    _exit(0);  // no destructors: lowtide's _exit reports
  }
  char alloc_arg[] = "alloc";
  char* self_argv[] = {const_cast<char*>(self), alloc_arg, nullptr};
  pid_t exec_self = spawn(self, self_argv);
  char py[] = "/usr/bin/python3", dash_c[] = "-c", code[] = "x = bytearray(5 << 20)";
  char* py_argv[] = {py, dash_c, code, nullptr};
  pid_t exec_py = spawn(py, py_argv);
  pid_t vchild = vfork();
  CHECK(vchild >= 0);
  if (vchild == 0) _exit(0);  // shares our memory: must not report

  reap(normal, 60);
  reap(quick, 60);
  reap(exec_self, 60);
  reap(exec_py, 60);
  reap(vchild, 60);
  if (std::strcmp(no_file, "-") != 0) {
    struct stat sb;
    CHECK(stat(no_file, &sb) != 0 && errno == ENOENT, "%s exists before the parent exits: a child wrote it", no_file);
  }
  std::printf("{\"parent\": %d, \"fork_exit\": %d, \"fork__exit\": %d, \"exec_self\": %d, \"exec_python\": %d, "
              "\"vfork\": %d}\n",
              static_cast<int>(getpid()), static_cast<int>(normal), static_cast<int>(quick),
              static_cast<int>(exec_self), static_cast<int>(exec_py), static_cast<int>(vchild));
  std::fflush(stdout);
  return 0;
}

void* exiter(void*) {
  CHECK(pthread_setname_np(pthread_self(), "exiter") == 0);
  allocate_some(std::size_t{2} << 20);
  std::printf("{\"exiter_tid\": %d, \"pid\": %d}\n", static_cast<int>(gettid()), static_cast<int>(getpid()));
  std::fflush(stdout);
  std::exit(0);
}

int run_thread_exit() {
  allocate_some(std::size_t{2} << 20);
  pthread_t t;
  CHECK(pthread_create(&t, nullptr, exiter, nullptr) == 0);
  pthread_join(t, nullptr);  // never returns: the worker exits the process
  CHECK(false, "exit() in the worker did not end the process");
  return 1;
}

void own_quick_exit_handler() {
  std::printf("own quick_exit handler\n");
  std::fflush(stdout);
}

int run_quick_exit() {
  allocate_some(std::size_t{2} << 20);
  CHECK(at_quick_exit(&own_quick_exit_handler) == 0);
  std::quick_exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  alarm(120);
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "hello") {
    allocate_some(std::size_t{2} << 20);
    std::printf("hello from report_procs\n");
    std::fflush(stdout);
    std::fprintf(stderr, "report_procs: own stderr line\n");
    return 0;
  }
  if (mode == "alloc") {
    allocate_some(std::size_t{6} << 20);
    return 0;
  }
  if (mode == "family" && argc == 3) return run_family(argv[0], argv[2]);
  if (mode == "thread-exit") return run_thread_exit();
  if (mode == "quick-exit") return run_quick_exit();
  std::fprintf(stderr, "usage: %s hello|alloc|family FILE|thread-exit|quick-exit\n", argv[0]);
  return 2;
}

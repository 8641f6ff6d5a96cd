// leader_exit: a program whose main thread ends with pthread_exit ends when
// its last thread does, as under glibc alone (src/orphan.hpp). glibc calls
// exit(0) from the last thread, counting lowtide's own threads, which never
// end: before the fix such a program lived on for good once lowtide's
// decay thread had started (at its first large allocation), and, as
// lowtide's threads block every signal, even SIGTERM left it standing.
//
// The parent runs each case as a child (this program again, with the case
// in argv[1]) and gives it 30 s to end with status 0, its worker's line
// and then its atexit handler's line on stdout, in that order (not
// before: lowtide must not end a process whose threads still run).
// Cases:
//   alone   main allocates a large block and calls pthread_exit, no other thread
//   worker  main allocates, starts a worker that writes after 300 ms
//           without allocating (its exit runs no lowtide destructor), then
//           calls pthread_exit
//   report  as worker, with no decay thread: only lowtide-report (a
//           periodic text report every 100 ms) is left to look
//   liveend as worker, after the program closed every descriptor it did
//           not open and connected to its own live socket: the lowtide-live
//           thread ends (its socket is not its own any more), and the
//           process must not then be taken for one with no thread of its
//           own left while the worker runs (lowtide's count of its threads
//           goes down with it)
//   exitstart as worker, but main makes no large allocation: it hands out
//           8 MiB of small blocks, so its own exit (pthread_exit's key
//           destructors) is what starts the decay thread
//           (cache::note_thread_exit), while the worker runs
#include <cerrno>
#include <cstddef>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <pthread.h>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

void say(const char* s) {
  const std::size_t n = std::strlen(s);
  if (write(1, s, n) != static_cast<ssize_t>(n)) _exit(9);
}

void at_end() { say("atexit\n"); }

void* worker(void*) {
  const timespec ts{0, 300'000'000};
  nanosleep(&ts, nullptr);
  say("worker\n");
  return nullptr;
}

// The live thread's socket, found in /proc/net/unix by its name's end
// ("@lowtide/<pid namespace>/<pid>"); every descriptor from 3 up closed (a
// daemon's clean-up: the socket's number too), then the name connected to,
// so that a thread blocked in accept wakes: it finds its listening
// descriptor gone and ends (one not yet at accept ends at once; the
// connect is then refused). Waits until it is gone from /proc/self/task
// (at most 10 s).
void end_live_thread() {
  char tail[32];
  std::snprintf(tail, sizeof tail, "/%d", static_cast<int>(getpid()));
  const std::size_t tail_len = std::strlen(tail);
  char name[108] = {};
  // The server makes its socket on its own thread, just after the large
  // allocation that started it: looked for up to 10 s.
  for (int tries = 0; name[0] == '\0' && tries < 1000; ++tries) {
    if (tries > 0) {
      const timespec ts{0, 10'000'000};
      nanosleep(&ts, nullptr);
    }
    if (FILE* f = std::fopen("/proc/net/unix", "r")) {
      char line[512];
      while (std::fgets(line, sizeof line, f) != nullptr) {
        std::size_t n = std::strlen(line);
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == ' ')) line[--n] = '\0';
        const char* at = std::strstr(line, " @lowtide/");
        if (at != nullptr && n > tail_len && std::strcmp(line + n - tail_len, tail) == 0)
          std::snprintf(name, sizeof name, "%s", at + 2);
      }
      std::fclose(f);
    }
  }
  if (name[0] == '\0') _exit(7);  // no live socket: the case would test nothing
  for (int fd = 3; fd < 4096; ++fd) close(fd);
  const int c = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::size_t name_len = std::strlen(name);
  std::memcpy(a.sun_path + 1, name, name_len);
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name_len);
  if (c >= 0) (void)connect(c, reinterpret_cast<sockaddr*>(&a), len);
  char cmd[96];
  std::snprintf(cmd, sizeof cmd, "grep -qs lowtide-live /proc/%d/task/*/comm", static_cast<int>(getpid()));
  for (int i = 0; i < 1000 && std::system(cmd) == 0; ++i) {
    const timespec ts{0, 10'000'000};
    nanosleep(&ts, nullptr);
  }
  if (std::system(cmd) == 0) _exit(5);  // the live thread did not end: the case would test nothing
  if (c >= 0) close(c);
}

[[noreturn]] void child(const char* which) {
  std::atexit(&at_end);
  if (std::strcmp(which, "exitstart") == 0) {
    for (int i = 0; i < 8192; ++i) {
      void* volatile q = std::malloc(1000);  // small: starts nothing yet
      std::memset(q, 1, 8);
      std::free(q);
    }
    char cmd[96];
    std::snprintf(cmd, sizeof cmd, "grep -qs lowtide- /proc/%d/task/*/comm", static_cast<int>(getpid()));
    if (std::system(cmd) == 0) _exit(6);  // a lowtide thread already: the case would test nothing
  } else {
    void* volatile p = std::malloc(std::size_t{4} << 20);  // large: the decay thread starts
    std::memset(p, 1, 4096);
    std::free(p);
  }
  if (std::strcmp(which, "liveend") == 0) end_live_thread();
  if (std::strcmp(which, "alone") == 0) {
    say("worker\n");  // no worker: the line the parent expects first
  } else {
    pthread_t t;
    if (pthread_create(&t, nullptr, &worker, nullptr) != 0) _exit(8);
  }
  pthread_exit(nullptr);
}

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

bool run_case(const char* self, const char* which, const char* const* env_add) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    for (const char* const* e = env_add; *e != nullptr; e += 2) setenv(e[0], e[1], 1);
    execl(self, self, which, static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  const double deadline = now_s() + 30.0;
  int status = 0;
  pid_t r = 0;
  while ((r = waitpid(pid, &status, WNOHANG)) == 0 && now_s() < deadline) {
    const timespec ts{0, 10'000'000};
    nanosleep(&ts, nullptr);
  }
  if (r == 0) {
    std::fprintf(stderr, "FAIL %s: still running 30 s after main's pthread_exit (killed)\n", which);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    close(fds[0]);
    return false;
  }
  std::string out;
  char buf[256];
  ssize_t n = 0;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "FAIL %s: status %#x, want exit 0\n", which, status);
    return false;
  }
  if (out != "worker\natexit\n") {
    std::fprintf(stderr, "FAIL %s: output \"%s\", want the worker's line, then atexit's\n", which, out.c_str());
    return false;
  }
  std::printf("ok %s\n", which);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) child(argv[1]);
  const char* const none[] = {nullptr};
  const char* const report[] = {"LOWTIDE_DECAY_THREAD", "off", "LOWTIDE_STATS", "text",
                                "LOWTIDE_STATS_INTERVAL", "100ms", "LOWTIDE_STATS_FILE", "/dev/null", nullptr};
  bool ok = run_case(argv[0], "alone", none);
  ok = run_case(argv[0], "worker", none) && ok;
  ok = run_case(argv[0], "report", report) && ok;
  ok = run_case(argv[0], "liveend", none) && ok;
  ok = run_case(argv[0], "exitstart", none) && ok;
  return ok ? 0 : 1;
}

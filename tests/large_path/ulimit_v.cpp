// Processes started under an address-space limit (ulimit -v, i.e. RLIMIT_AS)
// of 1 GiB and 300 MiB, with the shim preloaded (LD_PRELOAD is inherited from
// the test environment):
//   - /usr/bin/python3 must start, allocate a 10 MiB bytearray, and get a
//     MemoryError (not a crash) for a request larger than the limit;
//   - this program, re-executed in --child mode, allocates small and large
//     blocks correctly, gets NULL/ENOMEM (bad_alloc for new) for requests
//     larger than the limit, runs the address space dry with 32 MiB blocks
//     (NULL, no crash) and recovers after freeing.
// stderr of the children may only contain lines starting with "lowtide"
// (a warning about a reduced reservation is acceptable); anything else fails.

#include "lowtide_test.hpp"

#include <new>
#include <string>
#include <vector>

#include <poll.h>
#include <sys/resource.h>

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace {

// ------------------------------------------------------------- child mode
int child_main(std::size_t limit) {
  alarm(60);
  const std::size_t c = lt::cutoff();

  // Small blocks.
  std::vector<void*> small;
  for (int i = 0; i < 20000; ++i) {
    const std::size_t n = opaque(static_cast<std::size_t>(i * 37 % 2000 + 1));
    void* p = malloc(n);
    CHECK(p != nullptr, "small malloc(%zu) #%d failed under RLIMIT_AS", n, i);
    static_cast<unsigned char*>(p)[n - 1] = 1;
    small.push_back(p);
  }
  for (void* p : small) free(p);

  // Large blocks.
  const std::size_t large_sizes[] = {c, 3 * c + 7, 20 * MiB};
  for (std::size_t n : large_sizes) {
    void* p = malloc(opaque(n));
    CHECK(p != nullptr, "large malloc(%zu) failed under RLIMIT_AS %zu", n, limit);
    lt::fill_pattern(p, n, 1, 4096);
    CHECK(lt::find_pattern_mismatch(p, n, 1, 4096) == SIZE_MAX);
    free(p);
  }
  {
    auto* z = static_cast<unsigned char*>(calloc(opaque(8 * MiB), 1));
    CHECK(z != nullptr, "calloc(8 MiB) failed");
    for (std::size_t i = 0; i < 8 * MiB; i += 4096) CHECK(z[i] == 0, "calloc memory not zero");
    free(z);
    void* a = nullptr;
    CHECK(posix_memalign(&a, opaque(4 * MiB), 2 * MiB) == 0 && lt::aligned_to(a, 4 * MiB), "posix_memalign 4M failed");
    free(a);
    // realloc growth 100 B -> 64 MiB
    std::size_t n = 100;
    void* p = malloc(n);
    lt::fill_pattern(p, n, 2);
    while (n < 64 * MiB) {
      const std::size_t nn = n * 4;
      void* q = realloc(p, opaque(nn));
      CHECK(q != nullptr, "realloc %zu -> %zu failed under RLIMIT_AS", n, nn);
      CHECK(lt::find_prefix_mismatch(q, n, n, 2, 4096) == SIZE_MAX, "realloc lost data");
      lt::fill_pattern(q, nn, 2, 4096);
      p = q;
      n = nn;
    }
    free(p);
  }

  // Requests larger than the limit: NULL + ENOMEM, never a crash.
  const std::size_t too_big = limit + 64 * MiB;
  errno = 0;
  void* p = malloc(opaque(too_big));
  CHECK(p == nullptr && errno == ENOMEM, "malloc(%zu) over the limit: %p errno %d", too_big, p, errno);
  errno = 0;
  p = calloc(opaque(too_big / 8), 8);
  CHECK(p == nullptr && errno == ENOMEM, "calloc over the limit: %p errno %d", p, errno);
  errno = 0;
  p = aligned_alloc(opaque(64 * MiB), too_big);
  CHECK(p == nullptr && errno == ENOMEM, "aligned_alloc over the limit: %p errno %d", p, errno);
  void* q = reinterpret_cast<void*>(0x1000);
  CHECK(posix_memalign(&q, 4096, opaque(too_big)) == ENOMEM && q == reinterpret_cast<void*>(0x1000),
        "posix_memalign over the limit");
  {
    void* keep = malloc(opaque(2 * c));
    CHECK(keep != nullptr);
    lt::fill_pattern(keep, 2 * c, 9, 4096);
    errno = 0;
    void* r = realloc(opaque(keep), opaque(too_big));
    CHECK(r == nullptr && errno == ENOMEM, "realloc over the limit: %p errno %d", r, errno);
    CHECK(lt::find_pattern_mismatch(keep, 2 * c, 9, 4096) == SIZE_MAX, "failed realloc damaged the block");
    free(keep);
  }
  bool threw = false;
  try {
    void* o = ::operator new(opaque(too_big));
    ::operator delete(o);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  CHECK(threw, "operator new over the limit did not throw bad_alloc");

  // Run the address space dry with 32 MiB blocks (untouched), then recover.
  std::vector<void*> hog;
  const std::size_t max_blocks = limit / (32 * MiB) + 16;
  bool hit_null = false;
  for (std::size_t i = 0; i < max_blocks; ++i) {
    errno = 0;
    void* b = malloc(opaque(32 * MiB));
    if (b == nullptr) {
      CHECK(errno == ENOMEM, "exhaustion: NULL with errno %d, expected ENOMEM", errno);
      hit_null = true;
      break;
    }
    static_cast<unsigned char*>(b)[0] = 1;
    hog.push_back(b);
  }
  CHECK(hit_null, "allocated %zu x 32 MiB under a %zu-byte RLIMIT_AS without failing", hog.size(), limit);
  // Small allocations may still work or fail, but must not crash.
  void* s = malloc(opaque(std::size_t{64}));
  free(s);
  for (void* b : hog) free(b);
  void* after = malloc(opaque(3 * c));
  CHECK(after != nullptr, "large malloc failed after the hog was released");
  lt::fill_pattern(after, 3 * c, 4, 4096);
  free(after);
  std::printf("child ok: %zu x 32 MiB before exhaustion\n", hog.size());
  return 0;
}

// ------------------------------------------------------------ parent mode
struct Result {
  bool finished = false;
  int status = 0;
  std::string out, err;
};

Result run_limited(std::size_t limit, const std::vector<std::string>& args) {
  int out_pipe[2], err_pipe[2];
  CHECK(pipe(out_pipe) == 0 && pipe(err_pipe) == 0);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork: %s", std::strerror(errno));
  if (pid == 0) {
    rlimit rl{limit, limit};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(120);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    close(out_pipe[0]);
    close(err_pipe[0]);
    close(out_pipe[1]);
    close(err_pipe[1]);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(121);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  Result r;
  const double deadline = lt::now_seconds() + 60;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[4096];
  while (open_fds > 0 && lt::now_seconds() < deadline) {
    int pr = poll(fds, 2, 200);
    if (pr < 0 && errno == EINTR) continue;
    CHECK(pr >= 0, "poll: %s", std::strerror(errno));
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(fds[k].fd, buf, sizeof buf);
      if (n > 0) {
        (k == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[k].fd);
        fds[k].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  r.finished = lt::wait_bounded(pid, std::max(1.0, deadline - lt::now_seconds()), &r.status);
  return r;
}

bool stderr_acceptable(const std::string& err, std::string* bad_line) {
  std::size_t pos = 0;
  while (pos < err.size()) {
    std::size_t nl = err.find('\n', pos);
    if (nl == std::string::npos) nl = err.size();
    const std::string line = err.substr(pos, nl - pos);
    if (!line.empty() && line.rfind("lowtide", 0) != 0) {
      *bad_line = line;
      return false;
    }
    pos = nl + 1;
  }
  return true;
}

bool check_result(const char* what, std::size_t limit, const Result& r, const char* want_out) {
  char desc[128];
  lt::describe_status(r.status, desc, sizeof desc);
  std::printf("[%s, RLIMIT_AS %zu MiB] %s\n  stdout: %s  stderr: %s\n", what, limit / MiB,
              r.finished ? desc : "TIMED OUT (killed)", r.out.c_str(), r.err.empty() ? "(empty)\n" : r.err.c_str());
  bool ok = true;
  if (!r.finished || !WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
    std::fprintf(stderr, "FAIL [%s, %zu MiB]: child %s\n", what, limit / MiB, r.finished ? desc : "timed out");
    ok = false;
  }
  for (const char* w = want_out; *w; w += std::strlen(w) + 1) {
    if (r.out.find(w) == std::string::npos) {
      std::fprintf(stderr, "FAIL [%s, %zu MiB]: stdout lacks \"%s\"\n", what, limit / MiB, w);
      ok = false;
    }
  }
  std::string bad;
  if (!stderr_acceptable(r.err, &bad)) {
    std::fprintf(stderr, "FAIL [%s, %zu MiB]: unexpected stderr line: %s\n", what, limit / MiB, bad.c_str());
    ok = false;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--child") == 0)
    return child_main(static_cast<std::size_t>(std::strtoull(argv[2], nullptr, 10)));

  lt::arm_watchdog(250, "ulimit_v");
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  CHECK(len > 0, "readlink(/proc/self/exe): %s", std::strerror(errno));
  self[len] = '\0';

  const char* ld = std::getenv("LD_PRELOAD");
  std::printf("ulimit_v: LD_PRELOAD=%s\n", ld ? ld : "(unset)");

  const std::size_t limits[] = {1024 * MiB, 300 * MiB};
  int failures = 0;
  for (std::size_t limit : limits) {
    const std::string too_big = std::to_string(limit + 64 * MiB);
    const std::string script =
        "import sys\n"
        "b = bytearray(10 * 1024 * 1024)\n"
        "b[-1] = 1\n"
        "l = [bytes(1000) for _ in range(20000)]\n"
        "try:\n"
        "    x = bytearray(" + too_big + ")\n"
        "    print('no MemoryError')\n"
        "except MemoryError:\n"
        "    print('MemoryError ok')\n"
        "print('ok', len(b), len(l))\n";
    Result py = run_limited(limit, {"/usr/bin/python3", "-c", script});
    if (!check_result("python3", limit, py, "MemoryError ok\0ok 10485760 20000\0")) ++failures;

    Result self_run = run_limited(limit, {self, "--child", std::to_string(limit)});
    if (!check_result("ulimit_v --child", limit, self_run, "child ok\0")) ++failures;
  }
  CHECK(failures == 0, "%d run(s) under RLIMIT_AS failed (details above)", failures);
  std::printf("PASS ulimit_v\n");
  return 0;
}

// operator new's failure contract in a program on LLVM's libc++/libc++abi
// (linked against their runtime: tests/entry_points/meson.build): lowtide links no C++ runtime and must
// use this one's new_handler, throw through it, and return NULL from the
// nothrow forms when the handler throws (src/cxxrt.hpp). The last check runs
// out of memory for real (RLIMIT_AS, in a child): bad_alloc must still
// arrive, with no runtime to look for by then.
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string_view>

namespace {

int fails = 0;
#define CHECK(c, ...)                         \
  do {                                        \
    if (!(c)) {                               \
      std::printf("FAIL: " __VA_ARGS__);      \
      std::printf("\n");                      \
      ++fails;                                \
    }                                         \
  } while (0)

int calls = 0;
void handler() {
  if (++calls >= 3) std::set_new_handler(nullptr);
}
struct Mine : std::bad_alloc {};

std::size_t opaque(std::size_t n) {
  volatile std::size_t v = n;
  return v;
}

// Run in a process started under RLIMIT_AS (main's child execs this
// program again), so that lowtide's reservation, made at start, fits the
// limit and the blocks below really run out.
void* volatile sink;  // keeps the filling allocations alive and unelided

int real_oom() {
  // Down to 64 KiB blocks: a library could no longer be mapped.
  for (std::size_t sz = std::size_t{1} << 20; sz >= (std::size_t{64} << 10); sz /= 2)
    while (void* p = std::malloc(sz)) sink = p;
  // mimalloc asks for 32 MiB at a time: what is left the test maps itself,
  // down to single pages, so that not even a library could be loaded now.
  for (std::size_t sz = std::size_t{16} << 20; sz >= 4096; sz /= 2)
    while (mmap(nullptr, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) != MAP_FAILED) {
    }
  try {
    void* p = ::operator new(opaque(std::size_t{1} << 20));
    sink = p;
    return 3;  // no exception although memory is gone
  } catch (const std::bad_alloc&) {
    return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string_view(argv[1]) == "oom") return real_oom();
  const std::size_t huge = opaque(SIZE_MAX - (std::size_t{2} << 20));
  std::set_new_handler(handler);
  bool threw = false;
  try {
    void* p = ::operator new(huge);
    ::operator delete(p);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  CHECK(threw && calls == 3, "operator new: threw=%d, handler called %d times (expected 3)", threw, calls);

  calls = 0;
  std::set_new_handler(handler);
  void* q = ::operator new[](huge, std::nothrow);
  CHECK(q == nullptr && calls == 3, "new[](nothrow): %p, handler called %d times (expected 3)", q, calls);

  std::set_new_handler([] { throw Mine(); });
  bool escaped = false;
  try {
    q = ::operator new(huge, std::align_val_t{256}, std::nothrow);
  } catch (...) {
    escaped = true;
  }
  std::set_new_handler(nullptr);
  CHECK(!escaped && q == nullptr, "new(align 256, nothrow) with a throwing handler: escaped=%d p=%p", escaped, q);

  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    rlimit rl{std::size_t{512} << 20, std::size_t{512} << 20};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(2);
    char oom[] = "oom";
    char* args[] = {argv[0], oom, nullptr};
    execv("/proc/self/exe", args);
    _exit(4);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork/waitpid");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "out of memory for real: child status 0x%x (0 = bad_alloc caught)",
        status);
  if (fails == 0) std::printf("PASS cxx_libcxx\n");
  return fails == 0 ? 0 : 1;
}

// errno through the malloc that starts lowtide's threads (the decay thread
// and the live server, at the first large allocation): a successful malloc
// leaves errno as it was. Here another process's squat is played by this
// one: it binds the live socket's name for its own pid first, so the
// server's bind fails with EADDRINUSE and it binds a fallback name; until
// 2026-12-06 that EADDRINUSE was left in errno by a malloc that succeeded.
// Since the twentieth stop the server makes its socket on its own thread
// in a process with other threads (errno is per thread there); this one
// has none, so the allocating thread still makes it before the decay
// thread (live::prepare) and the EADDRINUSE still comes on the malloc's
// thread, with everything else the start does (reading /proc,
// pthread_create).
// Exits 0 when errno is kept, 1 (with a line saying why) otherwise.
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

int main() {
  struct stat st{};
  const unsigned long long ns = stat("/proc/self/ns/pid", &st) == 0 ? st.st_ino : 0;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const int n = std::snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "lowtide/%llu/%d", ns, static_cast<int>(getpid()));
  const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&a), static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n)) != 0) {
    std::perror("binding the squat name");
    return 2;
  }
  errno = 0;
  void* p = std::malloc(std::size_t{8} << 20);  // large: starts the decay thread and the live server
  const int e = errno;
  if (p == nullptr) {
    std::printf("malloc(8 MiB) failed\n");
    return 2;
  }
  std::free(p);
  if (e != 0) {
    std::printf("FAIL: errno after a successful malloc is %d (%s), was 0\n", e, strerrorname_np(e));
    return 1;
  }
  std::printf("errno kept through the malloc that started lowtide's threads\n");
  return 0;
}

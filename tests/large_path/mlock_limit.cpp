// mlockall(MCL_FUTURE) under an RLIMIT_MEMLOCK that a large block exceeds:
// the kernel refuses to map the block (EAGAIN), and malloc must then return
// NULL + ENOMEM, as glibc's does, or a block that really is locked. It must
// not get around the limit (a fallback that made reserved pages read-write
// with mprotect once handed out a 64 MiB block with 68 KiB locked).
// The check runs in a child without CAP_IPC_LOCK (as root, the child drops
// to nobody), since the capability lifts the limit.

#include "lowtide_test.hpp"

#include <fcntl.h>
#include <grp.h>
#include <initializer_list>
#include <sys/mman.h>
#include <sys/resource.h>

using lt::MiB;
using lt::opaque;

namespace {

int child() {
  // 8 MiB, or less where the hard limit is lower (an unprivileged run):
  // either way below the blocks asked for.
  rlimit rl{};
  CHECK(getrlimit(RLIMIT_MEMLOCK, &rl) == 0);
  const rlim_t limit = rl.rlim_max < 8 * MiB ? rl.rlim_max : 8 * MiB;
  rl = rlimit{limit, limit};
  CHECK(setrlimit(RLIMIT_MEMLOCK, &rl) == 0, "setrlimit: %s", std::strerror(errno));
  if (geteuid() == 0) {
    CHECK(setgroups(0, nullptr) == 0 && setgid(65534) == 0 && setuid(65534) == 0, "dropping root: %s",
          std::strerror(errno));
  }
  CHECK(mlockall(MCL_FUTURE) == 0, "mlockall(MCL_FUTURE): %s", std::strerror(errno));
  for (std::size_t n : {64 * MiB, 20 * MiB}) {
    errno = 0;
    void* p = malloc(opaque(n));
    const int err = errno;
    const std::size_t locked = lt::status_kib("VmLck:") * 1024;
    std::printf("  malloc(%zu MiB) under a %zu KiB lock limit: %s (errno %d), %zu KiB locked\n", n / MiB,
                static_cast<std::size_t>(limit / 1024), p ? "a block" : "NULL", err, locked / 1024);
    if (p == nullptr) {
      CHECK(err == ENOMEM, "malloc failed with errno %d, not ENOMEM", err);
    } else {
      CHECK(locked >= n, "malloc(%zu) gave a block that is not locked (%zu bytes locked)", n, locked);
      free(p);
    }
  }
  return 0;
}

}  // namespace

int main() {
  lt::arm_watchdog(60, "mlock_limit");
  std::fflush(stdout);
  const pid_t pid = fork();
  CHECK(pid >= 0, "fork: %s", std::strerror(errno));
  if (pid == 0) {
    const int rc = child();
    std::fflush(stdout);
    _exit(rc);
  }
  int status = 0;
  CHECK(lt::wait_bounded(pid, 30, &status), "the child hung");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed (status %#x)", status);
  std::printf("PASS mlock_limit\n");
  return 0;
}

#include "report_file.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.hpp"

namespace lowtide::report {

namespace {

std::atomic<std::uint64_t> n_dropped{0};

// SIGPIPE blocked while a report is written to a pipe or FIFO whose reader
// may be gone, and the one that write raised taken back, so that writing a
// report never changes how the process ends. (One already pending before is
// left for the process.)
class NoSigpipe {
 public:
  NoSigpipe() noexcept {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~NoSigpipe() {
    sigset_t pending;
    if (!was_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      timespec zero{0, 0};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  NoSigpipe(const NoSigpipe&) = delete;
  NoSigpipe& operator=(const NoSigpipe&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

}  // namespace

bool expand_path(const char* pattern, char* out) {
  std::size_t n = 0;
  auto put = [&](const char* s, std::size_t len) {
    if (n + len >= kPathMax) return false;
    std::memcpy(out + n, s, len);
    n += len;
    return true;
  };
  for (const char* s = pattern; *s; ++s) {
    if (s[0] == '%' && s[1] == 'p') {
      char pid[24];
      auto r = fmt::format_to_n(pid, sizeof pid, "{}", ::getpid());
      if (!put(pid, r.size)) return false;
      ++s;
    } else if (s[0] == '%' && s[1] == '%') {
      if (!put("%", 1)) return false;
      ++s;
    } else if (!put(s, 1)) {
      return false;
    }
  }
  out[n] = '\0';
  return true;
}

namespace {

// The directory part of target into dir: "." when there is none.
void dir_of(const char* target, char* dir) {
  const char* slash = std::strrchr(target, '/');
  if (slash == nullptr) {
    std::memcpy(dir, ".", 2);
    return;
  }
  std::size_t n = slash == target ? 1 : static_cast<std::size_t>(slash - target);
  std::memcpy(dir, target, n);
  dir[n] = '\0';
}

// A fresh file: written under a temporary name nobody can predict or plant,
// then renamed over the target (which replaces a regular file or nothing).
// The temporary name has a fixed length, so any final name the file system
// accepts works.
bool create_new(PathBuf* pb, const char* body, std::size_t n) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    auto r = fmt::format_to_n(pb->tmp, kPathMax - 1, "{}/.lowtide-{:016x}.tmp", pb->dir, pal::random_u64());
    if (r.size >= kPathMax - 1) {
      errno = ENAMETOOLONG;
      return false;
    }
    pb->tmp[r.size] = '\0';
    int fd = ::open(pb->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      return false;
    }
    struct stat st;
    bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 && st.st_uid == ::geteuid();
    if (!ok) {
      // Not the file we just created: leave it alone.
      ::close(fd);
      errno = EEXIST;
      return false;
    }
    ok = write_all(fd, body, n);
    ok = (::close(fd) == 0) && ok;
    if (ok && ::rename(pb->tmp, pb->target) == 0) return true;
    const int e = errno;
    ::unlink(pb->tmp);
    errno = e;
    return false;
  }
  return false;
}

// write_all on a non-blocking fd, giving up (ETIMEDOUT) once `until_ns`
// has passed: a FIFO whose reader never drains it, a terminal stopped
// with ^S, must not hold the exit (or the periodic thread) for ever.
bool write_all_until(int fd, const char* p, std::size_t n, std::uint64_t until_ns) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return false;
      const std::uint64_t now = pal::now_ns();
      if (now >= until_ns) {
        errno = ETIMEDOUT;
        return false;
      }
      pollfd pf{fd, POLLOUT, 0};
      ::poll(&pf, 1, static_cast<int>((until_ns - now) / 1'000'000u) + 1);
      continue;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// The time a report may take to go through a FIFO, a socket or a device.
constexpr std::uint64_t kThroughBudgetNs = 2'000'000'000;

// Something that exists and is neither a regular file nor a directory: a
// FIFO, a device, a socket, reached directly or (follow = true) through a
// symlink write_path allows. Opened without O_CREAT, so nothing is created
// through a link. Only one of ours or root's (a device such as /dev/null,
// /dev/tty): another user's FIFO at the report's name could read the report
// or, never drained, hold our exit. O_NONBLOCK kept, so a FIFO nobody reads
// fails (ENXIO) and one nobody drains gives up after kThroughBudgetNs. A
// regular file is never written in place: if one stands there now, through
// a link it is refused, directly a new file replaces it.
bool write_through(PathBuf* pb, const char* body, std::size_t n, bool follow) {
  int fd = ::open(pb->target, O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
  if (fd < 0) return false;
  struct stat st;
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode) || (follow && S_ISREG(st.st_mode))) {
    ::close(fd);
    errno = EACCES;
    return false;
  }
  if (S_ISREG(st.st_mode)) {
    // Replaced by a regular file since we looked: write a new one instead.
    ::close(fd);
    return create_new(pb, body, n);
  }
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    ::close(fd);
    errno = EACCES;
    return false;
  }
  bool ok;
  {
    NoSigpipe guard;
    ok = write_all_until(fd, body, n, pal::now_ns() + kThroughBudgetNs);
  }
  int e = errno;
  ok = (::close(fd) == 0) && ok;
  if (!ok) errno = e;
  return ok;
}

// A symlink at the final name is followed only if it is ours or root's
// (/dev/stderr is root's), in any directory: stricter than the kernel's
// fs.protected_symlinks, which trusts any link outside sticky directories,
// because a process of ours may run as root with a path pointing into
// someone else's directory. Even then only to a FIFO, a device or a socket:
// a regular file is never written through a link (write_through).
bool may_follow(const struct stat& link) { return link.st_uid == ::geteuid() || link.st_uid == 0; }

std::atomic<bool> warned_periodic{false};

// A report that cannot be written: one warning and the body on stderr; a
// periodic one (rewritten every interval) only warns, once per process.
int failed(const char* target, const char* why, const char* body, std::size_t n, bool periodic) {
  int e = errno;
  if (!periodic) {
    log::warn("cannot write the report to '{}' ({}); writing it to stderr instead", target,
              why != nullptr ? why : std::strerror(e));
    write_stderr(body, n);
  } else if (!warned_periodic.exchange(true)) {
    log::warn("cannot write the periodic report to '{}' ({}); not retried on stderr, the exit-time report will be",
              target, why != nullptr ? why : std::strerror(e));
  }
  errno = e;
  return -1;
}

}  // namespace

bool is_stderr(const char* path) {
  if (path == nullptr || path[0] == '\0') return true;
  for (const char* name : {"stderr", "/dev/stderr", "/dev/fd/2", "/proc/self/fd/2"})
    if (std::strcmp(path, name) == 0) return true;
  return false;
}

int write_stderr(const char* body, std::size_t n) {
  int fl = ::fcntl(2, F_GETFL);
  if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY) {
    n_dropped.fetch_add(1, std::memory_order_relaxed);
    errno = EBADF;
    return -1;
  }
  NoSigpipe guard;
  return write_all(2, body, n) ? 0 : -1;
}

int write_path(const char* path, const char* body, std::size_t n, bool secure, PathBuf* pb, bool periodic) {
  if (is_stderr(path)) return write_stderr(body, n);
  if (secure) {
    // docs/security.md: a setuid/setgid process writes no file.
    errno = EPERM;
    return -1;
  }
  if (pb == nullptr) {
    errno = ENOMEM;
    return failed(path, nullptr, body, n, periodic);
  }
  if (!expand_path(path, pb->target)) {
    errno = ENAMETOOLONG;
    return failed(path, nullptr, body, n, periodic);
  }
  dir_of(pb->target, pb->dir);
  struct stat lst;
  if (::lstat(pb->target, &lst) != 0) {
    if (errno == ENOENT && create_new(pb, body, n)) return 0;
    return failed(pb->target, nullptr, body, n, periodic);
  }
  bool ok;
  if (S_ISLNK(lst.st_mode)) {
    if (!may_follow(lst)) {
      errno = EACCES;
      return failed(pb->target, "a symlink of another user: not followed", body, n, periodic);
    }
    ok = write_through(pb, body, n, true);
  } else if (S_ISREG(lst.st_mode)) {
    ok = create_new(pb, body, n);
  } else if (S_ISDIR(lst.st_mode)) {
    errno = EISDIR;
    ok = false;
  } else {
    ok = write_through(pb, body, n, false);
  }
  return ok ? 0 : failed(pb->target, nullptr, body, n, periodic);
}

std::uint64_t dropped() { return n_dropped.load(std::memory_order_relaxed); }

}  // namespace lowtide::report

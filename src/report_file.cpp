#include "report_file.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <utility>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.hpp"

namespace lowtide::report {

namespace {

std::atomic<std::uint64_t> n_dropped{0};

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

// A symlink lowtide follows on the way to a report (at the final name or
// above it) is ours or root's: stricter than the kernel's
// fs.protected_symlinks, which trusts any link outside sticky directories,
// because a process of ours may run as root with a path pointing into
// someone else's directory. (In a user namespace a link of an unmapped
// user, the host's root's too, shows as the overflow uid and is not
// followed: /var/run there, /run works.)
bool may_follow(const struct stat& link) { return link.st_uid == ::geteuid() || link.st_uid == 0; }

// procfs's links are made by the kernel, nobody can plant or swap one, and
// several are not paths at all (an fd's object, a deleted directory,
// another mount namespace's root): the kernel follows them, never their
// text. But where one leads out of procfs is another process's choice
// when it is that process's (/proc/<pid>/cwd, root, fd/N: its owner's,
// even where the link shows as root's, a non-dumpable process), so such a
// link is followed only from our own /proc/self or /proc/thread-self
// (own_proc_dir); one that stays in procfs (/proc/self, /proc/net) from
// anywhere in it.
bool on_procfs(int fd) {
  struct statfs sf;
  return ::fstatfs(fd, &sf) == 0 && sf.f_type == PROC_SUPER_MAGIC;
}
bool own_proc_dir(int dir) {
  struct stat d;
  if (::fstat(dir, &d) != 0) return false;
  for (const char* own : {"/proc/self", "/proc/self/fd", "/proc/thread-self", "/proc/thread-self/fd"}) {
    const int fd = ::open(own, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat o;
    const bool same = ::fstat(fd, &o) == 0 && o.st_dev == d.st_dev && o.st_ino == d.st_ino;
    ::close(fd);
    if (same) return true;
  }
  return false;
}

// /dev/fd/N, /dev/stdout and /dev/stderr (alone or followed by "/...") as
// the procfs names they are links to, at the top of the report's path and
// in every link's text: in a user namespace the host's /dev links belong to
// an unmapped user (the overflow uid), which may_follow refuses. The links
// are the kernel's documented ones (devices.txt), not looked up. In place,
// in a kPathMax buffer; left as it is where the result would not fit.
void dev_fd_names(char* path) {
  static constexpr struct {
    const char *from, *to;
  } kNames[] = {{"/dev/fd", "/proc/self/fd"}, {"/dev/stdout", "/proc/self/fd/1"}, {"/dev/stderr", "/proc/self/fd/2"}};
  for (const auto& nm : kNames) {
    const std::size_t from = std::strlen(nm.from), to = std::strlen(nm.to);
    if (std::strncmp(path, nm.from, from) != 0 || (path[from] != '\0' && path[from] != '/')) continue;
    const std::size_t len = std::strlen(path);
    if (len - from + to >= kPathMax) return;
    std::memmove(path + to, path + from, len - from + 1);
    std::memcpy(path, nm.to, to);
    return;
  }
}

// One link met on the way (at the final name or above it): `lfd` its
// O_PATH|O_NOFOLLOW fd and `st` that fd's fstat. Counted (at most 40 in
// all, as the kernel); procfs's are left to the caller, which lets the
// kernel follow them (on_procfs); any other is followed only if may_follow
// allows, and its text is read through lfd, the fd that was checked, so
// that what is followed is what was checked. The text goes to out (room
// bytes, NUL-terminated), its length to *len. The caller closes lfd.
enum class LinkStep { text, procfs, refused, failed };  // refused: EACCES; failed: errno set
LinkStep read_link(int lfd, const struct stat& st, int* links, char* out, std::size_t room, std::size_t* len) {
  if (++*links > 40) {
    errno = ELOOP;
    return LinkStep::failed;
  }
  if (on_procfs(lfd)) return LinkStep::procfs;
  if (!may_follow(st)) {
    errno = EACCES;
    return LinkStep::refused;
  }
  const ssize_t k = ::readlinkat(lfd, "", out, room);
  if (k <= 0 || static_cast<std::size_t>(k) >= room) {
    if (k >= 0) errno = k == 0 ? ENOENT : ENAMETOOLONG;
    return LinkStep::failed;
  }
  out[k] = '\0';
  *len = static_cast<std::size_t>(k);
  return LinkStep::text;
}

// The directory part of `path` opened once (O_PATH), relative to `start`
// when the path is relative, its last component copied to pb->base, and
// everything after done relative to that fd: the final name checked, the
// temporary file created, the rename, so that nothing swapped in the path
// between those steps can send one of them elsewhere. Walked one component
// at a time by hand (pb->dir and pb->tmp hold the path still to walk and
// the next one; `path` may be one of them) so that the rule for a link at
// the final name holds for every link on the way: followed only if ours or
// root's (may_follow; /var/run -> /run is root's), read through the fd
// that was checked, procfs's followed by the kernel (on_procfs). A root
// process given a path through another user's symlinked directory would
// otherwise write where that user points it, and the rename would replace
// whatever file has the final name there. `*links` counts the links
// followed (at most 40, as the kernel). Returns the directory's fd, or -1
// with errno set (*link_refused true when it was another user's link). A
// link's text and the rest of the path after it must fit in kPathMax.
int open_dir_of(int start, const char* path, PathBuf* pb, int* links, bool* link_refused) {
  *link_refused = false;
  const char* slash = std::strrchr(path, '/');
  const char* base = slash == nullptr ? path : slash + 1;
  const std::size_t blen = std::strlen(base);
  if (blen == 0 || std::strcmp(base, ".") == 0 || std::strcmp(base, "..") == 0) {
    errno = EISDIR;
    return -1;
  }
  if (blen >= sizeof pb->base) {
    errno = ENAMETOOLONG;
    return -1;
  }
  std::memcpy(pb->base, base, blen + 1);
  const std::size_t n = slash == nullptr ? 0 : static_cast<std::size_t>(slash - path);
  std::memmove(pb->dir, path, n);  // path may be pb->dir
  pb->dir[n] = '\0';
  int cur = pb->dir[0] == '/' || (slash == path) ? ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC)
                                                 : ::openat(start, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (cur < 0) return -1;
  char* rest = pb->dir;
  char* next = pb->tmp;
  std::size_t pos = 0;
  const auto fail = [&](int e, int fd) {
    if (fd >= 0) ::close(fd);
    ::close(cur);
    errno = e;
    return -1;
  };
  for (;;) {
    while (rest[pos] == '/') ++pos;
    if (rest[pos] == '\0') return cur;
    std::size_t end = pos;
    while (rest[end] != '\0' && rest[end] != '/') ++end;
    if (end - pos >= sizeof pb->name) return fail(ENAMETOOLONG, -1);
    std::memcpy(pb->name, rest + pos, end - pos);
    pb->name[end - pos] = '\0';
    pos = end;
    if (std::strcmp(pb->name, ".") == 0) continue;
    // A directory, not through a link (O_DIRECTORY so that an automount
    // point is mounted, as the kernel's own walk does; ".." is never a
    // link and is the parent as for the kernel).
    int fd = ::openat(cur, pb->name, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
      ::close(cur);
      cur = fd;
      continue;
    }
    if (errno != ENOTDIR) return fail(errno, -1);
    // A link itself (O_PATH|O_NOFOLLOW), or something that is no directory.
    fd = ::openat(cur, pb->name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || ::fstat(fd, &st) != 0) return fail(errno, fd);
    if (!S_ISLNK(st.st_mode)) return fail(ENOTDIR, fd);
    std::size_t k = 0;
    switch (read_link(fd, st, links, next, kPathMax, &k)) {
      case LinkStep::procfs:
        ::close(fd);
        fd = ::openat(cur, pb->name, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) return fail(errno, -1);
        if (!on_procfs(fd) && !own_proc_dir(cur)) {
          *link_refused = true;
          return fail(EACCES, fd);
        }
        ::close(cur);
        cur = fd;
        continue;
      case LinkStep::refused: *link_refused = true; return fail(EACCES, fd);
      case LinkStep::failed: return fail(errno, fd);
      case LinkStep::text: break;
    }
    ::close(fd);
    // The link's text and the rest of the path become the path still to walk.
    const std::size_t tail = std::strlen(rest + pos);
    if (k + tail >= kPathMax) return fail(ENAMETOOLONG, -1);
    std::memcpy(next + k, rest + pos, tail + 1);
    std::swap(rest, next);
    pos = 0;
    dev_fd_names(rest);
    if (rest[0] == '/') {
      ::close(cur);
      cur = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (cur < 0) return -1;
    }
  }
}

// A fresh file: written under a temporary name nobody can predict or plant,
// then renamed over the final name `base` (which replaces a regular file or
// nothing), both in the directory `dfd` (open_dir_of). The temporary name
// has a fixed length, so any final name the file system accepts works.
bool create_new(int dfd, const char* base, const char* body, std::size_t n) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    char tmp[48];
    auto r = fmt::format_to_n(tmp, sizeof tmp - 1, ".lowtide-{:016x}.tmp", pal::random_u64());
    tmp[r.size] = '\0';
    int fd = ::openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      return false;
    }
    struct stat st;
    bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 && st.st_uid == ::geteuid();
    if (!ok) {
      // O_EXCL made this name ours, yet the file says otherwise (an owner
      // other than geteuid() after setfsuid, a vfat/CIFS uid= mount, NFS
      // root_squash): remove it, or one is left per periodic interval.
      ::close(fd);
      ::unlinkat(dfd, tmp, 0);
      errno = EEXIST;
      return false;
    }
    ok = write_all(fd, body, n);
    ok = (::close(fd) == 0) && ok;
    if (ok && ::renameat(dfd, tmp, dfd, base) == 0) return true;
    const int e = errno;
    ::unlinkat(dfd, tmp, 0);
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

// No forked child keeps a descriptor of a report being written (the
// directories on the way, the temporary file, a FIFO at the report's name):
// a fork in another thread while the periodic thread (or the exit path, or
// lowtide_write_report) held one gave the child a copy nobody closes until
// it execs, and a FIFO's reader then never saw the report's end while the
// child lived (reliability.md no. 97). write_path works inside a window of
// the fork gate (pal::fork_window_open), which a fork waits for, as the
// files lowtide reads. A write through a FIFO, a socket or a device may
// take kThroughBudgetNs, longer than a fork should wait: for it the window
// is left and its two descriptors (the FIFO's and the directory's) are
// recorded instead, for fork_child_fds to close in a child made meanwhile;
// the window is taken again for the closes. Without a window within
// kWindowWaitNs (a program thread forking in a tight loop; a signal handler
// that interrupted its own thread's fork) the report is written as before,
// outside one: a report is not given up for it.
constexpr std::uint64_t kWindowWaitNs = 20'000'000, kWindowWaitLongNs = 2'000'000'000;

// Descriptors handed to a forked child's fork handler to close (its
// identity first, then the number; pal::OwnFd's check before the close).
// A few slots: writers at once are the periodic thread, the exit path and
// the program's own lowtide_write_report calls.
struct HeldFd {
  std::atomic<bool> taken{false};
  std::atomic<int> fd{-1};
  std::atomic<unsigned long long> dev{0}, ino{0};
};
HeldFd held[8];

// The slot that records fd, or -1 (no slot free, or fstat failed).
int hold(int fd) {
  pal::OwnFd o;
  if (!pal::own(fd, &o)) return -1;
  for (int i = 0; i < 8; ++i) {
    if (held[i].taken.exchange(true)) continue;
    held[i].dev.store(o.dev);
    held[i].ino.store(o.ino);
    held[i].fd.store(fd);
    return i;
  }
  return -1;
}

void unhold(int slot) {
  if (slot < 0) return;
  held[slot].fd.store(-1);
  held[slot].taken.store(false);
}

// write_path's window: whether one is open, and the directory's slot once
// write_through has left the window for a long write.
struct Gate {
  bool open;
  int dir_slot;
};

// A FIFO, a device or a socket seen at the final name: refused before it
// is opened (opening alone rewinds a tape, arms a watchdog) when it is a
// block device or another user's; write_through checks again what it
// opened.
bool node_ok(const struct stat& st, const char** why) {
  if (!S_ISBLK(st.st_mode) && may_follow(st)) return true;
  errno = EACCES;
  *why = S_ISBLK(st.st_mode) ? "a block device: not written" : "a FIFO, device or socket of another user: not written";
  return false;
}

// Something that exists and is neither a regular file nor a directory: a
// FIFO, a device, a socket, reached directly or (follow = true) through a
// symlink write_path allows. Opened without O_CREAT, so nothing is created
// through a link. Only one of ours or root's (a device such as /dev/null,
// /dev/tty): another user's FIFO at the report's name could read the report
// or, never drained, hold our exit. O_NONBLOCK kept, so a FIFO nobody reads
// fails (ENXIO) and one nobody drains gives up after kThroughBudgetNs. A
// regular file is never written in place: if one stands there now, through
// a link it is refused, directly a new file replaces it.
bool write_through(int dfd, const char* base, const char* body, std::size_t n, bool follow, bool through_link,
                   Gate* gate) {
  int fd = ::openat(dfd, base, O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
  if (fd < 0) return false;
  struct stat st;
  // A block device never: a report is no disk image. A regular file
  // reached through a link (swapped in since it was looked at, too) never.
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode) || S_ISBLK(st.st_mode) ||
      ((follow || through_link) && S_ISREG(st.st_mode))) {
    ::close(fd);
    errno = EACCES;
    return false;
  }
  if (S_ISREG(st.st_mode)) {
    // Replaced by a regular file since we looked: write a new one instead.
    ::close(fd);
    return create_new(dfd, base, body, n);
  }
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    ::close(fd);
    errno = EACCES;
    return false;
  }
  // The write may take kThroughBudgetNs: outside the window, with both
  // descriptors recorded for a child's fork handler (see Gate). Where no
  // slot is free the window is kept for the write.
  int fd_slot = -1;
  if (gate->open) {
    fd_slot = hold(fd);
    gate->dir_slot = hold(dfd);
    if (fd_slot >= 0 && gate->dir_slot >= 0) {
      pal::fork_window_close();
      gate->open = false;
    } else {
      unhold(fd_slot);
      unhold(gate->dir_slot);
      fd_slot = gate->dir_slot = -1;
    }
  }
  bool ok;
  {
    pal::NoSigpipe guard;
    ok = write_all_until(fd, body, n, pal::now_ns() + kThroughBudgetNs);
  }
  int e = errno;
  if (fd_slot >= 0) gate->open = pal::fork_window_wait(kWindowWaitLongNs);
  ok = (::close(fd) == 0) && ok;
  unhold(fd_slot);
  if (!ok) errno = e;
  return ok;
}

std::atomic<bool> warned_periodic{false};

// A report that cannot be written: one warning and the body on stderr; a
// periodic one (rewritten every interval) only warns, once per process.
int failed(const char* target, const char* why, const char* body, std::size_t n, bool periodic) {
  int e = errno;
  // strerrordesc_np, not strerror: no translation, so no gettext and no
  // malloc under a non-C LC_MESSAGES (this runs in the SIGTERM handler).
  const char* desc = strerrordesc_np(e);
  if (desc == nullptr) desc = "unknown error";
  // The path as Shown: its control characters as '?', one line; its first
  // 200 bytes and "..." (it may be 4 KiB long), so that the reason and what
  // happens to the report always fit the warning's 512 bytes (no. 98).
  constexpr std::size_t kShownPath = 200;
  const std::size_t tn = std::strlen(target);
  const bool cut = tn > kShownPath;
  const Shown shown(target, cut ? kShownPath : tn);
  if (!periodic) {
    log::warn("cannot write the report to '{}{}' ({}); writing it to stderr instead", shown, cut ? "..." : "",
              why != nullptr ? why : desc);
    write_stderr(body, n);
  } else if (!warned_periodic.exchange(true)) {
    log::warn("cannot write the periodic report to '{}{}' ({}); not retried on stderr, the exit-time report will be",
              shown, cut ? "..." : "", why != nullptr ? why : desc);
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
  // A pipe nobody drains, a terminal stopped with ^S: the same bound as a
  // FIFO at a report's name (write_through), or the exit (from the SIGTERM
  // handler too) waits for ever.
  if (pal::write_stderr_within(body, n, kThroughBudgetNs) == 0) return 0;
  if (errno == ETIMEDOUT) n_dropped.fetch_add(1, std::memory_order_relaxed);  // cut short: counted as dropped
  return -1;
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
  dev_fd_names(pb->target);
  int links = 0;
  bool link_refused = false;
  // Every descriptor from here on is opened and closed inside a window of
  // the fork gate where one came (Gate).
  Gate gate{pal::fork_window_wait(kWindowWaitNs), -1};
  int dfd = open_dir_of(AT_FDCWD, pb->target, pb, &links, &link_refused);
  const char* why = nullptr;
  bool ok = false;
  struct stat lst;
  if (dfd < 0) {
    // errno from the walk.
  } else if (::fstatat(dfd, pb->base, &lst, AT_SYMLINK_NOFOLLOW) != 0) {
    ok = errno == ENOENT && create_new(dfd, pb->base, body, n);
  } else if (S_ISLNK(lst.st_mode)) {
    // A link at the final name leads only to a FIFO, a device or a socket,
    // never to a regular file or to nothing (nothing is created or
    // truncated through a link), and its target is walked by the same
    // rules: each link read through the fd that was checked, its
    // directories by open_dir_of. procfs's (/dev/fd/N's end) are followed
    // by the kernel, which alone knows what they lead to.
    for (;;) {
      const int lfd = ::openat(dfd, pb->base, O_PATH | O_NOFOLLOW | O_CLOEXEC);
      if (lfd < 0 || ::fstat(lfd, &lst) != 0) {
        if (lfd >= 0) ::close(lfd);
        break;
      }
      if (!S_ISLNK(lst.st_mode)) {
        // Swapped since it was looked at: what is there now is no link.
        ::close(lfd);
        errno = EAGAIN;
        break;
      }
      std::size_t k = 0;
      const LinkStep step = read_link(lfd, lst, &links, pb->tmp, kPathMax, &k);
      const int step_errno = errno;
      ::close(lfd);
      errno = step_errno;
      // procfs's (/proc/self/fd/N, what /dev/fd/N became): the kernel
      // follows it, from our own fd directory only (own_proc_dir).
      if (step == LinkStep::procfs) {
        if (!own_proc_dir(dfd)) {
          errno = EACCES;
          why = "a link of another process under /proc: not followed";
          break;
        }
        ok = write_through(dfd, pb->base, body, n, true, true, &gate);
        break;
      }
      if (step == LinkStep::refused) why = "a symlink of another user: not followed";
      if (step != LinkStep::text) break;
      dev_fd_names(pb->tmp);
      const int next = open_dir_of(dfd, pb->tmp, pb, &links, &link_refused);
      ::close(dfd);
      dfd = next;
      if (dfd < 0) break;
      if (::fstatat(dfd, pb->base, &lst, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) errno = EACCES;  // a dangling link: never created through
        break;
      }
      if (S_ISLNK(lst.st_mode)) continue;
      if (S_ISREG(lst.st_mode) || S_ISDIR(lst.st_mode)) {
        errno = S_ISDIR(lst.st_mode) ? EISDIR : EACCES;
        why = S_ISREG(lst.st_mode) ? "a symlink to a regular file: not written through" : nullptr;
        break;
      }
      ok = node_ok(lst, &why) && write_through(dfd, pb->base, body, n, false, true, &gate);
      break;
    }
  } else if (S_ISREG(lst.st_mode)) {
    ok = create_new(dfd, pb->base, body, n);
  } else if (S_ISDIR(lst.st_mode)) {
    errno = EISDIR;
  } else {
    ok = node_ok(lst, &why) && write_through(dfd, pb->base, body, n, false, false, &gate);
  }
  const int e = errno;
  if (dfd >= 0) ::close(dfd);
  unhold(gate.dir_slot);
  if (gate.open) pal::fork_window_close();
  errno = e;
  if (link_refused) why = "a symlink of another user in its directory path: not followed";
  return ok ? 0 : failed(pb->target, why, body, n, periodic);
}

std::uint64_t dropped() { return n_dropped.load(std::memory_order_relaxed); }

void fork_child_fds() {
  for (HeldFd& h : held) {
    pal::OwnFd o;
    o.fd = h.fd.exchange(-1);
    o.dev = h.dev.load();
    o.ino = h.ino.load();
    if (o.fd >= 0) pal::close_own(o);  // only if still that file
    h.taken.store(false);
  }
}

}  // namespace lowtide::report

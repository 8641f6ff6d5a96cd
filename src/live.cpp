#include "live.hpp"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "large_cache.hpp"
#include "large_space.hpp"
#include "orphan.hpp"
#include "platform.hpp"
#include "report.hpp"
#include "report_out.hpp"
#include "small_path.hpp"
#include "state.hpp"
#include "stats.hpp"

namespace lowtide::live {

namespace {

// The listening socket: its fd, and what fstat said of it when we made it.
// A program may close every fd (close_range, a loop up to the limit) and
// open something else under the same number; before each accept the fd is
// checked against the saved inode, and the server stops when it is not
// ours any more (it never closes an fd that is not its own).
std::atomic<int> listen_fd{-1};
dev_t listen_dev = 0;
ino_t listen_ino = 0;
// The connection being answered (-1: none), closed by a forked child, and
// its identity (pal::OwnFd: fstat's device and inode), written before
// client_fd is set: the child closes the number only if it is still that
// socket (a program closing every fd may have reused it for a file of its
// own in the instant before the fork).
std::atomic<int> client_fd{-1};
std::atomic<unsigned long long> client_dev{0}, client_ino{0};
// Once per process (reset in a forked child): start() runs each time a
// decay thread is started, which happens again after a failed start.
std::atomic<bool> started{false};
std::atomic<std::uint64_t> answered{0}, refused{0};

// Time allowed to each client: to send its request line, for each send to
// make progress, and for the whole answer. One client at a time: a slow or
// silent one delays the next query by at most kClientBudgetMs, never the
// process (answering runs on this thread only).
constexpr int kRecvTimeoutMs = 1000;
constexpr int kSendTimeoutMs = 2000;
constexpr std::uint64_t kClientBudgetMs = 5000;

std::uint64_t ino_of(const char* path) {
  struct stat st;
  return ::stat(path, &st) == 0 ? static_cast<std::uint64_t>(st.st_ino) : 0;
}

// "lowtide/<pid namespace inode>/<pid>", abstract (a leading NUL, no file):
// the pid namespace keeps two containers that share a network namespace but
// not a pid namespace (a pod) from both claiming "lowtide/1". 0 when
// /proc is not mounted; the CLI tries that name too.
socklen_t make_name(sockaddr_un* a) {
  std::memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  auto r = fmt::format_to_n(a->sun_path + 1, sizeof a->sun_path - 2, "lowtide/{}/{}", ino_of("/proc/self/ns/pid"),
                            ::getpid());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + r.size);
}

// Well above the numbers a program hands out (lowest free first), so a
// program that closes everything and opens again is unlikely to land on it
// (the inode check catches it if it does); not so high that the kernel's fd
// table must grow far (it is sized to the highest fd).
// `ours` (optional): whether the copy is still what the caller opened. A
// program closing every fd may have closed the low number and opened its
// own there before the copy was made: then the copy, a copy of the
// program's file, is closed and -1 returned, the low number left alone
// (closing it would close the program's file, and a kept copy of its pipe
// would keep its reader from ever seeing the end).
int move_high(int fd, bool (*ours)(int) = nullptr) {
  if (fd < 0) return fd;
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur <= 64) return fd;
  rlim_t want = rl.rlim_cur / 2 < 1024 ? rl.rlim_cur / 2 : 1024;
  int hi = ::fcntl(fd, F_DUPFD_CLOEXEC, static_cast<int>(want));
  if (hi < 0) return fd;
  if (ours != nullptr && !ours(hi)) {
    ::close(hi);
    return -1;
  }
  // The low number is closed only if it is still the same socket: a
  // program closing every fd at this instant may already have reopened it.
  struct stat a, b;
  if (::fstat(fd, &a) == 0 && ::fstat(hi, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) ::close(fd);
  return hi;
}

// The name the listening socket was bound to (open_socket), kept: made
// again later it could differ (a process that chroots away from /proc).
sockaddr_un bound_name;
socklen_t bound_len = 0;

// Whether fd is a unix socket bound to our name: the listening socket or a
// connection accepted on it.
bool ours_by_name(int fd) {
  sockaddr_un got;
  socklen_t len = sizeof got;
  std::memset(&got, 0, sizeof got);
  return fd >= 0 && bound_len != 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&got), &len) == 0 &&
         len == bound_len && std::memcmp(&got, &bound_name, len) == 0;
}

bool still_ours(int fd) {
  struct stat st;
  return fd >= 0 && ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == listen_ino &&
         st.st_dev == listen_dev;
}

// Our name with "/<16 hex digits>" of pal::random_u64 appended: where
// another process holds our name (EADDRINUSE), the name we take instead.
socklen_t add_suffix(sockaddr_un* a, socklen_t len) {
  const std::size_t at = len - offsetof(sockaddr_un, sun_path);
  if (at + 17 > sizeof a->sun_path) return 0;
  auto r = fmt::format_to_n(a->sun_path + at, 17, "/{:016x}", pal::random_u64());
  return static_cast<socklen_t>(len + r.size);
}

int open_socket() {
  // Moved high before it has a name: whoever sees the name (the CLI, a
  // program listing /proc/net/unix) sees the number it keeps, so a program
  // that closes every descriptor once it saw the name closes this one too
  // (the dup waits out the fd table's growth, milliseconds: a close-all
  // meanwhile would miss the number the socket was moving to).
  int fd = move_high(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd < 0) return -1;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return -1;  // not ours to close
  sockaddr_un a;
  const socklen_t plain_len = make_name(&a);
  socklen_t len = plain_len;
  // EADDRINUSE: another process in this network namespace has our name.
  // An abstract name is whoever's binds it first, and any local user can
  // bind the names of pids still to come (or the same pid of another pid
  // namespace whose inode we could not read has it). Then we bind
  // "<our name>/<64 random bits>", which nobody can take ahead of us; the
  // CLI looks for names under our name in /proc/net/unix when the one at
  // our name is not us (python/lowtide_cli/stats_cmd.py), and believes a
  // listener only after SO_PEERCRED says it is this pid, as for the plain
  // name. A few tries: the random bits colliding with a live name is not
  // going to happen, but a try costs nothing.
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), len);
  for (int tries = 0; rc != 0 && errno == EADDRINUSE && tries < 4; ++tries) {
    len = add_suffix(&a, plain_len);  // the same 17 bytes after the name each time
    if (len == 0) break;
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), len);
  }
  if (rc != 0 || ::listen(fd, 4) != 0) {
    struct stat now;
    if (::fstat(fd, &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev) ::close(fd);
    return -1;
  }
  listen_dev = st.st_dev;
  listen_ino = st.st_ino;
  bound_name = a;
  bound_len = len;
  return fd;
}

// ---- the answer ----

struct Send {
  pal::OwnFd c;  // the connection, checked before each send (pal::OwnFd)
  std::uint64_t deadline_ns;
  bool failed;
};

void send_all(const char* p, std::size_t n, void* arg) {
  auto* s = static_cast<Send*>(arg);
  while (n > 0 && !s->failed) {
    if (pal::now_ns() > s->deadline_ns) {
      s->failed = true;
      return;
    }
    if (!pal::still_own(s->c)) {
      s->failed = true;
      return;
    }
    ssize_t w = ::send(s->c.fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      s->failed = true;  // EAGAIN: SO_SNDTIMEO passed without progress
      return;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

// mimalloc 2.0.9 places its segments (aligned OS allocations) at hinted
// addresses in [2 TiB, 30 TiB) (its MI_HINT_BASE and MI_HINT_MAX): the
// anonymous mappings there are taken as its memory. What it maps elsewhere
// (thread metadata, a segment whose hint was taken) counts as "other".
constexpr std::uintptr_t kMiHintLo = std::uintptr_t{2} << 40;
constexpr std::uintptr_t kMiHintHi = std::uintptr_t{30} << 40;

std::uint64_t parse_hex(const char*& s) {
  std::uint64_t v = 0;
  for (;; ++s) {
    char c = *s;
    if (c >= '0' && c <= '9') v = v * 16 + static_cast<std::uint64_t>(c - '0');
    else if (c >= 'a' && c <= 'f') v = v * 16 + static_cast<std::uint64_t>(c - 'a' + 10);
    else return v;
  }
}

std::uint64_t parse_dec(const char*& s) {
  while (*s == ' ' || *s == '\t') ++s;
  std::uint64_t v = 0;
  while (*s >= '0' && *s <= '9') v = v * 10 + static_cast<std::uint64_t>(*s++ - '0');
  return v;
}

// One line of /proc/self/maps: "start-end perms offset dev inode   [path]".
// Whether it is an anonymous read-write mapping in mimalloc's area (not the
// large path's arena), and where.
bool small_range_of(const char* s, std::uint64_t* start, std::uint64_t* end) {
  *start = parse_hex(s);
  if (*s++ != '-') return false;
  *end = parse_hex(s);
  if (*s++ != ' ' || s[0] != 'r' || s[1] != 'w') return false;
  for (int field = 0; field < 3; ++field) {  // perms, offset, dev
    while (*s == ' ') ++s;
    while (*s != ' ' && *s != '\0') ++s;
  }
  std::uint64_t inode = parse_dec(s);
  while (*s == ' ') ++s;
  if (inode != 0 || *s != '\0' || *start < kMiHintLo || *end > kMiHintHi || *end <= *start) return false;
  return !large::space.arena.contains(reinterpret_cast<const void*>(*start));
}

// How long a window of the fork gate is waited for (pal::fork_window_wait):
// 20 ms where a later turn will do; 2 s where the descriptor must not be
// left to a child (the listening socket's making, a served connection's
// close).
constexpr std::uint64_t kWindowWait = 20'000'000, kWindowWaitLong = 2'000'000'000;
bool enter_fork_window(std::uint64_t within_ns = kWindowWait) { return pal::fork_window_wait(within_ns); }

// /proc/self/maps (no page walk, unlike smaps: cheap), streamed through a
// fixed buffer (only this thread reads it). Opened by the platform layer
// (pal::open_maps: no link, never blocking, a regular file only), then
// moved high and checked before each read and the close (pal::OwnFd).
// Opened, read and closed inside a window of the fork gate (never without
// one), the mappings' ranges copied out, and their pages counted after the
// close: a fork meanwhile waits only for the read, and no child inherits
// the fd. Where the file was not read whole (no window; not opened: a
// mount over it, no /proc, out of descriptors; taken by the program, or a
// read refused, midway), the last answer's figure, and *last_known says so
// (up to 2026-12-07 a failed open answered 0, a partial read a part).
std::uint64_t small_resident(bool* last_known) {
  static char buf[16 << 10];
  struct Range {
    std::uint64_t start, end;
  };
  static Range ranges[8192];  // 256 GiB of mimalloc's 32 MiB segments at least
  // What the last answer counted: given again where no window came (a
  // program thread forking in a tight loop), rather than open the file
  // without one (a child of a fork then would keep the descriptor:
  // reliability.md no. 86) or answer 0.
  static std::uint64_t last = 0;
  *last_known = true;
  std::size_t n = 0;
  if (!enter_fork_window()) return last;
  pal::OwnFd o;
  if (!pal::own(move_high(pal::open_maps()), &o)) {
    if (o.fd >= 0) ::close(o.fd);
    pal::fork_window_close();
    return last;
  }
  const int fd = o.fd;
  std::size_t have = 0;
  bool ours = true, whole = false;
  while (n < sizeof ranges / sizeof ranges[0]) {
    if (!pal::still_own(o)) {  // the program's now: not read, not closed
      ours = false;
      break;
    }
    ssize_t r = ::read(fd, buf + have, sizeof buf - 1 - have);
    if (r < 0 && errno == EINTR) continue;
    whole = r == 0;
    if (r <= 0) break;
    have += static_cast<std::size_t>(r);
    buf[have] = '\0';
    char* at = buf;
    for (char* nl; (nl = std::strchr(at, '\n')) != nullptr && n < sizeof ranges / sizeof ranges[0]; at = nl + 1) {
      *nl = '\0';
      if (small_range_of(at, &ranges[n].start, &ranges[n].end)) ++n;
    }
    have = static_cast<std::size_t>(buf + have - at);
    std::memmove(buf, at, have);
    if (have == sizeof buf - 1) have = 0;  // a line longer than the buffer (a path): not ours
  }
  if (ours) pal::close_own(o);
  pal::fork_window_close();
  // (The table full is not a failed read: 256 GiB of segments at least,
  // counted as far as it goes, as before.)
  if (!whole && n < sizeof ranges / sizeof ranges[0]) return last;
  *last_known = false;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i)
    total += pal::resident_bytes(reinterpret_cast<const void*>(ranges[i].start), ranges[i].end - ranges[i].start);
  last = total;
  return total;
}

struct Breakdown {
  std::uint64_t rss = 0, rss_anon = 0, rss_file = 0, rss_shmem = 0;
  std::size_t small_committed = 0, small_peak = 0;
  std::uint64_t small_resident = 0;
  bool small_resident_last_known = false;  // the last answer's: /proc/self/maps not read
  std::int64_t small_used = 0;
  std::uint64_t large_usable = 0, large_committed = 0, large_blocks = 0;
  std::uint64_t large_live = 0;  // resident pages of live large blocks
  std::uint64_t live_extents = 0;  // bytes of their extents (headers, rounding)
  std::uint64_t cache_bytes = 0, cache_resident = 0, pending_bytes = 0, pending_resident = 0;
  bool live_missed = false;  // more live blocks than the list holds
  std::uint64_t query_ns = 0;
};

// The live blocks' extents, copied under the arena lock (held only for the
// copy: no system call under it), counted with pal::resident_bytes after.
struct Span {
  std::uint32_t start, n;
};
constexpr std::size_t kSpans = std::size_t{1} << 20;  // 8 MiB, lazily committed

void measure_large(Breakdown* b) {
  const Arena& arena = large::space.arena;
  if (arena.ready()) {
    report::Scratch scratch(kSpans * sizeof(Span) * 2 + 4096, nullptr, 0);
    std::size_t cap = 0;
    Span* spans = scratch.take<Span>(kSpans, &cap);
    std::size_t n = 0;
    large::space.arena.for_each_live(
        [&](const void*, std::uint32_t s, std::uint32_t g, std::uint32_t) {
          if (n < cap) spans[n++] = Span{s, g};
          else b->live_missed = true;
        },
        false);
    for (std::size_t i = 0; i < n; ++i) {
      Extent e{spans[i].start, spans[i].n};
      b->live_extents += e.bytes();
      b->large_live += pal::resident_bytes(e.base(arena), e.bytes());
    }
  }
  cache::ReuseCache::View v[cache::ReuseCache::kSlots];
  int n = cache::view(v);
  for (int i = 0; i < n; ++i) {
    Extent e{v[i].start, v[i].n};
    std::uint64_t res = pal::resident_bytes(e.base(arena), e.bytes());
    (v[i].decayed ? b->pending_bytes : b->cache_bytes) += e.bytes();
    (v[i].decayed ? b->pending_resident : b->cache_resident) += res;
  }
}

void measure(Breakdown* b) {
  std::uint64_t t0 = pal::now_ns();
  // Counters first, pages last: in a quiet process they agree; under load
  // each figure is one moment's and the parts are as close as that allows.
  stats::Snapshot snap{};
  snap.rows = nullptr;  // totals only: every thread folds into them
  snap.cap = 0;
  stats::snapshot(&snap, false);
  b->small_used = static_cast<std::int64_t>(snap.total.c[stats::small_out]) -
                  static_cast<std::int64_t>(snap.total.c[stats::small_freed]);
  b->large_usable = snap.large_live;
  small::committed(&b->small_committed, &b->small_peak);
  b->large_committed = large::space.mapped.load(std::memory_order_relaxed);
  b->large_blocks = large::space.blocks.load(std::memory_order_relaxed);
  measure_large(b);
  b->small_resident = small_resident(&b->small_resident_last_known);
  // The kernel's own counters of resident pages (what ps and top show),
  // read last, right after the pages above were counted.
  // Where the file is not read (no fork-gate window came: a program thread
  // forking in a tight loop), the last answer's figures, not zeros (only
  // the server's thread gets here).
  const char* const keys[] = {"VmRSS:", "RssAnon:", "RssFile:", "RssShmem:"};
  static std::uint64_t last_kib[4];
  std::uint64_t kib[4];
  if (pal::read_status_kib(keys, kib, 4)) std::memcpy(last_kib, kib, sizeof kib);
  else std::memcpy(kib, last_kib, sizeof kib);
  b->rss = kib[0] * 1024;
  b->rss_anon = kib[1] * 1024;
  b->rss_file = kib[2] * 1024;
  b->rss_shmem = kib[3] * 1024;
  b->query_ns = pal::now_ns() - t0;
}

void put_head(report::Out& o, const Breakdown& b) {
  auto i64 = [](std::uint64_t v) { return static_cast<std::int64_t>(v); };
  const std::int64_t heap =
      i64(b.small_resident) + i64(b.large_live) + i64(b.cache_resident) + i64(b.pending_resident);
  const std::int64_t rest = i64(b.rss) - heap;
  const std::int64_t files = i64(b.rss_file) + i64(b.rss_shmem);
  o.put("{{\"schema\": \"lowtide-live\", \"schema_version\": 1, \"pid\": {}, \"uid\": {}, ", ::getpid(), ::geteuid());
  o.put("\"answered\": {}, \"refused\": {}, \"measure_ms\": {:.3f},\n", answered.load(), refused.load(),
        static_cast<double>(b.query_ns) / 1e6);
  o.put(" \"memory\": {{\"rss\": {}, \"rss_source\": \"/proc/self/status VmRSS\", \"rss_anon\": {}, \"rss_file\": {}, "
        "\"rss_shmem\": {},\n",
        b.rss, b.rss_anon, b.rss_file, b.rss_shmem);
  o.put("  \"small_resident\": {}, \"small_resident_last_known\": {}, \"small_committed\": {}, "
        "\"small_peak_committed\": {}, \"small_used\": {},\n",
        b.small_resident, b.small_resident_last_known, b.small_committed, b.small_peak, b.small_used);
  o.put("  \"large_live\": {}, \"large_usable\": {}, \"large_blocks\": {}, \"large_extents\": {}, "
        "\"large_committed\": {}, \"large_list_missed\": {},\n",
        b.large_live, b.large_usable, b.large_blocks, b.live_extents, b.large_committed, b.live_missed);
  o.put("  \"cache\": {}, \"cache_committed\": {}, \"pending_release\": {}, \"pending_committed\": {},\n",
        b.cache_resident, b.cache_bytes, b.pending_resident, b.pending_bytes);
  o.put("  \"rest\": {}, \"rest_files\": {}, \"rest_other\": {}}},\n", rest, files, rest - files);
  o.put(" \"report\": ");
}

void answer(const pal::OwnFd& c, std::uint64_t deadline_ns) {
  Send s{c, deadline_ns, false};
  Breakdown b;
  measure(&b);
  char head[4096];
  report::Out o(head, sizeof head);
  put_head(o, b);
  if (o.full()) return;
  send_all(o.data(), o.size(), &s);
  if (s.failed) return;
  if (report::json_now(&send_all, &s) != 0) {
    static constexpr char kNoMemory[] = "{\"error\": \"no memory for the report\"}";
    send_all(kNoMemory, sizeof kNoMemory - 1, &s);
  }
  send_all("}\n", 2, &s);
  if (!s.failed) answered.fetch_add(1, std::memory_order_relaxed);
}

void set_timeout(int c, int opt, int ms) {
  timeval tv{ms / 1000, static_cast<suseconds_t>(ms % 1000) * 1000};
  ::setsockopt(c, SOL_SOCKET, opt, &tv, sizeof tv);
}

// Reads the request line: "stats" (optionally "stats json"), at most 63
// bytes, within kRecvTimeoutMs of the accept in all (SO_RCVTIMEO bounds
// each recv; a client sending a byte a second would otherwise hold the
// server for a minute).
bool read_request(const pal::OwnFd& c, std::uint64_t until_ns) {
  char req[64];
  std::size_t n = 0;
  while (n < sizeof req - 1) {
    if (pal::now_ns() > until_ns || !pal::still_own(c)) return false;
    ssize_t r = ::recv(c.fd, req + n, sizeof req - 1 - n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    n += static_cast<std::size_t>(r);
    req[n] = '\0';
    if (std::strchr(req, '\n') != nullptr) break;
  }
  req[n] = '\0';
  return std::strcmp(req, "stats\n") == 0 || std::strcmp(req, "stats json\n") == 0;
}

// The uid the kernel reports for a peer whose uid has no mapping in this
// user namespace (/proc/sys/kernel/overflowuid, 65534 by default, or
// where it cannot be read). Read once, when the server thread starts and
// before its first accept (server_main), not on each connection.
uid_t overflow_uid() {
  char buf[32];
  if (pal::read_file("/proc/sys/kernel/overflowuid", buf, sizeof buf) <= 0) return 65534;
  const char* s = buf;
  const std::uint64_t v = parse_dec(s);
  return static_cast<uid_t>(v);
}

// Whether the peer of connection c may be answered: 0, or our effective
// uid now, not at start (a daemon that drops privileges answers its new
// user from then on, while that user may read it: pal::readable_by_own_uid,
// what /proc asks before it shows a process's maps to its own user).
// A peer the kernel reports as the overflow uid is a user with no mapping in
// our user namespace (any user outside a rootless container running as
// "nobody"): refused even where that is our own uid. Checked before
// anything else is done for it.
bool peer_allowed(int c, uid_t overflow) {
  ucred cred{};
  socklen_t len = sizeof cred;
  const uid_t me = ::geteuid();
  return ::getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
         (cred.uid == 0 || (cred.uid == me && cred.uid != overflow && pal::readable_by_own_uid()));
}

// Whether the request was answered.
bool serve(const pal::OwnFd& c, std::uint64_t accepted_ns) {
  set_timeout(c.fd, SO_RCVTIMEO, kRecvTimeoutMs);
  set_timeout(c.fd, SO_SNDTIMEO, kSendTimeoutMs);
  if (!read_request(c, accepted_ns + static_cast<std::uint64_t>(kRecvTimeoutMs) * 1'000'000u)) return false;
  const std::uint64_t before = answered.load(std::memory_order_relaxed);
  answer(c, accepted_ns + kClientBudgetMs * 1'000'000u);
  return answered.load(std::memory_order_relaxed) != before;
}

// What a connection the server does not answer may cost it: another
// user's flood of connections (each refused), or ours that connect and
// send nothing or nonsense. Without a bound, 195k refused connections in
// 5 s took 4.4 s of this thread's CPU in the victim process. The CPU this
// thread spends on each connection it does not answer (accept, the checks,
// close; measured with CLOCK_THREAD_CPUTIME_ID, so a slow or loaded
// machine does not change the bound) is added up per window of kWindowNs;
// past kIdleBudgetNs the thread sleeps to the end of the window without
// accepting: the kernel then keeps at most the listen backlog's few
// connections queued and refuses further connects by itself (EAGAIN, or a
// blocking connect waits), at no cost to this process. So at most 2 % of a
// core (plus one connection's cost per window) goes to such connections,
// whatever the peers do. A request from our own user is still answered
// after the pause: the CLI waits in connect (it is woken at each accept)
// and retries until its deadline; a connection that is answered is not
// counted (only our user or root gets one, and they can do more than that
// to the process anyway).
//
// The loop's clocks are system calls (clock_gettime, clock_nanosleep): no
// allocation and no lock that malloc takes, as the rest of the loop.
constexpr std::uint64_t kWindowNs = 100'000'000;    // 100 ms
constexpr std::uint64_t kIdleBudgetNs = 2'000'000;  // 2 ms of CPU in each: 2 % of a core

std::uint64_t thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

struct Budget {
  std::uint64_t window_start = 0;  // CLOCK_MONOTONIC
  std::uint64_t spent = 0;         // CPU ns on unanswered connections in this window

  void charge(std::uint64_t cpu_ns) {
    const std::uint64_t now = pal::now_ns();
    if (now - window_start >= kWindowNs) {
      window_start = now;
      spent = 0;
    }
    spent += cpu_ns;
    if (spent < kIdleBudgetNs) return;
    // Spent: not a single accept until the window ends.
    const std::uint64_t until = window_start + kWindowNs;
    timespec ts{static_cast<time_t>(until / 1'000'000'000u), static_cast<long>(until % 1'000'000'000u)};
    while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
  }
};

enum class Took { answered, not_answered, stop };

// One connection (or one failed accept): whether it was answered. The
// peer's credentials are checked on the fd accept gave, before anything
// else is done for it: a refused connection costs poll, accept, getsockname,
// getsockopt and close, nothing more.
//
// The wait for a connection is a poll, outside the fork gate; the accept
// (non-blocking: another may have taken the connection since) and
// everything up to client_fd's store, which fork's child handler closes,
// is inside a window of it (pal::fork_window_open): a fork meanwhile waits
// for it, and no child inherits a connection lowtide does not know of.
Took take_one(int fd, int pid, uid_t overflow) {
  pollfd p{fd, POLLIN, 0};
  const int ready = ::poll(&p, 1, -1);
  if (ready < 0 && errno != EINTR && errno != ENOMEM) return Took::stop;
  if ((ready > 0 && (p.revents & POLLNVAL) != 0)) return Took::stop;
  // The number may have been the program's since the last check: the
  // loop checks it again before the next poll.
  if (ready <= 0 || !still_ours(fd)) return Took::not_answered;
  // Forks all along (20 ms): the connection waits in the backlog, taken
  // at a later turn.
  if (!enter_fork_window()) return Took::not_answered;
  const auto leave = [] { pal::fork_window_close(); };
  int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (c < 0) {
    const int e = errno;
    leave();
    if (e == EAGAIN || e == EINTR || e == ECONNABORTED) return Took::not_answered;
    if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
      // Out of fds or memory: the pending client waits; try again later.
      timespec ts{0, 100'000'000};
      ::nanosleep(&ts, nullptr);
      return Took::not_answered;
    }
    return Took::stop;  // EBADF, ENOTSOCK, EINVAL: the fd is not our listening socket any more
  }
  // A connection of ours is known by its local name, our listening one:
  // where the program took the number in the instant after accept, the fd
  // is its own, left alone.
  const std::uint64_t accepted_ns = pal::now_ns();
  if (!ours_by_name(c)) {
    leave();
    return Took::not_answered;
  }
  if (!peer_allowed(c, overflow)) {
    refused.fetch_add(1, std::memory_order_relaxed);
    ::close(c);  // without a byte read or written
    leave();
    return Took::not_answered;
  }
  // Out of the numbers the program hands out, and checked before each use:
  // a program closing every fd may reuse the number (pal::OwnFd).
  pal::OwnFd o;
  if (!pal::own(move_high(c, ours_by_name), &o) || !ours_by_name(o.fd)) {
    leave();
    return Took::not_answered;
  }
  client_dev.store(o.dev, std::memory_order_relaxed);
  client_ino.store(o.ino, std::memory_order_relaxed);
  client_fd.store(o.fd);
  leave();
  // Blocking again: the timeouts (SO_RCVTIMEO, SO_SNDTIMEO) bound each call.
  const int flags = ::fcntl(o.fd, F_GETFL);
  if (flags >= 0 && pal::still_own(o)) ::fcntl(o.fd, F_SETFL, flags & ~O_NONBLOCK);
  const bool done = static_cast<int>(::getpid()) == pid && serve(o, accepted_ns);
  // The close and client_fd's reset inside a window again: the kernel
  // copies a forking process's fd table before its memory, so a close
  // during a fork can leave the child the connection open and client_fd
  // already reset, with nobody to close it (fork_live_fds saw it once in
  // ~35 runs while the wait was 20 ms). shutdown first ends the connection
  // itself, also for a copy a fork made without the window (the long wait
  // ran out) or without fork's handlers (a raw clone).
  if (pal::still_own(o)) ::shutdown(o.fd, SHUT_RDWR);
  const bool closing = enter_fork_window(kWindowWaitLong);
  pal::close_own(o);
  client_fd.store(-1);
  if (closing) pal::fork_window_close();
  return done ? Took::answered : Took::not_answered;
}

// The listening socket, made on the server's own thread rather than by the
// thread whose large allocation started the server: moving it above fd
// 1023 (move_high) grows the process's fd table, and in a process with more
// than one thread (the decay thread is one) the kernel then waits out an
// RCU grace period, 6-17 ms here, which that allocation paid (the first
// large block of every process: `python3 -c pass` took 25.8 ms, 14.4 now;
// reliability.md no. 71). Made
// inside a window of the fork gate and recorded in listen_fd before the
// window closes: a fork waits for it, so no child inherits a listening fd
// its fork handler does not know of (before, the start lock gave the same).
// -1 when it cannot be made (forks under way all along for 2 s, no socket
// allowed): the server then never runs, as before when start() could not
// make it.
int open_listening() {
  if (!enter_fork_window(kWindowWaitLong)) return -1;
  const int fd = open_socket();
  if (fd >= 0) listen_fd.store(fd);
  pal::fork_window_close();
  return fd;
}

void* server_main(void*) {
  pthread_setname_np(pthread_self(), "lowtide-live");
  orphan::own_thread_started();
  // Made by prepare() where the process had no other thread, else here.
  int fd = listen_fd.load();
  if (fd < 0) fd = open_listening();
  if (fd < 0) {
    orphan::own_thread_ending();
    return nullptr;
  }
  const int pid = g.pid;
  const uid_t overflow = overflow_uid();
  Budget budget;
  for (;;) {
    const std::uint64_t cpu0 = thread_cpu_ns();
    if (!still_ours(fd) || listen_fd.load() != fd) break;
    const Took t = take_one(fd, pid, overflow);
    if (t == Took::stop) break;
    if (t == Took::not_answered) budget.charge(thread_cpu_ns() - cpu0);
  }
  // Ours no more (closed, or its number reused by the program): leave the
  // fd alone, it may be the program's now. Still ours after an unexpected
  // accept error: closed, so the name does not outlive the server.
  const bool ours = still_ours(fd);
  int expected = fd;
  if (listen_fd.compare_exchange_strong(expected, -1) && ours) ::close(fd);
  // Uncounted before it ends (still counted by the kernel for a moment: the
  // safe side), or a process with one thread of its own left would be
  // taken for one with none.
  orphan::own_thread_ending();
  return nullptr;
}

}  // namespace

namespace {
// The listening socket closed and forgotten, if it is still ours (a
// program may have closed its number and reused it).
void drop_listening() {
  const int fd = listen_fd.exchange(-1);
  if (fd >= 0 && still_ours(fd)) ::close(fd);
}
}  // namespace

void start() {
  if (g.secure || g.config.get(Opt::live) != 0) return;  // "on" is the first word
  if (started.exchange(true)) return;
  // Detached, all signals blocked (pal::start_thread). It makes its
  // listening socket itself where prepare() did not (open_listening says
  // why). The stack: 512 KiB beyond the static TLS block, for the answer's
  // report: with LOWTIDE_SITES it symbolizes call sites through libdw and
  // demangles their names (symbolize.cpp bounds the demangler's share by
  // the length of the names it demangles).
  // No server: a socket prepare() made goes (nobody would answer on it).
  if (pal::start_thread(&server_main, nullptr, std::size_t{512} << 10) != 0) drop_listening();
}

void prepare(bool make) {
  if (g.secure || g.config.get(Opt::live) != 0) return;
  if (!make) {
    // Only a socket no server took (start() sets started before it makes
    // the server's thread).
    if (!started.load()) drop_listening();
    return;
  }
  if (started.load() || listen_fd.load() >= 0) return;
  long threads = 0;
  // The kernel's thread count, from the main thread's stat (0 where /proc
  // cannot be read: the server thread makes the socket then).
  pal::leader_gone(static_cast<int>(::getpid()), &threads);
  if (threads != 1) return;
  const int fd = open_socket();
  if (fd >= 0) listen_fd.store(fd);
}

void fork_child() {
  drop_listening();
  pal::OwnFd c;
  c.fd = client_fd.exchange(-1);
  c.dev = client_dev.load(std::memory_order_relaxed);
  c.ino = client_ino.load(std::memory_order_relaxed);
  pal::close_own(c);  // only if still that connection
  started.store(false);
}

}  // namespace lowtide::live

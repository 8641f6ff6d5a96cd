#include "report.hpp"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "large_cache.hpp"
#include "log.hpp"
#include "options.hpp"
#include "parse.hpp"
#include "platform.hpp"
#include "report_sites.hpp"
#include "state.hpp"
#include "stats.hpp"

namespace lowtide::report {

namespace {

using stats::ThreadRow;

std::uint64_t start_ns = 0;
bool forked_child = false;
bool exec_child = false;
std::atomic<bool> reported{false};

constexpr const char* kOwnerVar = "LOWTIDE_OWNER_PID";
constexpr std::size_t kMaxRows = 256;

std::uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

// Human size: "1.2 GiB", "512 B".
std::string human(double v) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  bool neg = v < 0;
  if (neg) v = -v;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{}{:.0f} B", neg ? "-" : "", v);
  return fmt::format("{}{:.1f} {}", neg ? "-" : "", v, units[u]);
}

std::string json_escape(const char* s) {
  std::string out;
  for (; *s; ++s) {
    auto c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::uint64_t status_kib(const char* buf, const char* key) {
  const char* at = std::strstr(buf, key);
  if (at == nullptr) return 0;
  at += std::strlen(key);
  while (*at == ' ' || *at == '\t') ++at;
  return std::strtoull(at, nullptr, 10);
}

struct Data {
  std::vector<ThreadRow> rows;
  stats::Snapshot snap{};
  std::string command;
  std::uint64_t peak_rss = 0, rss = 0;
  double uptime_s = 0;
  std::size_t folded_rows = 0;  // threads folded into "N other threads"
  bool at_exit = false;
  report_sites::Data sites;
};

std::int64_t live(const std::uint64_t* c, stats::Counter out, stats::Counter freed) {
  return static_cast<std::int64_t>(c[out]) - static_cast<std::int64_t>(c[freed]);
}

void gather(Data* d, bool at_exit) {
  // Storage first (this may allocate through lowtide), then the snapshot,
  // which takes the registry lock (only tries it at exit).
  d->rows.resize(stats::registry_size() + 16);
  d->snap.rows = d->rows.data();
  d->snap.cap = d->rows.size();
  stats::snapshot(&d->snap, at_exit);
  d->rows.resize(d->snap.nrows);
  // Sort by bytes handed out; fold everything past kMaxRows (and the
  // registry's own folded row) into one "N other threads" row.
  auto weight = [](const ThreadRow& r) { return r.c[stats::kSmallOut] + r.c[stats::kLargeOut]; };
  std::vector<ThreadRow> rows;
  ThreadRow other{};
  std::uint32_t other_threads = 0;
  for (ThreadRow& r : d->rows) {
    if (r.folded != 0) {
      other_threads += r.folded;
      for (unsigned i = 0; i < stats::kCounters; ++i) other.c[i] += r.c[i];
      for (unsigned i = 0; i < stats::kHistBuckets; ++i) other.hist[i] += r.hist[i];
    } else {
      rows.push_back(r);
    }
  }
  std::sort(rows.begin(), rows.end(), [&](const ThreadRow& a, const ThreadRow& b) { return weight(a) > weight(b); });
  while (rows.size() > kMaxRows) {
    ThreadRow& r = rows.back();
    other_threads += 1;
    for (unsigned i = 0; i < stats::kCounters; ++i) other.c[i] += r.c[i];
    for (unsigned i = 0; i < stats::kHistBuckets; ++i) other.hist[i] += r.hist[i];
    rows.pop_back();
  }
  if (other_threads != 0) {
    other.folded = other_threads;
    rows.push_back(other);
  }
  d->rows.swap(rows);

  char buf[8192];
  long n = pal::read_file("/proc/self/cmdline", buf, sizeof buf);
  for (long i = 0; i < n; ++i)
    if (buf[i] == '\0') buf[i] = ' ';
  while (n > 0 && buf[n - 1] == ' ') buf[--n] = '\0';
  d->command.assign(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  if (pal::read_file("/proc/self/status", buf, sizeof buf) > 0) {
    d->peak_rss = status_kib(buf, "VmHWM:") * 1024;
    d->rss = status_kib(buf, "VmRSS:") * 1024;
  }
  d->uptime_s = static_cast<double>(mono_ns() - start_ns) / 1e9;
  d->at_exit = at_exit;
  report_sites::gather(&d->sites, at_exit);
}

const char* const kCallNames[] = {"malloc", "calloc", "realloc", "aligned", "free"};

std::string row_name(const ThreadRow& r) {
  if (r.folded != 0) return fmt::format("{} other threads", r.folded);
  return r.name[0] ? std::string(r.name) : std::string("?");
}

std::string format_text(const Data& d) {
  const std::uint64_t* c = d.snap.total.c;
  fmt::memory_buffer o;
  auto out = std::back_inserter(o);
  char cut[32];
  fmt::format_to(out, "==== lowtide {} report: pid {} ====\n", LOWTIDE_VERSION, ::getpid());
  fmt::format_to(out, "command     {}\n", d.command);
  fmt::format_to(out, "cutoff      {}\n", format_size(g.cutoff, cut, sizeof cut));
  fmt::format_to(out, "uptime      {:.2f} s\n", d.uptime_s);
  if (d.snap.partial) fmt::format_to(out, "PARTIAL     a lock was held at exit; counters read without it\n");
  fmt::format_to(out, "\n-- process --\n");
  fmt::format_to(out, "{:<28}{:>12}\n", "peak RSS (VmHWM)", human(static_cast<double>(d.peak_rss)));
  fmt::format_to(out, "{:<28}{:>12}\n", "RSS now", human(static_cast<double>(d.rss)));
  fmt::format_to(out, "{:<28}{:>12}\n", "live, small path", human(static_cast<double>(live(c, stats::kSmallOut, stats::kSmallFreed))));
  fmt::format_to(out, "{:<28}{:>12}\n", "live, large path", human(static_cast<double>(live(c, stats::kLargeOut, stats::kLargeFreed))));
  fmt::format_to(out, "{:<28}{:>12}\n", "given back to the OS", human(static_cast<double>(c[stats::kLargeReturnedBytes])));

  fmt::format_to(out, "\n-- totals --\n");
  fmt::format_to(out, "{:<12}{:>14}{:>14}{:>14}{:>14}{:>14}\n", "calls", "malloc", "calloc", "realloc", "aligned", "free");
  fmt::format_to(out, "{:<12}{:>14}{:>14}{:>14}{:>14}{:>14}\n", "", c[stats::kMallocCalls], c[stats::kCallocCalls],
                 c[stats::kReallocCalls], c[stats::kAlignedCalls], c[stats::kFreeCalls]);
  fmt::format_to(out, "{:<12}{:>14}{:>14}{:>14}{:>14}\n", "path", "requested", "handed out", "freed", "live");
  fmt::format_to(out, "{:<12}{:>14}{:>14}{:>14}{:>14}\n", "small", human(static_cast<double>(c[stats::kSmallRequested])),
                 human(static_cast<double>(c[stats::kSmallOut])), human(static_cast<double>(c[stats::kSmallFreed])),
                 human(static_cast<double>(live(c, stats::kSmallOut, stats::kSmallFreed))));
  fmt::format_to(out, "{:<12}{:>14}{:>14}{:>14}{:>14}\n", "large", human(static_cast<double>(c[stats::kLargeRequested])),
                 human(static_cast<double>(c[stats::kLargeOut])), human(static_cast<double>(c[stats::kLargeFreed])),
                 human(static_cast<double>(live(c, stats::kLargeOut, stats::kLargeFreed))));

  fmt::format_to(out, "\n-- large path --\n");
  fmt::format_to(out, "{:<34}{:>12}\n", "blocks allocated", c[stats::kLargeMaps]);
  fmt::format_to(out, "{:<34}{:>12}\n", "blocks released", c[stats::kLargeUnmaps]);
  fmt::format_to(out, "{:<34}{:>12}\n", "resized in place", c[stats::kLargeInPlace]);
  fmt::format_to(out, "{:<34}{:>12}   ({} moved without copying)\n", "moved by mremap", c[stats::kLargeRemaps],
                 human(static_cast<double>(c[stats::kLargeRemapBytes])));
  fmt::format_to(out, "{:<34}{:>12}   ({} copied)\n", "moved by copying", c[stats::kLargeCopies],
                 human(static_cast<double>(c[stats::kLargeCopyBytes])));
  fmt::format_to(out, "{:<34}{:>12}\n", "realloc small -> large", c[stats::kCrossUp]);
  fmt::format_to(out, "{:<34}{:>12}\n", "realloc large -> small", c[stats::kCrossDown]);
  fmt::format_to(out, "{:<34}{:>12}\n", "served by mimalloc (range full)", c[stats::kLargeFallback]);
  fmt::format_to(out, "{:<34}{:>12}\n", "frees kept in the reuse cache", c[stats::kLargeCachedFrees]);
  fmt::format_to(out, "{:<34}{:>12}\n", "allocations served from it", c[stats::kLargeReused]);
  fmt::format_to(out, "{:<34}{:>12}\n", "held in it now", human(static_cast<double>(cache::cached_bytes())));
  fmt::format_to(out, "{:<34}{:>12}\n", "peak live (process)", human(static_cast<double>(d.snap.large_peak)));

  fmt::format_to(out, "\n-- threads (by bytes handed out) --\n");
  fmt::format_to(out, "{:>8}  {:<18}{:<8}{:>12}{:>12}{:>12}{:>12}\n", "tid", "name", "state", "allocs", "frees",
                 "handed out", "freed");
  for (const ThreadRow& r : d.rows) {
    std::uint64_t allocs = r.c[stats::kMallocCalls] + r.c[stats::kCallocCalls] + r.c[stats::kReallocCalls] +
                           r.c[stats::kAlignedCalls];
    std::string tid = r.folded ? std::string("-") : fmt::format("{}", r.tid);
    const char* state = r.folded ? "-" : (r.alive ? "alive" : "exited");
    fmt::format_to(out, "{:>8}  {:<18}{:<8}{:>12}{:>12}{:>12}{:>12}\n", tid, row_name(r), state, allocs,
                   r.c[stats::kFreeCalls], human(static_cast<double>(r.c[stats::kSmallOut] + r.c[stats::kLargeOut])),
                   human(static_cast<double>(r.c[stats::kSmallFreed] + r.c[stats::kLargeFreed])));
  }

  fmt::format_to(out, "\n-- request sizes --\n");
  std::uint64_t maxh = 1;
  for (unsigned i = 0; i < stats::kHistBuckets; ++i) maxh = std::max(maxh, d.snap.total.hist[i]);
  for (unsigned i = 0; i < stats::kHistBuckets; ++i) {
    std::uint64_t h = d.snap.total.hist[i];
    if (h == 0) continue;
    double lo = i == 0 ? 0 : static_cast<double>(std::uint64_t{1} << (i - 1));
    double hi = static_cast<double>(std::uint64_t{1} << i);
    auto bar = static_cast<std::size_t>(40.0 * static_cast<double>(h) / static_cast<double>(maxh));
    fmt::format_to(out, "{:>10} .. <{:<10}{:>14}  {}\n", human(lo), human(hi), h, std::string(bar ? bar : 1, '#'));
  }
  report_sites::text(o, d.sites, d.at_exit);
  return fmt::to_string(o);
}

void json_path(fmt::memory_buffer& o, const std::uint64_t* c, stats::Counter req, stats::Counter out,
               stats::Counter freed) {
  fmt::format_to(std::back_inserter(o), "{{\"requested\": {}, \"out\": {}, \"freed\": {}, \"live\": {}}}", c[req],
                 c[out], c[freed], live(c, out, freed));
}

void json_calls(fmt::memory_buffer& o, const std::uint64_t* c) {
  fmt::format_to(std::back_inserter(o), "{{\"malloc\": {}, \"calloc\": {}, \"realloc\": {}, \"aligned\": {}, \"free\": {}}}",
                 c[stats::kMallocCalls], c[stats::kCallocCalls], c[stats::kReallocCalls], c[stats::kAlignedCalls],
                 c[stats::kFreeCalls]);
}

std::string format_json(const Data& d) {
  const std::uint64_t* c = d.snap.total.c;
  fmt::memory_buffer o;
  auto out = std::back_inserter(o);
  fmt::format_to(out, "{{\"schema\": \"lowtide-report\", \"schema_version\": 1, \"version\": \"{}\", ", LOWTIDE_VERSION);
  fmt::format_to(out, "\"pid\": {}, \"command\": \"{}\", \"cutoff\": {}, \"uptime_s\": {:.3f}, \"partial\": {},\n",
                 ::getpid(), json_escape(d.command.c_str()), g.cutoff, d.uptime_s, d.snap.partial ? "true" : "false");
  fmt::format_to(out,
                 " \"process\": {{\"peak_rss\": {}, \"rss\": {}, \"live_small\": {}, \"live_large\": {}, "
                 "\"returned_to_os\": {}}},\n",
                 d.peak_rss, d.rss, live(c, stats::kSmallOut, stats::kSmallFreed),
                 live(c, stats::kLargeOut, stats::kLargeFreed), c[stats::kLargeReturnedBytes]);
  fmt::format_to(out, " \"totals\": {{\"calls\": ");
  json_calls(o, c);
  fmt::format_to(out, ", \"small\": ");
  json_path(o, c, stats::kSmallRequested, stats::kSmallOut, stats::kSmallFreed);
  fmt::format_to(out, ", \"large\": ");
  json_path(o, c, stats::kLargeRequested, stats::kLargeOut, stats::kLargeFreed);
  fmt::format_to(out, "}},\n");
  fmt::format_to(out,
                 " \"large\": {{\"maps\": {}, \"unmaps\": {}, \"in_place\": {}, \"remaps\": {}, \"remap_bytes\": {}, "
                 "\"copies\": {}, \"copy_bytes\": {}, \"returned_bytes\": {}, \"cross_up\": {}, \"cross_down\": {}, "
                 "\"fallback\": {}, \"reused\": {}, \"cached_frees\": {}, \"cached_bytes\": {}, "
                 "\"live\": {}, \"peak_live\": {}}},\n",
                 c[stats::kLargeMaps], c[stats::kLargeUnmaps], c[stats::kLargeInPlace], c[stats::kLargeRemaps],
                 c[stats::kLargeRemapBytes], c[stats::kLargeCopies], c[stats::kLargeCopyBytes],
                 c[stats::kLargeReturnedBytes], c[stats::kCrossUp], c[stats::kCrossDown], c[stats::kLargeFallback],
                 c[stats::kLargeReused], c[stats::kLargeCachedFrees], cache::cached_bytes(), d.snap.large_live,
                 d.snap.large_peak);
  fmt::format_to(out, " \"threads\": [");
  bool first = true;
  for (const ThreadRow& r : d.rows) {
    fmt::format_to(out, "{}\n  {{\"tid\": {}, \"name\": \"{}\", \"alive\": {}, \"folded\": {}, \"calls\": ",
                   first ? "" : ",", r.tid, json_escape(row_name(r).c_str()), r.alive ? "true" : "false", r.folded);
    first = false;
    json_calls(o, r.c);
    fmt::format_to(out, ", \"small\": ");
    json_path(o, r.c, stats::kSmallRequested, stats::kSmallOut, stats::kSmallFreed);
    fmt::format_to(out, ", \"large\": ");
    json_path(o, r.c, stats::kLargeRequested, stats::kLargeOut, stats::kLargeFreed);
    fmt::format_to(out, "}}");
  }
  fmt::format_to(out, "],\n \"histogram\": [");
  first = true;
  for (unsigned i = 0; i < stats::kHistBuckets; ++i) {
    if (d.snap.total.hist[i] == 0) continue;
    std::uint64_t lo = i == 0 ? 0 : std::uint64_t{1} << (i - 1);
    std::uint64_t hi = std::uint64_t{1} << i;
    fmt::format_to(out, "{}{{\"min\": {}, \"max\": {}, \"count\": {}}}", first ? "" : ", ", lo, hi,
                   d.snap.total.hist[i]);
    first = false;
  }
  fmt::format_to(out, "]");
  report_sites::json(o, d.sites);
  fmt::format_to(out, "}}\n");
  return fmt::to_string(o);
}

// "%p" -> pid, "%%" -> "%".
std::string expand(const char* pattern) {
  std::string out;
  for (const char* s = pattern; *s; ++s) {
    if (s[0] == '%' && s[1] == 'p') {
      out += fmt::format("{}", ::getpid());
      ++s;
    } else if (s[0] == '%' && s[1] == '%') {
      out += '%';
      ++s;
    } else {
      out += *s;
    }
  }
  return out;
}

bool has_pid_pattern(const char* pattern) {
  for (const char* s = pattern; *s; ++s) {
    if (s[0] == '%' && s[1] == '%') ++s;
    else if (s[0] == '%' && s[1] == 'p') return true;
  }
  return false;
}

bool is_stderr(const char* path) { return path == nullptr || std::strcmp(path, "stderr") == 0 || path[0] == '\0'; }

bool write_all(int fd, const std::string& s) {
  const char* p = s.data();
  std::size_t n = s.size();
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

int to_stderr_instead(const std::string& target, const std::string& body) {
  int e = errno;
  log::warn("cannot write the report to '{}' ({}); writing it to stderr instead", target, std::strerror(e));
  write_all(2, body);
  errno = e;
  return -1;
}

int emit(const char* path, const std::string& body) {
  if (is_stderr(path)) return write_all(2, body) ? 0 : -1;
  std::string target = expand(path);
  // Something other than a regular file (/dev/stderr, /dev/null, a FIFO, a
  // link to one) is written to: renaming our file over it would replace it,
  // and as root that breaks /dev for everyone. O_NONBLOCK: a FIFO nobody
  // reads fails (ENXIO) instead of hanging the exit.
  struct stat st;
  if (::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    int fd = ::open(target.c_str(), O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      bool ok = write_all(fd, body);
      ok = (::close(fd) == 0) && ok;
      if (ok) return 0;
    }
    return to_stderr_instead(target, body);
  }
  std::string tmp = fmt::format("{}.tmp.{}", target, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    bool ok = write_all(fd, body);
    ok = (::close(fd) == 0) && ok;
    if (ok && ::rename(tmp.c_str(), target.c_str()) == 0) return 0;
    ::unlink(tmp.c_str());
  }
  return to_stderr_instead(target, body);
}

int format_from_config() {
  switch (stats_mode(g.config.get(Opt::stats))) {
    case StatsMode::json: return kJson;
    case StatsMode::both: return kBoth;
    default: return kText;
  }
}

int write_impl(const char* path, int format, bool at_exit) {
  if (format == 0) format = format_from_config();
  if (format < kText || format > kBoth) {
    errno = EINVAL;
    return -1;
  }
  Data d;
  gather(&d, at_exit);
  std::string body;
  if (format & kText) body += format_text(d);
  if (format & kJson) body += format_json(d);
  return emit(path, body);
}

}  // namespace

int write(const char* path, int format) {
  if (path == nullptr) path = g.config.str(Opt::stats_file);
  return write_impl(path, format, false);
}

void at_exit() {
  if (stats_mode(g.config.get(Opt::stats)) == StatsMode::off) return;
  // Never in the wrong process: a vfork child (shares our memory, must not
  // lock or allocate) has another pid and stops here.
  if (static_cast<int>(::getpid()) != g.pid) return;
  if (g.mode.load(std::memory_order_acquire) != kReady) return;
  const char* path = g.config.str(Opt::stats_file);
  // Children (forked, or exec'd with our variables inherited) report only
  // into files of their own.
  if ((forked_child || exec_child) && !has_pid_pattern(path)) return;
  if (reported.exchange(true)) return;
  int saved = errno;
  write_impl(path, 0, true);
  errno = saved;
}

void on_start() {
  start_ns = mono_ns();
  if (stats_mode(g.config.get(Opt::stats)) == StatsMode::off) return;
  // Processes exec'd from this one inherit LD_PRELOAD and LOWTIDE_*; the
  // marker tells them they are not the process the user started (the same
  // pid after an exec of itself still is).
  char want[24];
  auto r = fmt::format_to_n(want, sizeof want - 1, "{}", ::getpid());
  want[r.size] = '\0';
  const char* owner = ::getenv(kOwnerVar);
  if (owner == nullptr) ::setenv(kOwnerVar, want, 1);
  else exec_child = std::strcmp(owner, want) != 0;
}

void on_fork_child() {
  forked_child = true;
  reported.store(false);
  start_ns = mono_ns();
}

}  // namespace lowtide::report

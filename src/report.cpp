#include "report.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <new>

#include "log.hpp"
#include "large_cache.hpp"
#include "mem_limit.hpp"
#include "options.hpp"
#include "parse.hpp"
#include "platform.hpp"
#include "report_file.hpp"
#include "report_out.hpp"
#include "report_prom.hpp"
#include "report_sites.hpp"
#include "route.hpp"
#include "state.hpp"
#include "stats.hpp"
#include "stats_table.hpp"
#include "symbolize.hpp"

namespace lowtide::report {

namespace {

using stats::ThreadRow;

std::uint64_t start_ns = 0;
bool forked_child = false;
bool exec_child = false;
std::atomic<bool> reported{false};

// "PID" or "PID:FD:DEV:INO": the process that reports, and the counter of
// processes started from it that did not (pal::shared_counter_create).
constexpr const char* kOwnerVar = "LOWTIDE_OWNER_PID";

// The count of processes started from the reporting one (forked, or exec'd
// with LD_PRELOAD and LOWTIDE_* inherited) that exited without a report of
// their own because LOWTIDE_STATS_FILE has no %p. The owner maps it at
// start; a forked child inherits the mapping; an exec'd child maps it at
// exit through what kOwnerVar names.
struct Children {
  std::uint64_t* counter = nullptr;
  int owner_pid = 0, fd = -1;
  std::uint64_t dev = 0, ino = 0;
  bool known = false;  // the fields above were read from kOwnerVar
};
Children children;

// Parse "PID[:FD:DEV:INO]" into *pid and, when all four are there, children.
bool parse_owner(const char* s, int* pid) {
  std::uint64_t v[4] = {0, 0, 0, 0};
  int n = 0;
  for (; n < 4; ++n) {
    if (*s < '0' || *s > '9') return false;
    while (*s >= '0' && *s <= '9') v[n] = v[n] * 10 + static_cast<std::uint64_t>(*s++ - '0');
    if (*s != ':') break;
    ++s;
  }
  if (*s != '\0') return false;
  *pid = static_cast<int>(v[0]);
  if (n == 3) {
    children.owner_pid = static_cast<int>(v[0]);
    children.fd = static_cast<int>(v[1]);
    children.dev = v[2];
    children.ino = v[3];
    children.known = true;
  }
  return true;
}

// One more process that wrote no report. From the exit path: syscalls only.
void count_unreported() {
  if (children.counter == nullptr && children.known)
    children.counter = pal::shared_counter_open(children.owner_pid, children.fd, children.dev, children.ino);
  if (children.counter != nullptr) __atomic_fetch_add(children.counter, 1, __ATOMIC_RELAXED);
}

std::uint64_t unreported_children() {
  return children.counter != nullptr ? __atomic_load_n(children.counter, __ATOMIC_RELAXED) : 0;
}
constexpr std::size_t kMaxRows = 256;
// Rows read from the registry at most; threads past it are folded into one
// row by stats::snapshot, so totals never lose a count.
constexpr std::size_t kMaxRead = 4096;
// The report's region: lazily committed, so a small report touches a few
// pages of it. Its largest users: 4096 thread rows (3.1 MiB), 2^18 live
// blocks (4 MiB), the site tables and the output.
constexpr std::size_t kScratch = std::size_t{64} << 20;
// Where the report goes when that region cannot be mapped (RLIMIT_AS, out of
// memory): one buffer for the exit-time report (written once) and one for
// reports asked for by the program (one at a time; a second concurrent one
// fails with ENOMEM). In .bss: they cost nothing until used.
constexpr std::size_t kFallback = std::size_t{256} << 10;
alignas(64) char exit_fallback[kFallback];
alignas(64) char api_fallback[kFallback];
std::atomic<bool> api_fallback_busy{false};

// The periodic report (periodic.cpp's thread) against the final one: the
// exit path sets exit_started, then waits while periodic_busy, so the file
// holds the final report, not a periodic one renamed over it a moment
// later, and the final report does not find the registry lock held by our
// own thread (it would call itself partial). A periodic report starting
// after exit_started writes nothing. Both sequentially consistent: of the
// two stores, at least one side sees the other's.
std::atomic<bool> exit_started{false};
std::atomic<bool> periodic_busy{false};
// How long the exit path waits for a periodic report under way. It is
// normally done in milliseconds; the bound covers one stuck on a lock held
// by the code an exiting signal handler interrupted (it never finishes: the
// final report goes ahead, and the process ends before that one could).
constexpr std::uint64_t kPeriodicWaitNs = 2'000'000'000;

// How the report is being written.
struct Context {
  bool at_exit;     // from the exit path: take no lock that may be held
  bool demangle;    // may call malloc (C++ names demangled); not from _exit
  bool periodic = false;  // from the periodic thread: gives way to the exit path
};

struct Data {
  ThreadRow* rows = nullptr;
  std::size_t nrows = 0;
  stats::Snapshot snap{};
  std::uint64_t fields[stats::kFieldCount];  // struct lowtide_stats's, in table order
  char command[8192];
  std::size_t command_len = 0;
  std::uint64_t peak_rss = 0, rss = 0;
  double uptime_s = 0;
  bool at_exit = false;
  bool short_of_memory = false;  // on the fallback buffer: fewer rows, maybe truncated
  report_sites::Data sites;
};

std::int64_t live(const std::uint64_t* c, stats::Counter out, stats::Counter freed) {
  return static_cast<std::int64_t>(c[out]) - static_cast<std::int64_t>(c[freed]);
}

void fold_row(ThreadRow* into, const ThreadRow& r, std::uint32_t threads) {
  into->folded += threads;
  for (unsigned i = 0; i < stats::kCounters; ++i) into->c[i] += r.c[i];
  for (unsigned i = 0; i < stats::kHistBuckets; ++i) into->hist[i] += r.hist[i];
}

// Sort by bytes handed out; fold everything past kMaxRows (and the
// registry's own folded row) into one "N other threads" row at the end.
// rows[] has room for one more than n.
std::size_t order_rows(ThreadRow* rows, std::size_t n) {
  auto weight = [](const ThreadRow& r) { return r.c[stats::small_out] + r.c[stats::large_out]; };
  ThreadRow other;
  std::memset(&other, 0, sizeof other);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (rows[i].folded != 0) fold_row(&other, rows[i], rows[i].folded);
    else rows[kept++] = rows[i];
  }
  std::sort(rows, rows + kept, [&](const ThreadRow& a, const ThreadRow& b) { return weight(a) > weight(b); });
  while (kept > kMaxRows) fold_row(&other, rows[--kept], 1);
  if (other.folded != 0) rows[kept++] = other;
  return kept;
}

void gather(Data* d, Scratch& scratch, const Context& ctx) {
  std::size_t want = stats::registry_size() + 16;
  std::size_t cap = 0;
  d->rows = scratch.take<ThreadRow>((want < kMaxRead ? want : kMaxRead) + 1, &cap);
  d->snap.rows = d->rows;
  d->snap.cap = cap > 0 ? cap - 1 : 0;  // one kept back for order_rows
  stats::snapshot(&d->snap, ctx.at_exit);
  d->nrows = d->rows != nullptr ? order_rows(d->rows, d->snap.nrows) : 0;
  stats::read_fields(d->snap, d->fields);

  long n = pal::read_file("/proc/self/cmdline", d->command, sizeof d->command);
  for (long i = 0; i < n; ++i)
    if (d->command[i] == '\0') d->command[i] = ' ';
  while (n > 0 && d->command[n - 1] == ' ') d->command[--n] = '\0';
  d->command_len = n > 0 ? static_cast<std::size_t>(n) : 0;
  const char* const keys[] = {"VmHWM:", "VmRSS:"};
  std::uint64_t kib[2];
  pal::read_status_kib(keys, kib, 2);
  d->peak_rss = kib[0] * 1024;
  d->rss = kib[1] * 1024;
  d->uptime_s = static_cast<double>(pal::now_ns() - start_ns) / 1e9;
  d->at_exit = ctx.at_exit;
  d->short_of_memory = scratch.on_fallback();
  report_sites::gather(&d->sites, scratch, ctx.at_exit);
}

double dbl(std::uint64_t v) { return static_cast<double>(v); }
double dbl(std::int64_t v) { return static_cast<double>(v); }

// The "-- totals --" section from lowtide_stats.def: a row of calls under
// the totals_calls labels, then a row per path under the totals_small
// labels (kTableOk checks that both paths have the same ones) and "live".
void text_totals(Out& o, const std::uint64_t* c) {
  o.put("{:<12}", "calls");
  stats::each_in(stats::Object::totals_calls, [&](const stats::Field& f, unsigned) { o.put("{:>14}", f.label); });
  o.put("\n{:<12}", "");
  stats::each_in(stats::Object::totals_calls, [&](const stats::Field& f, unsigned) { o.put("{:>14}", c[f.counter]); });
  o.put("\n{:<12}", "path");
  stats::each_in(stats::Object::totals_small, [&](const stats::Field& f, unsigned) { o.put("{:>14}", f.label); });
  o.put("{:>14}\n", "live");
  auto path = [&](const char* name, stats::Object obj, stats::Counter out, stats::Counter freed) {
    o.put("{:<12}", name);
    stats::each_in(obj, [&](const stats::Field& f, unsigned) {
      if (f.unit == stats::Unit::bytes) o.put("{:>14}", Human(dbl(c[f.counter])));
      else o.put("{:>14}", c[f.counter]);
    });
    o.put("{:>14}\n", Human(dbl(live(c, out, freed))));
  };
  path("small", stats::Object::totals_small, stats::small_out, stats::small_freed);
  path("large", stats::Object::totals_large, stats::large_out, stats::large_freed);
}

void text_header(Out& o, const Data& d) {
  const std::uint64_t* c = d.snap.total.c;
  char cut[32];
  o.put("==== lowtide {} report: pid {} ====\n", LOWTIDE_VERSION, ::getpid());
  o.put("command     {}\n", Shown(d.command, d.command_len));
  o.put("cutoff      {}\n", format_size(route::settings.cutoff, cut, sizeof cut));
  o.put("uptime      {:.2f} s\n", d.uptime_s);
  if (d.snap.partial) o.put("PARTIAL     a lock was held at exit; counters read without it\n");
  if (d.short_of_memory) o.put("SHORT       no memory for the report: fewer rows, possibly truncated\n");
  if (std::uint64_t dr = dropped(); dr != 0) o.put("dropped     {} report(s) for stderr (fd 2 closed or not writable)\n", dr);
  if (std::uint64_t n = unreported_children(); n != 0)
    o.put("children    {} process(es) started from this one wrote no report of their own (or it would have "
          "overwritten this one): put %p in LOWTIDE_STATS_FILE for one report per process\n", n);
  o.put("\n-- process --\n");
  o.put("{:<28}{:>12}\n", "peak RSS (VmHWM)", Human(dbl(d.peak_rss)));
  o.put("{:<28}{:>12}\n", "RSS now", Human(dbl(d.rss)));
  o.put("{:<28}{:>12}\n", "live, small path", Human(dbl(live(c, stats::small_out, stats::small_freed))));
  o.put("{:<28}{:>12}\n", "live, large path", Human(dbl(live(c, stats::large_out, stats::large_freed))));
  o.put("{:<28}{:>12}\n", "given back to the OS", Human(dbl(c[stats::large_returned_bytes])));
  if (limit::current() != 0)
    o.put("{:<28}{:>12}   ({})\n", "memory limit", Human(dbl(limit::current())), cgroup::source_name(limit::source()));
  else
    o.put("{:<28}{:>12}\n", "memory limit", "none");
  o.put("{:<28}{:>12}\n", "reuse cache cap", Human(dbl(cache::cap())));

  o.put("\n-- totals --\n");
  text_totals(o, c);
}

// The label column of the "-- large path --" and "-- small path --"
// sections: their longest label in lowtide_stats.def and two spaces. (A
// fixed 34 let "misses topped up from a cached block", 36 characters, push
// its value two columns past the others'.)
constexpr int kPathLabelWidth = [] {
  std::size_t w = 0;
  for (const stats::Field& f : stats::kFields)
    if (f.object == stats::Object::large || f.object == stats::Object::small)
      w = std::max(w, std::char_traits<char>::length(f.label));
  return static_cast<int>(w) + 2;
}();

// The "-- large path --" or "-- small path --" section: the `large` or
// `small` object's labelled rows of lowtide_stats.def, in its order.
void text_path(Out& o, const Data& d, const char* title, stats::Object obj) {
  o.put("\n-- {} --\n", title);
  const int w = kPathLabelWidth;
  stats::each_in(obj, [&](const stats::Field& f, unsigned i) {
    if (f.label[0] == '\0') return;
    if (f.unit == stats::Unit::bytes) o.put("{:<{}}{:>12}\n", f.label, w, Human(dbl(d.fields[i])));
    else if (f.unit == stats::Unit::byte_seconds) o.put("{:<{}}{:>12}*s\n", f.label, w, Human(dbl(d.fields[i])));
    else o.put("{:<{}}{:>12}\n", f.label, w, d.fields[i]);
  });
}

void row_name(Out& o, const ThreadRow& r, bool json) {
  if (r.folded != 0) {
    if (json) o.put("\"{} other threads\"", r.folded);
    else o.put("{} other threads", r.folded);
    return;
  }
  const char* name = r.name[0] ? r.name : "?";
  std::size_t n = strnlen(name, sizeof r.name);
  if (json) o.json_string(name, n);
  else o.put("{}", Shown(name, n));
}

void text_threads(Out& o, const Data& d) {
  o.put("\n-- threads (by bytes handed out) --\n");
  o.put("{:>8}  {:<18}{:<8}{:>12}{:>12}{:>12}{:>12}\n", "tid", "name", "state", "allocs", "frees", "handed out",
        "freed");
  for (std::size_t i = 0; i < d.nrows; ++i) {
    const ThreadRow& r = d.rows[i];
    std::uint64_t allocs = r.c[stats::malloc_calls] + r.c[stats::calloc_calls] + r.c[stats::realloc_calls] +
                           r.c[stats::aligned_calls];
    if (r.folded) o.put("{:>8}  ", "-");
    else o.put("{:>8}  ", r.tid);
    std::size_t at = o.size();
    row_name(o, r, false);
    std::size_t w = o.size() - at;
    o.put("{:<{}}{:<8}{:>12}{:>12}{:>12}{:>12}\n", "", w < 18 ? 18 - w : 0,
          r.folded ? "-" : (r.alive ? "alive" : "exited"), allocs, r.c[stats::free_calls],
          Human(dbl(r.c[stats::small_out] + r.c[stats::large_out])),
          Human(dbl(r.c[stats::small_freed] + r.c[stats::large_freed])));
  }
}

void text_sizes(Out& o, const Data& d) {
  o.put("\n-- request sizes --\n");
  std::uint64_t maxh = 1;
  for (unsigned i = 0; i < stats::kHistBuckets; ++i) maxh = std::max(maxh, d.snap.total.hist[i]);
  static const char kBar[] = "########################################";
  for (unsigned i = 0; i < stats::kHistBuckets; ++i) {
    std::uint64_t h = d.snap.total.hist[i];
    if (h == 0) continue;
    double lo = i == 0 ? 0 : dbl(std::uint64_t{1} << (i - 1));
    double hi = dbl(std::uint64_t{1} << i);
    auto bar = static_cast<std::size_t>(40.0 * dbl(h) / dbl(maxh));
    o.put("{:>10} .. <{:<10}{:>14}  {}\n", Human(lo), Human(hi), h, fmt::string_view(kBar, bar ? bar : 1));
  }
}

void format_text(Out& o, const Data& d, const Context& ctx) {
  text_header(o, d);
  text_path(o, d, "large path", stats::Object::large);
  text_path(o, d, "small path", stats::Object::small);
  text_threads(o, d);
  text_sizes(o, d);
  report_sites::text(o, d.sites, d.at_exit, ctx.demangle);
  if (o.full()) o.finish_with("[report truncated: no room left for the rest]\n");
}

// The keys of JSON object `obj` (counters only), from the table.
void json_counters(Out& o, const std::uint64_t* c, stats::Object obj) {
  bool first = true;
  stats::each_in(obj, [&](const stats::Field& f, unsigned) {
    o.put("{}\"{}\": {}", first ? "" : ", ", f.key, c[f.counter]);
    first = false;
  });
}

void json_path(Out& o, const std::uint64_t* c, stats::Object obj, stats::Counter out, stats::Counter freed) {
  o.put("{{");
  json_counters(o, c, obj);
  o.put(", \"live\": {}}}", live(c, out, freed));
}

void json_calls(Out& o, const std::uint64_t* c) {
  o.put("{{");
  json_counters(o, c, stats::Object::totals_calls);
  o.put("}}");
}

// The JSON report's head and totals: what a truncated report still has.
void json_head(Out& o, const Data& d, bool truncated) {
  const std::uint64_t* c = d.snap.total.c;
  o.put("{{\"schema\": \"lowtide-report\", \"schema_version\": 1, \"version\": \"{}\", ", LOWTIDE_VERSION);
  o.put("\"pid\": {}, \"command\": ", ::getpid());
  o.json_string(d.command, d.command_len);
  o.put(", \"cutoff\": {}, \"uptime_s\": {:.3f}, \"partial\": {}, \"truncated\": {}, \"reports_dropped\": {}, "
        "\"unreported_children\": {},\n",
        route::settings.cutoff, d.uptime_s, d.snap.partial, truncated, dropped(), unreported_children());
  o.put(" \"process\": {{\"peak_rss\": {}, \"rss\": {}, \"live_small\": {}, \"live_large\": {}, "
        "\"returned_to_os\": {}, \"limit\": {}, \"limit_source\": \"{}\", \"cache_cap\": {}}},\n",
        d.peak_rss, d.rss, live(c, stats::small_out, stats::small_freed), live(c, stats::large_out, stats::large_freed),
        c[stats::large_returned_bytes], limit::current(), cgroup::source_name(limit::source()), cache::cap());
  o.put(" \"totals\": {{\"calls\": ");
  json_calls(o, c);
  o.put(", \"small\": ");
  json_path(o, c, stats::Object::totals_small, stats::small_out, stats::small_freed);
  o.put(", \"large\": ");
  json_path(o, c, stats::Object::totals_large, stats::large_out, stats::large_freed);
  o.put("}},\n");
  for (const stats::Object obj : {stats::Object::large, stats::Object::small}) {
    o.put("{} \"{}\": {{", obj == stats::Object::large ? "" : ",\n", obj == stats::Object::large ? "large" : "small");
    bool first = true;
    stats::each_in(obj, [&](const stats::Field& f, unsigned i) {
      o.put("{}\"{}\": {}", first ? "" : ", ", f.key, d.fields[i]);
      first = false;
    });
    o.put("}}");
  }
}

void json_rest(Out& o, const Data& d, const Context& ctx) {
  o.put(",\n \"threads\": [");
  for (std::size_t i = 0; i < d.nrows; ++i) {
    const ThreadRow& r = d.rows[i];
    o.put("{}\n  {{\"tid\": {}, \"name\": ", i == 0 ? "" : ",", r.tid);
    row_name(o, r, true);
    o.put(", \"alive\": {}, \"folded\": {}, \"calls\": ", r.alive, r.folded);
    json_calls(o, r.c);
    o.put(", \"small\": ");
    json_path(o, r.c, stats::Object::totals_small, stats::small_out, stats::small_freed);
    o.put(", \"large\": ");
    json_path(o, r.c, stats::Object::totals_large, stats::large_out, stats::large_freed);
    o.put("}}");
  }
  o.put("],\n \"histogram\": [");
  bool first = true;
  for (unsigned i = 0; i < stats::kHistBuckets; ++i) {
    if (d.snap.total.hist[i] == 0) continue;
    std::uint64_t lo = i == 0 ? 0 : std::uint64_t{1} << (i - 1);
    std::uint64_t hi = std::uint64_t{1} << i;
    o.put("{}{{\"min\": {}, \"max\": {}, \"count\": {}}}", first ? "" : ", ", lo, hi, d.snap.total.hist[i]);
    first = false;
  }
  o.put("]");
  report_sites::json(o, d.sites, ctx.demangle);
}

// JSON must parse whole or not at all: when the full report does not fit,
// it is written again with the head and totals only, "truncated": true.
// Room for that is kept back from the text before it (kJsonHead).
constexpr std::size_t kJsonHead = 4096;

void format_json(Out& o, const Data& d, const Context& ctx) {
  std::size_t mark = o.size();
  json_head(o, d, false);
  json_rest(o, d, ctx);
  o.put("}}\n");
  if (!o.full()) return;
  o.rewind(mark);
  json_head(o, d, true);
  // Every key still there, so readers need no special case.
  o.put(",\n \"threads\": [],\n \"histogram\": []");
  report_sites::json(o, report_sites::Data{}, false);
  o.put("}}\n");
}

// A name ending in ".prom" (node_exporter's textfile collector reads only
// those) is always written in the Prometheus format.
int format_from_config(const char* path) {
  std::size_t n = path != nullptr ? std::strlen(path) : 0;
  if (n >= 5 && std::strcmp(path + n - 5, ".prom") == 0) return kPrometheus;
  switch (stats_mode(g.config.get(Opt::stats))) {
    case StatsMode::json: return kJson;
    case StatsMode::both: return kBoth;
    case StatsMode::prometheus: return kPrometheus;
    default: return kText;
  }
}

void format_prom(Out& o, const Data& d) {
  PromData p{d.fields, static_cast<long>(::getpid()), d.uptime_s, d.rss, d.peak_rss, limit::current(), dropped(),
             d.snap.partial};
  format_prometheus(o, p);
}

// While a report is formatted, its own helpers allocate on this thread:
// libdw naming the call sites' frames (with compressed debug sections, such
// as Debian's -dbg packages, large buffers) and the C++ demangler. Their
// calls and bytes are not the program's: counted as its own, every report
// after the first showed them (calls, histogram, a site in libelf) and the
// large peak they raised (docs/reliability.md no. 104). From here to the
// end of the report (the Session's dwfl_end included): no large peak
// raised and no site captured on this thread (t_local.in_report), the
// sampler's countdown kept, and its counting done in a scratch slot no
// reader sees (stats::begin_own), of which only the blocks the helpers
// keep for good and the bytes given back to the OS are added to the
// thread's counters at the end (only additions: a counter never goes down
// for a reader meanwhile). Not taken back: the reuse cache's own figures
// (blocks the helpers freed may sit there, real memory held) and
// mimalloc's commit. Only where the report may allocate (demangle: not
// from _exit or a signal handler); never nested (a signal handler's report
// inside one leaves it be: its counts go to the same scratch slot). Each
// report below opens one stats::OwnSpan for that.

bool has_pid_pattern(const char* pattern) {
  for (const char* s = pattern; *s; ++s) {
    if (s[0] == '%' && s[1] == '%') ++s;
    else if (s[0] == '%' && s[1] == 'p') return true;
  }
  return false;
}

int write_impl(const char* path, int format, const Context& ctx) {
  if (format == 0) format = format_from_config(path);
  if (format < kText || format > kPrometheus) {
    errno = EINVAL;
    return -1;
  }
  const bool exit_buffer = ctx.at_exit;
  bool api_buffer = false;
  char* fallback = exit_fallback;
  if (!exit_buffer) {
    api_buffer = !api_fallback_busy.exchange(true, std::memory_order_acquire);
    fallback = api_buffer ? api_fallback : nullptr;
  }
  int rc;
  {
    Scratch scratch(kScratch, fallback, fallback != nullptr ? kFallback : 0);
    std::size_t got = 0;
    Data* d = scratch.take<Data>(1, &got);
    PathBuf* pb = is_stderr(path) ? nullptr : scratch.take<PathBuf>(1, &got);
    if (d == nullptr) {
      errno = ENOMEM;
      rc = -1;
    } else {
      new (d) Data{};
      gather(d, scratch, ctx);
      stats::OwnSpan own(ctx.demangle);
      // libdw's names for this report's frames (it mallocs: not from _exit);
      // from _exit or a signal handler (at_exit without demangling) not
      // even dladdr's (the loader's lock may be held by a dlopen for good).
      symbolize::Session names(ctx.demangle, !ctx.at_exit || ctx.demangle);
      std::size_t room = 0;
      char* buf = scratch.rest(&room);
      std::size_t len = 0;
      if (format & kText) {
        // The text leaves room for at least the JSON head after it.
        Out text(buf, (format & kJson) && room > 2 * kJsonHead ? room - kJsonHead : room);
        format_text(text, *d, ctx);
        len = text.size();
      }
      if (format == kPrometheus) {
        Out prom(buf, room);
        format_prom(prom, *d);
        len = prom.size();
      } else if (format & kJson) {
        Out json(buf + len, room - len);
        format_json(json, *d, ctx);
        len += json.size();
      }
      if (ctx.periodic && exit_started.load()) {
        errno = ECANCELED;  // the final report is being written: leave the file to it
        rc = -1;
      } else {
        rc = write_path(path, buf, len, g.secure, pb, ctx.periodic);
      }
    }
  }
  if (api_buffer) api_fallback_busy.store(false, std::memory_order_release);
  return rc;
}

}  // namespace

int write(const char* path, int format) {
  if (path == nullptr) path = g.config.str(Opt::stats_file);
  return write_impl(path, format, Context{false, true});
}

int json_now(Sink sink, void* arg) {
  const Context ctx{false, true};
  Scratch scratch(kScratch, nullptr, 0);
  std::size_t got = 0;
  Data* d = scratch.take<Data>(1, &got);
  if (d == nullptr) {
    errno = ENOMEM;
    return -1;
  }
  new (d) Data{};
  gather(d, scratch, ctx);
  stats::OwnSpan own(ctx.demangle);  // the demangler's allocations
  std::size_t room = 0;
  char* buf = scratch.rest(&room);
  Out json(buf, room);
  format_json(json, *d, ctx);
  sink(json.data(), json.size(), arg);
  return 0;
}

bool this_process_reports() {
  if (stats_mode(g.config.get(Opt::stats)) == StatsMode::off) return false;
  // Never in the wrong process: a vfork child (shares our memory, must not
  // lock or allocate) has another pid and stops here.
  if (static_cast<int>(::getpid()) != g.pid) return false;
  if (g.mode.load(std::memory_order_acquire) != kReady) return false;
  // Children (forked, or exec'd with our variables inherited) report only
  // into files of their own.
  return !((forked_child || exec_child) && !has_pid_pattern(g.config.str(Opt::stats_file)));
}

// A child (forked, or exec'd with our variables) in the report's process
// tree that writes no report of its own: the file name has no %p.
bool unreported_child() {
  if (stats_mode(g.config.get(Opt::stats)) == StatsMode::off) return false;
  if (static_cast<int>(::getpid()) != g.pid) return false;
  if (g.mode.load(std::memory_order_acquire) != kReady) return false;
  return (forked_child || exec_child) && !has_pid_pattern(g.config.str(Opt::stats_file));
}

int write_periodic() {
  if (!this_process_reports()) return 0;
  periodic_busy.store(true);
  int rc = 0;
  if (!exit_started.load()) {
    int saved = errno;
    rc = write_impl(g.config.str(Opt::stats_file), 0, Context{false, false, true});
    errno = saved;
  }
  periodic_busy.store(false);
  return rc;
}

void at_exit(bool from_exit_call) {
  if (!this_process_reports()) {
    // Children (forked, or exec'd with our variables inherited) report only
    // into files of their own; one that writes none is counted in the
    // owner's report (count_unreported).
    if (unreported_child() && !reported.exchange(true)) {
      int saved = errno;
      count_unreported();
      errno = saved;
    }
    return;
  }
  const char* path = g.config.str(Opt::stats_file);
  if (reported.exchange(true)) return;
  int saved = errno;
  // Let a periodic report under way finish first (see exit_started).
  // nanosleep and atomics only: this may run in a signal handler.
  exit_started.store(true);
  for (std::uint64_t waited = 0; periodic_busy.load() && waited < kPeriodicWaitNs; waited += 1'000'000) {
    timespec ms{0, 1'000'000};
    nanosleep(&ms, nullptr);
  }
  // _exit may be called from a signal handler that interrupted malloc:
  // then not even the demangler (which mallocs) runs.
  write_impl(path, 0, Context{true, !from_exit_call});
  errno = saved;
}

void on_start() {
  start_ns = pal::now_ns();
  if (stats_mode(g.config.get(Opt::stats)) == StatsMode::off) return;
  // Processes exec'd from this one inherit LD_PRELOAD and LOWTIDE_*; the
  // marker tells them they are not the process the user started (the same
  // pid after an exec of itself still is).
  const int me = static_cast<int>(::getpid());
  const char* owner = ::getenv(kOwnerVar);
  int owner_pid = 0;
  if (owner != nullptr && parse_owner(owner, &owner_pid) && owner_pid != me) {
    exec_child = true;
    return;
  }
  // The process the user started, or it again after an exec of itself (the
  // counter's fd was closed by the exec: a new counter is made below).
  if (children.known)
    children.counter = pal::shared_counter_open(me, children.fd, children.dev, children.ino);
  // Only where children's reports go missing: with %p each writes its own.
  if (children.counter == nullptr && !has_pid_pattern(g.config.str(Opt::stats_file))) {
    int fd = -1;
    std::uint64_t dev = 0, ino = 0;
    children.counter = pal::shared_counter_create(&fd, &dev, &ino);
    if (children.counter != nullptr) {
      children = Children{children.counter, me, fd, dev, ino, true};
    }
  }
  // No counter (a name with %p, or none could be had): pass no stale one on.
  if (children.counter == nullptr) children.known = false;
  char want[96];
  auto r = children.known
               ? fmt::format_to_n(want, sizeof want - 1, "{}:{}:{}:{}", me, children.fd, children.dev, children.ino)
               : fmt::format_to_n(want, sizeof want - 1, "{}", me);
  want[r.size] = '\0';
  if (owner == nullptr || std::strcmp(owner, want) != 0) ::setenv(kOwnerVar, want, 1);
}

void on_fork_child() {
  fork_child_fds();
  forked_child = true;
  reported.store(false);
  // The periodic thread does not exist here (fork copies only the caller);
  // a report it was writing in the parent is not this process's.
  periodic_busy.store(false);
  exit_started.store(false);
  api_fallback_busy.store(false);  // likewise a report of another thread
  start_ns = pal::now_ns();
}

}  // namespace lowtide::report

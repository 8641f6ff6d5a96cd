#include "init.hpp"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cxxrt.hpp"
#include "forward.hpp"
#include "log.hpp"
#include "mem_limit.hpp"
#include "parse.hpp"
#include "platform.hpp"
#include "large_cache.hpp"
#include "large_path.hpp"
#include "libc.hpp"
#include "live.hpp"
#include "route.hpp"
#include "periodic.hpp"
#include "report.hpp"
#include "report_out.hpp"
#include "signals.hpp"
#include "sites.hpp"
#include "small_path.hpp"
#include "stats.hpp"

extern "C" void* __dso_handle __attribute__((visibility("hidden")));  // this object's (crtbegin)

namespace lowtide {

namespace {

// glibc's __register_atfork (what pthread_atfork calls), the definition after
// lowtide's own (exports.cpp interposes it: register_atfork).
using RegisterAtfork = int (*)(void (*)(), void (*)(), void (*)(), void*);
std::atomic<RegisterAtfork> libc_register_atfork_fn{nullptr};

// glibc's definition of a function lowtide interposes (RTLD_NEXT: the one
// after lowtide's own). Only a process that cannot run has none; going on
// would silently drop a destructor or leave fork without lowtide's
// handlers (a child would copy locks other threads hold): one line, abort.
void* libc_next(const char* name) {
  void* f = ::dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    char msg[96];
    auto r = fmt::format_to_n(msg, sizeof msg - 1, "lowtide: cannot find glibc's {}\n", name);
    pal::write_stderr(msg, r.size < sizeof msg - 1 ? r.size : sizeof msg - 1);
    std::abort();
  }
  return f;
}

RegisterAtfork libc_register_atfork() {
  RegisterAtfork real = libc_register_atfork_fn.load(std::memory_order_acquire);
  if (real != nullptr) return real;
  real = reinterpret_cast<RegisterAtfork>(libc_next("__register_atfork"));
  libc_register_atfork_fn.store(real, std::memory_order_release);
  return real;
}

// Values and names from the environment are shown with their control
// characters as '?' (report::Shown): a newline in a bad value made the
// warning two lines, the second one forged, and an escape sequence drove
// the terminal (reliability.md no. 98).
void warn_option(const char* env, const char* value, const char* reason, const char* def) {
  // The warning is one line of at most 512 bytes: a long value is cut short
  // here, so the reason, the valid range and the default used always fit.
  constexpr std::size_t kShown = 80;
  char valid[160] = "";
  if (const OptionSpec* spec = find_option(env)) describe_valid(*spec, valid, sizeof valid);
  std::size_t n = 0;
  while (n <= kShown && value[n] != '\0') ++n;
  const bool cut = n > kShown;
  log::warn("{}='{}{}' {} (valid: {}); using the default {}", env, report::Shown(value, cut ? kShown : n),
            cut ? "..." : "", reason, valid, def);
}

// A LOWTIDE_* name that is no setting: most often a misspelt one, which
// would otherwise be silently without effect.
void warn_unknown(const char* name, unsigned len, const char* nearest) {
  if (nearest != nullptr)
    log::warn("{} is not a lowtide setting and has no effect; did you mean {}?", report::Shown(name, len),
              nearest);
  else
    log::warn("{} is not a lowtide setting and has no effect (the settings: docs/configuration.md)",
              report::Shown(name, len > 80 ? 80 : len));
}

// A setting given twice (`env LOWTIDE_X=a ... LOWTIDE_X=b`, or a launcher
// appending to an environment that had it): the first counts, as getenv
// reads it.
void warn_duplicate(const char* env, const char* used, const char* ignored) {
  constexpr std::size_t kShown = 80;
  auto shown = [](const char* v) {
    std::size_t n = 0;
    while (n < kShown && v[n] != '\0') ++n;
    return report::Shown(v, n);
  };
  log::warn("{} is set more than once; the first value, '{}', is used (as getenv reads it), '{}' is ignored", env,
            shown(used), shown(ignored));
}

// fork: the child must find the arena lock free and its own pid. mimalloc
// 2.0.9 has no fork handling of its own (see docs/design.md).
// Locks in one fixed order: call sites, the thread registry, the cache, the
// arena. Sites first: a capture in flight may allocate (libunwind's own
// mallocs reach stats::attach), so it must be let finish before the registry
// lock is taken.
void before_fork() {
  // No hole in the range across fork (large_space.hpp); its windows take
  // no lock, so this comes before any.
  large::fork_wait_holes();
  pal::fork_wait_scans();  // resident_bytes' descriptor, likewise
  // The memory limit's collect lock first: the decay thread holds it while
  // mimalloc collects, which may reach the registry (a thread's first
  // allocation) under it.
  limit::fork_prepare();
  sites::fork_prepare();
  stats::fork_prepare();
  cache::fork_prepare();
  large::space.arena.lock();
}
void after_fork_parent() {
  large::space.arena.unlock();
  cache::fork_parent();
  stats::fork_parent();
  sites::fork_parent();
  limit::fork_parent();
  pal::fork_scans_done(false);
  large::fork_holes_done(false);
}
void after_fork_child() {
  // Asked before the resets below forget it.
  const bool unfinished = large::fork_child_unfinished();
  large::space.arena.reset_after_fork();
  pal::mlock_fork_child();
  cache::fork_child();
  if (unfinished) large::fork_child_reclaim();
  // Before g.pid changes: a signal in between would otherwise find this
  // process's own pid and forked_child still false, and write the owner's
  // report (its file, without %p) from the child.
  report::on_fork_child();
  g.pid = static_cast<int>(::getpid());
  t_local.tid = 0;
  stats::fork_child();
  small::shelf_fork_child(t_local.cache);
  sites::fork_child();
  limit::fork_child();
  live::fork_child();
  pal::fork_scans_done(true);
  large::fork_holes_done(true);
  periodic::on_fork_child();  // last: a thread started once all is reset
}

void init_once() {
  int saved = errno;
  g.pid = static_cast<int>(::getpid());
  pal::fork_gates_init(g.pid);
  bool secure = ::getauxval(AT_SECURE) != 0;
  g.secure = secure;
  // Before small::configure's first mi_malloc: from here on mimalloc never
  // looks at MIMALLOC_* (see small_path.hpp for what an earlier start of
  // mimalloc leaves behind).
  if (secure) small::ignore_environment();
  // (Not environ itself: a first malloc from a program's .preinit_array
  // comes before libc sets it, and every LOWTIDE_* setting was ignored.)
  load_config(&g.config, pal::initial_environ(), secure, &warn_option, &warn_unknown, &warn_duplicate);
  route::settings.cutoff = g.config.get(Opt::cutoff);
  route::settings.shrink_below = route::settings.cutoff / 2;
  // Commits checked against a finite RLIMIT_DATA, and mimalloc's first
  // segment committed as used under one: before small::configure's first
  // mi_malloc maps it.
  small::note_environment(pal::initial_environ(), secure);
  small::fit_data_limit(pal::note_data_limit());
  small::configure();
  // Only that first segment: with eager_commit off, mimalloc 2.0.9 answers
  // a refused page commit by mapping a new segment (its 64 KiB header
  // committed) and trying again, until a header's commit is refused too,
  // and leaks that segment's reservation (segment.c, mi_segment_os_alloc;
  // fixed in 2.1.2): each small request refused at a data limit then left
  // empty segments holding the rest of the limit for good and hundreds of
  // MiB of address space (a 200 MB limit: VmData 195 MB with 20 MB
  // resident once everything was freed, malloc NULL from then on). Eager
  // segments are mapped committed or not at all.
  small::fit_data_limit(false);
  small::configure_cache(g.config.get(Opt::thread_cache));
  small::on_forced_collect(&libc::flush_thread_cache);
  // A live thread's freed small-block memory, on its own slow path
  // (small_path.hpp); skipped where a collect is running elsewhere.
  // LOWTIDE_SMALL_TRIM's words are "on", "off".
  if (g.config.get(Opt::small_trim) == 0) small::on_refill([] {
    limit::collect_if_idle([] {
      std::uint64_t dropped = 0;
      const bool emptied = small::trim_own(stats::thread_small_out(), &dropped);
      if (stats::Slot* st = stats::slot_if_attached(); st != nullptr) {
        stats::add(st, stats::small_trims, 1);
        stats::add(st, stats::small_trim_dropped, dropped);
      }
      if (emptied) cache::note_segments_emptied();
    });
  });
  stats::init(&small::cache_flush, &small::cache_bytes, &small::shelf_bytes, &cache::note_thread_exit);
  // 100 ms past mimalloc's purge delay: the collect then finds the exited
  // threads' segments expired.
  cache::Hooks hooks;
  hooks.small_committed = &small::committed_now;
  hooks.thread_start = &live::start;
  hooks.small_collect = &small::collect_expired;
  hooks.small_collect_after_ns = small::segment_purge_delay_ns() + 100'000'000u;
  hooks.small_release = &small::release_retained;
  hooks.last_start = &stats::last_thread_start_ns;
  hooks.live_prepare = &live::prepare;
  cache::init(hooks);
  limit::init(&small::release_retained);
  // The words are "on", "off", "advise", in that order.
  large::space.hugepages = g.config.get(Opt::hugepages) != 1;
  large::space.advise_huge = g.config.get(Opt::hugepages) == 2;
  large::space.populate_pct = static_cast<unsigned>(g.config.get(Opt::populate));
  std::size_t want = g.config.get(Opt::reserve);
  // Under an address-space limit (ulimit -v) a reservation counts in full
  // although it commits nothing: take at most an eighth of the limit so the
  // host keeps room for everything else.
  struct rlimit as;
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY && want > as.rlim_cur / 8)
    want = static_cast<std::size_t>(as.rlim_cur / 8);
  if (!large::space.arena.init(want, std::size_t{64} << 20)) {
    large::space.disabled = true;
    char buf[32];
    log::warn("could not reserve address space for large blocks (ulimit -v?); "
              "blocks of {} and more go to mimalloc instead",
              format_size(route::settings.cutoff, buf, sizeof buf));
  }
  // Registered before any other handler (register_atfork below runs this
  // init before it registers anyone else's), so our prepare handler runs
  // last and our parent and child handlers first.
  libc_register_atfork()(&before_fork, &after_fork_parent, &after_fork_child, &__dso_handle);
  errno = saved;
}

}  // namespace

int mode_slow() {
  int m = g.mode.load(std::memory_order_acquire);
  for (;;) {
    if (m == kReady || m == kForwarding) return m;
    if (m == kUninit) {
      int expected = kUninit;
      if (g.mode.compare_exchange_strong(expected, kIniting, std::memory_order_acq_rel)) {
        t_local.in_init = 1;
        init_once();
        t_local.in_init = 0;
        // Before kReady: forward::detect, which closes them again while
        // it probes, can only start once the mode says ready, so a late
        // open can never undo its close.
        route::open_fast_paths();
        g.mode.store(kReady, std::memory_order_release);
        return kReady;
      }
      m = expected;
      continue;
    }
    // kIniting or kProbing: the thread doing it is served; others wait.
    if (t_local.in_init) {
      if (m == kProbing) forward::probe_hit.store(true, std::memory_order_relaxed);
      return kReady;
    }
    ::sched_yield();
    m = g.mode.load(std::memory_order_acquire);
  }
}

namespace {

using CxaAtexit = int (*)(void (*)(void*), void*, void*);
std::atomic<CxaAtexit> libc_cxa_atexit{nullptr};
std::atomic<bool> secure_checked{false};

}  // namespace

int cxa_atexit(void (*f)(void*), void* arg, void* dso) noexcept {
  if (!secure_checked.load(std::memory_order_acquire)) {
    // Setting options twice (two threads, or init_once later) is harmless.
    if (::getauxval(AT_SECURE) != 0) small::ignore_environment();
    secure_checked.store(true, std::memory_order_release);
  }
  CxaAtexit real = libc_cxa_atexit.load(std::memory_order_acquire);
  if (real == nullptr) {
    real = reinterpret_cast<CxaAtexit>(libc_next("__cxa_atexit"));
    libc_cxa_atexit.store(real, std::memory_order_release);
  }
  return real(f, arg, dso);
}

int register_atfork(void (*prepare)(), void (*parent)(), void (*child)(), void* dso) noexcept {
  // lowtide's fork handlers must be registered before everyone else's:
  // glibc runs prepare handlers last registered first and the parent's and
  // child's first registered first, so lowtide's prepare (which takes its
  // locks) then runs after every other prepare handler and its parent and
  // child handlers (which release or reset them) before every other one.
  // They are registered at first-call init, but a library's constructor
  // may register its handlers before the process's first allocation (a C
  // program allocates nothing before its libraries' constructors run):
  // its handlers then ran inside lowtide's locked window, and a large
  // allocation or free in one of them waited for ever on a lock lowtide
  // held (in the parent's prepare or parent handler, or in the child).
  // So the init runs first (a no-op once done; served at once on the
  // thread that is running it).
  (void)mode();
  return libc_register_atfork()(prepare, parent, child, dso);
}

namespace {

void report_at_quick_exit() { report::at_exit(true); }

// What lowtide's constructor allocates on this thread is its own, not the
// program's: the owner marker report::on_start sets with setenv (the
// "NAME=VALUE" string, a tsearch node and glibc's environ array, kept for
// good), cxxrt::prepare's dlopen and dlsym of the C++ runtime (dlerror's
// message naming lowtide's path, the loader's copy of libstdc++'s path,
// freed again), sites::start's loading of libunwind and libdw. Counted as
// the program's, a C program that allocates nothing showed 5 mallocs, a
// realloc and 3 frees at exit, and their bytes followed the marker's
// length: the pid's digits and the children counter's memfd inode's,
// which the kernel hands out in per-CPU batches (3 digits on one CPU, 4 on
// the other), so two runs of one program reported different bytes
// requested and histograms (docs/reliability.md no. 125). Counted aside
// as a report's helpers are (stats::begin_own, no. 104, and no. 111 for
// sites::start, which then finds the span already open): calls, histogram
// and bytes asked for dropped, what is kept counted as live (memory the
// process holds; a later free of it, the program's setenv growing environ,
// is counted then), no large peak raised and no site captured
// (t_local.in_report), the sampler's countdown kept. The constructor runs
// before main on the thread that loaded lowtide, never inside a malloc or
// a report, so no other span holds this thread's slot (begin_own does not
// nest): stats::OwnSpan, below.

// Runs once the loader has bound every symbol: only now can we tell whether
// our malloc is the one the process uses.
__attribute__((constructor)) void lowtide_constructor() {
  if (mode() != kReady) return;
  // Till the constructor returns (every return below).
  stats::OwnSpan own(true);
  report::on_start();
  if (forward::detect()) {
    log::warn("another allocator's malloc comes first in this process (lowtide was dlopen'ed "
              "or is later in LD_PRELOAD); lowtide forwards every call to it and stays out of the way");
    return;
  }
  // The seccomp state the program started with (before main: a filter
  // seen later is one the program installed: pal::sandbox_since_start).
  pal::note_sandbox_at_start();
  // Here and not at first-call init: dlopen inside a malloc call can
  // deadlock on the loader's lock. Blocks allocated before this get no site.
  cxxrt::prepare();
  sites::start();
  // The report's helpers, only when this process writes a report.
  sig::install();
  periodic::start();
  // quick_exit runs its handlers and then glibc's own _exit, reached inside
  // libc without the PLT: lowtide's _exit never sees it, and no destructor
  // runs, so such a process wrote no report. Handlers run last registered
  // first: this one, registered before main, runs after the program's.
  // Safe as from _exit (quick_exit may be called from a signal handler).
  // It fails only without memory for glibc's handler list: then quick_exit
  // writes no report, as before, and nothing else changes.
  if (::at_quick_exit(&report_at_quick_exit) != 0) return;
}

// Runs after the host's own exit work (Python's atexit handlers and
// finalisation come first); destructors of libraries dlopen'ed later still
// run after it and may allocate, which keeps working.
__attribute__((destructor)) void lowtide_destructor() { report::at_exit(false); }

}  // namespace

}  // namespace lowtide

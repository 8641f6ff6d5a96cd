#include "sites.hpp"

#include <cerrno>
#include <cstddef>
#include <csignal>
#include <cstring>
#include <ctime>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "log.hpp"
#include "platform.hpp"
#include "stats.hpp"
#include "pyframes.hpp"
#include "sample_math.hpp"
#include "symbolize.hpp"
#include "unwind.hpp"

namespace lowtide::sites {

std::atomic<bool> enabled{false};

namespace {

constexpr std::uint32_t kFramePool = 128 * 1024;  // frames of all sites together
constexpr std::uint32_t kModules = 1024;
constexpr std::size_t kStrings = std::size_t{256} * 1024;  // module paths
// Past this many sites, new stacks count in the "table full" row: probe
// chains stay short.
constexpr std::uint32_t kMaxUsed = kSites / 4 * 3;

struct Site {
  std::atomic<std::uint64_t> hash;  // 0 = empty; stored last, with release
  std::uint32_t nframes, first;
  std::atomic<std::uint64_t> sampled;
  // Scaled by the blocks' weights: in 1/256ths of a block or a byte.
  std::atomic<std::uint64_t> blocks, bytes, live_blocks, live_bytes, peak_bytes, remaps;
};

struct Module {
  std::uintptr_t bias;
  std::uint32_t path;  // offset in strings
};

Site* table = nullptr;
std::uint32_t* order = nullptr;  // the slots in use, in insertion order (the snapshot walks these)
Frame* frames = nullptr;
Module* modules = nullptr;
char* strings = nullptr;

// Only for inserting a new site (copies into the table, nothing else): never
// held while unwinding, looking up modules or allocating. The lock word is
// the pid of the process whose thread holds it (kWaiters added while a
// thread sleeps on it; 0: free), taken in one compare-and-swap, so that the
// holder's pid and the holding are one. A child made without fork's
// handlers (_Fork, glibc 2.34+; clone) inherits the lock as the parent had
// it: where one of the parent's other threads held it, no thread there
// will ever let it go. That child finds another pid in it and does not
// wait (a pthread mutex waited for ever, every signal blocked); the table
// may be half-written there (a site's frames copied, its hash not yet
// published), so it adds no site to it: new stacks count in site 1, as
// when the table is full (pal::ForkGate goes by its owner pid the same way).
std::atomic<std::uint32_t> mu{0};
static_assert(sizeof mu == sizeof(std::uint32_t) && std::atomic<std::uint32_t>::is_always_lock_free);
constexpr std::uint32_t kWaiters = 0x80000000u;  // above every pid (pid_max is 2^22 at most)
const std::uint32_t* mu_word() { return reinterpret_cast<const std::uint32_t*>(&mu); }
// false: held by a thread of another process (this one's parent, which
// made it without fork's handlers). `me`: getpid(), not g.pid, which no
// handler updated in such a child.
bool lock_table(std::uint32_t me) {
  std::uint32_t want = me;
  for (;;) {
    std::uint32_t w = 0;
    if (mu.compare_exchange_strong(w, want, std::memory_order_acquire, std::memory_order_relaxed)) return true;
    if ((w & ~kWaiters) != me) {
      // Marked as held by no process (pid 0): a later child of this one
      // whose pid comes round to that process's again must not take the
      // lock for its own.
      mu.compare_exchange_strong(w, kWaiters, std::memory_order_relaxed);
      return false;
    }
    if ((w & kWaiters) == 0 && !mu.compare_exchange_strong(w, w | kWaiters, std::memory_order_relaxed)) continue;
    // Until the holder lets go and wakes one sleeper (bounded: a wake this
    // thread missed costs it 1 ms). Taken with kWaiters from here on: other
    // sleepers may still be there, and the next unlock wakes one of them.
    pal::futex_wait(mu_word(), w | kWaiters, 1'000'000);
    want = me | kWaiters;
  }
}
void unlock_table() {
  if ((mu.exchange(0, std::memory_order_release) & kWaiters) != 0) pal::futex_wake(mu_word());
}
std::uint32_t process_id() { return static_cast<std::uint32_t>(::getpid()); }
// Whether fork_prepare took the lock (fork_parent lets it go, fork_child
// frees it): not where another process's thread held it, which stays so
// in both. (glibc runs one fork's handlers at a time.)
bool fork_took_lock = false;
std::uint32_t used = 0, frames_used = 0, nmodules = 0;  // under mu
std::atomic<std::uint32_t> modules_view{0};
std::atomic<std::uint32_t> used_view{0};
std::size_t strings_used = 0;
std::atomic<bool> full{false};

std::uint64_t interval_bytes = 0;
std::uint32_t show = 0;

std::atomic<int> capturing{0};
// The process whose threads `capturing` counts (start, fork_child): another
// pid in a child made without fork's handlers (fork_prepare).
std::atomic<std::uint32_t> count_pid{0};
// ThreadLocal::in_capture's bits (capture_site).
constexpr std::uint16_t kCaptureBusy = 1, kCaptureCounted = 2;
std::atomic<bool> fork_pending{false};

// The heap-at-peak snapshot (sites.hpp, AtPeak): each site's live bytes, by
// slot, under a sequence lock (odd while a copy is being written; readers
// retry a bounded number of times). One writer at a time, by try-flag: a
// thread that finds it taken (another thread, or a signal handler's free
// interrupting this thread's copy) skips its copy, never waits.
std::atomic<std::uint64_t>* snap = nullptr;
std::atomic<std::uint64_t> snap_seq{0};
std::atomic<std::uint64_t> snap_taken_at{0};
std::atomic<bool> snap_busy{false};
// A copy is taken when the peak has grown by more than peak >> kSnapShift
// since the last one.
constexpr int kSnapShift = 12;

std::uint64_t next_random(std::uint64_t* s) {
  std::uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545f4914f6cdd1dULL;
}

std::int64_t draw_interval(std::uint64_t* rng) {
  if (interval_bytes == 0) return 0;
  double u = static_cast<double>((next_random(rng) >> 11) + 1) * 0x1.0p-53;  // (0, 1]
  double v = -sample_math::ln(u) * static_cast<double>(interval_bytes);
  return v >= 0x1.0p62 ? std::int64_t{1} << 62 : static_cast<std::int64_t>(v) + 1;
}

std::uint32_t weight_of(std::size_t size) {
  if (interval_bytes == 0) return kWeightOne;
  double p = sample_math::one_minus_exp_neg(static_cast<double>(size) / static_cast<double>(interval_bytes));
  double w = p > 0 ? kWeightOne / p : 0x1.0p31;
  return w >= 0x1.0p31 ? 0x80000000u : sample_math::round_nonneg(w);
}

std::uint64_t scaled(std::size_t usable, std::uint32_t w) {
  std::uint64_t v;
  return __builtin_mul_overflow(static_cast<std::uint64_t>(usable), std::uint64_t{w}, &v) ? UINT64_MAX : v;
}

std::uint64_t add_sat(std::uint64_t a, std::uint64_t b) {
  std::uint64_t v;
  return __builtin_add_overflow(a, b, &v) ? UINT64_MAX : v;
}

std::uint64_t hash_stack(const std::uintptr_t* ips, int n) {
  std::uint64_t h = 0x9e3779b97f4a7c15ULL ^ static_cast<std::uint64_t>(n);
  for (int i = 0; i < n; ++i) {
    h ^= ips[i];
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 32;
  }
  return h < 2 ? h + 2 : h;  // 0 marks an empty slot
}

std::uint32_t home(std::uint64_t h) { return 2 + static_cast<std::uint32_t>(h % (kSites - 2)); }

// The slot holding h, or 0.
std::uint32_t find(std::uint64_t h) {
  for (std::uint32_t k = 0, i = home(h); k < kSites - 2; ++k, i = i + 1 < kSites ? i + 1 : 2) {
    std::uint64_t v = table[i].hash.load(std::memory_order_acquire);
    if (v == h) return i;
    if (v == 0) return 0;
  }
  return 0;
}

// A frame's object as _dl_find_object gave it, before mu was taken: the
// loader's link_map is not read here (module_of reads it).
struct Where {
  const link_map* map;  // nullptr: none found
  void* map_start;
};

// Under mu: room to copy one module path into before it is interned.
constexpr std::size_t kPathMax = 4096;
char* path_scratch = nullptr;

// Under mu.
std::uint32_t intern_module(std::uintptr_t bias, const char* path) {
  for (std::uint32_t i = 0; i < nmodules; ++i)
    if (modules[i].bias == bias && std::strcmp(strings + modules[i].path, path) == 0) return i;
  std::size_t len = std::strlen(path);
  if (nmodules == kModules || strings_used + len + 1 > kStrings) return kNoModule;
  std::memcpy(strings + strings_used, path, len + 1);
  modules[nmodules] = {bias, static_cast<std::uint32_t>(strings_used)};
  strings_used += len + 1;
  modules_view.store(nmodules + 1, std::memory_order_release);
  return nmodules++;
}

// Under mu: the module of the frame at `at`, whose object _dl_find_object
// found as w. Another thread may have dlclose'd that object since, which
// frees its link_map and its name: both are read with pal::read_own_memory,
// which fails where a plain read would fault (and with every signal blocked
// here, a fault would kill the process outright). kNoModule then: the frame
// keeps its address only. The name is checked to be that object's still
// after it was copied: dlclose takes the object out of _dl_find_object's
// view before it frees the name.
std::uint32_t module_of(const Where& w, std::uintptr_t at) {
  link_map lm{};  // its head only: l_addr and l_name
  static_assert(offsetof(link_map, l_name) == sizeof lm.l_addr);
  if (!pal::read_own_memory(w.map, &lm, sizeof lm.l_addr + sizeof lm.l_name)) return kNoModule;
  const char* path = unwind::exe_path();  // the executable's own name is ""
  if (lm.l_name != nullptr) {
    const long len = pal::read_own_string(lm.l_name, path_scratch, kPathMax);
    if (len < 0) return kNoModule;
    if (len > 0) path = path_scratch;
  }
  dl_find_object r;
  if (::_dl_find_object(reinterpret_cast<void*>(at), &r) != 0 || r.dlfo_link_map != w.map ||
      r.dlfo_map_start != w.map_start)
    return kNoModule;
  return intern_module(lm.l_addr, path);
}

std::uint32_t insert(std::uint64_t h, const std::uintptr_t* ips, int n, const pyframes::Captured& py) {
  // Which object each frame is in, looked up before taking mu:
  // _dl_find_object takes no lock and never allocates.
  Where where[kMaxFrames];
  for (int i = 0; i < n; ++i) {
    where[i] = {nullptr, nullptr};
    dl_find_object r;
    if (::_dl_find_object(reinterpret_cast<void*>(ips[i] - 1), &r) != 0 || r.dlfo_link_map == nullptr) continue;
    where[i] = {r.dlfo_link_map, r.dlfo_map_start};
  }
  // No signal handler runs on this thread while it holds mu: one that
  // forks would wait in fork_prepare for the lock its own thread holds.
  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  if (!lock_table(process_id())) {
    pthread_sigmask(SIG_SETMASK, &saved, nullptr);
    return kFullSite;
  }
  std::uint32_t at = find(h);
  if (at == 0) {
    if (used >= kMaxUsed || frames_used + static_cast<std::uint32_t>(n) > kFramePool) {
      full.store(true, std::memory_order_relaxed);
      at = kFullSite;
    } else {
      at = home(h);
      while (table[at].hash.load(std::memory_order_relaxed) != 0) at = at + 1 < kSites ? at + 1 : 2;
      Site& s = table[at];
      s.first = frames_used;
      s.nframes = static_cast<std::uint32_t>(n);
      Frame* mine = frames + frames_used;
      for (int i = 0; i < n; ++i) {
        Frame& f = mine[i];
        f.ip = ips[i];
        f.module = kNoModule;
        if (where[i].map != nullptr) {
          // Frames in an object seen earlier in this stack take its answer.
          int j = 0;
          while (j < i && (where[j].map != where[i].map || where[j].map_start != where[i].map_start)) ++j;
          f.module = j < i ? mine[j].module : module_of(where[i], ips[i] - 1);
        }
        f.offset = f.module != kNoModule ? ips[i] - modules[f.module].bias : ips[i];
      }
      frames_used += static_cast<std::uint32_t>(n);
      pyframes::store(at, py);  // before the hash is published
      order[used++] = at;
      s.hash.store(h, std::memory_order_release);
      used_view.store(used, std::memory_order_release);
    }
  }
  unlock_table();
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  return at;
}

void add_peak(Site& s, std::uint64_t live) {
  std::uint64_t p = s.peak_bytes.load(std::memory_order_relaxed);
  while (live > p && live < (std::uint64_t{1} << 63) &&
         !s.peak_bytes.compare_exchange_weak(p, live, std::memory_order_relaxed)) {
  }
}

// The countdown of thread t reached zero: draws the next interval and says
// whether this is a capture. A thread's first countdown is a full random
// interval too (drawn here, on its first expiry), so a thread's first large
// block is not always captured.
bool expired(ThreadLocal& t) {
  if (t.site_rng == 0) {
    t.site_rng = (static_cast<std::uint64_t>(current_tid()) << 32) ^ pal::now_ns() ^
                 reinterpret_cast<std::uintptr_t>(&t) ^ 0x853c49e6748fea9bULL;
    if (t.site_rng == 0) t.site_rng = 1;
    t.site_left += draw_interval(&t.site_rng);
    if (t.site_left > 0) return false;
  }
  t.site_left = draw_interval(&t.site_rng);
  return true;
}

// The calling thread's stack as a site id (0: none could be had).
std::uint32_t capture_site(ThreadLocal& t) {
  std::uint32_t site = 0;
  // Inside a malloc that succeeds: errno as it was (libunwind's check of
  // an address drains a pipe until read() fails with EAGAIN).
  const int saved_errno = errno;
  // in_capture: kCaptureBusy from first to last (no nested capture), and
  // kCaptureCounted only while this capture is surely counted in
  // `capturing`: set after the count goes up, cleared before it goes down.
  // A signal handler's fork between the two sees its own capture counted
  // and not marked (it waits out the bound, as pal::ForkGate's own_windows)
  // rather than marked and not counted (it would not wait for another
  // thread's capture, and its child would keep one counted for ever).
  t.in_capture = kCaptureBusy;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  capturing.fetch_add(1, std::memory_order_seq_cst);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t.in_capture = kCaptureBusy | kCaptureCounted;
  if (!fork_pending.load(std::memory_order_seq_cst)) {
    std::uintptr_t ips[kMaxFrames];
    int n = unwind::capture(ips, kMaxFrames);
    if (n > 0) {
      // The Python lines above, if any, are part of the site: one C stack
      // through the eval loop serves every line of Python.
      pyframes::Captured py;
      pyframes::capture(&py);
      std::uint64_t h = hash_stack(ips, n);
      if (py.n != 0) {
        h ^= py.hash;
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
        if (h < 2) h += 2;  // 0 marks an empty slot
      }
      site = find(h);
      if (site == 0) site = insert(h, ips, n, py);
    }
  }
  t.in_capture = kCaptureBusy;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // Never below 0: a child's fork_child, run by a handler between the two
  // steps above, may have set the count to this thread's marked captures.
  int c = capturing.load(std::memory_order_seq_cst);
  while (c > 0 && !capturing.compare_exchange_weak(c, c - 1, std::memory_order_seq_cst)) {
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t.in_capture = 0;
  errno = saved_errno;
  return site;
}

// Copies every site's live bytes when the process's large peak has risen
// by more than 1/4096 since the last copy. Called on each free and shrink
// before it takes anything off a site: at the first one after a new peak,
// the sites' figures are still those at the peak (in a single thread
// exactly; with several, as close as one thread's view can be).
void maybe_snapshot() {
  const std::uint64_t peak = stats::large_peak_now();
  const std::uint64_t last = snap_taken_at.load(std::memory_order_relaxed);
  if (peak <= last || peak - last <= (peak >> kSnapShift)) return;
  if (snap_busy.exchange(true, std::memory_order_acquire)) return;
  if (peak > snap_taken_at.load(std::memory_order_relaxed)) {
    const std::uint64_t seq = snap_seq.load(std::memory_order_relaxed);
    snap_seq.store(seq + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    snap[kFullSite].store(table[kFullSite].live_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
    const std::uint32_t n = used_view.load(std::memory_order_acquire);
    for (std::uint32_t k = 0; k < n; ++k) {
      const std::uint32_t i = order[k];
      snap[i].store(table[i].live_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
    snap_taken_at.store(peak, std::memory_order_relaxed);
    snap_seq.store(seq + 2, std::memory_order_release);
  }
  snap_busy.store(false, std::memory_order_release);
}

}  // namespace

Sample sample_slow(std::size_t size) {
  ThreadLocal& t = t_local;
  // libunwind may allocate: such a nested large block gets no site; nor
  // does a report's own helpers' (libdw's), which are not the program's.
  if (t.in_capture || t.in_report || !expired(t)) return {0, 0};
  Sample out{capture_site(t), weight_of(size)};
  if (out.site == 0) out.weight = 0;
  return out;
}

Sample grow_slow(const BlockHeader* h, const void* user, std::size_t grown) {
  ThreadLocal& t = t_local;
  if (t.in_capture || t.in_report || !expired(t)) return {0, 0};
  // A block that has a site keeps it: no unwinding. (The header is the
  // host's to overwrite: an id it could have garbled is checked first.)
  std::uint32_t id = header_valid(h, user) ? h->site : 0;
  Sample out{id != 0 && id < kSites ? id : capture_site(t), weight_of(grown)};
  if (out.site == 0) out.weight = 0;
  return out;
}

void allocated(BlockHeader* h, const Sample& smp, std::size_t usable) {
  if (smp.site == 0) return;
  Site& s = table[smp.site];
  s.sampled.fetch_add(1, std::memory_order_relaxed);
  s.blocks.fetch_add(smp.weight, std::memory_order_relaxed);
  std::uint64_t b = scaled(usable, smp.weight);
  h->site_bytes = b;
  s.bytes.fetch_add(b, std::memory_order_relaxed);
  s.live_blocks.fetch_add(smp.weight, std::memory_order_relaxed);
  add_peak(s, s.live_bytes.fetch_add(b, std::memory_order_relaxed) + b);
}

void released(const BlockHeader* h, const void* user, std::size_t /*usable*/) {
  if (!enabled.load(std::memory_order_relaxed)) return;
  maybe_snapshot();
  if (!header_valid(h, user)) return;
  // The header is the host's to overwrite: an id it could have garbled is
  // checked before it indexes anything.
  std::uint32_t id = h->site;
  if (id == 0 || id >= kSites) return;
  Site& s = table[id];
  s.live_blocks.fetch_sub(h->site_weight, std::memory_order_relaxed);
  s.live_bytes.fetch_sub(h->site_bytes, std::memory_order_relaxed);
}

bool resized(BlockHeader* h, std::size_t old_usable, std::size_t new_usable, bool moved, const Sample& grow) {
  if (!enabled.load(std::memory_order_relaxed)) return false;
  if (new_usable < old_usable) maybe_snapshot();
  std::uint32_t id = h->site;
  bool got = false;
  if (grow.site != 0 && (id == 0 || id >= kSites)) {
    // First captured by this growth: the block stands for no other blocks
    // (its allocation was not captured), only its growth's bytes.
    h->site = id = grow.site;
    h->site_weight = 0;
    h->site_bytes = 0;
    got = true;
  }
  if (id == 0 || id >= kSites) return false;
  Site& s = table[id];
  if (moved) s.remaps.fetch_add(h->site_weight, std::memory_order_relaxed);
  if (new_usable > old_usable && grow.site != 0) {
    // The new bytes only, weighted by their own chance of capture.
    const std::uint64_t b = scaled(new_usable - old_usable, grow.weight);
    s.sampled.fetch_add(1, std::memory_order_relaxed);
    s.bytes.fetch_add(b, std::memory_order_relaxed);
    h->site_bytes = add_sat(h->site_bytes, b);
    add_peak(s, s.live_bytes.fetch_add(b, std::memory_order_relaxed) + b);
  } else if (new_usable < old_usable && h->site_bytes != 0) {
    // The block keeps the share of its contribution that its bytes keep.
    __extension__ using Wide = unsigned __int128;  // site_bytes * usable may not fit 64 bits
    const auto keep = static_cast<std::uint64_t>(static_cast<Wide>(h->site_bytes) * new_usable / old_usable);
    s.live_bytes.fetch_sub(h->site_bytes - keep, std::memory_order_relaxed);
    h->site_bytes = keep;
  }
  return got;
}

void start() {
  show = static_cast<std::uint32_t>(g.config.get(Opt::sites));
  if (show == 0) return;
  interval_bytes = g.config.get(Opt::site_sample);
  std::size_t len = kSites * sizeof(Site) + kSites * sizeof(std::atomic<std::uint64_t>) +
                    kFramePool * sizeof(Frame) + kModules * sizeof(Module) + kSites * sizeof(std::uint32_t) + kStrings +
                    kPathMax;
  auto* m = static_cast<char*>(pal::map_lazy(len));
  if (m == nullptr) {
    log::warn("LOWTIDE_SITES: cannot map the site table; call sites are off");
    return;
  }
  table = reinterpret_cast<Site*>(m);
  snap = reinterpret_cast<std::atomic<std::uint64_t>*>(m + kSites * sizeof(Site));
  frames = reinterpret_cast<Frame*>(snap + kSites);
  modules = reinterpret_cast<Module*>(reinterpret_cast<char*>(frames) + kFramePool * sizeof(Frame));
  order = reinterpret_cast<std::uint32_t*>(modules + kModules);
  strings = reinterpret_cast<char*>(order + kSites);
  path_scratch = strings + kStrings;
  // Loading libunwind and libdw (and what libdw needs: libelf, libz,
  // liblzma, libbz2, libzstd) allocates on this thread through lowtide: the
  // loader's link maps, scope lists and TLS, the libraries' own
  // constructors, a warning where one is missing; and so does looking up
  // Python's API (pyframes::start: each dlsym that finds nothing leaves its
  // message in a dlerror buffer). Not the program's calls: a C program
  // that allocates nothing showed 100 calls more than with sites off at
  // exit (docs/reliability.md no. 111). Counted aside as a
  // report's helpers are (stats::begin_own, no. 104): calls, histogram and
  // bytes asked for dropped, what the loader keeps counted as live (it is
  // memory the process holds, and the loader may free it later, counted
  // then), no large peak raised (t_local.in_report). Here in lowtide's
  // constructor, never inside a malloc (a dlopen there can deadlock on the
  // loader's lock), so the thread's slot and cache are in no other span
  // (begin_own does not nest; a report's span would already hold them, and
  // so does the constructor's own, init.cpp's stats::OwnSpan, no. 125: then this
  // one is skipped and its calls go to that span).
  const bool aside = t_local.in_report == 0;
  stats::OwnScratch own{};
  if (aside) {
    stats::begin_own(&own);
    t_local.in_report = 1;
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  const bool unwinds = unwind::load();
  if (unwinds) {
    symbolize::load();  // names for static functions and file:line, if libdw.so.1 is there
    pyframes::start(g.config.get(Opt::sites_python) == 0);
  }
  if (aside) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    t_local.in_report = 0;
    stats::end_own(&own);
  }
  if (!unwinds) return;
  count_pid.store(process_id(), std::memory_order_relaxed);
  enabled.store(true, std::memory_order_release);
}

void fork_prepare() {
  if (!enabled.load(std::memory_order_relaxed)) return;
  fork_pending.store(true, std::memory_order_seq_cst);
  // A capture of this thread's own (a signal handler that forks, having
  // interrupted it) cannot end before the fork: not waited for. It holds
  // no mu (insert blocks signals while it does) and goes on in both
  // processes.
  const int own = (t_local.in_capture & kCaptureCounted) != 0 ? 1 : 0;
  // A process made without fork's handlers (_Fork) inherits the count of
  // its parent's other threads' captures, which never end here: it starts
  // the count afresh, with its own, at its first fork (else every fork of
  // its waited the 2 s below). Later threads' captures under way then may
  // not be waited for, as with pal::ForkGate's adopt.
  const std::uint32_t me = process_id();
  if (count_pid.load(std::memory_order_relaxed) != me) {
    count_pid.store(me, std::memory_order_relaxed);
    capturing.store(own, std::memory_order_seq_cst);
  }
  // Bounded: a capture waiting on a loader lock the forking thread holds
  // (fork from a library constructor) must not hang the fork.
  for (int i = 0; i < 20000 && capturing.load(std::memory_order_seq_cst) > own; ++i) {
    timespec ts{0, 100'000};
    nanosleep(&ts, nullptr);
  }
  fork_took_lock = lock_table(me);
}
void fork_parent() {
  if (!enabled.load(std::memory_order_relaxed)) return;
  if (fork_took_lock) unlock_table();
  fork_pending.store(false, std::memory_order_seq_cst);
}
void fork_child() {
  if (!enabled.load(std::memory_order_relaxed)) return;
  symbolize::fork_child();
  // Free where this fork's prepare handler took it; else it stays held by
  // the process that held it, another one than this child too.
  if (fork_took_lock) mu.store(0, std::memory_order_relaxed);
  count_pid.store(process_id(), std::memory_order_relaxed);
  // Only this thread's own capture, if a signal handler forked from it,
  // goes on here (and takes itself off the count when it ends).
  capturing.store((t_local.in_capture & kCaptureCounted) != 0 ? 1 : 0, std::memory_order_relaxed);
  // A copy another thread was writing is left half-done: keep what it
  // wrote, mark it whole, let the next copy overwrite it.
  snap_busy.store(false, std::memory_order_relaxed);
  snap_seq.store((snap_seq.load(std::memory_order_relaxed) + 1) & ~std::uint64_t{1}, std::memory_order_relaxed);
  fork_pending.store(false, std::memory_order_seq_cst);
}

std::uint64_t interval() { return interval_bytes; }
std::uint32_t shown() { return show; }
std::size_t count() { return used_view.load(std::memory_order_acquire); }
bool table_full() { return full.load(std::memory_order_relaxed); }

ModuleInfo module(std::uint32_t i) {
  if (i >= modules_view.load(std::memory_order_acquire)) return {nullptr, 0};
  return {strings + modules[i].path, modules[i].bias};
}

namespace {

std::size_t read_rows(SiteRow* out, std::size_t cap) {
  std::size_t n = 0;
  auto d = [](const std::atomic<std::uint64_t>& v) {
    return static_cast<double>(v.load(std::memory_order_relaxed)) / kWeightOne;
  };
  for (std::uint32_t i = 1; i < kSites && n < cap; ++i) {
    Site& s = table[i];
    bool have = i == kFullSite ? s.sampled.load(std::memory_order_relaxed) != 0
                               : s.hash.load(std::memory_order_acquire) != 0;
    if (!have) continue;
    SiteRow& r = out[n++];
    r.id = i;
    r.sampled = s.sampled.load(std::memory_order_relaxed);
    r.blocks = d(s.blocks);
    r.bytes = d(s.bytes);
    r.live_blocks = static_cast<double>(static_cast<std::int64_t>(s.live_blocks.load(std::memory_order_relaxed))) / kWeightOne;
    r.live_bytes = static_cast<double>(static_cast<std::int64_t>(s.live_bytes.load(std::memory_order_relaxed))) / kWeightOne;
    r.peak_bytes = d(s.peak_bytes);
    r.remaps = d(s.remaps);
    r.at_peak_bytes = static_cast<double>(snap[i].load(std::memory_order_relaxed)) / kWeightOne;
    r.nframes = i == kFullSite ? 0 : s.nframes;
    r.frames = i == kFullSite ? nullptr : frames + s.first;
  }
  return n;
}


}  // namespace

std::size_t read_sites(SiteRow* out, std::size_t cap, AtPeak* at_peak) {
  if (at_peak != nullptr) at_peak->taken_at = 0;
  if (table == nullptr) return 0;
  // The snapshot under its sequence lock: a copy being written while we read
  // makes us read again, a bounded number of times (a report at exit, or in
  // a process that forked mid-copy, takes what is there).
  for (int attempt = 0;; ++attempt) {
    const std::uint64_t seq = snap_seq.load(std::memory_order_acquire);
    const bool stable = (seq & 1) == 0;
    std::size_t n = read_rows(out, cap);
    if (at_peak != nullptr) at_peak->taken_at = snap_taken_at.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if ((stable && snap_seq.load(std::memory_order_relaxed) == seq) || attempt == 64) return n;
    sched_yield();
  }
}
}  // namespace lowtide::sites

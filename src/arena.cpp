#include "arena.hpp"

#include <algorithm>

#include "platform.hpp"
#include "size_math.hpp"

namespace lowtide {

namespace {
// Large blocks are aligned to 2 MiB inside the range when that helps
// transparent huge pages; the range itself starts on such a boundary.
constexpr std::size_t kRangeAlign = std::size_t{2} << 20;

// This thread's own share of the give-back counts (giving_back_, hiding_,
// held_unlisted_ and its runs in held_), for a forked child's reset: a
// signal handler that forks while this thread is inside a give-back leaves
// the child's copy of the thread to finish it. Changed with the shared
// counts under the arena's lock, which fork's prepare handler takes, so a
// fork never falls between the two. (Initial-exec TLS, as every lowtide
// thread local, constant-initialised: reading or writing it allocates
// nothing. One process arena: unit tests that make several use them one
// at a time on a thread, and every give-back ends at 0 here.) 16 bytes:
// static TLS stays small (docs/design.md). One listed run: a second, nested
// (a signal handler's give-back inside one), is counted unlisted for a
// child, which then takes any request as one that may fit until it ends.
constexpr int kOwnListed = 1;
struct OwnCounts {
  std::int16_t giving_back, hiding, unlisted, listed;
  Arena::Held runs[kOwnListed];
};
static_assert(sizeof(OwnCounts) == 16);
thread_local OwnCounts t_own = {};
}  // namespace

bool Arena::init(std::size_t want, std::size_t min) {
  for (std::size_t len = want; len >= min && len >= kRangeAlign; len /= 2) {
    std::size_t granules = len >> kGranuleShift;
    if (granules > kLenMask) continue;
    // Tables: 8 (live) + 4 (tag) + 4 + 4 (free-list links) bytes per granule.
    std::size_t meta = round_up(granules * 20, pal::kPageSize);
    void* m = pal::reserve(meta);
    if (m == nullptr) continue;
    auto* bytes = static_cast<char*>(m);
    live_ = reinterpret_cast<std::atomic<std::uint64_t>*>(bytes);
    tag_ = reinterpret_cast<std::uint32_t*>(bytes + granules * 8);
    next_ = tag_ + granules;
    prev_ = next_ + granules;
    granules_ = static_cast<std::uint32_t>(granules);
    open_.store(0, std::memory_order_relaxed);
    const auto last_tag = reinterpret_cast<std::uintptr_t>(&tag_[granules - 1]) & ~(pal::kPageSize - 1);
    void* r = nullptr;
    if (!pal::open_table(reinterpret_cast<void*>(last_tag), pal::kPageSize) || !open_to(1) ||
        (r = pal::reserve_aligned(len, kRangeAlign)) == nullptr) {
      pal::unmap(m, meta);
      granules_ = 0;
      continue;
    }
    for (auto& h : head_) h = kNone;
    base_ = reinterpret_cast<std::uintptr_t>(r);
    insert_free(0, granules_);
    // size_ last: contains() is false until the tables are in place.
    __atomic_store_n(&size_, len, __ATOMIC_RELEASE);
    return true;
  }
  return false;
}

bool Arena::open_to(std::uint32_t g) {
  constexpr std::uint32_t kOpenStep = 4096;  // 256 MiB of range; 80 KiB of tables
  const std::uint32_t have = open_.load(std::memory_order_relaxed);
  if (g <= have) return true;
  // g <= granules_ <= kLenMask: no overflow.
  const std::uint32_t want = std::min(granules_, (g + kOpenStep - 1) / kOpenStep * kOpenStep);
  // [have, want) of each table, out to whole pages (a page already open
  // stays as it is).
  auto open = [&](const void* table, std::size_t elem) {
    const auto t = reinterpret_cast<std::uintptr_t>(table);
    const std::uintptr_t from = (t + have * elem) & ~(pal::kPageSize - 1);
    const std::uintptr_t to = (t + want * elem + pal::kPageSize - 1) & ~(pal::kPageSize - 1);
    return pal::open_table(reinterpret_cast<void*>(from), to - from);
  };
  if (!open(live_, sizeof live_[0]) || !open(tag_, sizeof tag_[0]) || !open(next_, sizeof next_[0]) ||
      !open(prev_, sizeof prev_[0]))
    return false;
  open_.store(want, std::memory_order_release);
  return true;
}

std::size_t Arena::shrink_to(std::size_t keep) {
  if (size_ == 0) return 0;
  const std::uint32_t want = static_cast<std::uint32_t>(
      std::min<std::size_t>(round_up(std::max(keep, kRangeAlign), kRangeAlign) >> kGranuleShift, granules_));
  lock();
  const std::uint32_t old_g = granules_;
  const std::uint32_t last = tag_[old_g - 1];
  // Only the free tail goes: a range that ends in a used extent (a block,
  // a cached one, a run a give-back holds while it re-maps) keeps its size.
  if ((last & kFree) == 0 || want >= old_g) {
    unlock();
    return 0;
  }
  const std::uint32_t tail = old_g - (last & kLenMask);
  // The new end tag needs its table entries open: opened up to `want` if
  // the kernel allows (80 KiB per 256 MiB), else the range ends where the
  // tables are open (the tail's first granule always is: alloc opens one
  // past what it takes).
  (void)open_to(want);
  const std::uint32_t open = open_.load(std::memory_order_relaxed);
  const std::uint32_t g = std::max(tail + 1, std::min(want, open));
  if (g >= old_g) {
    unlock();
    return 0;
  }
  remove_free(tail);
  insert_free(tail, g - tail);
  granules_ = g;
  open_.store(std::min(open, g), std::memory_order_release);
  // contains() is false past the new end from here; nothing there was live.
  __atomic_store_n(&size_, std::size_t{g} << kGranuleShift, __ATOMIC_RELEASE);
  unlock();
  const std::size_t range_bytes = std::size_t{old_g - g} << kGranuleShift;
  pal::unmap(addr(g), range_bytes);
  // Each table's entries past g, whole pages only (the tables lie end to
  // end: a page one shares with the next stays).
  auto trim = [&](const void* table, std::size_t elem) {
    const auto t = reinterpret_cast<std::uintptr_t>(table);
    const std::uintptr_t from = (t + g * elem + pal::kPageSize - 1) & ~(pal::kPageSize - 1);
    const std::uintptr_t to = (t + old_g * elem) & ~(pal::kPageSize - 1);
    if (to > from) pal::unmap(reinterpret_cast<void*>(from), to - from);
  };
  trim(live_, sizeof live_[0]);
  trim(tag_, sizeof tag_[0]);
  trim(next_, sizeof next_[0]);
  trim(prev_, sizeof prev_[0]);
  return range_bytes;
}

void Arena::insert_free(std::uint32_t s, std::uint32_t n) {
  set_tags(s, n, kFree);
  int b = bin_of(n);
  next_[s] = head_[b];
  prev_[s] = kNone;
  if (head_[b] != kNone) prev_[head_[b]] = s;
  head_[b] = s;
}

void Arena::remove_free(std::uint32_t s) {
  std::uint32_t n = tag_[s] & kLenMask;
  int b = bin_of(n);
  if (prev_[s] != kNone) next_[prev_[s]] = next_[s];
  else head_[b] = next_[s];
  if (next_[s] != kNone) prev_[next_[s]] = prev_[s];
}

std::uint32_t Arena::alloc(std::uint32_t n, std::uint32_t align_g, std::uint32_t skew_g, std::uint32_t* gap,
                           bool* refused) {
  if (gap != nullptr) *gap = 0;
  if (refused != nullptr) *refused = false;
  if (n == 0 || n > granules_ || skew_g >= n) return kNone;
  if (align_g == 0) align_g = 1;
  // No extent is aligned to more than the whole range; refusing here also
  // keeps the arithmetic below far from wrapping (addresses < 2^57, an
  // alignment < 2^48).
  if (align_g > granules_) return kNone;
  lock();
  for (int b = bin_of(n); b < kBins; ++b) {
    for (std::uint32_t s = head_[b]; s != kNone; s = next_[s]) {
      std::uint32_t len = tag_[s] & kLenMask;
      const std::uint64_t a = place(s, align_g, skew_g);
      if (a + n > std::uint64_t{s} + len) continue;
      // Entries written below: up to the first granule of what is left.
      if (!open_to(static_cast<std::uint32_t>(std::min<std::uint64_t>(a + n + 1, granules_)))) {
        if (refused != nullptr) *refused = true;
        unlock();
        return kNone;
      }
      remove_free(s);
      auto at = static_cast<std::uint32_t>(a);
      if (at > s && gap != nullptr) {
        set_tags(s, at - s, kUsed);
        *gap = at - s;
      } else if (at > s) {
        insert_free(s, at - s);
      }
      std::uint32_t end = s + len;
      if (at + n < end) insert_free(at + n, end - (at + n));
      set_tags(at, n, kUsed);
      unlock();
      return at;
    }
  }
  unlock();
  return kNone;
}

void Arena::release_locked(std::uint32_t s, std::uint32_t n) {
  if (s > 0 && (tag_[s - 1] & kFree)) {
    std::uint32_t len = tag_[s - 1] & kLenMask;
    std::uint32_t ps = s - len;
    remove_free(ps);
    s = ps;
    n += len;
  }
  if (s + n < granules_ && (tag_[s + n] & kFree)) {
    std::uint32_t len = tag_[s + n] & kLenMask;
    remove_free(s + n);
    n += len;
  }
  insert_free(s, n);
}

void Arena::release(std::uint32_t s, std::uint32_t n) {
  lock();
  release_locked(s, n);
  unlock();
}

void Arena::give_back(std::uint32_t s, std::uint32_t n, void (*decommit)(void*, std::size_t),
                      bool (*drop_writable)(void*, std::size_t)) {
  own_unfinished_add(1);
  // The counts change under the lock (see t_own): a fork, whose
  // prepare handler takes it, comes before or after each change and this
  // thread's own share of it, never between them.
  lock();
  hiding_.fetch_add(1, std::memory_order_acq_rel);
  ++t_own.hiding;
  if (drop_writable == nullptr) {
    unlock();
    decommit(addr(s), std::size_t{n} << kGranuleShift);
    lock();
    release_locked(s, n);
    end_hiding();
    unlock();
    own_unfinished_add(-1);
    return;
  }
  // Counted before drop_writable looks at whether an mlockall is under way
  // (both sequentially consistent): either this call sees it and maps
  // PROT_NONE, or the mlockall sees this call and waits for it.
  giving_back_.fetch_add(1, std::memory_order_seq_cst);
  ++t_own.giving_back;
  std::uint32_t rs = s, rn = n;
  bool at_tail = s + n == granules_;
  if (s > 0 && (tag_[s - 1] & kFree)) {
    const std::uint32_t len = tag_[s - 1] & kLenMask;
    rs = s - len;
    rn += len;
    remove_free(rs);
  }
  if (!at_tail && (tag_[s + n] & kFree)) {
    const std::uint32_t len = tag_[s + n] & kLenMask;
    if (s + n + len == granules_) {
      at_tail = true;  // the untouched tail: not taken, it stays PROT_NONE
    } else {
      remove_free(s + n);
      rn += len;
    }
  }
  // The run is one used extent while it is re-mapped. (The tags inside it
  // are left as they were: only an extent's two end tags are ever read.)
  set_tags(rs, rn, kUsed);
  hold(rs, rn);
  unlock();
  void* p = addr(rs);
  const std::size_t len = std::size_t{rn} << kGranuleShift;
  if (at_tail || !drop_writable(p, len)) decommit(p, len);
  lock();
  unhold(rs, rn);
  release_locked(rs, rn);
  end_hiding();
  giving_back_.fetch_sub(1, std::memory_order_seq_cst);
  --t_own.giving_back;
  unlock();
  own_unfinished_add(-1);
}

void Arena::hold(std::uint32_t s, std::uint32_t n) {  // under mu_
  if (held_count_ < kHeldSlots) {
    held_[held_count_++] = Held{s, n};
    if (t_own.listed < kOwnListed) t_own.runs[t_own.listed++] = Held{s, n};
    else ++t_own.unlisted;  // a child would find it unlisted
  } else {
    ++held_unlisted_;
    ++t_own.unlisted;
  }
}

void Arena::unhold(std::uint32_t s, std::uint32_t n) {  // under mu_
  for (int i = 0; i < held_count_; ++i) {
    if (held_[i].s == s && held_[i].n == n) {
      held_[i] = held_[--held_count_];
      for (int j = 0; j < t_own.listed; ++j) {
        if (t_own.runs[j].s == s && t_own.runs[j].n == n) {
          t_own.runs[j] = t_own.runs[--t_own.listed];
          return;
        }
      }
      --t_own.unlisted;
      return;
    }
  }
  --held_unlisted_;
  --t_own.unlisted;
}

// The epoch first, then the count: a look that finds nothing under way
// (reading the count first) sees every ended one's epoch step. Under mu_.
void Arena::end_hiding() {
  ended_.fetch_add(1, std::memory_order_release);
  hiding_.fetch_sub(1, std::memory_order_release);
  --t_own.hiding;
}

void Arena::reset_after_fork() {
  pthread_mutex_init(&mu_, nullptr);
  // No other thread runs here, but this one may be inside give-backs (a
  // signal handler that interrupted one forked): its copy finishes them
  // once the handler returns and takes off what it added, so each count
  // starts from this thread's own share, not 0 (0 took them below 0, and
  // a later mlockall waited for ever in wait_give_backs).
  giving_back_.store(t_own.giving_back, std::memory_order_relaxed);
  hiding_.store(t_own.hiding, std::memory_order_relaxed);
  held_count_ = 0;
  for (int j = 0; j < t_own.listed; ++j) held_[held_count_++] = t_own.runs[j];
  held_unlisted_ = t_own.unlisted;
}

void Arena::wait_give_backs() const {
  while (giving_back_.load(std::memory_order_seq_cst) != 0) pal::yield();
}

void Arena::protect_free(void (*decommit)(void*, std::size_t)) {
  constexpr int kBatch = 64;
  std::uint32_t taken[kBatch][2];
  // The last extent of a full batch stays taken (used) until the next scan
  // has started from its end: while it is used, nothing can merge into the
  // extent at the cursor from the left, so the cursor stays an extent start.
  std::uint32_t held_s = kNone, held_n = 0;
  own_unfinished_add(1);
  // Its batches are not listed one by one: while it runs, settle counts
  // any request as one that may fit.
  lock();
  hiding_.fetch_add(1, std::memory_order_acq_rel);
  ++t_own.hiding;
  ++held_unlisted_;
  ++t_own.unlisted;
  unlock();
  for (std::uint32_t cursor = 0;;) {
    int k = 0;
    lock();
    std::uint32_t s = cursor;
    while (s < granules_ && k < kBatch) {
      const std::uint32_t t = tag_[s];
      const std::uint32_t n = t & kLenMask;
      if (n == 0 || n > granules_ - s) break;
      if ((t & kFree) && s + n != granules_) {
        remove_free(s);
        set_tags(s, n, kUsed);
        taken[k][0] = s;
        taken[k][1] = n;
        ++k;
      }
      s += n;
    }
    if (held_s != kNone) release_locked(held_s, held_n);
    held_s = kNone;
    unlock();
    const bool more = k == kBatch;
    for (int i = 0; i < k; ++i) {
      decommit(addr(taken[i][0]), std::size_t{taken[i][1]} << kGranuleShift);
      if (more && i == k - 1) {
        held_s = taken[i][0];
        held_n = taken[i][1];
      } else {
        release(taken[i][0], taken[i][1]);
      }
    }
    // Its room is free again: a waiting settle tries at once, not when the
    // whole pass (maybe longer than settle's bound) ends (review).
    ended_.fetch_add(1, std::memory_order_release);
    if (!more) break;
    cursor = s;
  }
  lock();
  --held_unlisted_;
  --t_own.unlisted;
  end_hiding();
  unlock();
  own_unfinished_add(-1);
}

namespace {
thread_local int t_own_unfinished = 0;
}  // namespace

void Arena::own_unfinished_add(int d) {
  t_own_unfinished += d;
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
}
int Arena::own_unfinished() { return t_own_unfinished; }

std::uint64_t Arena::reclaim_after_fork(bool (*cached)(std::uint32_t, std::uint32_t),
                                        void (*decommit)(void*, std::size_t),
                                        bool (*drop_writable)(void*, std::size_t)) {
  // Found first, given back after each walk: a give-back merges its extent
  // with the free ones around it and rewrites the run's end tag, which may
  // be the next extent's start tag (a free extent of one granule), so a
  // walk that went on past one would follow a wrong length into a live
  // block. A batch at a time; the walk again while one filled up.
  constexpr int kBatch = 64;
  std::uint64_t live = 0;
  for (bool more = true; more;) {
    std::uint32_t todo[kBatch][2];
    int k = 0;
    more = false;
    live = 0;
    const std::uint32_t open = open_.load(std::memory_order_relaxed);
    for (std::uint32_t s = 0; s < granules_ && s < open;) {
      const std::uint32_t t = tag_[s];
      const std::uint32_t n = t & kLenMask;
      if (n == 0 || n > granules_ - s) break;
      if ((t & kUsed) != 0) {
        std::uint64_t v = 0;
        const bool is_live = live_granule(s, n, &v) >= 0;
        bool held = false;
        for (const auto& slot : held_out_) {
          const std::uint64_t v = slot.load(std::memory_order_relaxed);
          const auto hs = static_cast<std::uint32_t>(v >> 32), hn = static_cast<std::uint32_t>(v);
          held = held || (hn != 0 && hs < s + n && s < hs + hn);
        }
        if (is_live) {
          live += n;
        } else if (!held && !cached(s, n)) {
          if (k < kBatch) {
            todo[k][0] = s;
            todo[k][1] = n;
            ++k;
          } else {
            more = true;
          }
        }
      }
      s += n;
    }
    for (int i = 0; i < k; ++i) give_back(todo[i][0], todo[i][1], decommit, drop_writable);
  }
  return live;
}

bool Arena::grow(std::uint32_t s, std::uint32_t n, std::uint32_t m) {
  lock();
  std::uint32_t nx = s + n;
  bool ok = false;
  if (nx < granules_ && (tag_[nx] & kFree)) {
    std::uint32_t len = tag_[nx] & kLenMask;
    if (len >= m - n && open_to(std::min(s + m + 1, granules_))) {
      remove_free(nx);
      std::uint32_t rest = len - (m - n);
      if (rest != 0) insert_free(s + m, rest);
      set_tags(s, m, kUsed);
      ok = true;
    }
  }
  unlock();
  return ok;
}

void Arena::shrink(std::uint32_t s, std::uint32_t n, std::uint32_t m) {
  lock();
  set_tags(s, m, kUsed);
  release_locked(s + m, n - m);
  unlock();
}

void Arena::split(std::uint32_t s, std::uint32_t n, std::uint32_t m) {
  lock();
  set_tags(s, m, kUsed);
  set_tags(s + m, n - m, kUsed);
  unlock();
}

void Arena::join(std::uint32_t s, std::uint32_t n, std::uint32_t m) {
  lock();
  tag_[s + n - 1] = 0;
  tag_[s + n] = 0;
  set_tags(s, m, kUsed);
  unlock();
}

void Arena::publish(const void* user, std::uint32_t start, std::uint32_t tag) {
  live_[granule_of(user)].store(encode_live(user, start, tag), std::memory_order_release);
}

std::uint32_t Arena::lookup(const void* user) const {
  if ((reinterpret_cast<std::uintptr_t>(user) & 15) != 0) return kNone;
  const std::uint32_t g = granule_of(user);
  if (g >= open_.load(std::memory_order_acquire)) return kNone;  // never carved: no block
  std::uint64_t v = live_[g].load(std::memory_order_acquire);
  std::uint64_t want_off = (reinterpret_cast<std::uintptr_t>(user) & (kGranule - 1)) >> 4;
  if ((v >> 63) == 0 || ((v >> 32) & kOffMask) != want_off) return kNone;
  return static_cast<std::uint32_t>(v);
}

const char* Arena::check() {
  if (!ready()) return nullptr;
  lock();
  const char* why = check_locked();
  unlock();
  return why;
}

std::uint32_t Arena::free_locked() const {
  std::uint32_t total = 0;
  for (std::uint32_t h : head_)
    for (std::uint32_t s = h; s != kNone; s = next_[s]) total += tag_[s] & kLenMask;
  return total;
}

// Held run i once released: [*s, *e), with the free extents and the other
// held runs it touches, and theirs in turn (each step lengthens it: it ends).
void Arena::joined_run(int i, std::uint32_t* s_out, std::uint32_t* e_out) const {
  std::uint32_t s = held_[i].s, e = s + held_[i].n;
  for (bool grew = true; grew;) {
    grew = false;
    if (s > 0 && (tag_[s - 1] & kFree)) {
      s -= tag_[s - 1] & kLenMask;
      grew = true;
    }
    if (e < granules_ && (tag_[e] & kFree)) {
      e += tag_[e] & kLenMask;
      grew = true;
    }
    for (int j = 0; j < held_count_; ++j) {
      if (held_[j].s + held_[j].n == s) {
        s = held_[j].s;
        grew = true;
      } else if (held_[j].s == e) {
        e += held_[j].n;
        grew = true;
      }
    }
  }
  *s_out = s;
  *e_out = e;
}

std::uint64_t Arena::place(std::uint32_t s, std::uint32_t align_g, std::uint32_t skew_g) const {
  // Align the absolute address: the range is only 2 MiB-aligned.
  const std::uint64_t addr = base_ + (std::uint64_t{s + skew_g} << kGranuleShift);
  const std::uint64_t align = std::uint64_t{align_g} << kGranuleShift;
  return ((((addr + align - 1) & ~(align - 1)) - base_) >> kGranuleShift) - skew_g;
}

bool Arena::may_fit_once_settled(std::uint32_t n, std::uint32_t align_g, std::uint32_t skew_g,
                                 std::uint32_t extra) {
  if (align_g == 0) align_g = 1;
  if (n == 0 || n > granules_ || skew_g >= n || align_g > granules_) return false;  // as alloc
  lock();
  // Not known (any request may fit), or what is on its way back is room
  // enough by itself (a range with no free extent at all: review).
  bool fits = held_unlisted_ != 0 || (extra != 0 && n <= extra);
  // The free extents, as alloc looks at them (give-backs that have ended
  // left their room here). With extra (cached extents on their way back,
  // whose places are not known): any free extent they might join, by
  // length only, so from the bin of n - extra (shorter ones cannot fit;
  // from bin 0, a fragmented range cost 214 us here under the lock).
  for (int b = bin_of(extra < n ? n - extra : 1); b < kBins && !fits; ++b) {
    for (std::uint32_t s = head_[b]; s != kNone && !fits; s = next_[s]) {
      const std::uint32_t len = tag_[s] & kLenMask;
      fits = extra != 0 ? std::uint64_t{n} <= std::uint64_t{len} + extra
                        : place(s, align_g, skew_g) + n <= std::uint64_t{s} + len;
    }
  }
  // Each held run, once released, joins the free extents and the other
  // held runs it touches (a give-back takes its free neighbours, but not
  // the range's free tail, and two give-backs may touch).
  for (int i = 0; i < held_count_ && !fits; ++i) {
    std::uint32_t s = 0, e = 0;
    joined_run(i, &s, &e);
    fits = extra != 0 ? std::uint64_t{n} <= std::uint64_t{e - s} + extra
                      : place(s, align_g, skew_g) + n <= std::uint64_t{e};
  }
  unlock();
  return fits;
}

std::uint32_t Arena::free_granules() {
  lock();
  const std::uint32_t total = free_locked();
  unlock();
  return total;
}

const char* Arena::check_locked() const {
  std::uint32_t free_extents = 0;
  bool prev_free = false;
  const std::uint32_t open = open_.load(std::memory_order_relaxed);
  for (std::uint32_t s = 0; s < granules_;) {
    if (s >= open) return "arena: an extent starts past the tables' open part (past the free tail's start)";
    std::uint32_t t = tag_[s];
    std::uint32_t n = t & kLenMask;
    std::uint32_t state = t & ~kLenMask;
    if (n == 0 || n > granules_ - s) return "arena: an extent's length runs past the range (extents do not tile it)";
    // Only the free tail ends past the open part (its end tag's page is open).
    if (s + n != granules_ && s + n > open) return "arena: an extent runs past the tables' open part";
    if (state != kFree && state != kUsed) return "arena: an extent is neither free nor used";
    if (tag_[s + n - 1] != t) return "arena: an extent's tags at its two ends differ";
    if (state == kFree) {
      if (prev_free) return "arena: two free extents touch (not coalesced)";
      ++free_extents;
    }
    prev_free = state == kFree;
    s += n;
  }
  std::uint32_t listed = 0;
  for (int b = 0; b < kBins; ++b) {
    std::uint32_t prev = kNone;
    for (std::uint32_t s = head_[b]; s != kNone; s = next_[s]) {
      if (s >= open || ++listed > free_extents) return "arena: a free list holds more than the free extents";
      if ((tag_[s] & kFree) == 0) return "arena: a free list holds an extent that is not free";
      if (bin_of(tag_[s] & kLenMask) != b) return "arena: a free extent is in the wrong size bin";
      if (prev_[s] != prev) return "arena: a free list's back link is wrong";
      prev = s;
    }
  }
  if (listed != free_extents) return "arena: a free extent is missing from the free lists";
  return nullptr;
}

std::uint32_t Arena::claim(const void* user) {
  if ((reinterpret_cast<std::uintptr_t>(user) & 15) != 0) return kNone;
  const std::uint32_t g = granule_of(user);
  if (g >= open_.load(std::memory_order_acquire)) return kNone;
  auto& slot = live_[g];
  std::uint64_t v = slot.load(std::memory_order_acquire);
  std::uint64_t want_off = (reinterpret_cast<std::uintptr_t>(user) & (kGranule - 1)) >> 4;
  if ((v >> 63) == 0 || ((v >> 32) & kOffMask) != want_off) return kNone;
  if (!slot.compare_exchange_strong(v, 0, std::memory_order_acq_rel)) return kNone;
  return static_cast<std::uint32_t>(v);
}

int Arena::hold_out(std::uint32_t start, std::uint32_t n) {
  const std::uint64_t v = std::uint64_t{start} << 32 | n;
  for (int i = 0; i < kHeldOut; ++i) {
    std::uint64_t expected = 0;
    if (held_out_[i].compare_exchange_strong(expected, v, std::memory_order_seq_cst)) {
      held_out_n_.fetch_add(1, std::memory_order_seq_cst);
      return i;
    }
  }
  return -1;
}

void Arena::put_back(int slot) {
  // The count first: a reader seeing it 0 skips the slots, which is right
  // once the extent is ours again; one seeing it above 0 reads the slot.
  held_out_n_.fetch_sub(1, std::memory_order_seq_cst);
  held_out_[slot].store(0, std::memory_order_seq_cst);
}

void Arena::forget_held_out() {
  for (auto& slot : held_out_) slot.store(0, std::memory_order_relaxed);
  held_out_n_.store(0, std::memory_order_relaxed);
  lost_n_.store(0, std::memory_order_relaxed);
}

}  // namespace lowtide

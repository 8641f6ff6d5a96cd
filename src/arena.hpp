// The large-block address range: one reservation made at start-up (cut
// shorter only for a lower RLIMIT_AS: shrink_to), carved
// into extents of whole granules. All bookkeeping lives outside the range, in
// tables lowtide maps itself, so deciding "is this pointer a live large block
// of ours?" is a range compare plus one table load, and a freed block's
// header is never read.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <pthread.h>

namespace lowtide {

class Arena {
 public:
  static constexpr unsigned kGranuleShift = 16;
  static constexpr std::size_t kGranule = std::size_t{1} << kGranuleShift;  // 64 KiB
  static constexpr std::uint32_t kNone = UINT32_MAX;

  // Reserve up to `want` bytes (halving on failure down to `min`). Returns
  // false when no reservation could be made; the arena then stays empty.
  bool init(std::size_t want, std::size_t min);

  // Whether p is in the range and not in a held extent (hold_out()): the
  // pointers every entry point routes to the large path.
  bool contains(const void* p) const {
    const std::uintptr_t off = reinterpret_cast<std::uintptr_t>(p) - base_;
    if (off >= size_) return false;
    return __builtin_expect(held_out_n_.load(std::memory_order_acquire) == 0, 1) ||
           !in_held_out(off >> kGranuleShift);
  }
  // Extents lowtide may not own for a while, or for good: a hole lowtide
  // leaves in a used extent for a moment (pal::move_grow, grow_mapping)
  // may be taken by another thread's mmap, which may be anyone's
  // (mimalloc's, the program's). Held out before the hole opens, so that
  // until it is known to be ours again contains() says no for pointers in
  // it, and a block someone else put there goes to them, not to the
  // large path's invalid-pointer check. Returns a slot, or -1 when all
  // kHeldOut slots are taken (then make no hole). put_back(slot): the hole
  // was mapped again, the extent is ours. keep_out(slot): it was taken;
  // the extent stays a used extent for good (lowtide never maps over it)
  // and held out. may_hold_out(): fewer than kLostMax kept out for good.
  int hold_out(std::uint32_t start, std::uint32_t n);
  void put_back(int slot);
  void keep_out(int slot) { (void)slot; lost_n_.fetch_add(1, std::memory_order_relaxed); }
  bool may_hold_out() const { return lost_n_.load(std::memory_order_relaxed) < kLostMax; }
  // For tests: every extent back in (the test has mapped and released them).
  void forget_held_out();
  // Make the range smaller, to about `keep` bytes (never below the end of
  // its last extent that is not free, nor above what it is): the free tail
  // beyond is unmapped, with the tables' entries for it, so that it no
  // longer counts in the process's address space. For a program that lowers
  // RLIMIT_AS while it runs (libc::limit_address_space): the reservation,
  // made at start-up for a process without that limit, counts in full
  // against it although it commits nothing. Returns the bytes unmapped (0:
  // none, where the range ends in a used or held extent). Takes the lock.
  std::size_t shrink_to(std::size_t keep);
  static constexpr int kHeldOut = 32;
  static constexpr int kLostMax = 16;
  bool ready() const { return size_ != 0; }
  std::size_t size() const { return size_; }
  std::uintptr_t base() const { return base_; }
  char* addr(std::uint32_t g) const { return reinterpret_cast<char*>(base_ + (std::uintptr_t{g} << kGranuleShift)); }
  std::uint32_t granule_of(const void* p) const {
    return static_cast<std::uint32_t>((reinterpret_cast<std::uintptr_t>(p) - base_) >> kGranuleShift);
  }

  // Extent management (takes the arena lock). Returns the first granule s of
  // n free granules such that granule s + skew_g starts at an address aligned
  // to align_g granules, or kNone.
  // With `gap` (not null), the granules skipped in front of s to reach the
  // alignment are not left free but handed over too, as a used extent of
  // *gap granules ending at s (0: none), for the caller to give_back once s
  // is committed: gaps cut from the PROT_NONE tail would otherwise split the
  // read-write run around every aligned block for as long as it lives.
  // With `refused` (not null): set true where a free extent was found but
  // the kernel refused to make its table entries read-write (open_to: an
  // RLIMIT_DATA reached, an mprotect refused), false otherwise: kNone then
  // means the kernel's refusal, not a range without room.
  std::uint32_t alloc(std::uint32_t n, std::uint32_t align_g, std::uint32_t skew_g = 0, std::uint32_t* gap = nullptr,
                      bool* refused = nullptr);
  void release(std::uint32_t start, std::uint32_t n);
  // Give the used extent [start, start+n) back with its pages dropped,
  // keeping the range's mapping count near the live blocks' (issue 14 part
  // 5). The free extents on either side are taken too (out of the free
  // lists, under the lock, so nobody allocates there meanwhile) and the whole
  // run is re-mapped at once, outside the lock: with drop_writable (a fresh
  // read-write mapping; fresh PROT_NONE where a finite RLIMIT_DATA refuses
  // that) where it succeeds, which merges the run into one
  // mapping with its neighbours, whatever gaps (PROT_NONE) or separately
  // made mappings it held; with decommit (PROT_NONE) where it does not, or
  // when the run meets the range's free tail, which stays PROT_NONE (the
  // run then joins it). Then the run is released. drop_writable null: the
  // extent alone, decommitted, as release() after decommit.
  void give_back(std::uint32_t start, std::uint32_t n, void (*decommit)(void*, std::size_t),
                 bool (*drop_writable)(void*, std::size_t));
  // Every free extent but the range's tail through decommit (PROT_NONE), a
  // batch at a time: each batch is taken out of the free lists under the
  // lock, re-mapped outside it, then released. For mlockall(MCL_CURRENT),
  // which would populate and lock every read-write page of the process,
  // free extents included.
  void protect_free(void (*decommit)(void*, std::size_t));
  // Extend the used extent [start, start+n) to m granules in place, if the
  // following granules are free.
  bool grow(std::uint32_t start, std::uint32_t n, std::uint32_t m);
  // Give back the tail [start+m, start+n) of a used extent.
  void shrink(std::uint32_t start, std::uint32_t n, std::uint32_t m);
  // Cut the used extent [start, start+n) into two used extents, of m and
  // n-m granules (the reuse cache keeps the tail of a block it hands out).
  void split(std::uint32_t start, std::uint32_t n, std::uint32_t m);
  // The reverse: the used extents [start, start+n) and [start+n, start+m)
  // become one used extent of m granules.
  void join(std::uint32_t start, std::uint32_t n, std::uint32_t m);
  std::uint32_t used_length(std::uint32_t start) const { return tag_[start] & kLenMask; }
  // Is [start, start+n) exactly one used extent (tags at both ends)? Takes
  // no lock: the caller owns the extent.
  bool is_used_extent(std::uint32_t start, std::uint32_t n) const {
    const std::uint32_t open = open_.load(std::memory_order_acquire);
    return n != 0 && start < open && n <= open - start && tag_[start] == (n | kUsed) &&
           tag_[start + n - 1] == (n | kUsed);
  }

  // The extent map's invariants (takes the lock): the extents tile the
  // range, each with the same tag at both ends, no two free ones touch, and
  // the free lists hold exactly the free extents, each in its size's bin.
  // nullptr if all hold, else the first one violated.
  const char* check();
  // Granules in free extents (takes the lock; for tests and checks).
  std::uint32_t free_granules();
  // Could n granules, at granule + skew_g aligned to align_g granules (as
  // alloc), fit once the give_backs under way have released the runs they
  // hold (the extent and its free neighbours), if nothing else changed?
  // Looks at the free extents and at each held run joined with what it
  // touches; with `extra` granules on their way back from the cache (where,
  // not known), at any free extent or joined run plus extra, by length. An
  // over-estimate (another thread may take room meanwhile); true while
  // protect_free runs or more give_backs run than are listed (kHeldSlots).
  // For settle: walks the free lists under the lock, as alloc does.
  bool may_fit_once_settled(std::uint32_t n, std::uint32_t align_g, std::uint32_t skew_g, std::uint32_t extra);

  // Live-block table, lock-free. A user pointer is registered in the slot of
  // the granule it falls in (no two live blocks share a granule).
  // `tag` (12 bits: the block's call site) rides along for walkers, which
  // must not read a header another thread may be unmapping.
  void publish(const void* user, std::uint32_t start, std::uint32_t tag = 0);
  // The block's first granule if `user` is exactly a live user pointer.
  std::uint32_t lookup(const void* user) const;
  // Like lookup, and atomically unregisters it: of two concurrent frees of
  // one pointer, exactly one gets the block.
  std::uint32_t claim(const void* user);

  // Calls f(user, first granule, granules, tag) for every live block, walking
  // the extents under the lock (`try_only`: at exit, never wait; then the
  // walk reads without it, bounded by the table, and returns false). f runs
  // under the lock: it must not allocate.
  // Which of the used extent [s, s+n)'s granules holds its live block's
  // slot (*v), or -1 where it holds none (a cached extent, one being given
  // back): the user pointer is in the first granule, or the second for
  // alignments above a granule.
  int live_granule(std::uint32_t s, std::uint32_t n, std::uint64_t* v) const {
    for (std::uint32_t k = 0; k < 2 && k < n; ++k) {
      *v = live_[s + k].load(std::memory_order_acquire);
      if ((*v >> 63) != 0 && static_cast<std::uint32_t>(*v) == s) return static_cast<int>(k);
    }
    return -1;
  }

  template <typename F>
  bool for_each_live(F f, bool try_only) {
    bool locked = try_only ? pthread_mutex_trylock(&mu_) == 0 : pthread_mutex_lock(&mu_) == 0;
    const std::uint32_t open = open_.load(std::memory_order_acquire);
    // Every extent starts in the tables' open part (the tail's head is the
    // last one); a tag read mid-update without the lock may point past it.
    for (std::uint32_t s = 0; s < granules_ && s < open;) {
      std::uint32_t t = tag_[s];
      std::uint32_t n = t & kLenMask;
      if (n == 0 || n > granules_ - s) break;
      std::uint64_t v = 0;
      const int k = (t & kUsed) ? live_granule(s, n, &v) : -1;
      if (k >= 0)
        f(addr(s + static_cast<std::uint32_t>(k)) + (((v >> 32) & kOffMask) << 4), s, n,
          static_cast<std::uint32_t>((v >> 44) & kTagMask));
      s += n;
    }
    if (locked) unlock();
    return locked;
  }

  // In a forked child, whose parent had a give-back (this arena's, or the
  // reuse cache's: its extents are taken out of the cache before they are
  // given back) or a cached block on trial under way in another thread at
  // the fork: that thread does not exist here, and its extent (with, for a
  // give-back, the free extents it held) stayed used by nobody for good.
  // Every used extent that is not a live block, not held out (a lost
  // extent, or one a thread held when the fork came) and for which
  // `cached` is false is given back (give_back). Returns the granules of
  // the live blocks' extents. Single-threaded (the child's handler).
  std::uint64_t reclaim_after_fork(bool (*cached)(std::uint32_t start, std::uint32_t n),
                                   void (*decommit)(void*, std::size_t), bool (*drop_writable)(void*, std::size_t));
  // Give-backs and trials of cached blocks the calling thread has under way
  // (give_back, protect_free, the reuse cache's give-backs and trials):
  // where a signal handler on that thread forks, the child's copy of the
  // thread finishes them once the handler returns, so the child must not
  // reclaim them first (large::fork_child_unfinished). Counted before the
  // shared state changes and after it is settled again.
  static void own_unfinished_add(int d);
  static int own_unfinished();

  // Waits until no give_back that started before the call is still under
  // way (mlockall: one that re-maps read-write must have released its run
  // before protect_free looks for free extents). Spins with sched_yield;
  // give_back holds no lock while it maps.
  void wait_give_backs() const;

  // For an allocation that found no room (ReuseCache::settle): give_backs
  // and protect_free hold free extents out of the free lists while they
  // re-map them (may_fit_once_settled looks at them), so for a moment the
  // range may look fuller than it is. hiding(): how many are under way;
  // hidings_ended(): how many have ended (an epoch). The epoch moves before
  // the count drops: read the count first.
  int hiding() const { return hiding_.load(std::memory_order_acquire); }
  std::uint64_t hidings_ended() const { return ended_.load(std::memory_order_acquire); }

  void lock() { pthread_mutex_lock(&mu_); }
  void unlock() { pthread_mutex_unlock(&mu_); }
  // In a forked child (its one thread's own give-backs under way kept).
  void reset_after_fork();

  // A run a give-back holds out of the free lists (held_).
  struct Held {
    std::uint32_t s, n;
  };

 private:
  static constexpr std::uint32_t kLenMask = 0x3fffffff;
  static constexpr std::uint32_t kFree = 0x40000000;
  static constexpr std::uint32_t kUsed = 0x80000000;
  static constexpr int kBins = 32;

  static int bin_of(std::uint32_t n) { return 31 - __builtin_clz(n); }
  // bit 63: live; bits 44-55: tag; bits 32-43: user offset in the granule / 16; 0-31: start
  static constexpr std::uint64_t kOffMask = 0xfff;
  static constexpr std::uint64_t kTagMask = 0xfff;
  static std::uint64_t encode_live(const void* user, std::uint32_t start, std::uint32_t tag) {
    auto off = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(user) & (kGranule - 1)) >> 4;
    return (std::uint64_t{1} << 63) | ((tag & kTagMask) << 44) | (off << 32) | start;
  }
  friend struct ArenaTestAccess;  // tests/unit: corrupt a tag on purpose
  const char* check_locked() const;
  std::uint32_t free_locked() const;  // granules in the free lists, under mu_
  void set_tags(std::uint32_t s, std::uint32_t n, std::uint32_t state) {
    tag_[s] = n | state;
    tag_[s + n - 1] = n | state;
  }
  // Make the table entries of granules [0, g) read-write (under the lock).
  bool open_to(std::uint32_t g);
  void insert_free(std::uint32_t s, std::uint32_t n);
  void remove_free(std::uint32_t s);
  void release_locked(std::uint32_t start, std::uint32_t n);

  std::uintptr_t base_ = 0;
  std::size_t size_ = 0;
  std::uint32_t granules_ = 0;
  std::atomic<std::uint64_t>* live_ = nullptr;
  std::uint32_t* tag_ = nullptr;
  std::uint32_t* next_ = nullptr;
  std::uint32_t* prev_ = nullptr;
  std::uint32_t head_[kBins] = {};
  // The tables are reserved PROT_NONE and opened from the front as the
  // range is carved (kOpenStep granules at a time), with the last page of
  // tag_ (the tail's end tag) open from the start: granules [0, open_) can be
  // read and written. Every extent but the range's free tail lies below the
  // tail's first granule, and that granule is below open_ (alloc and grow
  // open past what they carve), so only lookups of arbitrary pointers need
  // to check. Whole, the tables are 20 bytes per granule: 320 MiB for the
  // default 1 TiB range, which mlockall(MCL_CURRENT) used to populate and
  // lock, and vm.overcommit_memory=2 to charge (docs/reliability.md no. 19).
  std::atomic<std::uint32_t> open_{0};
  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
  std::atomic<int> giving_back_{0};  // give_backs under way
  // Held-out extents (hold_out()): start << 32 | n, 0 for a free slot;
  // held_out_n_ counts the slots in use (written after a slot is filled,
  // before it is emptied).
  std::atomic<std::uint64_t> held_out_[kHeldOut]{};
  std::atomic<int> held_out_n_{0};
  std::atomic<int> lost_n_{0};  // kept out for good
  bool in_held_out(std::uintptr_t g) const {
    for (const auto& slot : held_out_) {
      const std::uint64_t v = slot.load(std::memory_order_acquire);
      if (g - (v >> 32) < (v & 0xffffffffu)) return true;
    }
    return false;
  }
  std::atomic<int> hiding_{0};        // give_backs and protect_free under way (settle)
  std::atomic<std::uint64_t> ended_{0};  // and ended (settle's epoch)
  // The runs give_backs hold out of the free lists (under mu_); past
  // kHeldSlots (or while protect_free runs) counted, not listed.
  static constexpr int kHeldSlots = 32;
  Held held_[kHeldSlots] = {};
  int held_count_ = 0;
  int held_unlisted_ = 0;
  void hold(std::uint32_t s, std::uint32_t n);
  void joined_run(int i, std::uint32_t* s, std::uint32_t* e) const;  // under mu_
  // The first granule at or after s where granule + skew_g is aligned to
  // align_g granules (the absolute address: the range is only 2 MiB-aligned).
  std::uint64_t place(std::uint32_t s, std::uint32_t align_g, std::uint32_t skew_g) const;
  void unhold(std::uint32_t s, std::uint32_t n);
  void end_hiding();
};

// An extent of the range: granules [start, start+n). The one place the
// large path turns granules into bytes and addresses.
struct Extent {
  std::uint32_t start = Arena::kNone;
  std::uint32_t n = 0;

  static constexpr std::size_t bytes_of(std::uint32_t granules) {
    return std::size_t{granules} << Arena::kGranuleShift;
  }
  // `bytes` a multiple of the granule, below 2^(32+16).
  static constexpr std::uint32_t granules_of(std::size_t bytes) {
    return static_cast<std::uint32_t>(bytes >> Arena::kGranuleShift);
  }
  // The used extent that starts at granule s.
  static Extent used_at(const Arena& a, std::uint32_t s) { return {s, a.used_length(s)}; }

  bool found() const { return start != Arena::kNone; }
  std::uint32_t end() const { return start + n; }
  std::size_t bytes() const { return bytes_of(n); }
  char* base(const Arena& a) const { return a.addr(start); }
  // How far p (the user pointer) lies into the extent, and the bytes from
  // it to the extent's end (its usable size).
  std::size_t offset_of(const Arena& a, const void* p) const {
    return static_cast<std::size_t>(static_cast<const char*>(p) - base(a));
  }
  std::size_t usable_from(const Arena& a, const void* p) const { return bytes() - offset_of(a, p); }
};

}  // namespace lowtide

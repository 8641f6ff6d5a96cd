#include "large_path.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "invariants.hpp"
#include "large_cache.hpp"
#include "log.hpp"
#include "mem_limit.hpp"
#include "platform.hpp"
#include "sites.hpp"
#include "size_math.hpp"
#include "state.hpp"
#include "stats.hpp"

namespace lowtide::large {

namespace {

constexpr std::size_t G = Arena::kGranule;

// The most one realloc faults in ahead of the writes (populate_tail): 8 ms
// at this VM's 0.5 us a page for the call, and the most a block that stops
// growing can hold unwritten because of it (reached from blocks of 256 MiB
// on: an eighth of the old size bounds it before).
constexpr std::size_t kPopulateMax = std::size_t{32} << 20;

// Offset of the user pointer from the start of its extent: room for the
// header, and the alignment asked for.
std::size_t user_offset(std::size_t align) {
  if (align <= sizeof(BlockHeader)) return sizeof(BlockHeader);
  return align <= G ? align : G;
}

constexpr std::size_t kHuge = std::size_t{2} << 20;
constexpr std::uint32_t kHugeGranules = static_cast<std::uint32_t>(kHuge / G);

// Blocks of 2 MiB and more start on a 2 MiB boundary, so that any huge page
// the kernel is willing to give (THP in `always` mode, a program's own
// MADV_HUGEPAGE as numpy makes on its arrays, khugepaged) covers their
// interior; alignment costs no memory.
bool wants_huge(std::size_t bytes) { return large::space.hugepages && bytes >= kHuge; }

// lowtide itself asks for huge pages (MADV_HUGEPAGE) only with
// LOWTIDE_HUGEPAGES=advise. Advised, a block touched in one byte of a 2 MiB
// region gets the whole 2 MiB resident (and khugepaged, with its default
// max_ptes_none of 511, may fill advised regions touched in one page later):
// 73 blocks of 8 MiB with one byte written each cost 146 MiB, glibc 0.5 MiB.
// What advice buys is speed on memory written in full: first touch 6x faster
// on these VMs (a 4 KiB fault costs 3-30 us here, ~0.25-1 us on bare metal,
// where the estimate is 2-4x) and rewriting warm blocks 1.6x (nested paging
// makes TLB misses dear on a VM; a few per cent on bare metal). Bloat that
// can reach 512x is the worse risk, and numpy advises its own arrays, so by
// default no advice. MADV_COLLAPSE of blocks found dense at free was
// measured too: it copies the pages, 18-116 ms per 64 MiB here, more than
// the faults it would save. Figures: docs/benchmarks.md.
bool wants_advice(std::size_t bytes) { return large::space.advise_huge && wants_huge(bytes); }

[[noreturn]] void invalid(const char* what, const void* p) { log::fatal_pointer(what, p); }

// What a refused commit means to the caller: out of memory, or a mapping
// the kernel will not make now (the caller may fall back).
Result refusal(pal::Commit c) { return c == pal::Commit::over_limit ? Result::no_memory : Result::no_mapping; }

}  // namespace

// Could the range, were it empty, hold an extent of `bytes` whose user
// pointer, `off` into it, is aligned to `align`? The first such pointer is
// the first aligned address at least `off` past the range's start.
bool can_place(const Arena& a, std::size_t bytes, std::size_t off, std::size_t align) {
  const auto start = reinterpret_cast<std::uintptr_t>(a.addr(0));
  std::uintptr_t lowest;
  if (__builtin_add_overflow(start, off + align - 1, &lowest)) return false;
  const std::uintptr_t user = lowest & ~(std::uintptr_t{align} - 1);
  return user - off - start <= a.size() - bytes;
}

struct LargePath::Plan {
  std::size_t size;   // asked for
  std::size_t off;    // of the user pointer in the extent
  std::size_t bytes;  // of the extent
  std::uint32_t need, align_g, skew;  // granules; the extent's alignment
};

// The extent a request needs, or why it cannot have one. Nothing touched.
Result LargePath::plan(std::size_t size, std::size_t align, Plan* pl) const {
  if (!a_.ready()) return Result::no_room;
  const std::size_t off = user_offset(align);
  if (size > a_.size() - off) return Result::no_room;
  // At least one byte past the user pointer, so even a zero-size block's
  // pointer lies inside its own extent (its live-table slot is its own).
  const std::size_t bytes = round_up(off + (size == 0 ? 1 : size), G);
  // An alignment no place in the range meets is refused before the cache
  // is touched: no cache purge, no warning that the range is full. This
  // also keeps align / G below 2^32 (the range is at most 2^30 granules)
  // for the 32-bit alignment below.
  if (!can_place(a_, bytes, off, align)) return Result::no_alignment;
  // Refuse what the kernel would before the cache is emptied for it.
  if (ops_.overcommit_refuses(bytes)) return Result::no_memory;
  // Alignments above a granule: the user pointer sits one granule in, and
  // the extent starts one granule before an aligned address.
  auto align_g = static_cast<std::uint32_t>(align > G ? align / G : 1);
  std::uint32_t skew = align > G ? 1 : 0;
  if (skew == 0 && wants_huge(bytes) && align_g < kHugeGranules) align_g = kHugeGranules;
  *pl = Plan{size, off, bytes, Extent::granules_of(bytes), align_g, skew};
  return Result::ok;
}

// A cached block of about this size: its pages are already there. For a
// block grown by realloc the whole warm block is kept (the reallocs that
// follow grow into it): pl->bytes becomes its length.
Extent LargePath::take_cached(Plan* pl, bool for_growth) {
  std::uint32_t got = 0;
  std::uint32_t s = cache_.take(pl->need, pl->align_g, pl->skew, for_growth, &got,
                                for_growth ? grown_g_.load(std::memory_order_relaxed) : 0);
  if (s == Arena::kNone) return Extent{};
  if (for_growth) pl->bytes = Extent::bytes_of(got);
  return Extent{s, Extent::granules_of(pl->bytes)};
}

// A cached extent this large or more is worth moving into a miss's block
// (one mremap, and a PROT_NONE remap of the emptied range, against a fault
// per touched 4 KiB page of it).
constexpr std::uint32_t kWarmLeast = static_cast<std::uint32_t>((std::size_t{1} << 20) / G);

// A miss that the cache can still half serve: no cached extent fits, but a
// smaller one's warm pages become the block's front and only the rest is
// faulted in. Before, such a miss gave the cached block back (its pages
// freed by the kernel) and faulted the whole new one: many blocks of
// varying sizes (5-25 MiB, 200 live) missed half the time, and each miss
// paid for every page. The cached extent is grown in place when the
// granules behind it are free and its start is aligned as the request
// needs; otherwise its pages move (mremap, no copy) into the front of a
// new extent. *stale: the bytes at the front that hold old data.
LargePath::Warm LargePath::commit_warm(Plan* pl, Extent* out, std::size_t* stale) {
  std::uint32_t have = 0;
  std::uint64_t freed_ns = 0;
  const std::uint32_t c = cache_.largest_below(pl->need, kWarmLeast, &have, &freed_ns);
  if (c == Arena::kNone) return Warm::none;
  const Extent warm{c, have};
  // Its resident pages are what a move saves faulting, and they come along
  // whether or not the new block writes them again: worth it only when most
  // of it is resident (a block that was written in full). A block written
  // here and there (one byte per 256 KiB in bench/many_large) would bring
  // its pages to offsets the new block may never write: peak RSS there rose
  // from 55 to 75 MiB without this test. Its first MiB is the sample: a
  // mincore over the whole block (15 MiB on average there) made every miss
  // of that shape 12 % slower, and where a block is written from its front
  // only, what is not resident moves for free. (ops_.resident,
  // pal::resident_bytes, outside the cache's lock: the extent may be taken
  // meanwhile, and then take_at fails.)
  const std::size_t sample = Extent::bytes_of(kWarmLeast);
  if (ops_.resident(warm.base(a_), sample) * 2 < sample) return Warm::none;
  // Taken, not yet as a reuse: if nothing comes of it, it goes back with its
  // age and the cache's reuse figures untouched (else a failing attempt
  // would keep the block young and cached for as long as misses came).
  // (The owner it was kept for, as take_at found it: it stays so if it goes back.)
  std::uint32_t owner = 0;
  if (!cache_.take_at(warm.start, warm.n, false, &owner)) return Warm::none;
  const std::size_t fresh = Extent::bytes_of(pl->need - have);
  // Only what is faulted counts against the cache's slack.
  cache_.evict_for(fresh, pl->bytes);
  // In place: the granules behind it free, its start aligned as asked (and
  // not where lowtide advises huge pages: a grown block would be two
  // mappings, the front without the advice).
  const auto start_addr = reinterpret_cast<std::uintptr_t>(warm.base(a_)) + pl->skew * G;
  bool done = false;
  if (start_addr % (std::uintptr_t{pl->align_g} * G) == 0 && !wants_advice(pl->bytes) &&
      a_.grow(warm.start, have, pl->need)) {
    if (ops_.commit(warm.base(a_) + warm.bytes(), fresh) == pal::Commit::ok) {
      *out = Extent{warm.start, pl->need};
      done = true;
    } else if (ops_.recover(warm.base(a_) + warm.bytes(), fresh)) {
      a_.shrink(warm.start, pl->need, have);
    } else {
      a_.split(warm.start, pl->need, have);
      lose_refused(Extent{warm.start + have, pl->need - have});
    }
  } else if (moves_refused_.load(std::memory_order_relaxed)) {
    // Moving is off in this process (below): nothing more to try.
  } else if (std::uint32_t s = a_.alloc(pl->need, pl->align_g, pl->skew); s != Arena::kNone) {
    // Moved: the tail committed first, so that once the pages have moved
    // nothing can fail.
    const Extent to{s, pl->need};
    char* base = to.base(a_);
    bool lost = false;
    if (ops_.commit(base + warm.bytes(), fresh) != pal::Commit::ok) {
      lost = !ops_.recover(base + warm.bytes(), fresh);
      if (lost) lose_refused(to);
    } else {
      const pal::Moved m = move_into(warm.base(a_), warm.bytes(), to);
      if (m.bytes == warm.bytes()) {
        // MREMAP_DONTUNMAP left the old range mapped and empty: reserve it
        // again, and it is free range.
        ops_.decommit(warm.base(a_), warm.bytes());
        a_.release(warm.start, warm.n);
        if (wants_advice(to.bytes())) ops_.advise_hugepage(base, to.bytes());
        *out = to;
        done = true;
      } else {
        // Kernels before 6.17 refuse to move a range of more than one
        // mapping, and a block made by a move is two (its moved front is
        // never merged with the tail), as is one numpy advised in part:
        // once refused, this process stops moving cached blocks into misses
        // (growing them in place goes on), rather than pay a commit and a
        // refused mremap on each later miss. (Not where nothing was tried:
        // a fork under way, no held-out slot.)
        if (m.refused != 0 || m.bytes != 0) moves_refused_.store(true, std::memory_order_relaxed);
        ops_.decommit(base + warm.bytes(), fresh);
        // A front that did move (the kernel refused a later mapping) is
        // free pages, nobody's data: dropped, and the warm extent goes back
        // with its front empty. A refused call may have unmapped its piece
        // first: reserved again by move_pages, or lost (move_into kept the
        // extent out for good, so it is not released; the rest of its head
        // was never committed).
        lost = m.lost;
        if (m.lost) ops_.decommit(base, m.bytes);
        else if (m.bytes != 0 || m.refused != 0) ops_.decommit(base, m.refused != 0 ? warm.bytes() : m.bytes);
      }
    }
    if (!done && !lost) a_.release(to.start, to.n);
  }
  if (done) {
    large::space.mapped.fetch_add(fresh, std::memory_order_relaxed);
    cache_.note_taken(freed_ns);
    cache_.end_trial(warm.n);
    *stale = warm.bytes();
    return Warm::done;
  }
  // Not done (no room behind it or elsewhere, a commit refused, or mremap
  // refused): the warm extent goes back to the cache with its age, or to the
  // OS if the cache will not keep it (as the cache gives back what it has
  // no room for).
  if (!cache_.put(warm.start, warm.n, freed_ns != 0 ? freed_ns : 1, owner))
    return_to_os(warm, stats::slot(), stats::large_released_room);
  cache_.end_trial(warm.n);
  return Warm::tried;
}

// A committed extent nobody keeps: its pages dropped, its granules free,
// counted as returned for `why`.
void LargePath::return_to_os(Extent e, stats::Slot* st, unsigned why) {
  a_.give_back(e.start, e.n, ops_.decommit, ops_.drop_writable);
  large::space.mapped.fetch_sub(e.bytes(), std::memory_order_relaxed);
  stats::add(st, static_cast<stats::Counter>(why), e.bytes());
}

// Free granules of the range for a miss (Arena::alloc's arguments). The
// range may only be full of cached blocks: those are given back and the
// alloc tried again. Or of cached blocks another thread is giving back
// right now (a decay pass), or the free neighbours any give-back holds while
// it re-maps, or a cached block on trial in another miss (commit_warm):
// settle waits for them, briefly, and it is tried again as each ends (a
// spurious ENOMEM or mimalloc fallback otherwise). Where it finds none,
// *why says which refusal it was, as the last attempt saw it: no_mapping
// where room was found but the kernel refused to open its table entries
// (Arena::alloc's `refused`: RLIMIT_DATA reached), no_room where the range
// had none. Up to 2026-12-07 both were no_room, and a process at its
// RLIMIT_DATA was told the 1 TiB range was full.
std::uint32_t LargePath::alloc_room(std::uint32_t need, std::uint32_t align_g, std::uint32_t skew,
                                    std::uint32_t* gap, Result* why) {
  cache::ReuseCache::Settle settle = cache_.settle_start();
  bool refused = false;
  std::uint32_t s = a_.alloc(need, align_g, skew, gap, &refused);
  if (s == Arena::kNone && cache_.purge(true) != 0) s = a_.alloc(need, align_g, skew, gap, &refused);
  while (s == Arena::kNone && cache_.settle(need, align_g, skew, &settle)) {
    cache_.purge(true);  // a block back from trial is cached, not free
    s = a_.alloc(need, align_g, skew, gap, &refused);
  }
  *why = refused ? Result::no_mapping : Result::no_room;
  return s;
}

// A miss: a fresh extent of the range, committed (its front possibly a
// smaller cached block's pages: commit_warm).
Result LargePath::commit_fresh(Plan* pl, Extent* out, std::size_t* stale) {
  *stale = 0;
  const Warm w = commit_warm(pl, out, stale);
  if (w == Warm::done) return Result::ok;
  // What the cache holds does not fit this request. Shrink it by what is
  // about to be faulted in, so reuse never adds to the peak (the miss
  // already matched against blocks given back early if commit_warm tried).
  cache_.evict_for(pl->bytes, w == Warm::tried ? 0 : pl->bytes);
  std::uint32_t gap = 0;
  std::uint32_t* want_gap = ops_.drop_writable != nullptr ? &gap : nullptr;
  Result why = Result::no_room;
  std::uint32_t s = alloc_room(pl->need, pl->align_g, pl->skew, want_gap, &why);
  if (s == Arena::kNone) return why;
  const Extent e{s, pl->need};
  const pal::Commit c = ops_.commit(e.base(a_), e.bytes());
  // A refused commit may have left part of the extent mapped: released
  // first, it is re-mapped with the gap's run below (or joins the tail).
  // Not where it left a hole someone else's mapping took (lose_refused).
  if (c != pal::Commit::ok) {
    if (ops_.recover(e.base(a_), e.bytes())) a_.release(e.start, e.n);
    else lose_refused(e);
  }
  // The alignment gap in front, re-mapped as free read-write space next to
  // the block (Arena::alloc): no pages, no mapping of its own.
  if (gap != 0) a_.give_back(s - gap, gap, ops_.decommit, ops_.drop_writable);
  if (c != pal::Commit::ok) return refusal(c);
  if (wants_advice(e.bytes())) ops_.advise_hugepage(e.base(a_), e.bytes());
  large::space.mapped.fetch_add(e.bytes(), std::memory_order_relaxed);
  *out = e;
  return Result::ok;
}

Result LargePath::allocate(std::size_t size, std::size_t align, Origin origin, std::uint8_t flags, void** out,
                           std::size_t asked) {
  Plan pl;
  if (Result r = plan(size, align, &pl); r != Result::ok) return r;
  // Before any lock is taken: a capture unwinds and looks up modules.
  const sites::Sample site = sites::on_allocate(size);
  cache_.purge(false);
  if (on_allocation_ != nullptr) on_allocation_();
  stats::Slot* st = stats::slot();

  Extent e = take_cached(&pl, origin == Origin::realloc);
  // Reused pages hold old data: calloc's must read as zero, over all of
  // the block's usable bytes (malloc_usable_size's), not only the `size`
  // asked for: glibc's calloc and mimalloc's (the small path) zero the
  // whole usable block, and a fresh extent reads as zero to its end. Up to
  // 2026-12-07 the usable tail past `size` (up to a granule, 64 KiB) of a
  // block taken from the cache kept a freed block's bytes.
  const std::size_t usable = pl.bytes - pl.off;
  // Only the pages that hold something are written (pal::zero_held): a
  // sparse block's untouched or dropped pages read as zero already, and a
  // memset of them faulted every one in (a calloc of 2 MiB taken from the
  // cache by a program that had touched a few pages of it cost 512 faults
  // and 2 MiB of memory: reliability.md no. 99).
  auto zero = [this](char* p, std::size_t n) {
    if (ops_.zero != nullptr) ops_.zero(p, n);
    else std::memset(p, 0, n);
  };
  if (e.found()) {
    if (origin == Origin::calloc) zero(e.base(a_) + pl.off, usable);
    stats::add(st, stats::large_reused, 1);
  } else {
    std::size_t stale = 0;
    Result r = commit_fresh(&pl, &e, &stale);
    // Refused by the kernel (RLIMIT_DATA, an mlock limit, the map count):
    // what is held and unused given up, and the commit tried once more.
    if (r == Result::no_mapping && give_up_held(pl.bytes)) r = commit_fresh(&pl, &e, &stale);
    if (r != Result::ok) return r;
    if (stale != 0) {
      // The front is a cached block's pages; the fresh rest reads as zero.
      if (origin == Origin::calloc && stale > pl.off)
        zero(e.base(a_) + pl.off, (stale < pl.bytes ? stale : pl.bytes) - pl.off);
      stats::add(st, stats::large_warm_misses, 1);
    }
  }
  stats::add(st, stats::large_maps, 1);
  void* user = e.base(a_) + pl.off;
  encode_header(header_of(user), user, reinterpret_cast<std::uint64_t>(e.base(a_)), pl.bytes, size, align,
                origin, flags, current_tid(), site.site, site.weight);
  a_.publish(user, e.start, site.site);
  large::space.blocks.fetch_add(1, std::memory_order_relaxed);
  stats::add(st, stats::large_requested, asked == kAskedIsSize ? size : asked);
  stats::add(st, stats::large_out, usable);
  stats::large_live_add(usable);
  sites::allocated(header_of(user), site, usable);
  *out = user;
  return Result::ok;
}

void LargePath::release(void* p, const char* what) {
  std::uint32_t s = a_.claim(p);
  if (s == Arena::kNone) invalid(what, p);
  const Extent e = Extent::used_at(a_, s);
  const std::size_t usable = e.usable_from(a_, p);
  large::space.blocks.fetch_sub(1, std::memory_order_relaxed);
  stats::Slot* st = stats::slot();
  stats::add(st, stats::large_unmaps, 1);
  stats::add(st, stats::large_freed, usable);
  stats::large_live_sub(usable);
  if (header_of(p)->origin == Origin::realloc) note_grown(e.n);
  sites::released(header_of(p), p, usable);
  // A block the program took write permission from (mprotect, a key) is
  // made read-write before the cache keeps it, or given back (platform.hpp,
  // writable_again).
  const bool writable = ops_.writable_again == nullptr || ops_.writable_again(e.base(a_), e.bytes());
  if (writable && cache_.put(e.start, e.n)) stats::add(st, stats::large_cached_frees, 1);
  else return_to_os(e, st, stats::large_released_free);
  cache_.purge(false);
}

// The cache's blocks are committed memory that counts against the kernel's
// limits (RLIMIT_DATA, an mlock limit, overcommit mode 2's charge), where
// glibc would have unmapped them at free: given back. Under a finite
// RLIMIT_DATA the read-write free space give-backs leave between live
// blocks (Arena::give_back, pal::drop_writable: one mapping, no split)
// counts as data too: made PROT_NONE (Arena::protect_free), as glibc's
// unmapped chunks are not counted. Only after a refusal: elsewhere free
// space stays read-write, and the map count low (tests/memory/map_count).
// And only where the limit can have been the cause (VmData + want past
// it): protect_free walks every extent of the range, and at
// vm.max_map_count, where every commit may be refused, a walk per refusal
// made stress/map_pressure under `prlimit --data=64GiB` run for minutes
// instead of 3 s. Whether anything was given up.
bool LargePath::give_up_held(std::size_t want) {
  bool any = cache_.purge(true) != 0;
  if (ops_.data_limit_near != nullptr && ops_.data_limit_near(want)) {
    a_.protect_free(ops_.decommit);
    any = true;
  }
  return any;
}

void LargePath::note_grown(std::uint32_t n) {
  const std::uint32_t g = grown_g_.load(std::memory_order_relaxed);
  grown_g_.store(n >= g ? n : g - (g - n + 7) / 8, std::memory_order_relaxed);
}

// The extent of the live block at p; aborts on an invalid pointer.
Extent LargePath::live_extent(const void* p, const char* what) const {
  std::uint32_t s = a_.lookup(p);
  if (s == Arena::kNone) invalid(what, p);
  return Extent::used_at(a_, s);
}

std::size_t LargePath::usable(const void* p, const char* what) const {
  return live_extent(p, what).usable_from(a_, p);
}

// ---- resize ----

struct LargePath::Change {
  void* p;
  BlockHeader* h;       // the block's header (the new one once moved)
  Extent old;           // the block's extent before
  std::size_t off;      // of the user pointer in the extent (kept by a move)
  std::size_t size;     // asked for
  std::size_t bytes;    // of the extent after
  std::uint32_t need;   // granules after
  std::size_t old_usable, new_usable;
  stats::Slot* st;
  sites::Sample grow;   // the growth's call-site sample (sites::on_grow)
  bool grown_before;    // grown by an earlier realloc, or from the small path (kGrown, kFromSmall)
};

// Every successful resize hands out new_usable in place of old_usable.
void LargePath::account(const Change& c, unsigned how_) {
  const auto how = static_cast<stats::Counter>(how_);
  // A block that gets its site in place needs the arena's tag for it (a
  // moved one is published with it after this).
  if (sites::resized(c.h, c.old_usable, c.new_usable, how == stats::large_remaps || how == stats::large_copies,
                     c.grow) &&
      c.h == header_of(c.p))
    a_.publish(c.p, c.old.start, c.h->site);
  stats::add(c.st, how, 1);
  stats::add(c.st, stats::large_requested, c.size);
  stats::add(c.st, stats::large_freed, c.old_usable);
  stats::add(c.st, stats::large_out, c.new_usable);
  // The old size off first: the other order made the peak count a resized
  // block twice (old + new) for an instant.
  stats::large_live_sub(c.old_usable);
  stats::large_live_add(c.new_usable);
}

Result LargePath::resize(void* p, std::size_t size, void** out) {
  const Extent e = live_extent(p, "realloc()");
  const std::size_t off = e.offset_of(a_, p);
  if (size > a_.size() - off) return Result::no_room;
  const std::size_t bytes = round_up(off + size, G);
  // Before any lock is taken: a capture unwinds and looks up modules.
  const sites::Sample grow = sites::on_grow(header_of(p), p, e.usable_from(a_, p), size);
  Change c{p,     header_of(p), e, off, size, bytes, Extent::granules_of(bytes), e.usable_from(a_, p),
           bytes - off, stats::slot(), grow, (header_of(p)->flags & (kGrown | kFromSmall)) != 0};
  if (c.need <= e.n) return shrink_in_place(c, out);
  // Growing by more than the kernel would grant: refused before the cache
  // is emptied for it (mremap checks only the growth too).
  if (ops_.overcommit_refuses(Extent::bytes_of(c.need - e.n))) return Result::no_memory;
  Result r = Result::ok;
  if (grow_into_cache(c)) *out = p;
  else r = grow_onto_fresh(c, out);
  // Refused by the kernel (RLIMIT_DATA, an mlock limit, the map count):
  // what is held and unused given up (the reuse cache's blocks count as
  // data) and the growth tried once more, as allocate does (no. 102). A
  // buffer grown by an eighth at a time under a data limit glibc stays
  // within got NULL while the cache held the rounds before it
  // (reliability.md no. 127). A refused move left the block as it was.
  if (r == Result::no_mapping && give_up_held(Extent::bytes_of(c.need - c.old.n))) r = grow_onto_fresh(c, out);
  if (r == Result::ok) header_of(*out)->flags |= kGrown;
  return r;
}

// Growth in place, else a move (grow_into_cache found no cached block
// behind the block).
Result LargePath::grow_onto_fresh(Change& c, void** out) {
  if (!grow_in_place(c)) return move_block(c, out);
  *out = c.p;
  populate_tail(c, c.old.base(a_) + c.old.bytes(), static_cast<char*>(c.p) + c.size);
  return Result::ok;
}

// A block that grows by realloc is being written from its old end on: a
// buffer built by appends (CPython's bytearray, list and io.BytesIO, numpy's
// resize, Arrow's builders over the system allocator). Its new pages, fresh
// from the kernel, would fault one trap at a time as the writes reach them;
// the first LOWTIDE_POPULATE percent of them (50 by default) are faulted in
// here by one system call (pal::populate), outside every lock. Not all of
// them: the program may never write the room a growth step over-allocates
// (CPython's 12.5 %, a doubling's half), which would then be resident for
// nothing until the block is freed. With writes landing anywhere in the new
// room equally likely, populating a fraction f of it costs on average
// f^2/2 of the last step's room, so half the room keeps three quarters of
// that cost away while taking half the faults off the writes. And at most
// an eighth of the block's old size: a step of CPython's 12.5 % is
// populated by half, a doubling's (pandas' and Arrow's growing vectors, a
// Rust Vec) by an eighth of its room, where the half cost pandas_etl 6 MiB
// at its peak (265 -> 271) for no time it could measure. Not for
// malloc or calloc, whose blocks may be written sparsely (a sparse table),
// nor for a malloc'd block's first growth (a one-off resize: a block grown
// before, or from the small path, is a buffer being built), nor for growth
// into warm cached pages, nor where the memory limit's room is short: what
// the program does not write must not count against it.
// Bounded by kPopulateMax per call, so a huge growth step neither holds the
// caller nor makes much it may not use.
void LargePath::populate_tail(const Change& c, char* from, const char* end) {
  const unsigned pct = large::space.populate_pct;
  if (pct == 0 || !c.grown_before || ops_.populate == nullptr || end <= from) return;
  // (end - from is below the range, 64 TiB at most: no overflow.)
  std::size_t len = static_cast<std::size_t>(end - from) * pct / 100;
  len = std::min({len, c.old.bytes() / 8, kPopulateMax}) & ~(pal::kPageSize - 1);
  if (len == 0 || limit::cache_room(0) < len) return;
  // Counted only where the kernel did it: refused (a kernel before 5.14,
  // where every call is refused, or a seccomp filter), or stopped part-way
  // (out of memory, a fatal signal pending), the report's large.populated
  // showed the bytes asked for as faulted in (reliability.md no. 126). A
  // call stopped part-way did some of it, which it does not say: none is
  // counted.
  if (ops_.populate(from, len)) stats::add(c.st, stats::large_populated, len);
}

Result LargePath::shrink_in_place(Change& c, void** out) {
  // Shrink only when the caller shrinks: a block growing inside spare room
  // (a reused cached block) keeps it for the next growth step.
  if (c.need < c.old.n && c.size < c.h->requested) {
    const Extent tail{c.old.start + c.need, c.old.n - c.need};
    a_.split(c.old.start, c.old.n, c.need);
    a_.give_back(tail.start, tail.n, ops_.decommit, ops_.drop_writable);
    large::space.mapped.fetch_sub(tail.bytes(), std::memory_order_relaxed);
    stats::add(c.st, stats::large_released_free, tail.bytes());
    c.h->length = c.bytes;
  } else {
    c.new_usable = c.old_usable;  // the extent stays as it is
  }
  c.h->requested = c.size;
  account(c, stats::large_in_place);
  *out = c.p;
  return Result::ok;
}

// Grow in place into the warm cached extent right behind the block (a
// block cut from a cached one has its rest there): no syscall, no fault.
bool LargePath::grow_into_cache(Change& c) {
  if (!cache_.take_at(c.old.end(), c.need - c.old.n)) return false;
  a_.join(c.old.start, c.old.n, c.need);
  c.h->flags &= static_cast<std::uint8_t>(~kMovedWhole);  // the cached extent is a mapping of its own
  if (wants_advice(c.bytes)) ops_.advise_hugepage(c.old.base(a_), c.bytes);
  c.h->length = c.bytes;
  c.h->requested = c.size;
  account(c, stats::large_in_place);
  // A block growing, not one handed out: large_reused counts allocations.
  stats::add(c.st, stats::large_grown_into_cache, 1);
  return true;
}

// The moves that leave a hole in the range for a moment (pal::move_grow,
// pal::grow_mapping): only where the kernel will not refuse them for a
// reason lowtide can see (grows_by: what the call adds to the pages a
// finite RLIMIT_DATA counts, pal::mremap_growth_ok), and while fewer than
// Arena::kLostMax extents have been lost. Each hole's extent is held out
// of Arena::contains from before it opens until it is mapped again
// (Arena::hold_out).
bool LargePath::may_make_holes(std::size_t grows_by) const {
  return ops_.move_grow != nullptr && a_.may_hold_out() && ops_.mremap_growth_ok(grows_by);
}

// A hole window opens only while no fork is being prepared; fork waits for
// the open ones (fork_wait_holes; pal::ForkGate).
bool LargePath::open_hole() { return large::space.holes.open(); }
void LargePath::close_hole() { large::space.holes.close(); }

// The extent of a hole someone else's mapping took: a used extent for good,
// held out of contains() (it was from before the hole opened).
void LargePath::lose(int slot, Extent e) {
  a_.keep_out(slot);
  large::space.lost.fetch_add(e.bytes(), std::memory_order_relaxed);
}

// An extent a refused commit left in part a hole that someone else's
// mapping took before it could be reserved again (ops_.recover): a kernel
// before 6.12 unmaps a MAP_FIXED mmap's range before some of its checks
// (pal::commit avoids the one that matters, overcommit mode 2's charge;
// what is left is the kernel out of memory). Kept out for good like a
// lost hole, never released: the next commit there would map over that
// mapping. Held out only from now (no slot left: it stays in contains());
// a commit is no hole window, since it leaves a hole only where the
// kernel itself fails.
void LargePath::lose_refused(Extent e) { lose(a_.hold_out(e.start, e.n), e); }

// The one way a call that may leave a hole in a used extent is made
// (move_into's pal::move_pages, move_block's pal::move_grow,
// grow_in_place's pal::grow_mapping): each of the
// n extents `held` the call may leave a hole in (the kernel unmaps a
// move's destination before its last checks; move_grow leaves its source
// unmapped) is held out of contains() from before the window opens, since
// another thread's mmap may take a hole and a pointer in it is theirs;
// `call(ours)` runs inside a hole window (fork waits for it), makes the
// move and maps back what it can, and sets ours[i] false for an extent it
// cannot tell ours again (ours[i] is true until then). Once the window is
// closed each extent is put back into contains(), or, where not ours, kept
// out for good (lose): the caller must then neither map over it nor
// release it. False, with nothing called and nothing held, where no window
// can be had: kLostMax extents lost already, every held-out slot taken, a
// fork under way.
template <typename Call>
bool LargePath::in_hole_window(const Extent* held, bool* ours, int n, const Call& call) {
  int slot[2] = {-1, -1};
  if (n < 1 || n > 2 || !a_.may_hold_out()) return false;
  int got = 0;
  while (got < n && (slot[got] = a_.hold_out(held[got].start, held[got].n)) >= 0) ++got;
  if (got < n || !open_hole()) {
    for (int i = 0; i < got; ++i) a_.put_back(slot[i]);
    return false;
  }
  for (int i = 0; i < n; ++i) ours[i] = true;
  call(ours);
  close_hole();
  for (int i = 0; i < n; ++i) {
    if (ours[i]) a_.put_back(slot[i]);
    else lose(slot[i], held[i]);
  }
  return true;
}

// move_pages into the front of `to` in a hole window (in_hole_window),
// `to` held out of contains() for the call. Where the refused piece
// cannot be told ours again (Moved.lost), `to` is kept out for good
// (lose) and the caller must neither map over it nor release it. Nothing
// is moved (a copy instead) where no window can be opened.
pal::Moved LargePath::move_into(char* src, std::size_t len, Extent to) {
  pal::Moved m;
  bool ours = true;
  in_hole_window(&to, &ours, 1, [&](bool* mine) {
    m = ops_.move_pages(src, len, to.base(a_));
    mine[0] = !m.lost;
  });
  return m;
}

// A move into `to` that the kernel refused part-way, where the refused
// piece may now be someone else's mapping (move_into lost `to`): the block
// stays where it was and the realloc fails as out of memory (the refusal
// was the kernel's: out of memory, or KSM interrupted). The moved front
// goes back into the old extent, still mapped and empty there
// (MREMAP_DONTUNMAP); what lowtide committed of `to` outside the piece is
// dropped, and `to` is never released (it may hold that mapping).
Result LargePath::undo_lost_move(Change& c, Extent to, bool warm, const pal::Moved& m) {
  char* nbase = to.base(a_);
  const std::size_t old_bytes = c.old.bytes();
  if (m.bytes != 0) {
    std::memcpy(c.old.base(a_), nbase, m.bytes);
    ops_.decommit(nbase, m.bytes);
  }
  const std::size_t past = m.bytes + m.refused;  // the end of the lost piece
  if (warm) {
    // A cached block, committed whole: its pages behind the piece dropped,
    // and it is no longer mapped lowtide memory.
    if (past < to.bytes()) ops_.decommit(nbase + past, to.bytes() - past);
    large::space.mapped.fetch_sub(to.bytes(), std::memory_order_relaxed);
    stats::add(c.st, stats::large_released_room, to.bytes());
  } else {
    // Its tail was committed for the move; its head between the piece and
    // the tail is still reserved.
    ops_.decommit(nbase + old_bytes, c.bytes - old_bytes);
  }
  return Result::no_memory;
}

// Grow in place by carving the adjacent free extent: no copy, no move.
bool LargePath::grow_in_place(Change& c) {
  if (!a_.grow(c.old.start, c.old.n, c.need)) return false;
  const Extent tail{c.old.end(), c.need - c.old.n};
  // A block moved as one mapping grows as the same mapping: a tail mapped
  // behind its moved pages would be a mapping of its own (the kernel merges
  // anonymous memory only where its page offsets line up).
  bool grown = false;
  if ((c.h->flags & kMovedWhole) != 0 && may_make_holes(c.bytes - c.old.bytes())) {
    // The tail is a hole between grow_mapping's munmap and its mremap:
    // held out, in a window fork waits for (in_hole_window).
    pal::Grow g = pal::Grow::refused;
    bool ours = true;
    const bool tried = in_hole_window(&tail, &ours, 1, [&](bool* mine) {
      g = ops_.grow_mapping(c.old.base(a_), c.old.bytes(), c.bytes);
      mine[0] = g != pal::Grow::lost;
    });
    if (tried && !ours) {
      // Another mapping took part of the tail while it was a hole: the
      // tail stays a used extent for good (lost: never mapped over), and
      // the block moves instead.
      a_.split(c.old.start, c.need, c.old.n);
      c.h->flags &= static_cast<std::uint8_t>(~kMovedWhole);
      return false;
    }
    grown = tried && g == pal::Grow::grown;
  }
  if (!grown) {
    // However it was decided (refused, no hole allowed, a fork under way),
    // the commit makes the tail a mapping of its own.
    c.h->flags &= static_cast<std::uint8_t>(~kMovedWhole);
    if (ops_.commit(tail.base(a_), tail.bytes()) != pal::Commit::ok) {
      // Refused (at vm.max_map_count it may need a split): try a move, which
      // may find a cached block that needs no syscall. A tail the refusal
      // left a hole that someone else's mapping took stays used for good.
      if (ops_.recover(tail.base(a_), tail.bytes())) {
        a_.shrink(c.old.start, c.need, c.old.n);
      } else {
        a_.split(c.old.start, c.need, c.old.n);
        lose_refused(tail);
      }
      return false;
    }
  }
  // The whole block, not only the new tail: a head advised differently
  // (it was under 2 MiB) would be a mapping of its own, which mremap
  // may refuse to move and which gets no huge pages.
  if (wants_advice(c.bytes)) ops_.advise_hugepage(c.old.base(a_), c.bytes);
  large::space.mapped.fetch_add(tail.bytes(), std::memory_order_relaxed);
  c.h->length = c.bytes;
  c.h->requested = c.size;
  account(c, stats::large_in_place);
  return true;
}

// The extent a moving block goes to. A cached block that fits (*warm) is
// cut to the need: the old pages move into its front, and its rest stays
// cached right behind the block, where the next growth steps land in place
// (grow_into_cache). Not taken whole, as it was up to 4x the need until
// 2026-12-04: a buffer that stopped growing kept the unused warm back of
// its block until it was freed, and with a round of buffers built from the
// cache those backs added 19 MiB to seed-4t's 309 MiB peak; left cached,
// a miss evicts them (docs/benchmarks.md "The cache's size").
Result LargePath::find_new_extent(Change& c, Extent* to, bool* warm) {
  const std::uint32_t huge_g = wants_huge(c.bytes) ? kHugeGranules : 1;
  std::uint32_t got = 0;  // c.need: a take not for growth is cut to the need
  std::uint32_t ns = cache_.take(c.need, huge_g, 0, false, &got, grown_g_.load(std::memory_order_relaxed));
  *warm = ns != Arena::kNone;
  if (*warm) {
    stats::add(c.st, stats::large_grown_into_cache, 1);
  } else {
    cache_.evict_for(c.bytes - c.old.bytes());
    Result why = Result::no_room;
    ns = alloc_room(c.need, huge_g, 0, nullptr, &why);
    if (ns == Arena::kNone) return why;
  }
  *to = Extent{ns, c.need};
  return Result::ok;
}

// Move: a new extent, the user pointer at the same offset in it (realloc
// need not keep an alignment above 16, and pages move whole).
Result LargePath::move_block(Change& c, void** out) {
  Extent to;
  bool warm = false;
  if (Result r = find_new_extent(c, &to, &warm); r != Result::ok) return r;
  const std::size_t old_bytes = c.old.bytes();
  char* nbase = to.base(a_);
  char* obase = c.old.base(a_);
  // A block within one mapping moves and grows as one mapping, so that
  // growing buffers do not pile up a mapping per move (issue 14 part 5).
  // Not into a cached block: its warm pages would be dropped for fresh ones.
  // Both extents are held out of contains() while either may be a hole
  // (in_hole_window; where no window can be had, the move below).
  // one_mapping opens /proc/self/maps: inside a window fork waits for, or
  // a child forked meanwhile would inherit the descriptor.
  bool one = false;
  if (!warm && may_make_holes(c.bytes - old_bytes) && open_hole()) {
    one = ops_.one_mapping(obase, old_bytes);
    close_hole();
  }
  if (one) {
    const Extent held[2] = {c.old, to};
    bool ours[2] = {true, true};  // [0] the old extent, [1] the new one
    bool grown = false;
    const bool tried = in_hole_window(held, ours, 2, [&](bool* mine) {
      grown = ops_.move_grow(obase, old_bytes, nbase, c.bytes);
      // Moved: the old extent is the hole. Refused: the new one may be;
      // on a kernel that checks the limits first, a refusal for a limit
      // (a data limit's race with another thread's commit: the growth was
      // foreseen to fit) leaves it mapped, and ours (recover).
      if (grown) mine[0] = ops_.fill_hole(obase, old_bytes);
      else if (ops_.growth_checked_first != nullptr && ops_.growth_checked_first()) mine[1] = ops_.recover(nbase, c.bytes);
      else mine[1] = ops_.fill_hole(nbase, c.bytes);
    });
    if (tried && grown) {
      stats::add(c.st, stats::large_remap_bytes, old_bytes);
      finish_move(c, to, warm, true, out, ours[0]);
      header_of(*out)->flags |= kMovedWhole;
      populate_tail(c, nbase + old_bytes, static_cast<char*>(*out) + c.size);
      return Result::ok;
    }
    // Refused by the kernel, which may have unmapped the new extent first
    // (up to 6.16 at least; 6.18 checks first): it is mapped again. Where
    // that is refused it is either still mapped or someone's mmap took the
    // hole, which cannot be told apart: the extent is lost and another
    // found. The refusals that can be foreseen were (mremap_growth_ok), so
    // this is a kernel out of memory, a lock lowtide did not see, or
    // another thread's commit under a data limit since VmData was read.
    if (tried && !ours[1]) {
      if (Result r = find_new_extent(c, &to, &warm); r != Result::ok) return r;
      nbase = to.base(a_);
    }
  }
  // Commit the tail first, so that once the pages have moved nothing can
  // fail. (Not the head too, so that a move refused part-way would need no
  // commit: mapping it only for the moved pages to replace it made moves
  // 7 % slower, bench of 4 buffers grown by turns, 1,118 moves.)
  if (!warm) {
    if (pal::Commit r = ops_.commit(nbase + old_bytes, c.bytes - old_bytes); r != pal::Commit::ok) {
      if (ops_.recover(nbase + old_bytes, c.bytes - old_bytes)) a_.release(to.start, to.n);
      else lose_refused(to);
      return refusal(r);
    }
  }
  const pal::Moved m = move_into(obase, old_bytes, to);
  if (m.lost) return undo_lost_move(c, to, warm, m);
  const bool moved = m.bytes == old_bytes;
  if (!moved) {
    // A refused call may have unmapped its piece first (a cached block's
    // pages too), reserved again since: the copy commits it again, as for
    // a fresh extent.
    if (Result r = copy_instead(c, to, warm && m.refused == 0, warm, m.bytes); r != Result::ok) return r;
  } else {
    stats::add(c.st, stats::large_remap_bytes, old_bytes);
  }
  finish_move(c, to, warm, moved, out);
  header_of(*out)->flags &= static_cast<std::uint8_t>(~kMovedWhole);  // pieces now, or a copy
  if (!warm) populate_tail(c, nbase + old_bytes, static_cast<char*>(*out) + c.size);
  return Result::ok;
}

// mremap refused (vm.max_map_count, a mapping the kernel will not move, no
// way to ask the kernel which mappings the block spans), before it moved
// anything or part-way (`moved` bytes of the old extent's front are in the
// new one already): copy the rest of the header and of the old block's
// usable bytes, which the program may have written (glibc keeps them too).
Result LargePath::copy_instead(Change& c, Extent to, bool committed, bool cached, std::size_t moved) {
  const std::size_t old_bytes = c.old.bytes();
  char* nbase = to.base(a_);
  char* obase = c.old.base(a_);
  // (A warm extent is committed, but where a refused move unmapped a piece
  // of it; a fresh one's tail was committed before the move, its head is
  // committed here but for what moved into it.)
  const std::size_t head = old_bytes - moved;
  if (pal::Commit r = committed ? pal::Commit::ok : ops_.commit(nbase + moved, head); r != pal::Commit::ok) {
    // The moved front holds the only copy of those bytes: back where they
    // were (the old range is still mapped, empty: MREMAP_DONTUNMAP), so the
    // block stays as it was. (Only at vm.max_map_count, where the move
    // stopped too: a front the program had made read-only or registered
    // with a userfaultfd would fault here.)
    if (moved != 0) {
      std::memcpy(obase, nbase, moved);
      ops_.decommit(nbase, moved);
    }
    const bool ours = ops_.recover(nbase + moved, head);
    if (cached) {
      // A cached block (its move refused part-way, then this commit): the
      // rest of its pages dropped too, and it is no longer mapped lowtide
      // memory (as undo_lost_move's). Released as free it would have kept
      // its pages resident and its bytes counted as mapped for good.
      if (ours) ops_.decommit(nbase + moved, head);
      ops_.decommit(nbase + old_bytes, to.bytes() - old_bytes);
      large::space.mapped.fetch_sub(to.bytes(), std::memory_order_relaxed);
      stats::add(c.st, stats::large_released_room, to.bytes());
    } else {
      // Only the tail was committed; the head's pages are still dropped.
      ops_.decommit(nbase + old_bytes, c.bytes - old_bytes);
    }
    if (ours) a_.release(to.start, to.n);
    else lose_refused(to);
    return refusal(r);
  }
  // The header, then the usable bytes (the new block is larger than the
  // old one's usable size: need > n), less the front that moved.
  const std::size_t from_hdr = c.off - sizeof(BlockHeader);
  const std::size_t end = c.off + c.old_usable;
  const std::size_t from = moved > from_hdr ? moved : from_hdr;
  const std::size_t keep = end > from ? end - from : 0;
  std::memcpy(nbase + from, obase + from, keep);
  stats::add(c.st, stats::large_copy_bytes, keep);
  stats::add(c.st, stats::large_remap_bytes, moved);
  stats::add(c.st, stats::large_released_free, old_bytes - moved);
  return Result::ok;
}

// The block's header and pointer now live in `to`: account, give the old
// extent back, publish the new one.
void LargePath::finish_move(Change& c, Extent to, bool warm, bool moved, void** out, bool old_mapped) {
  const std::size_t old_bytes = c.old.bytes();
  char* nbase = to.base(a_);
  // Advised once the head is in: moved pages keep their old mapping's
  // flags, and a head that was under 2 MiB would otherwise get no huge
  // pages. (A moved head stays a mapping of its own all the same: the
  // kernel does not merge anonymous memory that mremap moved with memory
  // mapped where it landed.)
  if (wants_advice(c.bytes)) ops_.advise_hugepage(nbase, c.bytes);
  void* user = nbase + c.off;
  BlockHeader* nh = header_of(user);
  c.h = nh;  // the old pages are gone (moved, or about to be): account on the copy
  account(c, moved ? stats::large_remaps : stats::large_copies);
  nh->magic = kHeaderMagic ^ reinterpret_cast<std::uint64_t>(user);
  nh->base = reinterpret_cast<std::uint64_t>(nbase);
  nh->length = c.bytes;
  nh->requested = c.size;
  a_.claim(c.p);
  // An old extent another mapping took part of (pal::fill_hole) stays used
  // for good: giving it back would let a later commit map over that mapping.
  if (old_mapped) a_.give_back(c.old.start, c.old.n, ops_.decommit, ops_.drop_writable);
  a_.publish(user, to.start, nh->site);
  if (warm) large::space.mapped.fetch_sub(old_bytes, std::memory_order_relaxed);
  else large::space.mapped.fetch_add(c.bytes - old_bytes, std::memory_order_relaxed);
  *out = user;
}

// ---- the process's large path ----

constinit Space space;

void fork_wait_holes() { space.holes.fork_wait(); }
void fork_holes_done(bool child) { space.holes.fork_done(child); }

bool fork_child_unfinished() {
  // Not where this thread's own are among them (a signal handler that
  // interrupted one forked): its copy here finishes them after the
  // handler, and an extent reclaimed first would be released twice.
  return (space.arena.hiding() != 0 || cache::production_cache.in_flight() != 0) && Arena::own_unfinished() == 0;
}

void fork_child_reclaim() {
  // The extents a give-back or a trial in another thread held were counted
  // in `mapped` or not depending on how far it had gone: counted afresh.
  const std::uint64_t live = space.arena.reclaim_after_fork(
      [](std::uint32_t s, std::uint32_t n) { return cache::production_cache.holds(s, n); }, pal::kPageOps.decommit,
      pal::kPageOps.drop_writable);
  space.mapped.store(static_cast<std::size_t>(live << Arena::kGranuleShift) + cache::production_cache.cached_bytes(),
                     std::memory_order_relaxed);
}

namespace {
constinit LargePath the_path{large::space.arena, cache::production_cache, pal::kPageOps, &cache::note_large_allocation};
}  // namespace

// Each counted as under way on its thread (Arena::own_unfinished): an
// extent it holds out of every table for a moment (taken from the cache or
// carved, not yet published; a moved block's new extent) is not a forked
// child's to reclaim where a signal handler on this thread forks.
Result allocate(std::size_t size, std::size_t align, Origin origin, std::uint8_t flags, void** out,
                std::size_t asked) {
  Arena::own_unfinished_add(1);
  Result r = the_path.allocate(size, align, origin, flags, out, asked);
  Arena::own_unfinished_add(-1);
  if constexpr (invariants::kEnabled) invariants::after_large_op();
  return r;
}

void release(void* p, const char* what) {
  Arena::own_unfinished_add(1);
  the_path.release(p, what);
  Arena::own_unfinished_add(-1);
  if constexpr (invariants::kEnabled) invariants::after_large_op();
}

Result resize(void* p, std::size_t size, void** out) {
  Arena::own_unfinished_add(1);
  Result r = the_path.resize(p, size, out);
  Arena::own_unfinished_add(-1);
  if constexpr (invariants::kEnabled) invariants::after_large_op();
  return r;
}

std::size_t usable(const void* p, const char* what) { return the_path.usable(p, what); }

bool give_up_held(std::size_t want) {
  if (!space.arena.ready()) return cache::purge(true) != 0;
  Arena::own_unfinished_add(1);
  const bool any = the_path.give_up_held(want);
  Arena::own_unfinished_add(-1);
  return any;
}

}  // namespace lowtide::large

#include "large_path.hpp"

#include <cerrno>
#include <cstring>

#include "large_cache.hpp"
#include "log.hpp"
#include "platform.hpp"
#include "sites.hpp"
#include "size_math.hpp"
#include "state.hpp"
#include "stats.hpp"

namespace lowtide::large {

namespace {

constexpr std::size_t G = Arena::kGranule;

// Offset of the user pointer from the start of its extent: room for the
// header, and the alignment asked for.
std::size_t user_offset(std::size_t align) {
  if (align <= sizeof(BlockHeader)) return sizeof(BlockHeader);
  return align <= G ? align : G;
}

constexpr std::size_t kHuge = std::size_t{2} << 20;
constexpr std::uint32_t kHugeGranules = static_cast<std::uint32_t>(kHuge / G);

// Blocks of 2 MiB and more start on a 2 MiB boundary and ask for huge pages:
// a huge-page fault costs far less per byte than 512 small ones.
bool wants_huge(std::size_t bytes) { return g.hugepages && bytes >= kHuge; }

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

Result allocate(std::size_t size, std::size_t align, Origin origin, std::uint8_t flags, void** out) {
  Arena& a = g.arena;
  if (!a.ready()) return Result::no_room;
  std::size_t off = user_offset(align);
  if (size > a.size() - off) return Result::no_room;
  // An alignment no place in the range meets is refused before the cache
  // is touched: no cache purge, no warning that the range is full. This
  // also keeps align / G below 2^32 (the range is at most 2^30 granules)
  // for the 32-bit alignment below.
  if (!can_place(a, round_up(off + (size == 0 ? 1 : size), G), off, align)) return Result::no_alignment;
  // At least one byte past the user pointer, so even a zero-size block's
  // pointer lies inside its own extent (its live-table slot is its own).
  std::size_t bytes = round_up(off + (size == 0 ? 1 : size), G);
  // Refuse what the kernel would before the cache is emptied for it.
  if (pal::overcommit_refuses(bytes)) return Result::no_memory;
  auto need = static_cast<std::uint32_t>(bytes >> Arena::kGranuleShift);
  // Alignments above a granule: the user pointer sits one granule in, and
  // the extent starts one granule before an aligned address.
  auto align_g = static_cast<std::uint32_t>(align > G ? align / G : 1);
  std::uint32_t skew = align > G ? 1 : 0;
  if (skew == 0 && wants_huge(bytes) && align_g < kHugeGranules) align_g = kHugeGranules;
  // Before any lock is taken: a capture unwinds and looks up modules.
  const sites::Sample site = sites::on_allocate(size);
  cache::purge(false);
  cache::note_large_allocation();
  stats::Slot* st = stats::slot();

  // A cached block of about this size: its pages are already there.
  std::uint32_t got = 0;
  const bool for_growth = origin == Origin::realloc;
  std::uint32_t s = cache::take(need, align_g, skew, for_growth, &got);
  char* base;
  if (s != Arena::kNone) {
    base = a.addr(s);
    if (for_growth) {
      // Keep the whole warm block: the reallocs that follow grow into it.
      bytes = std::size_t{got} << Arena::kGranuleShift;
    }
    // Reused pages hold old data: calloc's must read as zero.
    if (origin == Origin::calloc) std::memset(base + off, 0, size);
    stats::add(st, stats::large_reused, 1);
  } else {
    // A miss: what the cache holds does not fit this request. Shrink it by
    // what is about to be faulted in, so reuse never adds to the peak.
    cache::evict_for(bytes);
    s = a.alloc(need, align_g, skew);
    // The range may only be full of cached blocks: give those back, retry.
    if (s == Arena::kNone && cache::purge(true) != 0) s = a.alloc(need, align_g, skew);
    if (s == Arena::kNone) return Result::no_room;
    base = a.addr(s);
    if (pal::Commit c = pal::commit(base, bytes); c != pal::Commit::ok) {
      a.release(s, need);
      return refusal(c);
    }
    if (wants_huge(bytes)) pal::advise_hugepage(base, bytes);
    g.large_mapped.fetch_add(bytes, std::memory_order_relaxed);
  }
  stats::add(st, stats::large_maps, 1);
  void* user = base + off;
  encode_header(header_of(user), user, reinterpret_cast<std::uint64_t>(base), bytes, size, align,
                origin, flags, current_tid(), site.site, site.weight);
  a.publish(user, s, site.site);
  g.large_blocks.fetch_add(1, std::memory_order_relaxed);
  std::size_t usable = bytes - off;
  stats::add(st, stats::large_requested, size);
  stats::add(st, stats::large_out, usable);
  stats::large_live_add(usable);
  sites::allocated(site, usable);
  *out = user;
  return Result::ok;
}

void release(void* p, const char* what) {
  Arena& a = g.arena;
  std::uint32_t s = a.claim(p);
  if (s == Arena::kNone) invalid(what, p);
  std::uint32_t n = a.used_length(s);
  std::size_t bytes = std::size_t{n} << Arena::kGranuleShift;
  std::size_t usable = bytes - static_cast<std::size_t>(static_cast<char*>(p) - a.addr(s));
  g.large_blocks.fetch_sub(1, std::memory_order_relaxed);
  stats::Slot* st = stats::slot();
  stats::add(st, stats::large_unmaps, 1);
  stats::add(st, stats::large_freed, usable);
  stats::large_live_sub(usable);
  sites::released(header_of(p), p, usable);
  if (cache::put(s, n)) {
    stats::add(st, stats::large_cached_frees, 1);
  } else {
    pal::decommit(a.addr(s), bytes);
    a.release(s, n);
    g.large_mapped.fetch_sub(bytes, std::memory_order_relaxed);
    stats::add(st, stats::large_returned_bytes, bytes);
  }
  cache::purge(false);
}

std::size_t usable(const void* p, const char* what) {
  Arena& a = g.arena;
  std::uint32_t s = a.lookup(p);
  if (s == Arena::kNone) invalid(what, p);
  std::size_t off = static_cast<std::size_t>(static_cast<const char*>(p) - a.addr(s));
  return (std::size_t{a.used_length(s)} << Arena::kGranuleShift) - off;
}

Result resize(void* p, std::size_t size, void** out) {
  Arena& a = g.arena;
  std::uint32_t s = a.lookup(p);
  if (s == Arena::kNone) invalid("realloc()", p);
  char* base = a.addr(s);
  auto off = static_cast<std::size_t>(static_cast<char*>(p) - base);
  std::uint32_t n = a.used_length(s);
  if (size > a.size() - off) return Result::no_room;
  std::size_t bytes = round_up(off + size, G);
  auto need = static_cast<std::uint32_t>(bytes >> Arena::kGranuleShift);
  BlockHeader* h = header_of(p);
  stats::Slot* st = stats::slot();
  const std::size_t old_usable = (std::size_t{n} << Arena::kGranuleShift) - off;
  std::size_t new_usable = bytes - off;
  // Every successful resize hands out new_usable in place of old_usable.
  auto account = [&](stats::Counter how) {
    sites::resized(h, old_usable, new_usable, how == stats::large_remaps || how == stats::large_copies);
    stats::add(st, how, 1);
    stats::add(st, stats::large_requested, size);
    stats::add(st, stats::large_freed, old_usable);
    stats::add(st, stats::large_out, new_usable);
    stats::large_live_add(new_usable);
    stats::large_live_sub(old_usable);
  };

  if (need <= n) {
    // Shrink only when the caller shrinks: a block growing inside spare room
    // (a reused cached block) keeps it for the next growth step.
    if (need < n && size < h->requested) {
      std::size_t tail = std::size_t{n - need} << Arena::kGranuleShift;
      pal::decommit(a.addr(s + need), tail);
      a.shrink(s, n, need);
      g.large_mapped.fetch_sub(tail, std::memory_order_relaxed);
      stats::add(st, stats::large_returned_bytes, tail);
      h->length = bytes;
    } else {
      new_usable = old_usable;  // the extent stays as it is
    }
    h->requested = size;
    account(stats::large_in_place);
    *out = p;
    return Result::ok;
  }

  // Growing by more than the kernel would grant: refused before the cache
  // is emptied for it (mremap checks only the growth too).
  if (pal::overcommit_refuses(std::size_t{need - n} << Arena::kGranuleShift)) return Result::no_memory;

  // Grow in place into the warm cached extent right behind the block (a
  // block cut from a cached one has its rest there): no syscall, no fault.
  if (cache::take_at(s + n, need - n)) {
    a.join(s, n, need);
    if (wants_huge(bytes)) pal::advise_hugepage(base, bytes);
    h->length = bytes;
    h->requested = size;
    account(stats::large_in_place);
    stats::add(st, stats::large_reused, 1);
    *out = p;
    return Result::ok;
  }
  // Grow in place by carving the adjacent free extent: no copy, no move.
  if (a.grow(s, n, need)) {
    if (pal::commit(a.addr(s + n), std::size_t{need - n} << Arena::kGranuleShift) == pal::Commit::ok) {
      // The whole block, not only the new tail: a head advised differently
      // (it was under 2 MiB) would be a mapping of its own, which mremap
      // may refuse to move and which gets no huge pages.
      if (wants_huge(bytes)) pal::advise_hugepage(base, bytes);
      g.large_mapped.fetch_add(std::size_t{need - n} << Arena::kGranuleShift, std::memory_order_relaxed);
      h->length = bytes;
      h->requested = size;
      account(stats::large_in_place);
      *out = p;
      return Result::ok;
    }
    // Refused (at vm.max_map_count it may need a split): try a move, which
    // may find a cached block that needs no syscall.
    a.shrink(s, need, n);
  }

  // Move: a new extent, the user pointer at the same offset in it (realloc
  // need not keep an alignment above 16, and pages move whole). A cached
  // block of up to 4x is taken whole: the old pages move into its front, and
  // its warm back is where the next growth steps land, in place.
  std::size_t old_bytes = std::size_t{n} << Arena::kGranuleShift;
  const std::uint32_t huge_g = wants_huge(bytes) ? kHugeGranules : 1;
  std::uint32_t got = 0;
  std::uint32_t ns = cache::take(need, huge_g, 0, true, &got);
  const bool warm = ns != Arena::kNone;
  if (warm) {
    need = got;
    bytes = std::size_t{got} << Arena::kGranuleShift;
    new_usable = bytes - off;
    stats::add(st, stats::large_reused, 1);
  } else {
    cache::evict_for(bytes - old_bytes);
    ns = a.alloc(need, huge_g, 0);
    if (ns == Arena::kNone && cache::purge(true) != 0) ns = a.alloc(need, huge_g, 0);
    if (ns == Arena::kNone) return Result::no_room;
  }
  char* nbase = a.addr(ns);
  // Commit the tail first, so that once the pages have moved nothing can fail.
  if (!warm) {
    if (pal::Commit c = pal::commit(nbase + old_bytes, bytes - old_bytes); c != pal::Commit::ok) {
      a.release(ns, need);
      return refusal(c);
    }
  }
  bool moved = pal::move_pages(base, old_bytes, nbase);
  if (!moved) {
    // mremap refused (an old kernel, or the block spans several VMAs since
    // someone madvised part of it): copy all the old block's usable bytes,
    // which the program may have written (glibc keeps them too).
    if (pal::Commit c = warm ? pal::Commit::ok : pal::commit(nbase, old_bytes); c != pal::Commit::ok) {
      // Only the tail was committed; the head's pages are still dropped.
      pal::decommit(nbase + old_bytes, bytes - old_bytes);
      a.release(ns, need);
      return refusal(c);
    }
    // The new block is larger than the old one's usable size (need > n).
    const std::size_t keep = old_bytes - off;
    std::memcpy(nbase + off - sizeof(BlockHeader), h, sizeof(BlockHeader));
    std::memcpy(nbase + off, p, keep);
    stats::add(st, stats::large_copy_bytes, keep);
    stats::add(st, stats::large_returned_bytes, old_bytes);
  } else {
    stats::add(st, stats::large_remap_bytes, old_bytes);
  }
  // Advised once the head is in: moved pages keep their old mapping's
  // flags, and a head that was under 2 MiB would otherwise get no huge
  // pages. (A moved head stays a mapping of its own all the same: the
  // kernel does not merge anonymous memory that mremap moved with memory
  // mapped where it landed.)
  if (wants_huge(bytes)) pal::advise_hugepage(nbase, bytes);
  void* user = nbase + off;
  BlockHeader* nh = header_of(user);
  h = nh;  // the old pages are gone (moved, or about to be): account on the copy
  account(moved ? stats::large_remaps : stats::large_copies);
  nh->magic = kHeaderMagic ^ reinterpret_cast<std::uint64_t>(user);
  nh->base = reinterpret_cast<std::uint64_t>(nbase);
  nh->length = bytes;
  nh->requested = size;
  a.claim(p);
  pal::decommit(base, old_bytes);
  a.release(s, n);
  a.publish(user, ns, nh->site);
  if (warm) g.large_mapped.fetch_sub(old_bytes, std::memory_order_relaxed);
  else g.large_mapped.fetch_add(bytes - old_bytes, std::memory_order_relaxed);
  *out = user;
  return Result::ok;
}

}  // namespace lowtide::large

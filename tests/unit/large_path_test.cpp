// The large path alone, over a test arena and a fake platform: the real
// page operations, each made to fail on demand.
#include <catch2/catch.hpp>
#include <sys/mman.h>
#include <sys/resource.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#endif

#include "arena.hpp"
#include "test_arena.hpp"
#include "large_cache.hpp"
#include "large_path.hpp"
#include "large_space.hpp"
#include "under_valgrind.hpp"
#include "platform.hpp"
#include "state.hpp"
#include "stats.hpp"

using lowtide::Arena;
using lowtide::Origin;
using lowtide::large::LargePath;
using lowtide::large::Result;
namespace pal = lowtide::pal;

namespace {

constexpr std::size_t G = Arena::kGranule;

// What the fake platform refuses next.
struct Faults {
  int commits_ok = -1;  // commits that succeed before the failures; -1: all
  int commits_failing = 0;
  pal::Commit fail_as = pal::Commit::refused;
  bool refuse_move = false;
  std::size_t move_only = 0;  // a move stops after this many bytes (0: none), as a kernel refusing a later mapping
  bool unmap_on_refusal = false;  // a refused move unmaps the destination's rest first
  bool refuse_overcommit = false;
  int commits = 0, moves = 0;
  bool moved = false;  // the last real move_pages succeeded (valgrind refuses MREMAP_DONTUNMAP)
  std::size_t moved_bytes = 0;  // what the last move_pages moved
  bool taken_in_hole = false;  // another mapping takes a page of a refused move's hole (unmap_on_refusal)
  void* taken = nullptr;  // that page
  void* last_dst = nullptr;
  bool dst_held = false;  // contains() said no for the destination during the last move
  bool commit_hole = false;  // a refused commit unmaps its range first (mode 2 before Linux 6.12)
  bool commit_hole_taken = false;  // and another thread's mmap takes a page of that hole
  char* refused_at = nullptr;  // the last refused commit's range
  std::size_t refused_len = 0;
};
Faults faults;

pal::Commit fake_commit(void* p, std::size_t len) {
  ++faults.commits;
  if (faults.commits_ok > 0) {
    --faults.commits_ok;
  } else if (faults.commits_ok == 0 && faults.commits_failing > 0) {
    --faults.commits_failing;
    faults.refused_at = static_cast<char*>(p);
    faults.refused_len = len;
    if (faults.commit_hole) {
      munmap(p, len);
      if (faults.commit_hole_taken) {
        faults.taken = mmap(static_cast<char*>(p) + len / 2, 4096, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (faults.taken != MAP_FAILED) std::memset(faults.taken, 0x5a, 4096);
      }
    }
    return faults.fail_as;
  }
  return pal::commit(p, len);
}
pal::Moved fake_move(void* src, std::size_t len, void* dst) {
  ++faults.moves;
  faults.dst_held = !test_arena().contains(dst);
  std::size_t want = faults.refuse_move ? 0 : len;
  if (faults.move_only != 0 && faults.move_only < want) want = faults.move_only;
  pal::Moved m;
  if (want != 0) m = pal::move_pages(src, want, dst);
  faults.moved_bytes = m.bytes;
  faults.moved = m.bytes == len;
  faults.last_dst = dst;
  if (!faults.moved) {
    // The kernel refusing the next mapping (valgrind refuses them all), as
    // every kernel may after unmapping the destination (move_vma out of
    // memory), and another thread's mmap taking part of that hole meanwhile.
    char* piece = static_cast<char*>(dst) + m.bytes;
    m.refused = len - m.bytes;
    if (faults.unmap_on_refusal) munmap(piece, m.refused);
    if (faults.taken_in_hole) {
      faults.taken = mmap(piece + m.refused / 2, 4096, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (faults.taken != MAP_FAILED) std::memset(faults.taken, 0x5a, 4096);
    }
    m.lost = !pal::recover_destination(piece, m.refused);
  }
  return m;
}
bool fake_overcommit(std::size_t len) { return faults.refuse_overcommit || pal::overcommit_refuses(len); }

constexpr pal::PageOps kFakeOps{&fake_commit, &pal::decommit, &fake_move, &pal::advise_hugepage, &fake_overcommit,
                                 &pal::resident_bytes};

std::uint64_t fake_now = 0;
std::uint64_t fake_clock() { return fake_now; }
constexpr lowtide::cache::Deps kCacheDeps{&fake_clock, &pal::decommit, &lowtide::cache::account_returned};

// A large path over the test arena with its own cache (cap 0 unless asked):
// at the end of each case the arena must be whole and consistent again, and
// every byte committed given back.
struct Rig {
  Arena& a = test_arena();
  std::uint32_t total = static_cast<std::uint32_t>(a.size() / G);
  std::size_t mapped0 = lowtide::large::space.mapped.load();
  std::size_t blocks0 = lowtide::large::space.blocks.load();
  lowtide::cache::ReuseCache cache{a, kCacheDeps};
  const pal::PageOps& ops;
  LargePath path{a, cache, ops};
  explicit Rig(std::size_t cap = 0, const pal::PageOps& o = kFakeOps) : ops(o) {
    faults = Faults{};
    cache.configure(cap, 1000);
    REQUIRE(a.free_granules() == total);
  }
  ~Rig() {
    // No hole window left open, no fork gate left shut (a failed case would
    // otherwise turn holes off for every later one).
    CHECK(lowtide::large::space.holes.windows.load() == 0);
    CHECK_FALSE(lowtide::large::space.holes.forking.load());
    lowtide::large::space.holes.windows.store(0);
    lowtide::large::space.holes.forking.store(0);
    cache.purge(true);
    CHECK(cache.in_flight() == 0);  // every trial ended (commit_warm)
    CHECK(a.check() == nullptr);
    CHECK(a.free_granules() == total);
    CHECK(lowtide::large::space.mapped.load() == mapped0);
    CHECK(lowtide::large::space.blocks.load() == blocks0);
  }
  void* alloc(std::size_t size, std::size_t align = 16, Origin o = Origin::malloc) {
    void* p = nullptr;
    REQUIRE(path.allocate(size, align, o, 0, &p) == Result::ok);
    return p;
  }
  // A block moved over from the small path by a realloc (a growing buffer:
  // its growth populates).
  void* from_small(std::size_t size) {
    void* p = nullptr;
    REQUIRE(path.allocate(size, 16, Origin::realloc, lowtide::kFromSmall, &p) == Result::ok);
    return p;
  }
};

void fill(void* p, std::size_t n, unsigned seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>((i * 131 + seed) >> 3);
}
bool same(const void* p, std::size_t n, unsigned seed) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i)
    if (b[i] != static_cast<unsigned char>((i * 131 + seed) >> 3)) return false;
  return true;
}

// The range filled with blocks of `block` bytes until it refuses one,
// sorted by address.
std::vector<void*> fill_range(LargePath& path, std::size_t block) {
  std::vector<void*> held;
  for (;;) {
    void* p = nullptr;
    if (path.allocate(block, 16, Origin::malloc, 0, &p) != Result::ok) break;
    held.push_back(p);
  }
  std::sort(held.begin(), held.end());
  return held;
}

// The moves that keep a block one mapping (pal::move_grow), refused on demand.
struct GrowFaults {
  // 0: the real move; 1: refused, the new extent left as it was; 2: refused
  // after unmapping the new extent (mremap_to unmaps first up to 6.16).
  int refuse = 0;
  int fills_refused = 0;  // fill_hole calls refused before the real ones
  int grows = 0, fills = 0;
  void* last_dst = nullptr;
  std::size_t last_len = 0;
  bool lose_tail = false;  // grow_mapping: another mapping took the tail's hole
  int expansions = 0;
  bool not_ok = false;  // mremap_growth_ok says no (a lock, a limit)
  bool checked_first = false;  // growth_checked_first: a kernel from 6.17
  // Whether contains() said no for the source and the destination while
  // the hole could open (the last move_grow), and for the tail (grow_mapping).
  bool src_held = false, dst_held = false, tail_held = false;
};
GrowFaults grow_faults;

bool fake_move_grow(void* src, std::size_t len, void* dst, std::size_t new_len) {
  ++grow_faults.grows;
  grow_faults.src_held = !test_arena().contains(src);
  grow_faults.dst_held = !test_arena().contains(dst);
  grow_faults.last_dst = dst;
  grow_faults.last_len = new_len;
  if (grow_faults.refuse == 1) return false;
  if (grow_faults.refuse == 2) {
    ::munmap(dst, new_len);
    return false;
  }
  return pal::move_grow(src, len, dst, new_len);
}
bool fake_fill_hole(void* p, std::size_t len) {
  ++grow_faults.fills;
  if (grow_faults.fills_refused > 0) {
    --grow_faults.fills_refused;
    return false;
  }
  return pal::fill_hole(p, len);
}

pal::Grow fake_grow_mapping(void* p, std::size_t len, std::size_t new_len) {
  ++grow_faults.expansions;
  grow_faults.tail_held = !test_arena().contains(static_cast<char*>(p) + len);
  if (grow_faults.lose_tail) {
    ::munmap(static_cast<char*>(p) + len, new_len - len);  // the hole, as if someone's mapping sat there
    return pal::Grow::lost;
  }
  return pal::grow_mapping(p, len, new_len);
}

bool fake_growth_ok(std::size_t) { return !grow_faults.not_ok; }
bool fake_checked_first() { return grow_faults.checked_first; }

constexpr pal::PageOps kGrowOps{&fake_commit,    &pal::decommit,  &fake_move,          &pal::advise_hugepage,
                                &fake_overcommit, &pal::resident_bytes, nullptr,     &pal::one_mapping,
                                &fake_move_grow,  &fake_fill_hole, &fake_grow_mapping, &fake_growth_ok,
                                &pal::recover_destination, nullptr, nullptr, nullptr, nullptr, &fake_checked_first};

// A lost extent's cleanup, for the next case: mapped again if it is a
// hole, released, forgotten.
void reclaim_lost(Arena& a, void* p, std::size_t len) {
  pal::fill_hole(p, len);  // (refused where it is still mapped)
  a.release(static_cast<std::uint32_t>((reinterpret_cast<std::uintptr_t>(p) - a.base()) / G),
            static_cast<std::uint32_t>(len / G));
  a.forget_held_out();
  lowtide::large::space.lost.fetch_sub(len);
}


// What a mremap grew [p+from, p+to), for memcheck, which does not follow
// mremap's growth (the kernel maps it zero-filled; memcheck calls it not
// addressable). Nothing outside valgrind.
void grown_by_mremap(void* p, std::size_t from, std::size_t to) {
#if __has_include(<valgrind/memcheck.h>)
  VALGRIND_MAKE_MEM_DEFINED(static_cast<char*>(p) + from, to - from);
#else
  (void)p, (void)from, (void)to;
#endif
}

// Mappings (/proc/self/maps lines) that overlap [p, p+len).
int mappings_over(const void* p, std::size_t len) {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return -1;
  const auto lo = reinterpret_cast<std::uintptr_t>(p), hi = lo + len;
  char line[512];
  int n = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long a = 0, b = 0;
    if (std::sscanf(line, "%lx-%lx", &a, &b) == 2 && a < hi && b > lo) ++n;
  }
  std::fclose(f);
  return n;
}

// Huge-page advice off for a case (blocks then need no alignment gaps).
struct NoHugePages {
  bool was = lowtide::large::space.hugepages;
  NoHugePages() { lowtide::large::space.hugepages = false; }
  ~NoHugePages() { lowtide::large::space.hugepages = was; }
};

}  // namespace

TEST_CASE("large path: allocate, grow, shrink and release over a fake platform") {
  Rig r;
  void* p = r.alloc(200 << 10);
  CHECK(r.path.usable(p, "test") >= (200 << 10));
  fill(p, 200 << 10, 1);
  void* q = nullptr;
  REQUIRE(r.path.resize(p, 3 << 20, &q) == Result::ok);
  CHECK(same(q, 200 << 10, 1));
  CHECK(r.path.usable(q, "test") >= (3u << 20));
  void* s = nullptr;
  REQUIRE(r.path.resize(q, 300 << 10, &s) == Result::ok);
  CHECK(s == q);  // shrinks in place
  CHECK(r.path.usable(s, "test") < (400u << 10));
  CHECK(same(s, 200 << 10, 1));
  CHECK(r.a.check() == nullptr);
  r.path.release(s, "test");
}

TEST_CASE("large path: a refused commit leaves nothing behind") {
  Rig r;
  void* p = nullptr;
  SECTION("the kernel will not map it: no_mapping") {
    faults.commits_ok = 0;
    faults.commits_failing = 1;
    faults.fail_as = pal::Commit::refused;
    CHECK(r.path.allocate(1 << 20, 16, Origin::malloc, 0, &p) == Result::no_mapping);
  }
  SECTION("over the overcommit limit: no_memory") {
    faults.commits_ok = 0;
    faults.commits_failing = 1;
    faults.fail_as = pal::Commit::over_limit;
    CHECK(r.path.allocate(1 << 20, 16, Origin::malloc, 0, &p) == Result::no_memory);
  }
  SECTION("overcommit refuses up front: no_memory, no commit tried") {
    faults.refuse_overcommit = true;
    CHECK(r.path.allocate(1 << 20, 16, Origin::malloc, 0, &p) == Result::no_memory);
    CHECK(faults.commits == 0);
  }
  CHECK(p == nullptr);
  CHECK(faults.commits_failing == 0);
}

TEST_CASE("large path: mremap refused, the copy keeps the old block's usable bytes") {
  Rig r;
  void* p = r.alloc(256 << 10);
  void* blocker = r.alloc(256 << 10);  // right behind p: no growth in place
  const std::size_t old_usable = r.path.usable(p, "test");
  fill(p, old_usable, 7);
  faults.refuse_move = true;
  void* q = nullptr;
  REQUIRE(r.path.resize(p, 1 << 20, &q) == Result::ok);
  CHECK(q != p);
  CHECK(faults.moves == 1);
  CHECK(same(q, old_usable, 7));  // min(old usable, new size) bytes kept
  CHECK(r.path.usable(q, "test") >= (1u << 20));
  // The rest of the new block is fresh zero pages.
  const auto* tail = static_cast<const unsigned char*>(q) + old_usable;
  bool zero = true;
  for (std::size_t i = 0; i < (1u << 20) - old_usable; ++i) zero &= tail[i] == 0;
  CHECK(zero);
  r.path.release(q, "test");
  r.path.release(blocker, "test");
}

// Since Linux 6.17 mremap moves a range of several mappings one at a time
// and stops at one it cannot move, the ones before it moved: the front of
// the block is then at the destination, the source's front empty.
TEST_CASE("large path: a move refused part-way keeps every byte (the front moved, the rest copied)") {
  Rig r;
  void* p = r.alloc(512 << 10);
  void* blocker = r.alloc(256 << 10);  // right behind p: no growth in place
  const std::size_t old_usable = r.path.usable(p, "test");
  fill(p, old_usable, 11);
  faults.move_only = 128 << 10;
  void* q = nullptr;
  REQUIRE(r.path.resize(p, 2 << 20, &q) == Result::ok);
  CHECK(q != p);
  CHECK(faults.moves == 1);
  // (valgrind refuses MREMAP_DONTUNMAP: there nothing moves, and this is
  // the whole copy's case.)
  if (faults.moved_bytes == 0) WARN("move_pages moved nothing here: the part-way case is not exercised");
  else CHECK(faults.moved_bytes == (128u << 10));
  CHECK(same(q, old_usable, 11));
  CHECK(r.path.usable(q, "test") >= (2u << 20));
  const auto* tail = static_cast<const unsigned char*>(q) + old_usable;
  bool zero = true;
  for (std::size_t i = 0; i < (2u << 20) - old_usable; ++i) zero &= tail[i] == 0;
  CHECK(zero);
  r.path.release(q, "test");
  r.path.release(blocker, "test");
}

// Whether [p, p+len) is mapped throughout: mincore fails with ENOMEM over a
// hole. (Not msync: valgrind takes PROT_NONE pages as unaddressable there.)
static bool all_mapped(std::uintptr_t p, std::size_t len) {
  unsigned char vec[4096];
  for (std::uintptr_t a = p; a < p + len; a += sizeof vec * 4096) {
    const std::size_t n = p + len - a < sizeof vec * 4096 ? p + len - a : sizeof vec * 4096;
    if (mincore(reinterpret_cast<void*>(a), n, vec) != 0 && errno == ENOMEM) return false;
  }
  return true;
}

// Every kernel unmaps a move's destination before move_vma, which can still
// refuse (out of memory, KSM): a cached block the move was going into is
// then a hole, and the copy must map it again before writing.
TEST_CASE("large path: a move refused after the kernel unmapped its destination: mapped again, every byte kept") {
  Rig r(std::size_t{64} << 20);
  void* p = r.alloc(256 << 10);
  void* blocker = r.alloc(256 << 10);  // right behind p: no growth in place
  void* spare = r.alloc(std::size_t{2} << 20);
  void* after = r.alloc(64 << 10);  // keeps the spare block's extent from joining free space
  r.path.release(spare, "test");
  REQUIRE(r.cache.cached_bytes() != 0);
  const std::size_t old_usable = r.path.usable(p, "test");
  fill(p, old_usable, 13);
  faults.move_only = GENERATE(std::size_t{0}, std::size_t{64} << 10);
  faults.refuse_move = faults.move_only == 0;
  faults.unmap_on_refusal = true;
  void* q = nullptr;
  REQUIRE(r.path.resize(p, 1 << 20, &q) == Result::ok);
  CHECK(q != p);
  CHECK(same(q, old_usable, 13));
  CHECK(all_mapped(r.a.base(), r.a.size()));  // the hole mapped again
  // (all_mapped sees a hole where there is one.)
  auto* three = static_cast<char*>(mmap(nullptr, 3 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(three != MAP_FAILED);
  munmap(three + 4096, 4096);
  CHECK_FALSE(all_mapped(reinterpret_cast<std::uintptr_t>(three), 3 * 4096));
  munmap(three, 3 * 4096);
  r.path.release(q, "test");
  r.path.release(blocker, "test");
  r.path.release(after, "test");
}

TEST_CASE("large path: a miss whose move into a fresh extent is refused after an unmap leaves no hole") {
  Rig r(std::size_t{64} << 20);
  void* p = r.alloc(2 << 20);
  fill(p, r.path.usable(p, "test"), 21);
  void* blocker = r.alloc(1 << 20);
  r.path.release(p, "test");
  faults.refuse_move = true;
  faults.unmap_on_refusal = true;
  void* q = r.alloc(5 << 20);
  CHECK(faults.moves == 1);
  CHECK(all_mapped(r.a.base(), r.a.size()));
  r.path.release(q, "test");
  r.path.release(blocker, "test");
}

// The same refusal, with another thread's mmap taking a page of the hole
// before move_pages could map it again: that extent is never mapped over
// nor reused, pointers into it are not the large path's, and the realloc
// fails as out of memory with the block as it was.
TEST_CASE("large path: a refused move whose hole someone else's mapping took loses that extent, never maps over it") {
  Rig r(std::size_t{64} << 20);
  const bool into_cached = GENERATE(false, true);
  void* p = r.alloc(512 << 10);
  void* blocker = r.alloc(256 << 10);  // right behind p: no growth in place
  void* spare = nullptr;
  void* after = nullptr;
  if (into_cached) {
    spare = r.alloc(std::size_t{2} << 20);
    after = r.alloc(64 << 10);  // keeps the spare block's extent from joining free space
    r.path.release(spare, "test");
    REQUIRE(r.cache.cached_bytes() != 0);
  }
  const std::size_t old_usable = r.path.usable(p, "test");
  fill(p, old_usable, 17);
  faults.move_only = 128 << 10;
  faults.unmap_on_refusal = true;
  faults.taken_in_hole = true;
  const std::size_t lost0 = lowtide::large::space.lost.load();
  const std::size_t mapped0 = lowtide::large::space.mapped.load();
  void* q = nullptr;
  CHECK(r.path.resize(p, 2 << 20, &q) == Result::no_memory);
  CHECK(faults.moves == 1);
  CHECK(faults.dst_held);  // held out of contains() for the move
  REQUIRE(faults.taken != MAP_FAILED);
  const std::size_t lost = lowtide::large::space.lost.load() - lost0;
  CHECK(lost >= (2u << 20));
  // The block as it was, its moved front copied back.
  CHECK(r.path.usable(p, "test") == old_usable);
  CHECK(same(p, old_usable, 17));
  // The other mapping untouched, and not the large path's.
  const auto* t = static_cast<const unsigned char*>(faults.taken);
  bool intact = true;
  for (std::size_t i = 0; i < 4096; ++i) intact &= t[i] == 0x5a;
  CHECK(intact);
  CHECK_FALSE(r.a.contains(faults.taken));
  // What lowtide had committed of the lost extent is dropped (a cached
  // block's pages no longer count as mapped).
  CHECK(lowtide::large::space.mapped.load() == mapped0 - (into_cached ? lost : 0));
  // The block still grows, elsewhere.
  char* lost_base = static_cast<char*>(faults.last_dst);
  void* taken = faults.taken;
  faults = Faults{};
  REQUIRE(r.path.resize(p, 2 << 20, &q) == Result::ok);
  CHECK(same(q, old_usable, 17));
  CHECK_FALSE((static_cast<char*>(q) >= lost_base && static_cast<char*>(q) < lost_base + lost));
  r.path.release(q, "test");
  r.path.release(blocker, "test");
  if (after != nullptr) r.path.release(after, "test");
  // Cleanup for the next case: the lost extent unmapped, mapped again and
  // released.
  munmap(taken, 4096);
  munmap(lost_base, lost);
  reclaim_lost(r.a, lost_base, lost);
}

// A kernel older than 6.11 answers PROCMAP_QUERY with ENOTTY: the block
// is moved in one call, which such a kernel makes whole or refuses whole
// (Debian 12's 6.1). Before, every such move was a copy.
TEST_CASE("platform: without PROCMAP_QUERY a block moves in one call") {
  const std::size_t len = std::size_t{1} << 20;
  auto* src = static_cast<char*>(mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  auto* dst = static_cast<char*>(mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  REQUIRE(src != MAP_FAILED);
  REQUIRE(dst != MAP_FAILED);
  fill(src, len, 23);
  // A release from 6.17 on (a seccomp filter answering ENOTTY there): no
  // whole-range move, since such a kernel may move part of a range and
  // stop; nothing tried, so the caller copies.
  pal::set_procmap_query_missing(true, "6.17.0");
  const pal::Moved none = pal::move_pages(src, len, dst);
  CHECK(none.bytes == 0);
  CHECK(none.refused == 0);
  CHECK_FALSE(none.lost);
  CHECK(same(src, len, 23));
  pal::set_procmap_query_missing(true, "6.1.0-28-amd64");
  const pal::Moved m = pal::move_pages(src, len, dst);
  pal::set_procmap_query_missing(false);
  if (under_valgrind()) {
    // valgrind refuses MREMAP_DONTUNMAP: refused whole, the destination
    // still mapped, so ours.
    WARN("valgrind refuses MREMAP_DONTUNMAP: only the refusal is exercised");
    CHECK(m.bytes == 0);
    CHECK(m.refused == len);
    CHECK_FALSE(m.lost);
    CHECK(same(src, len, 23));
  } else {
    CHECK(m.bytes == len);
    CHECK(m.refused == 0);
    CHECK(same(dst, len, 23));
  }
  munmap(src, len);
  munmap(dst, len);
}

TEST_CASE("platform: kernel releases below 6.17") {
  CHECK(pal::release_below("6.1.0-28-amd64", 6, 17));
  CHECK(pal::release_below("6.16.9", 6, 17));
  CHECK(pal::release_below("5.10.0-30-cloud-amd64", 6, 17));
  CHECK(pal::release_below("2.6.58", 6, 17));
  CHECK_FALSE(pal::release_below("6.17.0", 6, 17));
  CHECK_FALSE(pal::release_below("6.18.44-fc-v1147", 6, 17));
  CHECK_FALSE(pal::release_below("7.0", 6, 17));
  CHECK_FALSE(pal::release_below("10.1", 6, 17));
  // Not two numbers: taken for a new kernel (its blocks are copied).
  CHECK_FALSE(pal::release_below("", 6, 17));
  CHECK_FALSE(pal::release_below("6", 6, 17));
  CHECK_FALSE(pal::release_below("6.", 6, 17));
  CHECK_FALSE(pal::release_below("v6.1", 6, 17));
}

TEST_CASE("large path: a resize whose commits are refused leaves the block as it was") {
  Rig r;
  void* p = r.alloc(256 << 10);
  void* blocker = r.alloc(256 << 10);
  const std::size_t old_usable = r.path.usable(p, "test");
  fill(p, old_usable, 3);
  const std::uint32_t free_before = r.a.free_granules();
  void* q = nullptr;
  SECTION("the new extent's tail refused") {
    faults.commits_ok = 0;
    faults.commits_failing = 1;
    faults.fail_as = pal::Commit::over_limit;
    CHECK(r.path.resize(p, 1 << 20, &q) == Result::no_memory);
    CHECK(faults.moves == 0);
  }
  SECTION("mremap refused, then the head's commit for the copy refused") {
    faults.refuse_move = true;
    faults.commits_ok = 1;  // the tail
    faults.commits_failing = 1;
    faults.fail_as = pal::Commit::refused;
    CHECK(r.path.resize(p, 1 << 20, &q) == Result::no_mapping);
  }
  SECTION("a move refused part-way, then the rest's commit for the copy refused: the front copied back") {
    faults.move_only = 64 << 10;
    faults.commits_ok = 1;  // the tail
    faults.commits_failing = 1;
    faults.fail_as = pal::Commit::refused;
    CHECK(r.path.resize(p, 1 << 20, &q) == Result::no_mapping);
    if (faults.moved_bytes == 0) WARN("move_pages moved nothing here: the part-way case is not exercised");
    else CHECK(faults.moved_bytes == (64u << 10));
  }
  SECTION("overcommit refuses the growth") {
    faults.refuse_overcommit = true;
    const int commits = faults.commits;
    CHECK(r.path.resize(p, 1 << 20, &q) == Result::no_memory);
    CHECK(faults.commits == commits);
  }
  CHECK(q == nullptr);
  CHECK(r.a.free_granules() == free_before);
  CHECK(r.a.check() == nullptr);
  CHECK(r.path.usable(p, "test") == old_usable);
  CHECK(same(p, old_usable, 3));
  r.path.release(p, "test");
  r.path.release(blocker, "test");
  // Nothing of the new extent stays resident (a front copied back is dropped there).
  CHECK(pal::resident_bytes(reinterpret_cast<void*>(r.a.base()), r.a.size()) == 0);
}

// A growth the kernel refuses (RLIMIT_DATA counts the reuse cache's blocks
// as data) gives up what the cache holds and is tried once more, as an
// allocation is (reliability.md no. 127): before, realloc failed while
// the cache held what would have made room.
TEST_CASE("large path: a refused growth gives up the cache and is tried again") {
  NoHugePages nh;
  Rig r(std::size_t{32} << 20);
  void* spare = r.alloc(512 << 10);
  void* p = r.alloc(256 << 10);
  void* blocker = r.alloc(256 << 10);
  const std::size_t old_usable = r.path.usable(p, "test");
  fill(p, old_usable, 5);
  r.path.release(spare, "test");  // cached: too small for the growth
  REQUIRE(r.cache.cached_bytes() >= (512u << 10));
  faults.commits_ok = 0;
  faults.commits_failing = 1;  // the move's tail, once
  faults.fail_as = pal::Commit::refused;
  void* q = nullptr;
  REQUIRE(r.path.resize(p, 1 << 20, &q) == Result::ok);
  CHECK(q != p);
  CHECK(r.cache.cached_bytes() == 0);  // given up for the second try
  CHECK(faults.commits >= 2);
  CHECK(same(q, old_usable, 5));
  CHECK(r.path.usable(q, "test") >= (1u << 20));
  r.path.release(q, "test");
  r.path.release(blocker, "test");
}

// A kernel before 6.12 in overcommit mode 2 unmaps a MAP_FIXED mmap's
// range before it checks the charge (docs/reliability.md no. 43): a
// refused commit must not leave a hole in the range, released as free,
// that anyone's mmap may take and a later commit map over.
TEST_CASE("large path: a refused commit that unmapped its range first: mapped again, then released") {
  Rig r;
  void* p = r.alloc(256 << 10);
  const std::size_t old_usable = r.path.usable(p, "test");
  fill(p, old_usable, 5);
  void* blocker = nullptr;
  const int where = GENERATE(0, 1, 2);  // a miss; a move's tail; growth in place
  if (where == 1) blocker = r.alloc(256 << 10);  // right behind p: a move
  const std::uint32_t free_before = r.a.free_granules();
  const std::size_t lost0 = lowtide::large::space.lost.load();
  faults.commits_ok = 0;
  faults.commits_failing = 1;
  faults.commit_hole = true;
  void* q = nullptr;
  if (where == 0) CHECK(r.path.allocate(1 << 20, 16, Origin::malloc, 0, &q) == Result::no_mapping);
  else if (where == 1) CHECK(r.path.resize(p, 1 << 20, &q) == Result::no_mapping);
  else CHECK(r.path.resize(p, 1 << 20, &q) == Result::ok);  // grown by a move instead
  REQUIRE(faults.refused_at != nullptr);
  CHECK(all_mapped(r.a.base(), r.a.size()));  // the hole reserved again
  CHECK(lowtide::large::space.lost.load() == lost0);
  if (where != 2) {
    CHECK(q == nullptr);
    CHECK(r.a.free_granules() == free_before);
  } else {
    p = q;
  }
  CHECK(same(p, old_usable, 5));
  r.path.release(p, "test");
  if (blocker != nullptr) r.path.release(blocker, "test");
}

// The same, with another thread's mmap taking a page of the hole before it
// is reserved again: that extent is never released (a later commit would
// map over the mapping), nor the large path's.
TEST_CASE("large path: a refused commit whose hole someone else's mapping took keeps the extent out for good") {
  Rig r;
  void* p = r.alloc(256 << 10);
  const std::size_t old_usable = r.path.usable(p, "test");
  fill(p, old_usable, 7);
  const bool resize = GENERATE(false, true);
  void* blocker = resize ? r.alloc(256 << 10) : nullptr;
  const std::size_t lost0 = lowtide::large::space.lost.load();
  faults.commits_ok = 0;
  faults.commits_failing = 1;
  faults.commit_hole = true;
  faults.commit_hole_taken = true;
  void* q = nullptr;
  if (resize) CHECK(r.path.resize(p, 1 << 20, &q) == Result::no_mapping);
  else CHECK(r.path.allocate(1 << 20, 16, Origin::malloc, 0, &q) == Result::no_mapping);
  CHECK(q == nullptr);
  REQUIRE(faults.taken != MAP_FAILED);
  REQUIRE(faults.taken != nullptr);
  const std::size_t lost = lowtide::large::space.lost.load() - lost0;
  CHECK(lost >= faults.refused_len);
  CHECK_FALSE(r.a.contains(faults.taken));
  // The lost extent ends where the refused commit did (a move's new
  // extent: its tail).
  char* lost_base = faults.refused_at + faults.refused_len - lost;
  void* taken = faults.taken;
  faults = Faults{};
  // Later blocks are placed elsewhere, and the other mapping is untouched.
  void* b = r.alloc(4 << 20);
  CHECK_FALSE((static_cast<char*>(b) + (4 << 20) > lost_base && static_cast<char*>(b) < lost_base + lost));
  const auto* t = static_cast<const unsigned char*>(taken);
  bool intact = true;
  for (std::size_t i = 0; i < 4096; ++i) intact &= t[i] == 0x5a;
  CHECK(intact);
  CHECK(same(p, old_usable, 7));
  r.path.release(b, "test");
  r.path.release(p, "test");
  if (blocker != nullptr) r.path.release(blocker, "test");
  munmap(taken, 4096);
  munmap(lost_base, lost);
  reclaim_lost(r.a, lost_base, lost);
}

// A move into a cached block refused part-way, then the copy's commit
// refused (docs/reliability.md no. 44): the cached block is dropped whole,
// no longer counted as mapped (Rig's destructor), none of its pages left
// resident in the free extent it becomes.
TEST_CASE("large path: a cached block whose move and then copy were refused is dropped whole") {
  Rig r(std::size_t{64} << 20);
  void* p = r.alloc(256 << 10);
  void* blocker = r.alloc(256 << 10);  // right behind p: no growth in place
  void* spare = r.alloc(std::size_t{2} << 20);
  void* after = r.alloc(64 << 10);  // keeps the spare block's extent from joining free space
  fill(spare, r.path.usable(spare, "test"), 9);  // resident
  r.path.release(spare, "test");
  REQUIRE(r.cache.cached_bytes() != 0);
  const std::size_t old_usable = r.path.usable(p, "test");
  fill(p, old_usable, 11);
  faults.move_only = 64 << 10;
  faults.commits_ok = 0;  // the copy's (a cached block needs no tail commit)
  // and the tail's of the second try, once the cached rest is given up
  // (no. 127), which moves nothing
  faults.commits_failing = 2;
  void* q = nullptr;
  CHECK(r.path.resize(p, 1 << 20, &q) == Result::no_mapping);
  CHECK(faults.moves == 1);
  CHECK(faults.refused_at != nullptr);
  CHECK(q == nullptr);
  CHECK(same(p, old_usable, 11));
  r.path.release(p, "test");
  r.path.release(blocker, "test");
  r.path.release(after, "test");
  r.cache.purge(true);
  CHECK(pal::resident_bytes(reinterpret_cast<void*>(r.a.base()), r.a.size()) == 0);
}

TEST_CASE("large path: growth in place refused by the kernel falls back to a move") {
  Rig r;
  void* p = r.alloc(256 << 10);
  const std::size_t old_usable = r.path.usable(p, "test");
  fill(p, old_usable, 5);
  faults.commits_ok = 0;
  faults.commits_failing = 1;  // the commit of the adjacent free granules
  void* q = nullptr;
  REQUIRE(r.path.resize(p, 1 << 20, &q) == Result::ok);
  CHECK(q != p);
  CHECK(same(q, old_usable, 5));
  CHECK(r.a.check() == nullptr);
  r.path.release(q, "test");
}

// The cases of the moves that keep a block one mapping: the grow ops, a
// 256 KiB block p (filled from `seed`) with a live block right behind it,
// so that growing p moves it.
struct GrowCase {
  NoHugePages nh;
  Rig r{0, kGrowOps};
  void* p;
  void* blocker;
  explicit GrowCase(unsigned seed) {
    grow_faults = GrowFaults{};
    p = r.alloc(256 << 10);
    blocker = r.alloc(256 << 10);
    fill(p, 256 << 10, seed);
  }
};

TEST_CASE("large path: a block within one mapping moves as one mapping, and grows in place as one") {
  GrowCase g(11);
  Rig& r = g.r;
  void* p = g.p;
  void* blocker = g.blocker;
  void* q = nullptr;
  REQUIRE(r.path.resize(p, 1 << 20, &q) == Result::ok);
  CHECK(q != p);
  CHECK(grow_faults.grows == 1);
  CHECK(faults.moves == 0);  // not the move into a tail committed first
  CHECK(grow_faults.fills == 1);  // the old extent's hole, mapped again
  // Both extents held out of contains() while the hole could be open, and
  // back in once it is mapped again.
  CHECK(grow_faults.src_held);
  CHECK(grow_faults.dst_held);
  CHECK(r.a.contains(p));
  CHECK(r.a.contains(q));
  CHECK(same(q, 256 << 10, 11));
  const auto* h = lowtide::header_of(q);
  CHECK((h->flags & lowtide::kMovedWhole) != 0);
  grown_by_mremap(q, 256 << 10, r.path.usable(q, "test"));
  // One mapping, where a move into a committed tail makes two (the moved
  // pages never merge with the tail).
  CHECK(mappings_over(reinterpret_cast<void*>(h->base), h->length) == 1);
  // Growing again with free room behind it: in place, as the same mapping
  // (a tail committed behind the moved pages would be a second one).
  fill(q, 1 << 20, 12);
  void* s = nullptr;
  REQUIRE(r.path.resize(q, 2 << 20, &s) == Result::ok);
  CHECK(s == q);
  CHECK(grow_faults.grows == 1);
  CHECK(grow_faults.expansions == 1);
  CHECK(grow_faults.tail_held);
  CHECK(r.a.contains(static_cast<char*>(s) + (1 << 20) + 4096));
  grown_by_mremap(s, 1 << 20, r.path.usable(s, "test"));
  CHECK(same(s, 1 << 20, 12));
  h = lowtide::header_of(s);
  CHECK(h->length >= (2u << 20));
  // (valgrind grows a mapping in place in its own address-space manager,
  // as a mapping of its own: the count is the kernel's, checked natively.)
  if (!under_valgrind()) CHECK(mappings_over(reinterpret_cast<void*>(h->base), h->length) == 1);
  // The grown part reads as zeros and can be written.
  const auto* grown = static_cast<const unsigned char*>(s) + (1 << 20);
  bool zero = true;
  for (std::size_t i = 0; i < (1u << 20); ++i) zero &= grown[i] == 0;
  CHECK(zero);
  std::memset(static_cast<char*>(s) + (1 << 20), 0x77, 1 << 20);
  CHECK(r.a.check() == nullptr);
  r.path.release(s, "test");
  r.path.release(blocker, "test");
}

TEST_CASE("large path: a moved block's old extent is lost, not reused, when its hole was taken") {
  GrowCase g(1);
  Rig& r = g.r;
  void* p = g.p;
  void* blocker = g.blocker;
  const auto* h = lowtide::header_of(p);
  char* old_base = reinterpret_cast<char*>(h->base);
  const std::size_t old_len = h->length;
  const std::size_t lost0 = lowtide::large::space.lost.load();
  const std::uint32_t free_before = r.a.free_granules();
  grow_faults.fills_refused = 1;  // another mapping took the old extent's hole
  void* q = nullptr;
  REQUIRE(r.path.resize(p, 1 << 20, &q) == Result::ok);
  CHECK(q != p);
  CHECK(lowtide::large::space.lost.load() == lost0 + old_len);
  // The old extent stayed used: only the new block's granules left the free lists.
  const auto new_g = static_cast<std::uint32_t>(lowtide::header_of(q)->length / G);
  CHECK(r.a.free_granules() == free_before - new_g);
  // Pointers there are no longer routed to the large path (a free of a
  // block someone else's allocator put there must not abort as invalid).
  CHECK_FALSE(r.a.contains(old_base + 4096));
  CHECK(r.a.contains(q));
  CHECK(r.a.check() == nullptr);
  r.path.release(q, "test");
  r.path.release(blocker, "test");
  reclaim_lost(r.a, old_base, old_len);
  CHECK(r.a.contains(old_base + 4096));
}

TEST_CASE("large path: a tail lost while it was a hole stays used, and the block moves") {
  GrowCase g(21);
  Rig& r = g.r;
  void* p = g.p;
  void* blocker = g.blocker;
  void* q = nullptr;
  REQUIRE(r.path.resize(p, 1 << 20, &q) == Result::ok);  // moved as one mapping
  REQUIRE((lowtide::header_of(q)->flags & lowtide::kMovedWhole) != 0);
  const auto* h = lowtide::header_of(q);
  char* tail = reinterpret_cast<char*>(h->base) + h->length;
  const std::size_t lost0 = lowtide::large::space.lost.load();
  grow_faults.lose_tail = true;
  void* s = nullptr;
  REQUIRE(r.path.resize(q, 2 << 20, &s) == Result::ok);
  CHECK(s != q);  // moved, not grown over what is no longer ours
  CHECK(grow_faults.expansions == 1);
  const std::size_t tail_len = lowtide::large::space.lost.load() - lost0;
  CHECK(tail_len > 0);
  CHECK(tail_len % G == 0);
  CHECK(same(s, 256 << 10, 21));
  CHECK(r.a.check() == nullptr);
  // The lost tail is a used extent no block owns: the arena's only leftover.
  r.path.release(s, "test");
  r.path.release(blocker, "test");
  CHECK(r.a.free_granules() == r.total - tail_len / G);
  CHECK_FALSE(r.a.contains(tail));
  reclaim_lost(r.a, tail, tail_len);
}

TEST_CASE("large path: a refused one-mapping move falls back to the move into a committed tail") {
  GrowCase g(13);
  Rig& r = g.r;
  void* p = g.p;
  void* blocker = g.blocker;
  const std::size_t lost0 = lowtide::large::space.lost.load();
  void* q = nullptr;
  SECTION("refused after the new extent was unmapped: it is mapped again and used") {
    grow_faults.refuse = 2;
    REQUIRE(r.path.resize(p, 1 << 20, &q) == Result::ok);
    CHECK(grow_faults.fills == 1);  // the new extent, before the fallback maps over it
    CHECK(lowtide::large::space.lost.load() == lost0);
    CHECK(static_cast<void*>(reinterpret_cast<char*>(lowtide::header_of(q)->base)) == grow_faults.last_dst);
  }
  SECTION("refused with the new extent still mapped, the kernel not known to check first: it is lost, another used") {
    grow_faults.refuse = 1;  // the real fill_hole then finds it mapped
    REQUIRE(r.path.resize(p, 1 << 20, &q) == Result::ok);
    CHECK(grow_faults.fills == 1);
    CHECK(lowtide::large::space.lost.load() == lost0 + grow_faults.last_len);
    CHECK(static_cast<void*>(reinterpret_cast<char*>(lowtide::header_of(q)->base)) != grow_faults.last_dst);
    CHECK_FALSE(r.a.contains(grow_faults.last_dst));
  }
  SECTION("refused with the new extent still mapped on a kernel that checks first (6.17 on): it is kept and used") {
    // A data limit's race (reliability.md no. 128's review): before, each
    // such refusal lost an extent, and after 16 no block moved any more.
    grow_faults.refuse = 1;
    grow_faults.checked_first = true;
    REQUIRE(r.path.resize(p, 1 << 20, &q) == Result::ok);
    CHECK(grow_faults.fills == 0);  // covered: no fill_hole needed
    CHECK(lowtide::large::space.lost.load() == lost0);
    CHECK(static_cast<void*>(reinterpret_cast<char*>(lowtide::header_of(q)->base)) == grow_faults.last_dst);
  }
  SECTION("refused after the new extent was unmapped on a kernel that checks first: it is mapped again and used") {
    grow_faults.refuse = 2;
    grow_faults.checked_first = true;
    REQUIRE(r.path.resize(p, 1 << 20, &q) == Result::ok);
    CHECK(lowtide::large::space.lost.load() == lost0);
    CHECK(static_cast<void*>(reinterpret_cast<char*>(lowtide::header_of(q)->base)) == grow_faults.last_dst);
  }
  CHECK(q != p);
  CHECK(grow_faults.grows == 1);
  CHECK(faults.moves == 1);
  CHECK(same(q, 256 << 10, 13));
  CHECK((lowtide::header_of(q)->flags & lowtide::kMovedWhole) == 0);
  CHECK(r.a.check() == nullptr);
  r.path.release(q, "test");
  r.path.release(blocker, "test");
  if (lowtide::large::space.lost.load() != lost0) reclaim_lost(r.a, grow_faults.last_dst, grow_faults.last_len);
}

TEST_CASE("large path: where mremap_growth_ok says no, no hole is made and nothing is lost") {
  GrowCase g(17);
  Rig& r = g.r;
  void* p = g.p;
  void* blocker = g.blocker;
  grow_faults.not_ok = true;  // a finite RLIMIT_DATA, an mlock, overcommit mode 2
  const std::size_t lost0 = lowtide::large::space.lost.load();
  void* q = nullptr;
  REQUIRE(r.path.resize(p, 1 << 20, &q) == Result::ok);
  CHECK(q != p);
  CHECK(grow_faults.grows == 0);
  CHECK(grow_faults.fills == 0);
  CHECK(faults.moves == 1);  // the move into a committed tail
  CHECK(lowtide::large::space.lost.load() == lost0);
  CHECK(same(q, 256 << 10, 17));
  r.path.release(q, "test");
  r.path.release(blocker, "test");
}

TEST_CASE("large path: a moved block grown in place while holes are not allowed is no longer taken for one mapping") {
  GrowCase g(1);
  Rig& r = g.r;
  void* p = g.p;
  void* blocker = g.blocker;
  void* q = nullptr;
  REQUIRE(r.path.resize(p, 1 << 20, &q) == Result::ok);
  REQUIRE((lowtide::header_of(q)->flags & lowtide::kMovedWhole) != 0);
  grow_faults.not_ok = true;  // say, an mlock since
  void* s = nullptr;
  REQUIRE(r.path.resize(q, 2 << 20, &s) == Result::ok);
  CHECK(s == q);  // grown in place by a committed tail: two mappings now
  CHECK(grow_faults.expansions == 0);
  CHECK((lowtide::header_of(s)->flags & lowtide::kMovedWhole) == 0);
  // So once holes are allowed again, its next growth does not unmap its
  // tail for an mremap that must fail (a hole for nothing).
  grow_faults.not_ok = false;
  void* t = nullptr;
  REQUIRE(r.path.resize(s, 3 << 20, &t) == Result::ok);
  CHECK(grow_faults.expansions == 0);
  r.path.release(t, "test");
  r.path.release(blocker, "test");
}

TEST_CASE("large path: no hole is opened while a fork is being prepared") {
  GrowCase g(19);
  Rig& r = g.r;
  void* p = g.p;
  void* blocker = g.blocker;
  // What fork's prepare handler does, in two threads forking at once: the
  // first one's parent handler leaves the second's gate shut (review).
  lowtide::large::fork_wait_holes();
  lowtide::large::fork_wait_holes();
  lowtide::large::fork_holes_done(false);
  CHECK(lowtide::large::space.holes.forking.load() != 0);
  void* q = nullptr;
  REQUIRE(r.path.resize(p, 1 << 20, &q) == Result::ok);
  lowtide::large::fork_holes_done(false);
  CHECK(lowtide::large::space.holes.forking.load() == 0);
  // Neither move: a refused mremap may leave a hole in its destination
  // too (move_into), so the block is copied.
  CHECK(grow_faults.grows == 0);
  CHECK(faults.moves == 0);
  CHECK(lowtide::large::space.holes.windows.load() == 0);
  CHECK(same(q, 256 << 10, 19));
  // A window open on the forking thread (fork from a signal handler that
  // interrupted it) does not hold the prepare handler up: it cannot close
  // meanwhile, so it is not waited for.
  REQUIRE(lowtide::large::space.holes.open());
  CHECK(lowtide::large::space.holes.fork_wait());
  lowtide::large::fork_holes_done(true);  // the child: no window open in it
  CHECK(lowtide::large::space.holes.windows.load() == 0);
  r.path.release(q, "test");
  r.path.release(blocker, "test");
}

TEST_CASE("platform: a lock on the range turns growth by mremap off until munlockall") {
  const bool before = pal::mremap_growth_ok(0);  // (false under a finite RLIMIT_DATA)
  static char page[4096] __attribute__((aligned(4096)));
  pal::mlock2(page, sizeof page, 0);  // (may be refused: RLIMIT_MEMLOCK 0 in some containers)
  CHECK(pal::mremap_growth_ok(0) == before);  // pal::mlock2 alone notes nothing
  pal::note_locked();  // what libc::mlock2 does for a lock on the range
  CHECK_FALSE(pal::mremap_growth_ok(0));
  REQUIRE(pal::munlockall() == 0);
  CHECK(pal::mremap_growth_ok(0) == before);
}

// Under a finite RLIMIT_DATA a move or growth by mremap is tried where the
// data pages it adds fit under the limit (VmData plus them), and not where
// they do not: a copy instead would commit the whole new block beside the
// old one (reliability.md no. 128). Until then, never under a finite limit.
TEST_CASE("platform: under a finite RLIMIT_DATA, growth by mremap where what it adds fits") {
  struct rlimit saved;
  REQUIRE(::getrlimit(RLIMIT_DATA, &saved) == 0);
  const bool unlimited = pal::mremap_growth_ok(0);  // false: overcommit mode 2, a lock, RLIMIT_AS
  static constexpr const char* kKeys[] = {"VmData:"};
  std::uint64_t kib = 0;
  REQUIRE(pal::read_status_kib(kKeys, &kib, 1));
  const std::uint64_t limit = kib * 1024 + (std::uint64_t{64} << 20);
  REQUIRE((saved.rlim_max == RLIM_INFINITY || saved.rlim_max >= limit));
  struct rlimit lim = saved;
  lim.rlim_cur = limit;
  REQUIRE(::setrlimit(RLIMIT_DATA, &lim) == 0);
  const bool small_growth = pal::mremap_growth_ok(std::size_t{1} << 20);
  const bool large_growth = pal::mremap_growth_ok(std::size_t{128} << 20);
  lim.rlim_cur = 1;  // below VmData: nothing fits
  REQUIRE(::setrlimit(RLIMIT_DATA, &lim) == 0);
  const bool over = pal::mremap_growth_ok(0);
  REQUIRE(::setrlimit(RLIMIT_DATA, &saved) == 0);
  CHECK(small_growth == unlimited);
  CHECK_FALSE(large_growth);
  CHECK_FALSE(over);
  CHECK(pal::mremap_growth_ok(0) == unlimited);
}

TEST_CASE("large path: freed blocks are reused from the cache, calloc's zeroed") {
  Rig r(std::size_t{16} << 20);
  void* p = r.alloc(512 << 10);
  fill(p, 512 << 10, 9);
  r.path.release(p, "test");
  CHECK(r.cache.cached_bytes() != 0);
  const int commits = faults.commits;
  void* q = r.alloc(512 << 10, 16, Origin::calloc);
  CHECK(faults.commits == commits);  // warm pages, no commit
  const auto* b = static_cast<const unsigned char*>(q);
  bool zero = true;
  for (std::size_t i = 0; i < (512u << 10); ++i) zero &= b[i] == 0;
  CHECK(zero);
  CHECK(r.cache.check() == nullptr);
  r.path.release(q, "test");
}

// A growing block that moves into a cached block takes what it needs; the
// cached block's rest stays cached right behind it, where its next growth
// step lands in place, and where a miss could evict it once the block stops
// growing. (Taken whole, up to 4x the need, the rest was the block's own
// until it was freed: docs/benchmarks.md "The cache's size".)
TEST_CASE("large path: a move into a cached block takes only what it needs, and grows into the rest") {
  NoHugePages nh;
  Rig r(std::size_t{64} << 20);
  void* big = r.alloc(std::size_t{4} << 20);
  void* p = r.alloc(256 << 10);
  void* blocker = r.alloc(256 << 10);
  // The blocker right behind p: p cannot grow in place.
  REQUIRE(static_cast<char*>(blocker) - static_cast<char*>(p) == 5 * static_cast<std::ptrdiff_t>(G));
  fill(p, 256 << 10, 7);
  r.path.release(big, "test");
  const std::size_t cached = r.cache.cached_bytes();
  REQUIRE(cached >= (std::size_t{4} << 20));
  void* q = nullptr;
  REQUIRE(r.path.resize(p, 512 << 10, &q) == Result::ok);
  CHECK(q != p);
  CHECK(same(q, 256 << 10, 7));
  CHECK(r.path.usable(q, "test") < (std::size_t{1} << 20));  // 9 granules, not 36
  CHECK(r.cache.cached_bytes() == cached - 9 * G);
  const int commits = faults.commits;
  void* g = nullptr;
  REQUIRE(r.path.resize(q, std::size_t{1} << 20, &g) == Result::ok);
  CHECK(g == q);                     // in place, into the cached rest
  CHECK(faults.commits == commits);  // its pages were there
  CHECK(r.cache.cached_bytes() == cached - 17 * G);
  CHECK(same(g, 256 << 10, 7));
  CHECK(r.cache.check() == nullptr);
  r.path.release(g, "test");
  r.path.release(blocker, "test");
}

// A block freed after growing by realloc teaches how large such blocks get;
// the next one to start growing takes a cached block that long rather than
// the smallest that fits, which it would outgrow and leave by a move.
TEST_CASE("large path: a block starting to grow takes a cached block as long as the last grown one") {
  NoHugePages nh;
  Rig r(std::size_t{64} << 20);
  void* small = r.alloc(448 << 10);
  void* b1 = r.alloc(64 << 10);
  void* grown = r.alloc(std::size_t{2} << 20, 16, Origin::realloc);
  void* b2 = r.alloc(64 << 10);
  r.path.release(small, "test");
  r.path.release(grown, "test");
  // The best fit for 192 KiB is the 448 KiB block; the hint is 2 MiB.
  void* p = r.alloc(192 << 10, 16, Origin::realloc);
  CHECK(p == grown);
  void* q = r.alloc(192 << 10, 16, Origin::malloc);  // no hint: the best fit
  CHECK(q == small);
  CHECK(r.cache.check() == nullptr);
  r.path.release(p, "test");
  r.path.release(q, "test");
  r.path.release(b1, "test");
  r.path.release(b2, "test");
}

// A miss (nothing cached fits) that a smaller cached block can half serve:
// its pages become the new block's front, only the rest is committed.
TEST_CASE("large path: a miss takes a smaller cached block's pages") {
  Rig r(std::size_t{64} << 20);
  void* p = r.alloc(2 << 20);
  const std::size_t warm = r.path.usable(p, "test");
  fill(p, warm, 21);
  SECTION("moved (the granules behind it are taken): the old data at the front, calloc's zeroed") {
    void* blocker = r.alloc(1 << 20);
    r.path.release(p, "test");
    const std::size_t cached = r.cache.cached_bytes();
    REQUIRE(cached != 0);
    const bool zeroed = GENERATE(false, true);
    void* q = r.alloc(5 << 20, 16, zeroed ? Origin::calloc : Origin::malloc);
    CHECK(faults.moves == 1);
    CHECK(q != p);
    // Where mremap refuses (valgrind does not do MREMAP_DONTUNMAP), the
    // fallback: a fresh block, the cached one kept with its age. On this
    // kernel tests/cache's `warm` scenario checks the move itself.
    CHECK(r.cache.cached_bytes() == (faults.moved ? 0 : cached));
    if (!faults.moved) {
      CHECK(static_cast<unsigned char*>(q)[0] == 0);
    } else if (zeroed) {
      const auto* b = static_cast<const unsigned char*>(q);
      bool zero = true;
      for (std::size_t i = 0; i < (5u << 20); ++i) zero &= b[i] == 0;
      CHECK(zero);
    } else {
      CHECK(same(q, warm, 21));  // the pages moved: no copy, no fault
    }
    CHECK(r.path.usable(q, "test") >= (5u << 20));
    CHECK(r.a.check() == nullptr);
    r.path.release(q, "test");
    r.path.release(blocker, "test");
  }
  SECTION("grown in place when the granules behind it are free") {
    r.path.release(p, "test");
    void* q = r.alloc(5 << 20);
    CHECK(q == p);
    CHECK(faults.moves == 0);
    CHECK(same(q, warm, 21));
    CHECK(r.cache.cached_bytes() == 0);
    CHECK(r.a.check() == nullptr);
    r.path.release(q, "test");
  }
  SECTION("mremap refused: a fresh block, the cached one kept") {
    void* blocker = r.alloc(1 << 20);
    r.path.release(p, "test");
    const std::size_t cached = r.cache.cached_bytes();
    faults.refuse_move = true;
    void* q = r.alloc(5 << 20);
    CHECK(faults.moves == 1);
    CHECK(r.cache.cached_bytes() == cached);
    CHECK(r.cache.check() == nullptr);
    CHECK(static_cast<unsigned char*>(q)[0] == 0);  // fresh pages
    r.path.release(q, "test");
    r.path.release(blocker, "test");
  }
  SECTION("mremap refused part-way: a fresh block, the cached one kept, the moved front dropped") {
    void* blocker = r.alloc(1 << 20);
    r.path.release(p, "test");
    const std::size_t cached = r.cache.cached_bytes();
    faults.move_only = 64 << 10;
    void* q = r.alloc(5 << 20);
    CHECK(faults.moves == 1);
    CHECK(r.cache.cached_bytes() == cached);
    CHECK(r.cache.check() == nullptr);
    const auto* b = static_cast<const unsigned char*>(q);
    bool zero = true;
    for (std::size_t i = 0; i < (5u << 20); ++i) zero &= b[i] == 0;
    CHECK(zero);  // fresh pages, none of the warm block's
    r.path.release(q, "test");
    r.path.release(blocker, "test");
    r.cache.purge(true);
    // Nothing stays resident in the range: the front that moved (into an
    // extent given back to the range) was dropped too.
    CHECK(pal::resident_bytes(reinterpret_cast<void*>(r.a.base()), r.a.size()) == 0);
  }
  SECTION("the tail's commit refused: the fresh path serves it, the cached block kept") {
    void* blocker = r.alloc(1 << 20);
    r.path.release(p, "test");
    const std::size_t cached = r.cache.cached_bytes();
    faults.commits_ok = 0;
    faults.commits_failing = 1;
    void* q = r.alloc(5 << 20);
    CHECK(faults.moves == 0);
    CHECK(faults.commits_failing == 0);
    CHECK(r.cache.cached_bytes() == cached);
    CHECK(r.cache.check() == nullptr);
    r.path.release(q, "test");
    r.path.release(blocker, "test");
  }
}

TEST_CASE("large path: a cached block mostly not resident is not moved into a miss") {
  Rig r(std::size_t{64} << 20);
  void* p = r.alloc(2 << 20);
  static_cast<volatile char*>(p)[0] = 1;  // a page or two of 32 resident
  void* blocker = r.alloc(1 << 20);
  r.path.release(p, "test");
  const std::size_t cached = r.cache.cached_bytes();
  void* q = r.alloc(5 << 20);
  CHECK(faults.moves == 0);
  CHECK(q != p);
  CHECK(r.cache.cached_bytes() == cached);  // within the miss's slack: kept
  r.path.release(q, "test");
  r.path.release(blocker, "test");
}

TEST_CASE("large path: a cached block under 1 MiB is not moved into a miss") {
  Rig r(std::size_t{64} << 20);
  void* p = r.alloc(512 << 10);
  fill(p, 512 << 10, 3);
  void* blocker = r.alloc(512 << 10);
  r.path.release(p, "test");
  const std::size_t cached = r.cache.cached_bytes();
  void* q = r.alloc(4 << 20);
  CHECK(faults.moves == 0);
  CHECK(r.cache.cached_bytes() == cached);  // within the miss's slack: kept
  r.path.release(q, "test");
  r.path.release(blocker, "test");
}

// A cached block a miss tried and failed to use goes back with its age and
// no reuse recorded, so it still decays; after one refused mremap the path
// stops moving blocks into misses. (Before, each failed attempt put it back
// as freshly freed: it stayed cached for as long as misses came.)
TEST_CASE("large path: a failed top-up leaves the cached block's age") {
  Rig r(std::size_t{4} << 20);
  fake_now = 0;
  void* p = r.alloc(2 << 20);
  fill(p, 2 << 20, 7);
  void* blocker = r.alloc(1 << 20);
  r.path.release(p, "test");
  REQUIRE(r.cache.cached_bytes() != 0);
  faults.refuse_move = true;
  for (int i = 0; i < 20; ++i) {
    fake_now += 600;
    void* q = r.alloc(5 << 20);
    r.path.release(q, "test");  // 5 MiB: over the 4 MiB cap, not kept
  }
  CHECK(faults.moves == 1);  // then no more moves tried
  r.cache.purge(false);
  CHECK(r.cache.cached_bytes() == 0);
  fake_now = 0;
  r.path.release(blocker, "test");
}

// ---- ReuseCache::settle: waits for room that is free for a moment only ----
//
// Each case below stalls one thing on purpose (a 50 ms drop, a block held on
// trial) with the range full but for what that thing holds, and checks
// that an allocation meanwhile waits for it instead of failing (ENOMEM, or
// mimalloc's fallback), or that a request that could not fit does not
// wait.
namespace {

// A large path over the whole test arena with its own cache, a settle bound
// far above the 50 ms stalls (a loaded machine cannot make a case fail) and
// no huge-page advice (no alignment gaps: full means no free run). At the
// end the arena must be whole again.
struct WaitRig {
  NoHugePages no_gaps;
  Arena& a = test_arena();
  std::uint32_t total = static_cast<std::uint32_t>(a.size() / G);
  lowtide::cache::ReuseCache cache;
  LargePath path;
  WaitRig(const lowtide::cache::Deps& deps, std::size_t cap, const pal::PageOps& ops)
      : cache{a, deps}, path{a, cache, ops} {
    faults = Faults{};
    cache.configure(cap, 1000);
    cache.set_settle_bound(std::uint64_t{10} * 1000 * 1000 * 1000);
  }
  ~WaitRig() {
    cache.purge(true);
    CHECK(cache.in_flight() == 0);
    CHECK(a.check() == nullptr);
    CHECK(a.free_granules() == total);
  }
  // Releases every block of `live` and, if the allocation succeeded, q.
  void release_all(std::vector<void*>& live, Result got, void* q) {
    if (got == Result::ok) live.push_back(q);
    for (void* p : live) path.release(p, "test");
  }
};

// The range filled to its last granule (fill_range leaves a short tail):
// then there is no free extent at all, and what is on its way back from the
// cache is the only room (found by the second review of no. 22: the fit
// check looked only at free extents and held runs, and gave up).
void fill_rest(LargePath& path, std::vector<void*>& held) {
  for (std::vector<void*> more = fill_range(path, 1000); void* p : more) held.push_back(p);  // a granule each
  std::sort(held.begin(), held.end());
}

// Until the stalled operation has started (counted in `started`), at most
// 5 s: whether it started.
bool wait_start(const std::atomic<int>& started) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (started.load() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  return started.load() != 0;
}

constexpr std::size_t kMiB = 1 << 20;  // a block of 17 granules with its header

// A stalled decommit (the cache's give-back without drop_writable).
std::atomic<int> g_slow_started{0};
void slow_decommit(void* p, std::size_t len) {
  g_slow_started.fetch_add(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  pal::decommit(p, len);
}
constexpr lowtide::cache::Deps kSlowCacheDeps{&fake_clock, &slow_decommit, &lowtide::cache::account_returned};

// A stalled read-write re-map (drop_writable, as in production), once armed.
std::atomic<bool> g_drop_armed{false};
std::atomic<int> g_drop_started{0};
bool slow_drop_writable(void* p, std::size_t len) {
  if (g_drop_armed.load()) {
    g_drop_started.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pal::drop_writable(p, len);
}
constexpr lowtide::cache::Deps kSlowDropDeps{&fake_clock, &pal::decommit, &lowtide::cache::account_returned,
                                             nullptr,     nullptr,        &slow_drop_writable};
// The same for give-backs outside the cache (LargePath's own).
constexpr pal::PageOps kSlowDropOps{&fake_commit,          &pal::decommit,   &fake_move,
                                    &pal::advise_hugepage, &fake_overcommit, &pal::resident_bytes,
                                    &slow_drop_writable};
void arm_drop() {
  g_drop_started.store(0);
  g_drop_armed.store(true);
}

}  // namespace

// A decay pass takes the cache's entries out under its lock, then gives them
// back one by one outside it; each is out of the free lists while its pages
// are dropped (stress/oom's one flake: reliability.md no. 21).
TEST_CASE("large path: an allocation waits for the cache's give-backs under way instead of failing") {
  const bool to_the_last_granule = GENERATE(false, true);
  WaitRig r(kSlowCacheDeps, std::size_t{64} << 20, kFakeOps);
  constexpr std::size_t kBlock = 4 << 20;
  std::vector<void*> held = fill_range(r.path, kBlock);
  REQUIRE(held.size() >= 4);
  if (to_the_last_granule) fill_rest(r.path, held);
  void* victim = held[1];
  held.erase(held.begin() + 1);
  r.path.release(victim, "test");  // cached: the range is full but for it
  REQUIRE(r.cache.cached_bytes() != 0);
  g_slow_started.store(0);
  std::thread decay([&] { r.cache.purge(true); });
  const bool started = wait_start(g_slow_started);
  // Could not fit even once the block is back: no wait.
  lowtide::cache::ReuseCache::Settle st = r.cache.settle_start();
  const bool waited_for_too_big = r.cache.settle(r.total, 1, 0, &st);
  void* q = nullptr;
  const Result got = r.path.allocate(kBlock, 16, Origin::malloc, 0, &q);
  decay.join();
  REQUIRE(started);
  CHECK_FALSE(waited_for_too_big);
  CHECK(got == Result::ok);
  r.release_all(held, got, q);
}

// The same wait where the give-back re-maps read-write, as in production
// (Deps::drop_writable): Arena::give_back then also holds the free runs next
// to the extent out of the free lists while it re-maps, and the request
// fits only in the extent and its free neighbour together. settle must
// count what the give-back holds, not only the cached extent (found by a
// review: the first version counted the free lists and the cache's bytes in
// flight, and gave up).
TEST_CASE("large path: the wait counts the free neighbours a give-back holds") {
  WaitRig r(kSlowDropDeps, std::size_t{64} << 20, kFakeOps);
  std::vector<void*> held = fill_range(r.path, kMiB);
  REQUIRE(held.size() >= 4);
  const std::size_t ext = static_cast<std::size_t>(static_cast<char*>(held[2]) - static_cast<char*>(held[1]));
  REQUIRE(ext == 17 * G);
  void* left = held[1];
  void* right = held[2];
  held.erase(held.begin() + 1, held.begin() + 3);
  r.path.release(right, "test");
  r.cache.purge(true);           // right's extent: a free run now
  r.path.release(left, "test");  // cached, its right neighbour free
  arm_drop();
  std::thread decay([&] { r.cache.purge(true); });  // gives left back, holding the free run too
  const bool started = wait_start(g_drop_started);
  // Fits once the give-back is done: exactly left's extent and the free run.
  void* q = nullptr;
  const Result got = r.path.allocate(2 * ext - 64, 16, Origin::malloc, 0, &q);
  decay.join();
  g_drop_armed.store(false);
  REQUIRE(started);
  CHECK(got == Result::ok);
  r.release_all(held, got, q);
}

// The retry loop is bounded: past its deadline settle allows one last try
// if a give-back ended since the previous one, then answers no, whatever
// ends after (found by a review: under churn the epoch kept moving and an
// allocation that could never fit tried again for as long as it lasted).
TEST_CASE("large path: settle answers no past its bound after one last try") {
  Rig r(std::size_t{64} << 20);
  void* p = r.alloc(1 << 20);
  lowtide::cache::ReuseCache::Settle st = r.cache.settle_start();
  r.path.release(p, "test");          // cached
  REQUIRE(r.cache.purge(true) != 0);  // a give-back ended since settle_start
  st.until = 1;                       // the bound passed long ago
  CHECK(r.cache.settle(1, 1, 0, &st));      // the last try
  void* q = r.alloc(1 << 20);
  r.path.release(q, "test");
  REQUIRE(r.cache.purge(true) != 0);  // another one ended
  CHECK_FALSE(r.cache.settle(1, 1, 0, &st));
}

// A give-back that bypasses the cache (a free the cache does not keep, the
// old extent of a realloc that moved, a shrunk tail) holds the free runs next
// to its extent out of the free lists too, as the cache's own do. Those runs
// were free before that free began: an allocation that fits only in one of
// them must wait for the give-back (found by the second review of no. 21;
// reliability.md no. 22). Not "racing the program's own free": without the
// concurrent free the allocation succeeds.
TEST_CASE("large path: a free that bypasses the cache does not take away the free run next to it") {
  WaitRig r(kCacheDeps, 0, kSlowDropOps);  // the cache keeps nothing: every free is given back at once
  std::vector<void*> held = fill_range(r.path, kMiB);
  REQUIRE(held.size() >= 4);
  void* left = held[1];
  void* right = held[2];
  held.erase(held.begin() + 1, held.begin() + 3);
  r.path.release(right, "test");  // a free run of exactly one block, the only room
  arm_drop();
  std::thread other([&] { r.path.release(left, "test"); });  // holds left and the free run
  const bool started = wait_start(g_drop_started);
  void* q = nullptr;
  const Result got = r.path.allocate(kMiB, 16, Origin::malloc, 0, &q);  // fits in right's run
  other.join();
  g_drop_armed.store(false);
  REQUIRE(started);
  CHECK(got == Result::ok);
  r.release_all(held, got, q);
}

// The same with the cache on: a realloc that moves gives its old extent back
// directly (finish_move), holding the free run before it.
TEST_CASE("large path: a moving realloc does not take away the free run next to its old block") {
  WaitRig r(kCacheDeps, std::size_t{64} << 20, kSlowDropOps);
  std::vector<void*> held = fill_range(r.path, kMiB);
  REQUIRE(held.size() >= 10);
  const std::size_t ext = static_cast<std::size_t>(static_cast<char*>(held[2]) - static_cast<char*>(held[1]));
  REQUIRE(ext == 17 * G);
  // Free runs: one block's (held[1]) and three blocks' (held[5..7]), where
  // the moving realloc lands exactly.
  void* mover = held[2];
  std::vector<void*> gone{held[1], held[5], held[6], held[7]};
  for (void* p : gone) r.path.release(p, "test");
  r.cache.purge(true);
  std::vector<void*> live;
  for (void* p : held)
    if (p != mover && std::find(gone.begin(), gone.end(), p) == gone.end()) live.push_back(p);
  arm_drop();
  void* moved = nullptr;
  Result moved_r = Result::no_room;
  // Cannot grow in place (held[3] is live): moves into the three blocks'
  // run, then gives its old extent back with the free run before it.
  std::thread other([&] { moved_r = r.path.resize(mover, 3 * ext - 64, &moved); });
  const bool started = wait_start(g_drop_started);
  void* q = nullptr;
  const Result got = r.path.allocate(kMiB, 16, Origin::malloc, 0, &q);  // fits in held[1]'s run
  other.join();
  g_drop_armed.store(false);
  REQUIRE(started);
  REQUIRE(moved_r == Result::ok);
  live.push_back(moved);
  CHECK(got == Result::ok);
  r.release_all(live, got, q);
}

// A miss that tops up a smaller cached block (commit_warm) takes it out of
// the cache on trial (take_at(..., false)); if the top-up fails, it goes
// back. Meanwhile it is neither cached nor free: an allocation that fits
// only once it is back waits for it (settle counts blocks on trial as
// coming back, until end_trial). The trial is made by hand here, so that
// nothing else takes room meanwhile (a real miss goes on to other tries).
TEST_CASE("large path: an allocation waits for a cached block on trial") {
  const bool to_the_last_granule = GENERATE(false, true);
  WaitRig r(kCacheDeps, std::size_t{64} << 20, kFakeOps);
  std::vector<void*> held = fill_range(r.path, kMiB);
  REQUIRE(held.size() >= 4);
  if (to_the_last_granule) {
    fill_rest(r.path, held);
    REQUIRE(r.a.free_granules() == 0);
    CHECK(r.a.may_fit_once_settled(17, 1, 0, 17));  // 17 granules on their way back
    CHECK_FALSE(r.a.may_fit_once_settled(18, 1, 0, 17));
  }
  void* wp = held[1];
  const std::uint32_t w = r.a.granule_of(wp);  // its extent's first granule (the header is in it)
  held.erase(held.begin() + 1);
  r.path.release(wp, "test");
  REQUIRE(r.cache.cached_bytes() == 17 * G);  // the range is full but for it
  REQUIRE(r.cache.take_at(w, 17, false));     // on trial
  std::atomic<bool> done{false};
  Result got = Result::no_room;
  void* q = nullptr;
  std::thread other([&] {
    got = r.path.allocate(kMiB, 16, Origin::malloc, 0, &q);
    done.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const bool waited = !done.load();  // without the wait it fails at once
  REQUIRE(r.cache.put(w, 17, 1));    // back, with its age
  r.cache.end_trial(17);
  other.join();
  CHECK(waited);
  CHECK(got == Result::ok);
  r.release_all(held, got, q);
}

// mlockall's protect_free takes the free extents out of the free lists a
// batch at a time while it maps them PROT_NONE: an allocation meanwhile
// waits for them rather than fail.
namespace {
std::atomic<int> g_protect_started{0};
void slow_protect(void* p, std::size_t len) {
  g_protect_started.fetch_add(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  pal::decommit(p, len);
}
}  // namespace

TEST_CASE("large path: an allocation waits for the free extents protect_free holds") {
  WaitRig r(kCacheDeps, 0, kFakeOps);
  std::vector<void*> held = fill_range(r.path, kMiB);
  REQUIRE(held.size() >= 4);
  r.path.release(held[1], "test");  // the only room: one block's free run
  held.erase(held.begin() + 1);
  g_protect_started.store(0);
  std::thread locker([&] { r.a.protect_free(slow_protect); });
  const bool started = wait_start(g_protect_started);
  void* q = nullptr;
  const Result got = r.path.allocate(kMiB, 16, Origin::malloc, 0, &q);
  locker.join();
  REQUIRE(started);
  CHECK(got == Result::ok);
  r.release_all(held, got, q);
}

// protect_free works a batch (64 extents) at a time: the room a batch
// releases wakes a waiting allocation at once, not when the whole pass ends
// (found by a review: a pass longer than settle's bound made it fail with
// its room free for a while). The second batch here waits until the
// allocation is done (at most 5 s): without the early wake the allocation
// only returns once the pass has ended.
namespace {
std::atomic<int> g_batch_calls{0};
std::atomic<bool> g_alloc_done{false};
void batch_protect(void* p, std::size_t len) {
  const int c = g_batch_calls.fetch_add(1);
  if (c == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the allocation fails meanwhile
  } else if (c >= 64) {
    static const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);  // the first call's
    while (!g_alloc_done.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  }
  pal::decommit(p, len);
}
}  // namespace

TEST_CASE("large path: each protect_free batch wakes a waiting allocation") {
  WaitRig r(kCacheDeps, 0, kFakeOps);
  std::vector<void*> held = fill_range(r.path, 1000);  // a granule each
  REQUIRE(held.size() >= 400);
  // Free: a run of two granules (held[1..2], in the first batch) and 1-granule
  // holes, enough for a second batch.
  std::vector<void*> live;
  for (std::size_t i = 0; i < held.size(); ++i) {
    if (i == 1 || i == 2 || (i >= 4 && i <= 300 && i % 2 == 0)) r.path.release(held[i], "test");
    else live.push_back(held[i]);
  }
  g_batch_calls.store(0);
  g_alloc_done.store(false);
  std::thread locker([&] { r.a.protect_free(batch_protect); });
  const bool started = wait_start(g_batch_calls);
  void* q = nullptr;
  const Result got = r.path.allocate(G, 16, Origin::malloc, 0, &q);  // two granules with its header
  const bool before_pass_ended = g_batch_calls.load() < 64 + 85;     // the second batch still held
  g_alloc_done.store(true);
  locker.join();
  REQUIRE(started);
  CHECK(got == Result::ok);
  CHECK(before_pass_ended);
  r.release_all(live, got, q);
}

// The wait is only for requests that could fit once the give-backs under
// way are over, counting contiguity and alignment: a range with free and
// held granules enough in total, but no run long enough (or none aligned as
// asked), makes no request wait (a first
// fix that waited for every give-back made never-fitting requests under
// churn wait their whole bound, each).
TEST_CASE("large path: settle does not wait for a request no run there will be can hold") {
  WaitRig r(kCacheDeps, 0, kSlowDropOps);
  std::vector<void*> held = fill_range(r.path, kMiB);
  REQUIRE(held.size() >= 10);
  // Three free runs of one block each, apart, and a fourth block given back
  // slowly between live ones: four blocks' granules, no run of two.
  for (int i : {1, 3, 5}) r.path.release(held[i], "test");
  void* slow = held[7];
  std::vector<void*> live;
  for (std::size_t i = 0; i < held.size(); ++i)
    if (i != 1 && i != 3 && i != 5 && i != 7) live.push_back(held[i]);
  arm_drop();
  lowtide::cache::ReuseCache::Settle st = r.cache.settle_start();
  std::thread other([&] { r.path.release(slow, "test"); });
  const bool started = wait_start(g_drop_started);
  // The held run: 17 granules, not 2 MiB-aligned (the range is).
  const std::uint32_t at = r.a.granule_of(slow);
  REQUIRE(at % 32 != 0);
  CHECK(r.a.may_fit_once_settled(17, 1, 0, 0));
  CHECK_FALSE(r.a.may_fit_once_settled(18, 1, 0, 0));
  CHECK_FALSE(r.a.may_fit_once_settled(17, 32, 0, 0));
  CHECK(r.a.may_fit_once_settled(17, 1, 0, 17));  // cached extents on their way back may join it
  const bool waited_for_two = r.cache.settle(34, 1, 0, &st);       // 4 x 17 granules in all, no run of 34
  const bool waited_for_aligned = r.cache.settle(17, 32, 0, &st);  // long enough, never aligned
  const bool waited_for_one = r.cache.settle(17, 1, 0, &st);       // fits once it is over: waits for it
  other.join();
  g_drop_armed.store(false);
  REQUIRE(started);
  CHECK_FALSE(waited_for_two);
  CHECK_FALSE(waited_for_aligned);
  CHECK(waited_for_one);
  r.release_all(live, Result::no_room, nullptr);
}

namespace {
// What populate_tail asked for, in order; each range is faulted in for real.
struct Populated {
  char* p;
  std::size_t len;
};
std::vector<Populated> populated;
bool fake_populate(void* p, std::size_t len) {
  populated.push_back({static_cast<char*>(p), len});
  return pal::populate(p, len);
}
constexpr pal::PageOps kPopulateOps{.commit = &fake_commit,
                                    .decommit = &pal::decommit,
                                    .move_pages = &fake_move,
                                    .advise_hugepage = &pal::advise_hugepage,
                                    .overcommit_refuses = &fake_overcommit,
                                    .resident = &pal::resident_bytes,
                                    .populate = &fake_populate};
// The kernel refusing every call (before 5.14, or a seccomp filter), as
// madvise would: nothing faulted in.
bool refused_populate(void* p, std::size_t len) {
  populated.push_back({static_cast<char*>(p), len});
  return false;
}
constexpr pal::PageOps kRefusedPopulateOps{.commit = &fake_commit,
                                           .decommit = &pal::decommit,
                                           .move_pages = &fake_move,
                                           .advise_hugepage = &pal::advise_hugepage,
                                           .overcommit_refuses = &fake_overcommit,
                                           .resident = &pal::resident_bytes,
                                           .populate = &refused_populate};
// This thread's large.populated so far.
std::uint64_t populated_counted() { return lowtide::stats::slot()->c[lowtide::stats::large_populated]; }

// Pages of [p, p+len) resident now (mincore).
std::size_t resident_pages(const void* p, std::size_t len) {
  std::vector<unsigned char> v(len / pal::kPageSize);
  if (::mincore(const_cast<void*>(p), len, v.data()) != 0) return SIZE_MAX;
  return static_cast<std::size_t>(std::count_if(v.begin(), v.end(), [](unsigned char c) { return (c & 1) != 0; }));
}

struct PopulatePct {
  unsigned was = lowtide::large::space.populate_pct;
  explicit PopulatePct(unsigned pct) {
    lowtide::large::space.populate_pct = pct;
    populated.clear();
  }
  ~PopulatePct() { lowtide::large::space.populate_pct = was; }
};
}  // namespace

TEST_CASE("large path: growth onto fresh pages faults in the first half of the new room, at most an eighth of the old size") {
  NoHugePages nh;
  constexpr std::size_t kPageMask = ~(pal::kPageSize - 1);
  SECTION("in place: not at a block's first growth; then half of the room, or an eighth of the old size") {
    PopulatePct pp(50);
    Rig r(0, kPopulateOps);
    void* p = r.alloc(256 << 10);
    fill(p, 256 << 10, 3);
    void* q0 = nullptr;
    REQUIRE(r.path.resize(p, 512 << 10, &q0) == Result::ok);
    REQUIRE(q0 == p);
    CHECK(populated.empty());  // a malloc'd block's first growth
    // A growth of about an eighth: half of its room, from the old end.
    char* old_end = reinterpret_cast<char*>(lowtide::header_of(p)) + 9 * G;
    const std::size_t size = (640 << 10) - 100;
    void* q = nullptr;
    REQUIRE(r.path.resize(p, size, &q) == Result::ok);
    REQUIRE(q == p);
    REQUIRE(populated.size() == 1);
    const std::size_t room = static_cast<std::size_t>(static_cast<char*>(p) + size - old_end);
    CHECK(populated[0].p == old_end);
    CHECK(populated[0].len == (room / 2 & kPageMask));
    CHECK(populated[0].len < 9 * G / 8);
    if (!under_valgrind()) {
      // The populated half is resident, the other half untouched.
      CHECK(resident_pages(old_end, populated[0].len) == populated[0].len / pal::kPageSize);
      CHECK(resident_pages(old_end + populated[0].len + pal::kPageSize, room / 2 - 2 * pal::kPageSize) == 0);
    }
    // A doubling and more: an eighth of the old size (10 granules).
    void* s = nullptr;
    REQUIRE(r.path.resize(q, std::size_t{4} << 20, &s) == Result::ok);
    REQUIRE(s == p);
    REQUIRE(populated.size() == 2);
    CHECK(populated[1].p == old_end + G);
    CHECK(populated[1].len == (10 * G / 8 & kPageMask));
    CHECK(same(s, 256 << 10, 3));
    r.path.release(s, "test");
  }
  SECTION("moved onto fresh pages: from the new extent's copy of the old end (a block from the small path)") {
    PopulatePct pp(50);
    Rig r(0, kPopulateOps);
    void* p = r.from_small(256 << 10);
    void* blocker = r.alloc(256 << 10);
    fill(p, 256 << 10, 4);
    void* q = nullptr;
    REQUIRE(r.path.resize(p, (320 << 10) + (32 << 10), &q) == Result::ok);
    REQUIRE(q != p);
    REQUIRE(populated.size() == 1);
    char* new_base = reinterpret_cast<char*>(lowtide::header_of(q));
    CHECK(populated[0].p == new_base + 5 * G);
    CHECK(populated[0].len ==
          (static_cast<std::size_t>(static_cast<char*>(q) + (320 << 10) + (32 << 10) - populated[0].p) / 2 & kPageMask));
    CHECK(same(q, 256 << 10, 4));
    r.path.release(q, "test");
    r.path.release(blocker, "test");
  }
  SECTION("never at malloc, nor into a cached block's pages, nor with LOWTIDE_POPULATE=0") {
    PopulatePct pp(50);
    Rig r(std::size_t{32} << 20, kPopulateOps);
    void* big = r.alloc(std::size_t{4} << 20);
    void* p = r.from_small(256 << 10);  // (from the small path: its growth would populate onto fresh pages)
    void* blocker = r.alloc(256 << 10);
    CHECK(populated.empty());  // malloc
    r.path.release(big, "test");
    void* q = nullptr;
    REQUIRE(r.path.resize(p, std::size_t{1} << 20, &q) == Result::ok);  // moves into the cached block
    CHECK(q != p);
    CHECK(populated.empty());
    lowtide::large::space.populate_pct = 0;
    r.path.release(blocker, "test");
    void* s = nullptr;
    REQUIRE(r.path.resize(q, std::size_t{8} << 20, &s) == Result::ok);
    CHECK(populated.empty());
    r.path.release(s, "test");
  }
  SECTION("large.populated counts what was faulted in, not what a refused call asked for") {
    // Until no. 126 every call was counted: on a kernel before 5.14 (or
    // under a seccomp filter refusing the advice) the report showed the
    // bytes of each growth as populated, none of them being.
    PopulatePct pp(50);
    {
      Rig r(0, kRefusedPopulateOps);
      void* p = r.from_small(256 << 10);
      fill(p, 256 << 10, 5);
      const std::uint64_t before = populated_counted();
      void* q = nullptr;
      REQUIRE(r.path.resize(p, (320 << 10) + (20 << 10), &q) == Result::ok);
      REQUIRE(populated.size() == 1);  // asked for, and refused
      CHECK(populated_counted() == before);
      CHECK(same(q, 256 << 10, 5));
      r.path.release(q, "test");
    }
    populated.clear();
    {
      Rig r(0, kPopulateOps);
      void* p = r.from_small(256 << 10);
      const std::uint64_t before = populated_counted();
      void* q = nullptr;
      REQUIRE(r.path.resize(p, (320 << 10) + (20 << 10), &q) == Result::ok);
      REQUIRE(populated.size() == 1);  // done: counted
      CHECK(populated_counted() == before + populated[0].len);
      r.path.release(q, "test");
    }
  }
  SECTION("a move refused part-way (copied instead): from the new extent's copy of the old end, bytes kept") {
    PopulatePct pp(100);
    Rig r(0, kPopulateOps);
    void* p = r.from_small(256 << 10);
    void* blocker = r.alloc(256 << 10);
    fill(p, 256 << 10, 6);
    faults.move_only = GENERATE(std::size_t{0}, std::size_t{64} << 10);
    faults.refuse_move = faults.move_only == 0;
    const std::size_t size = (320 << 10) + (40 << 10);
    void* q = nullptr;
    REQUIRE(r.path.resize(p, size, &q) == Result::ok);
    REQUIRE(q != p);
    REQUIRE(populated.size() == 1);
    char* new_base = reinterpret_cast<char*>(lowtide::header_of(q));
    CHECK(populated[0].p == new_base + 5 * G);
    CHECK(populated[0].p + populated[0].len <= static_cast<char*>(q) + size);
    CHECK(same(q, 256 << 10, 6));
    faults = Faults{};
    r.path.release(q, "test");
    r.path.release(blocker, "test");
  }
  SECTION("LOWTIDE_POPULATE=100: the whole room, up to an eighth of the old size") {
    // (The 32 MiB cap binds from blocks of 256 MiB on, past this arena.)
    PopulatePct pp(100);
    Rig r(0, kPopulateOps);
    void* p = r.from_small(256 << 10);
    void* q = nullptr;
    REQUIRE(r.path.resize(p, (320 << 10) + (20 << 10), &q) == Result::ok);
    REQUIRE(populated.size() == 1);
    CHECK(populated[0].len == (20 << 10));  // the room, to its last whole page
    void* s = nullptr;
    REQUIRE(r.path.resize(q, std::size_t{2} << 20, &s) == Result::ok);
    REQUIRE(populated.size() == 2);
    CHECK(populated[1].len == (6 * G / 8 & kPageMask));
    r.path.release(s, "test");
  }
}

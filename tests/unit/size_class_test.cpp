// The malloc fast path counts a fresh small block's usable size from its
// size class (mi_good_size) instead of reading the block's page: check that
// against mi_usable_size for every request size lowtide can hand mimalloc
// below the limit, and that the limit is where mimalloc stops agreeing.
#include <catch2/catch.hpp>

#include <cstdint>
#include <thread>
#include <vector>

#include "small_path.hpp"

using namespace lowtide;

TEST_CASE("size-class usable size equals mi_usable_size for every small request") {
  small::configure();
  REQUIRE(small::class_exact_max == small::kClassExactMax);
  std::size_t mismatches = 0, checked = 0;
  for (std::size_t n = 0; n <= small::kClassExactMax + 4096; ++n) {
    if (n > 4096 && n % 16 != 1 && n % 16 != 0) continue;  // every class edge, fewer interiors
    void* p = small::allocate(n);
    REQUIRE(p != nullptr);
    if (small_request(n) <= small::class_exact_max) {
      ++checked;
      if (small::usable_of_new(p, n) != mi_usable_size(p)) ++mismatches;
    }
    small::release(p);
  }
  CHECK(checked > 16000);
  CHECK(mismatches == 0);
}

// malloc's fast path asks mimalloc for the class size itself (fast_class),
// not for n's round-up: the block must be of that same class, 16-aligned,
// for every n the table covers (n = 0 included).
TEST_CASE("fast_class: mimalloc serves the class size from the round-up's class") {
  small::configure();
  REQUIRE(small::class_table_ready);
  std::size_t mismatches = 0, misaligned = 0;
  for (std::size_t n = 0; n <= small::kTableMax; ++n) {
    const std::size_t c = small::fast_class(n);
    void* p = small::allocate_class(c);
    REQUIRE(p != nullptr);
    void* q = small::allocate(n);  // the round-up, as the slow path asks
    REQUIRE(q != nullptr);
    if (c < (n == 0 ? 1 : n) || mi_usable_size(p) != c || mi_usable_size(q) != c) ++mismatches;
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) ++misaligned;
    small::release(p);
    small::release(q);
  }
  CHECK(mismatches == 0);
  CHECK(misaligned == 0);
}

// malloc's fast path finds the thread cache's bin from n directly
// (fast_bin), not from the class: it must be the class's bin for every n
// the table covers, with the cache on and every cached class in a bin.
TEST_CASE("fast_bin: every request's bin is its class's bin") {
  small::configure();
  REQUIRE(small::class_table_ready);
  small::configure_cache(16 << 10);
  REQUIRE(small::cache_on);
  std::size_t mismatches = 0, cached = 0;
  for (std::size_t n = 0; n <= small::kTableMax; ++n) {
    const std::size_t c = small::fast_class(n);
    const unsigned b = small::fast_bin(n);
    if (b != small::cache_bin[c / 16]) ++mismatches;
    if (b != 0) {
      ++cached;
      if (small::cache_class[b] != c) ++mismatches;
    }
  }
  CHECK(mismatches == 0);
  CHECK(cached > small::kTableMax / 2);  // (8 KiB blocks cap at 2: every class is cached)
}

TEST_CASE("mi_good_size stops matching above the limit, so the limit is needed") {
  // If this starts to fail, a newer mimalloc agrees further up and the limit
  // could be raised.
  CHECK_FALSE(small::class_sizes_match(small::kClassExactMax * 2));
}

// free() counts each block's usable size from its mimalloc page
// (small::usable_from_page) instead of calling mi_usable_size: on this
// Debian mimalloc the shortcut must be on, and must give mi_usable_size's
// answer for blocks of every kind.
namespace {
std::size_t checked_blocks = 0, disagreements = 0;
void expect_same(const void* p) {
  ++checked_blocks;
  if (small::usable(p) != mi_usable_size(p)) ++disagreements;
  // free's fast path reads p's slice entry as its page (slice_of): only
  // where it is, of p's size, for a block start the cache may take (an
  // aligned block's inner address has a smaller mi_usable_size).
  const unsigned char* slice = small::slice_of(p);
  const small::SliceRef ref = small::slice_ref(p);
  if (small::slice_size_field(ref) != small::page_size_field(slice) ||
      small::slice_cacheable(ref, small::slice_size_field(ref)) !=
          small::slice_cacheable(slice, small::page_size_field(slice)))
    ++disagreements;
  if (small::slice_cacheable(slice, small::page_size_field(slice)) &&
      (slice != small::page_of(p) || small::page_size_field(slice) != mi_usable_size(p) ||
       mi_usable_size(p) > small::kCacheMax))
    ++disagreements;
}
}  // namespace

TEST_CASE("free's page-read usable size equals mi_usable_size for blocks of every kind") {
  small::configure();
  REQUIRE(small::page_size_direct);
  checked_blocks = disagreements = 0;
  // Every size to 4 KiB, then class edges to 8 MiB (mimalloc's large and
  // huge pages, which lowtide hands it only when the large path is full).
  std::vector<void*> live;
  for (std::size_t n = 1; n <= (std::size_t{8} << 20); n += (n < 4096 ? 1 : n / 7)) {
    void* p = mi_malloc(n);
    REQUIRE(p != nullptr);
    expect_same(p);
    live.push_back(p);
  }
  // mimalloc's huge blocks (a segment of their own, over 32 MiB): the
  // page's size field cannot hold theirs, so they are asked.
  for (std::size_t n : {std::size_t{40} << 20, (std::size_t{64} << 20) + 12345}) {
    void* p = mi_malloc(n);
    REQUIRE(p != nullptr);
    expect_same(p);
    live.push_back(p);
  }
  // Aligned blocks (their pages are marked and must go to mi_usable_size).
  for (std::size_t align = 16; align <= (std::size_t{1} << 20); align *= 2)
    for (std::size_t n : {std::size_t{1}, align / 2 + 1, align * 3, std::size_t{100000}}) {
      void* p = mi_malloc_aligned_at(n, align, 0);
      REQUIRE(p != nullptr);
      REQUIRE(reinterpret_cast<std::uintptr_t>(p) % align == 0);
      expect_same(p);
      live.push_back(p);
    }
  // Zeroed, and grown by realloc across classes.
  void* g = mi_zalloc(24);
  for (std::size_t n = 24; n < (std::size_t{2} << 20); n = n * 3 / 2) {
    g = mi_realloc(g, n);
    REQUIRE(g != nullptr);
    expect_same(g);
  }
  live.push_back(g);
  // Blocks another thread made (a page of another heap), read here.
  std::vector<void*> theirs;
  std::thread([&] {
    for (std::size_t n = 16; n <= 65536; n += 48) theirs.push_back(mi_malloc(n));
  }).join();
  for (void* p : theirs) {
    REQUIRE(p != nullptr);
    expect_same(p);
  }
  for (void* p : live) mi_free(p);
  for (void* p : theirs) mi_free(p);
  CHECK(checked_blocks > 5000);
  CHECK(disagreements == 0);
}

TEST_CASE("a block in a page holding aligned blocks is asked of mimalloc") {
  // The page's block size is not the usable size of an aligned block carved
  // from inside a larger one: such a page reads as 0 (ask mimalloc).
  small::configure();
  REQUIRE(small::page_size_direct);
  std::vector<void*> held;
  void* p = nullptr;
  for (int i = 0; i < 64 && p == nullptr; ++i) {
    // Alignments the free list rarely meets by chance: the block is carved
    // from inside a larger one and its page gets the aligned mark.
    void* q = mi_malloc_aligned_at(48, 4096, 0);
    REQUIRE(q != nullptr);
    held.push_back(q);
    if (small::usable_from_page(q) == 0) p = q;
  }
  CHECK(p != nullptr);
  if (p != nullptr) CHECK(small::usable(p) == mi_usable_size(p));
  for (void* q : held) mi_free(q);
}

// free's fast path skips saving errno where mi_free is sure to make no
// system call: the block's page has another block in use
// (small::quiet_free_size; libc.hpp). A block alone in its page (its free
// empties the page, which may madvise or munmap), an aligned page and a
// huge block must say 0, so that errno is saved around those.
TEST_CASE("quiet_free_size: the page's size while another block is in use there, else 0") {
  small::configure();
  REQUIRE(small::page_size_direct);
  // A class with few blocks per page, taken from this thread's fresh pages.
  // Allocate until two blocks share a page that holds nothing else.
  constexpr std::size_t kSize = 7000;
  std::vector<void*> held;
  void* a = nullptr;
  void* b = nullptr;
  for (int i = 0; i < 200 && b == nullptr; ++i) {
    void* p = mi_malloc(kSize);
    REQUIRE(p != nullptr);
    if (a != nullptr && small::page_of(p) == small::page_of(a) && small::page_used(small::page_of(a)) == 2) {
      b = p;
    } else {
      if (a != nullptr) held.push_back(a);
      a = p;
    }
  }
  REQUIRE(b != nullptr);
  // Pages are handed out whole here: a lone a has used == 1 only once the
  // blocks allocated before it in its page are freed; so check both ways.
  CHECK(small::quiet_free_size(a) == mi_usable_size(a));
  CHECK(small::quiet_free_size(b) == mi_usable_size(b));
  mi_free(b);
  CHECK(small::page_used(small::page_of(a)) == 1);
  CHECK(small::quiet_free_size(a) == 0);  // its free empties the page
  mi_free(a);
  for (void* p : held) mi_free(p);
  // Huge: asked, errno saved.
  void* huge = mi_malloc(std::size_t{40} << 20);
  REQUIRE(huge != nullptr);
  CHECK(small::quiet_free_size(huge) == 0);
  mi_free(huge);
  // Aligned blocks carved from inside larger ones mark their page.
  std::vector<void*> aligned;
  bool saw_marked = false;
  for (int i = 0; i < 64 && !saw_marked; ++i) {
    void* q = mi_malloc_aligned_at(48, 4096, 0);
    REQUIRE(q != nullptr);
    aligned.push_back(q);
    if (small::usable_from_page(q) == 0) {
      saw_marked = true;
      CHECK(small::quiet_free_size(q) == 0);
    }
  }
  CHECK(saw_marked);
  for (void* q : aligned) mi_free(q);
}

TEST_CASE("page_heap: a page names the heap that made its blocks (the shelf's own-or-not test)") {
  small::configure();
  REQUIRE(small::page_heap_known);
  const void* mine = mi_heap_get_default();
  std::vector<void*> ours, theirs;
  const void* their_heap = nullptr;
  for (std::size_t n = 16; n <= 8192; n += 112) ours.push_back(mi_malloc(n));
  std::size_t theirs_named = 0;
  std::thread([&] {
    their_heap = mi_heap_get_default();
    for (std::size_t n = 16; n <= 8192; n += 112) theirs.push_back(mi_malloc(n));
    for (void* p : theirs) theirs_named += p != nullptr && small::page_heap(small::page_of(p)) == their_heap;
  }).join();
  REQUIRE(their_heap != mine);
  CHECK(theirs_named == theirs.size());
  for (void* p : ours) {
    REQUIRE(p != nullptr);
    CHECK(small::page_heap(small::page_of(p)) == mine);
  }
  // The thread has exited: its pages may be abandoned (heap no longer its),
  // never this thread's.
  for (void* p : theirs) {
    REQUIRE(p != nullptr);
    CHECK(small::page_heap(small::page_of(p)) != mine);
  }
  for (void* p : ours) mi_free(p);
  for (void* p : theirs) mi_free(p);
}

// Under a finite RLIMIT_DATA mimalloc's segments are committed as used
// (eager_commit off), and the default comes back when the limit is lifted;
// a process that never had a limit never has the option written
// (reliability.md no. 128). MIMALLOC_EAGER_COMMIT named in the environment
// is the user's choice and stands: this test runs without it, the last
// case names it (note_environment only ever adds the name, so last).
TEST_CASE("fit_data_limit: eager commit off under a data limit, back when lifted, the user's setting stands") {
  const long before = mi_option_get(mi_option_eager_commit);
  mi_option_set(mi_option_eager_commit, 7);  // a mark no write of fit_data_limit's makes
  lowtide::small::fit_data_limit(false);     // no limit, never one: untouched
  CHECK(mi_option_get(mi_option_eager_commit) == 7);
  mi_option_set(mi_option_eager_commit, before);
  lowtide::small::fit_data_limit(true);
  CHECK(mi_option_get(mi_option_eager_commit) == 0);
  lowtide::small::fit_data_limit(true);
  CHECK(mi_option_get(mi_option_eager_commit) == 0);
  lowtide::small::fit_data_limit(false);
  CHECK(mi_option_get(mi_option_eager_commit) == 1);
  const char* env[] = {"PATH=/bin", "mimalloc_eager_commit=1", nullptr};  // any case, as mimalloc reads it
  lowtide::small::note_environment(env, true);  // a secure process: names nothing
  lowtide::small::fit_data_limit(true);
  CHECK(mi_option_get(mi_option_eager_commit) == 0);
  lowtide::small::fit_data_limit(false);
  lowtide::small::note_environment(env, false);
  lowtide::small::fit_data_limit(true);
  CHECK(mi_option_get(mi_option_eager_commit) == 1);
}

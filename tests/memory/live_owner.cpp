// Small blocks freed while the thread that made them lives go back to the
// kernel (small::trim_own; docs/design.md, "Small blocks freed while their
// thread lives"). Under mimalloc 2.0.9 alone they stayed resident for good:
// a page another thread emptied is freed only when its owner collects its
// heap, and a page freed inside a segment still in use is only scheduled
// for decommit, carried out when that segment next hands out a page.
//
// The main thread makes 256 MiB of 64 KiB blocks (below the cutoff: small
// blocks), each written in full, and a 3000-byte block after every fourth,
// kept: every 32 MiB segment stays in use. Then
//   `consumer`: another thread frees the 64 KiB blocks and stays alive;
//   `own`:      the main thread frees them itself;
// and the main thread goes on as a working program does: rounds of 200
// small blocks replaced by others, 1 ms apart. RSS must come back within
// 48 MiB of where it started within 10 s (due in ~0.2 s: the owner's trims
// are 100 ms apart). Before: 256 MiB held after 10 s either way.
//   `idle`: no small block kept (the consumer's frees empty whole
// segments, which mimalloc keeps in its segment cache for 500 ms and
// purges only in a later collect), a large block first (lowtide's decay
// thread runs), and the main thread works for 0.3 s only, then makes no
// call: the decay thread's collect after the trim that emptied them
// (cache::note_segments_emptied) must give them back within 5 s (due at
// ~0.7 s). Without it they stayed for good.
//   `held` (run with LOWTIDE_SMALL_TRIM=off): `consumer`'s run, but the
// memory must still be held after 1 s of work: the switch turns the trim
// off, and this program sees the difference.
//
// What the trim must not do: drop a byte of a live block. Every kept block
// is checked, and then 64 KiB blocks made again over the dropped spans
// hold what is written to them (their spans taken back from the schedule).
#include "../lowtide_stats.hpp"

#include <pthread.h>
#include <sys/mman.h>

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace {

constexpr std::size_t kBig = 64 * KiB;
constexpr std::size_t kBigCount = 256 * MiB / kBig;
constexpr std::size_t kKeep = 3000;
constexpr std::size_t kKeepCount = kBigCount / 4;
constexpr std::size_t kSlack = 48 * MiB;

void** big = nullptr;  // in pages of its own (mmap), not a block of any allocator
void** kept = nullptr;

pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
bool freed = false, finish = false;

void* consumer(void*) {
  for (std::size_t i = 0; i < kBigCount; ++i) free(opaque(big[i]));
  pthread_mutex_lock(&mu);
  freed = true;
  pthread_cond_broadcast(&cv);
  while (!finish) pthread_cond_wait(&cv, &mu);  // alive until the end
  pthread_mutex_unlock(&mu);
  return nullptr;
}

std::size_t rss_kib() { return lt::status_kib("VmRSS:"); }

void* map_list(std::size_t n) {
  void* v = mmap(nullptr, n * sizeof(void*), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(v != MAP_FAILED);
  return v;
}

// One round of a working program: 200 of a ring of 4096 blocks of
// 16 B-4 KiB replaced by blocks of other sizes, written (the allocations
// that reach mimalloc's page refills: a round that made and freed the same
// sizes would be served by lowtide's thread cache alone).
void* ring[4096];
unsigned ring_at = 0;
std::uint32_t lcg = 12345;
void work_round() {
  for (unsigned i = 0; i < 200; ++i, ++ring_at) {
    void*& slot = ring[ring_at % 4096];
    free(slot);
    lcg = lcg * 1664525u + 1013904223u;
    const std::size_t n = 16 + (lcg >> 8) % 4080;
    slot = malloc(opaque(n));
    CHECK(slot != nullptr);
    std::memset(slot, static_cast<int>(i), n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CHECK(argc == 2 && (std::strcmp(argv[1], "consumer") == 0 || std::strcmp(argv[1], "own") == 0 ||
                      std::strcmp(argv[1], "idle") == 0 || std::strcmp(argv[1], "held") == 0),
        "usage: live_owner consumer|own|idle|held");
  const bool idle = std::strcmp(argv[1], "idle") == 0;
  const bool held = std::strcmp(argv[1], "held") == 0;
  const bool by_consumer = idle || held || std::strcmp(argv[1], "consumer") == 0;
  lt::arm_watchdog(60, "live_owner");
  big = static_cast<void**>(map_list(kBigCount));
  kept = static_cast<void**>(map_list(kKeepCount));
  if (idle) {  // a large block: lowtide's decay thread starts
    void* l = malloc(opaque(MiB));
    CHECK(l != nullptr);
    std::memset(l, 1, MiB);
    free(l);
  }
  const std::size_t before = rss_kib();

  for (std::size_t i = 0; i < kBigCount; ++i) {
    big[i] = malloc(opaque(kBig));
    CHECK(big[i] != nullptr);
    std::memset(big[i], 0x5a, kBig);
    if (!idle && i % 4 == 3) {
      kept[i / 4] = malloc(opaque(kKeep));
      CHECK(kept[i / 4] != nullptr);
      lt::fill_pattern(kept[i / 4], kKeep, static_cast<unsigned>(i));
    }
  }
  const std::size_t full = rss_kib();
  CHECK(full >= before + (kBigCount * kBig) / KiB * 3 / 4, "the blocks were not resident: %zu -> %zu KiB", before, full);

  pthread_t t{};
  if (by_consumer) {
    CHECK(pthread_create(&t, nullptr, &consumer, nullptr) == 0);
    pthread_mutex_lock(&mu);
    while (!freed) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
  } else {
    for (std::size_t i = 0; i < kBigCount; ++i) free(opaque(big[i]));
  }
  const std::size_t at_free = rss_kib();

  const double t0 = lt::now_seconds();
  std::size_t now = at_free;
  unsigned rounds = 0;
  std::size_t worked = 0;  // idle: RSS when the work stopped
  while (lt::now_seconds() - t0 < (held ? 1 : 10)) {
    if (idle && lt::now_seconds() - t0 >= 0.3) {
      if (worked == 0) worked = rss_kib();
      if (lt::now_seconds() - t0 >= 5.3) break;
    } else {
      work_round();
      ++rounds;
    }
    now = rss_kib();
    if (now <= before + kSlack / KiB && (!idle || worked != 0) && !held) break;
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, nullptr);
  }
  const double took = lt::now_seconds() - t0;
  std::fprintf(stderr, "live_owner %s: RSS %zu KiB at start, %zu with the blocks, %zu right after the free, %zu after %.2f s (%u rounds)\n",
               argv[1], before, full, at_free, now, took, rounds);
  if (idle) std::fprintf(stderr, "live_owner idle: %zu KiB when the work stopped at 0.3 s\n", worked);
  // The report's small object says what the trims did (lowtide_get_stats:
  // small_trims, small_trim_dropped): none with the trim off; with it on,
  // where blocks were kept between the freed ones (every segment stays in
  // use, so it is the trims' drops that give the memory back), at least a
  // quarter of the 256 MiB freed.
  const lowtide_stats st = lt::read_stats();
  std::fprintf(stderr, "live_owner %s: %llu trims dropped %llu KiB\n", argv[1],
               static_cast<unsigned long long>(st.small_trims),
               static_cast<unsigned long long>(st.small_trim_dropped / KiB));
  if (held) {
    CHECK(st.small_trims == 0 && st.small_trim_dropped == 0, "trims counted with the trim off: %llu",
          static_cast<unsigned long long>(st.small_trims));
  } else if (!idle) {
    CHECK(st.small_trims > 0 && st.small_trim_dropped >= kBigCount * kBig / 4,
          "%llu trims, %llu KiB dropped counted for 256 MiB freed", static_cast<unsigned long long>(st.small_trims),
          static_cast<unsigned long long>(st.small_trim_dropped / KiB));
  }
  if (held) {
    CHECK(now >= before + (kBigCount * kBig) / KiB / 2, "LOWTIDE_SMALL_TRIM=off, yet only %zu KiB held after 1 s",
          now - before);
    std::printf("live_owner held: ok\n");
    _exit(0);  // (the consumer still waits)
  }
  CHECK(now <= before + kSlack / KiB, "%zu KiB still resident above the start %.1f s after the free (want <= %zu)",
        now - before, took, kSlack / KiB);

  // Nothing live was dropped.
  for (std::size_t i = 0; i < (idle ? 0 : kKeepCount); ++i) {
    const std::size_t bad = lt::find_pattern_mismatch(kept[i], kKeep, static_cast<unsigned>(i * 4 + 3));
    CHECK(bad == SIZE_MAX, "kept block %zu changed at byte %zu", i, bad);
  }
  // The dropped spans serve new blocks that keep what is written.
  for (std::size_t i = 0; i < kBigCount / 4; ++i) {
    big[i] = malloc(opaque(kBig));
    CHECK(big[i] != nullptr);
    lt::fill_pattern(big[i], kBig, static_cast<unsigned>(i + 7));
  }
  for (unsigned r = 0; r < 300; ++r) {  // trims meanwhile (0.3 s and more)
    work_round();
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, nullptr);
  }
  for (std::size_t i = 0; i < kBigCount / 4; ++i) {
    const std::size_t bad = lt::find_pattern_mismatch(big[i], kBig, static_cast<unsigned>(i + 7));
    CHECK(bad == SIZE_MAX, "new block %zu changed at byte %zu", i, bad);
    free(big[i]);
  }
  for (std::size_t i = 0; i < (idle ? 0 : kKeepCount); ++i) {
    const std::size_t bad = lt::find_pattern_mismatch(kept[i], kKeep, static_cast<unsigned>(i * 4 + 3));
    CHECK(bad == SIZE_MAX, "kept block %zu changed at byte %zu", i, bad);
    free(kept[i]);
  }
  for (void* p : ring) free(p);
  if (by_consumer) {
    pthread_mutex_lock(&mu);
    finish = true;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(t, nullptr);
  }
  std::printf("live_owner %s: ok\n", argv[1]);
  return 0;
}

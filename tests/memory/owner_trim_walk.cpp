// The owner's trim (small::trim_own) drops each of its segments' scheduled
// spans once per trim, however many segments the thread has and however
// their pages are ordered. The trim walks the heap's pages bin by bin, so a
// segment with pages in two bins comes back after every other segment; its
// walk once remembered the last 32 segments only, and past 32 (1 GiB of
// small blocks) it dropped a segment's spans again at each of its pages:
// with 4 GiB, ~7,000 discards and up to 34 ms in one malloc, all signals
// blocked and the collect lock held (docs/reliability.md).
//
// The main thread makes 1.5 GiB of 100 KiB and 60 KiB blocks in turn (two
// bins of medium pages in every segment, ~59 segments; the blocks are not
// written: ~90 MiB resident), keeps the first block of each size in each
// segment and frees the others (every segment keeps a page of each bin and
// has its free spans scheduled for decommit). Then it works: rounds of
// small blocks replaced, whose page refills run the trims. This program's
// madvise stands in for libc's (lowtide calls it through its GOT): the
// MADV_DONTNEED calls lowtide makes inside one malloc (one trim) must never
// repeat a range, and trims must have dropped at least one range per segment (not
// vacuous: LOWTIDE_SMALL_TRIM=off fails it). Before the fix: 484 repeats.
#include "../lowtide_test.hpp"

#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <cstdint>

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace {

// The main thread's malloc call being made by the work rounds (0: none;
// other threads' calls, lowtide's decay thread's, are not counted).
__thread volatile unsigned long call_id = 0;
struct Discard {
  unsigned long call;
  std::uintptr_t at;
  std::size_t len;
};
constexpr unsigned kMaxDiscards = 1u << 16;
Discard discards[kMaxDiscards];
unsigned n_discards = 0, repeats = 0, total = 0;

constexpr std::size_t kHeap = 1536 * MiB;
constexpr std::size_t kA = 100 * KiB, kB = 60 * KiB;
constexpr std::size_t kPairs = kHeap / (kA + kB);
void* a[kPairs];
void* b[kPairs];

// The first block of each segment (32 MiB) in list v is kept, the others freed.
unsigned keep_one_per_segment(void** v) {
  static std::uintptr_t seen[512];
  unsigned n = 0;
  for (std::size_t i = 0; i < kPairs; ++i) {
    const std::uintptr_t s = reinterpret_cast<std::uintptr_t>(v[i]) >> 25;
    bool first = true;
    for (unsigned j = 0; j < n; ++j) first = first && seen[j] != s;
    if (first && n < 512) {
      seen[n++] = s;
    } else {
      free(opaque(v[i]));
      v[i] = nullptr;
    }
  }
  return n;
}

}  // namespace

// lowtide's load address (dladdr of its malloc): mimalloc's own decommits
// (madvise too, in 2.0.9) may meet a range the trim dropped earlier in the
// same malloc call, and are not counted.
void* lowtide_base = nullptr;
bool from_lowtide(void* caller) {
  Dl_info info;
  return dladdr(caller, &info) != 0 && info.dli_fbase == lowtide_base;
}

// (No allocation here: it runs inside lowtide's trim.)
extern "C" int madvise(void* p, std::size_t len, int advice) {
  const long r = syscall(SYS_madvise, p, len, advice);
  const unsigned long call = call_id;
  if (advice == MADV_DONTNEED && call != 0 && from_lowtide(__builtin_return_address(0))) {
    ++total;
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    for (unsigned i = n_discards; i-- > 0 && discards[i].call == call;)
      if (discards[i].at == at && discards[i].len == len) {
        ++repeats;
        break;
      }
    if (n_discards < kMaxDiscards) discards[n_discards++] = {call, at, len};
  }
  return r == 0 ? 0 : -1;
}

int main() {
  lt::arm_watchdog(60, "owner_trim_walk");
  Dl_info info;
  CHECK(dladdr(reinterpret_cast<void*>(&malloc), &info) != 0 && std::strstr(info.dli_fname, "lowtide") != nullptr,
        "malloc is not lowtide's");
  lowtide_base = info.dli_fbase;
  for (std::size_t i = 0; i < kPairs; ++i) {
    a[i] = malloc(opaque(kA));
    b[i] = malloc(opaque(kB));
    CHECK(a[i] != nullptr && b[i] != nullptr);
  }
  const unsigned segments = keep_one_per_segment(a);
  keep_one_per_segment(b);
  CHECK(segments > 40, "only %u segments: the walk's old ring of 32 would not be passed", segments);

  static void* ring[4096];
  std::uint32_t lcg = 1;
  for (unsigned r = 0; r < 600; ++r) {  // ~1 s: several trims, 100 ms apart
    for (unsigned i = 0; i < 200; ++i) {
      lcg = lcg * 1664525u + 1013904223u;
      void*& slot = ring[lcg % 4096];
      free(slot);
      call_id = call_id + 1;
      slot = malloc(opaque(16 + (lcg >> 8) % 4080));
      call_id = 0;
      CHECK(slot != nullptr);
    }
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, nullptr);
  }
  std::fprintf(stderr, "owner_trim_walk: %u segments, %u discards in trims, %u repeated within one trim\n", segments,
               total, repeats);
  CHECK(repeats == 0, "%u ranges dropped twice in one trim", repeats);
  CHECK(total >= segments, "only %u discards for %u segments: no trim ran?", total, segments);
  for (void* p : ring) free(p);
  for (std::size_t i = 0; i < kPairs; ++i) {
    free(a[i]);
    free(b[i]);
  }
  std::printf("owner_trim_walk: ok\n");
  return 0;
}

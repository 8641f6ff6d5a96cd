// A thread's small-block pages come back when it exits, as they do under
// raw mimalloc: no block of its own pages may still be held by lowtide (its
// thread cache, or a shelf) when mimalloc abandons its heap. mimalloc's key
// destructor runs before lowtide's and abandons every segment that still
// has a block in use; such a segment keeps its free pages committed until
// some thread reclaims it, which may be never. Two ways lowtide held them:
// - the thread cache, flushed only by lowtide's own key destructor, after
//   the abandon (now: at the start of mimalloc's collect, through its
//   deferred-free hook);
// - the shelf: a bin full of the thread's own blocks goes there when a
//   block of another thread's page overflows it, as the std::thread state
//   its creator made does at every std::thread's end (now: the forced
//   collect's hook gives back the shelves too).
//
// `immediate` (run with MIMALLOC_SEGMENT_DECOMMIT_DELAY=0, so a segment
// mimalloc frees is decommitted at once): what stays resident right after
// the join is what the exited thread's abandoned segments hold. Before
// the fix: ~24 MiB of 24 MiB, each way. Run without the decay thread
// (meson.build says why).
//
// `decay` (mimalloc's defaults: a freed segment waits 500 ms in its
// segment cache, purged only by a later call into mimalloc): a large block
// first, so the process has lowtide's decay thread, which collects once no
// thread has exited for that delay (cache::note_thread_exit). The RSS the
// threads left must be gone within 5 s (due at 0.6-1 s); before, under raw
// mimalloc too, it stayed for good in a process that makes no more calls.
// Also where the main thread frees the exited thread's blocks after the
// join (their segment abandoned in use at the exit, emptied later): the
// collect that comes 0.6 s after the first (due at 1.2-1.6 s).
//
// `small` (the same, with no large block: a C program that only makes
// small ones): a thread that handed out under 4 MiB of small blocks starts
// no lowtide thread at its exit; the worker, which handed out 24 MiB,
// starts the decay thread, and its pages go as in `decay`. Before
// 2026-12-06 only a large allocation started that thread, and they stayed
// resident for good (churn-2t: 25 MiB where glibc keeps 3). The same with
// mimalloc's purge delay at a minute (thread_exit_release): the pages go
// back by the decay thread's forced release 100 ms after such an exit,
// not by the collects that wait for mimalloc's delay.
#include "../lowtide_test.hpp"

#include <dirent.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace {

constexpr std::size_t kRequest = 1000;  // a class the thread cache keeps (up to kCacheMax)
constexpr std::size_t kTotal = 24 * MiB;
constexpr std::size_t kBlocks = kTotal / kRequest;
constexpr std::size_t kSlack = 6 * MiB;  // stacks, lowtide's and mimalloc's thread records, page tables

void* foreign = nullptr;  // a block of the main thread's pages, or NULL
bool main_frees = false;  // the worker leaves its blocks to the main thread
void** handed = nullptr;  // the worker's list, when it does

void* worker(void*) {
  // The list in pages of its own (mmap: not a block of any allocator).
  auto** v = static_cast<void**>(mmap(nullptr, kBlocks * sizeof(void*), PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  CHECK(v != MAP_FAILED);
  for (std::size_t i = 0; i < kBlocks; ++i) {
    v[i] = malloc(opaque(kRequest));
    CHECK(v[i] != nullptr);
    std::memset(v[i], 0x5a, kRequest);
  }
  if (main_frees) {
    handed = v;
    return nullptr;
  }
  // Its own blocks freed: the cache opens (warm) and its bin of this class
  // fills to its largest cap; the rest go to mimalloc.
  for (std::size_t i = 0; i < kBlocks; ++i) free(opaque(v[i]));
  // Then another thread's block of the same class: the full bin (its own
  // blocks) goes onto the shelf.
  if (foreign != nullptr) free(opaque(foreign));
  munmap(v, kBlocks * sizeof(void*));
  return nullptr;
}

std::size_t rss_kib() { return lt::status_kib("VmRSS:"); }

bool decay_mode = false;

void run(bool with_foreign, const char* what) {
  foreign = with_foreign ? malloc(opaque(kRequest)) : nullptr;
  pthread_t t;
  const std::size_t before = rss_kib();
  CHECK(pthread_create(&t, nullptr, worker, nullptr) == 0);
  CHECK(pthread_join(t, nullptr) == 0);
  if (main_frees) {
    CHECK(handed != nullptr);
    for (std::size_t i = 0; i < kBlocks; ++i) free(opaque(handed[i]));
    munmap(handed, kBlocks * sizeof(void*));
    handed = nullptr;
  }
  const double joined = lt::now_seconds();
  std::size_t kept = 0;
  for (;;) {
    const std::size_t after = rss_kib();
    kept = after > before ? (after - before) * KiB : 0;
    if (kept <= kSlack || !decay_mode || lt::now_seconds() - joined > 5) break;
    usleep(20'000);
  }
  std::printf("%s: %zu KiB resident %.2f s after the thread's exit (it had %zu KiB)\n", what, kept / KiB,
              lt::now_seconds() - joined, kTotal / KiB);
  CHECK(kept <= kSlack, "%s: the exited thread's pages stayed resident: %zu KiB (at most %zu)", what, kept / KiB,
        kSlack / KiB);
}

void* idle(void*) { return nullptr; }

int threads_now() {
  DIR* d = opendir("/proc/self/task");
  CHECK(d != nullptr);
  int n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  lt::arm_watchdog(60, "thread_exit");
  CHECK(argc == 2 && (std::strcmp(argv[1], "immediate") == 0 || std::strcmp(argv[1], "decay") == 0 ||
                      std::strcmp(argv[1], "small") == 0),
        "usage: thread_exit immediate|decay|small");
  const bool small_only = std::strcmp(argv[1], "small") == 0;
  decay_mode = small_only || std::strcmp(argv[1], "decay") == 0;
  const char* delay = std::getenv("MIMALLOC_SEGMENT_DECOMMIT_DELAY");
  if (small_only) {
    // thread_exit_release runs it with a purge delay of a minute: only the
    // forced release after a working thread's exit can then give the pages
    // back within the 5 s the runs wait.
    CHECK(delay == nullptr || std::strcmp(delay, "0") != 0, "small: run without MIMALLOC_SEGMENT_DECOMMIT_DELAY=0");
  } else if (decay_mode) {
    CHECK(delay == nullptr, "decay: run with mimalloc's default delays");
    // A large block made and freed: the decay thread starts.
    void* big = malloc(opaque(lt::cutoff() * 4));
    CHECK(big != nullptr);
    std::memset(big, 1, 4096);
    free(opaque(big));
  } else {
    CHECK(delay != nullptr && std::strcmp(delay, "0") == 0, "immediate: run with MIMALLOC_SEGMENT_DECOMMIT_DELAY=0");
  }
  // A first thread, so that glibc's cached stack and lowtide's and
  // mimalloc's thread records are in place before the measures.
  pthread_t t;
  CHECK(pthread_create(&t, nullptr, idle, nullptr) == 0);
  CHECK(pthread_join(t, nullptr) == 0);
  if (small_only) CHECK(threads_now() == 1, "a thread that handed out nothing started %d thread(s)", threads_now() - 1);
  run(false, "its own blocks only");
  if (small_only) CHECK(threads_now() > 1, "the worker's exit started no lowtide thread");
  run(true, "then a block of another thread");
  run(false, "its own blocks only, again");
  if (decay_mode) {
    // Its blocks still live at its exit (mimalloc abandons their segment),
    // freed by the main thread after the join: the first collect frees the
    // emptied segment into mimalloc's cache, the second purges it.
    main_frees = true;
    run(false, "its blocks freed by the main thread after its exit");
  }
  std::printf("ok\n");
  return 0;
}

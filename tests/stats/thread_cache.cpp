// The thread cache (LOWTIDE_THREAD_CACHE, small_path.hpp) seen through the
// small_thread_cached gauge: a warm thread keeps at most its cap of a class
// (a bin that overflows raises its cap, doubling, up to four times the base
// before it gives anything away: cache_growth.cpp tests the bounds on that),
// a bin that overflows with another thread's block goes whole onto its
// class's shelf (at most 4 bins a class; a thread freeing its own blocks
// shelves none) and a thread whose bin is empty takes one from there (a
// producer's mallocs served by what its consumer freed); a thread's cache
// and the shelves go back to mimalloc when the thread exits, calls
// lowtide_release() or malloc_trim; a forked child does not
// count its parent's other threads' caches. With LOWTIDE_THREAD_CACHE=0 nothing is ever cached.
//
// The blocks are of a class nothing else in this process frees (the one
// 3000 bytes round up to, ~3 KiB: glibc's own thread set-up and teardown
// free far smaller blocks), so the gauge moves by exactly what the worker
// thread does while the main thread waits without allocating.
#include <malloc.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "../lowtide_stats.hpp"
#include "../lowtide_test.hpp"

namespace {

constexpr std::size_t kRequest = 3000;
constexpr int kFrees = 160;  // more than a grown bin and full shelves hold of a ~3 KiB class
constexpr std::size_t kShelfBins = 4;  // the documented bound (configuration.md)

std::atomic<int> stage{0};
std::size_t cls = 0, cap = 0;  // the class's size and the blocks a thread keeps of it once its bin has grown
enum class After { exit, release, trim, produce };
After after = After::exit;
// The blocks the worker frees: the main thread's (made before the worker
// starts: another thread's pages, as a queue's consumer frees them) or,
// with own_blocks, the worker's own.
void* blocks[kFrees];
bool own_blocks = false;

void wait_for(int s) {
  const double deadline = lt::now_seconds() + 20;
  while (stage.load() < s) {
    CHECK(lt::now_seconds() < deadline, "stage %d not reached", s);
    usleep(100);
  }
}

using release_fn = std::size_t (*)();

// A thread caches from its 256th free on (small_path.hpp, kCacheWarm):
// 300 frees of 16-byte blocks first.
void warm_up() {
  for (int i = 0; i < 300; ++i) free(lt::opaque(malloc(lt::opaque(std::size_t{16}))));
}

void* worker(void*) {
  warm_up();
  // Its warm-up's blocks out of its cache, so the gauge moves by the
  // ~3 KiB blocks alone.
  auto release = reinterpret_cast<release_fn>(dlsym(RTLD_DEFAULT, "lowtide_release"));
  CHECK(release != nullptr);
  release();
  stage.store(1);
  wait_for(2);
  if (own_blocks) {
    for (auto& q : blocks) {
      q = malloc(lt::opaque(kRequest));
      CHECK(q != nullptr);
    }
  }
  for (auto* q : blocks) free(lt::opaque(q));
  if (after == After::release) {
    release();
  } else if (after == After::trim) {
    malloc_trim(0);
  }
  stage.store(3);
  wait_for(4);
  return nullptr;
}

std::uint64_t cached() { return lt::read_stats().small_thread_cached; }

// A producer that never frees: warm by its mallocs alone (no cache of its
// own yet), it mallocs one block of the class while the shelf holds the
// worker's bins: it opens its cache, takes a whole bin and hands out its
// first block (the gauge read before its exit); its exit gives back the
// rest of that bin and the shelves.
void* small_blocks[300];
void* produced = nullptr;
std::uint64_t in_producer = 0;
void* producer(void*) {
  for (auto& q : small_blocks) q = malloc(lt::opaque(std::size_t{16}));
  produced = malloc(lt::opaque(kRequest));
  CHECK(produced != nullptr);
  in_producer = cached();
  return nullptr;
}


// One worker: what its frees added to the gauge, and what its end left;
// then the main thread gives back the shelves (and its own cache).
void run(After how, std::uint64_t want_added, std::uint64_t want_left, bool fork_too, bool own = false) {
  auto release = reinterpret_cast<release_fn>(dlsym(RTLD_DEFAULT, "lowtide_release"));
  CHECK(release != nullptr);
  release();
  stage.store(0);
  after = how;
  own_blocks = own;
  if (!own) {
    for (auto& q : blocks) {
      q = malloc(lt::opaque(kRequest));
      CHECK(q != nullptr);
    }
  }
  pthread_t t;
  CHECK(pthread_create(&t, nullptr, worker, nullptr) == 0);
  wait_for(1);
  const std::uint64_t before = cached();
  stage.store(2);
  wait_for(3);
  const std::uint64_t during = cached();
  CHECK(during == before + want_added, "the worker's frees added %llu bytes to the gauge, expected %llu",
        static_cast<unsigned long long>(during - before), static_cast<unsigned long long>(want_added));
  const std::uint64_t shelved = want_added <= cap * cls ? 0 : want_added - cap * cls;
  if (fork_too) {
    // The worker is still alive and holds its cache: the child has no such
    // thread, so its gauge is the main thread's and the shelves'.
    const pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      alarm(10);
      const std::uint64_t in_child = cached();
      if (in_child != before + shelved) {
        std::fprintf(stderr, "FAIL: the child counts %llu cached bytes, its only thread and the shelves %llu\n",
                     static_cast<unsigned long long>(in_child), static_cast<unsigned long long>(before + shelved));
        _exit(1);
      }
      // The child's own thread caches as usual: two blocks of the class
      // (from a shelved bin, or mimalloc with the cache off), both freed
      // into its bin: the bytes moved from the shelf to the bin.
      void* q = malloc(lt::opaque(kRequest));
      void* r = malloc(lt::opaque(kRequest));
      free(lt::opaque(q));
      free(lt::opaque(r));
      _exit(cached() == in_child ? 0 : 2);
    }
    int status = 0;
    CHECK(lt::wait_bounded(pid, 15, &status), "the child did not finish");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed (status %#x)", status);
  }
  if (how == After::produce) {
    // A producer thread's malloc takes a whole shelved bin: the gauge drops
    // by the block it hands out (the rest of the bin is in the producer's
    // cache), and by the shelves and that bin at the producer's exit: the
    // worker's own bin is left.
    pthread_t pt;
    CHECK(pthread_create(&pt, nullptr, producer, nullptr) == 0);
    CHECK(pthread_join(pt, nullptr) == 0);
    CHECK(in_producer == during - (shelved != 0 ? cls : 0),
          "a producer's malloc took %llu bytes off the gauge, expected %llu (one block of a shelved bin)",
          static_cast<unsigned long long>(during - in_producer),
          static_cast<unsigned long long>(shelved != 0 ? cls : 0));
    const std::uint64_t after_exit = cached();
    CHECK(after_exit == before + (want_added - shelved),
          "after the producer's exit the gauge is %llu above where it started, expected %llu (the worker's bin)",
          static_cast<unsigned long long>(after_exit - before),
          static_cast<unsigned long long>(want_added - shelved));
    free(lt::opaque(produced));
    for (auto* q : small_blocks) free(lt::opaque(q));
  }
  stage.store(4);
  CHECK(pthread_join(t, nullptr) == 0);
  const std::uint64_t end = cached();
  if (how != After::produce)
    CHECK(end == before + want_left,
          "after the worker's end the gauge is %llu above where it started, expected %llu",
          static_cast<unsigned long long>(end - before), static_cast<unsigned long long>(want_left));
  release();
  CHECK(cached() == 0, "lowtide_release() gave back the shelves: %llu bytes left",
        static_cast<unsigned long long>(cached()));
}

}  // namespace

int main() {
  warm_up();
  const char* env = std::getenv("LOWTIDE_THREAD_CACHE");
  void* probe = malloc(lt::opaque(kRequest));
  cls = malloc_usable_size(probe);
  free(lt::opaque(probe));
  CHECK(cls >= kRequest && cls < 2 * kRequest, "usable size %zu", cls);
  // The documented rule: LOWTIDE_THREAD_CACHE bytes of a class (16 KiB by
  // default), at most 64 blocks, to start with; a bin that overflows
  // doubles its cap up to four times that (at most 64 blocks), within the
  // process-wide pool (256 times the base: far more than one class needs).
  std::size_t per_class = 16 << 10;
  if (env != nullptr) per_class = std::strtoull(env, nullptr, 10);  // plain bytes in this test
  cap = per_class < cls ? 0 : 4 * per_class / cls;  // (a class above the value is not cached)
  if (cap > 64) cap = 64;
  CHECK((kShelfBins + 1) * cap < static_cast<std::size_t>(kFrees));
  // The worker's frees fill its bin and grow it to its largest cap, then
  // each full bin goes onto the shelf (4 at most), then its bin fills
  // again; the rest go to mimalloc.
  const std::uint64_t bin = cap * cls, kept = (kShelfBins + 1) * bin;
  if (env == nullptr) CHECK(bin > 0, "a ~3 KiB class is cached by default");

  run(After::exit, kept, 0, false);           // its own bin and the shelves given back at its exit
  run(After::release, 0, 0, false);           // lowtide_release() empties the caller's cache and the shelves
  run(After::trim, 0, 0, false);              // and so does malloc_trim
  run(After::exit, kept, 0, true);            // a child does not count the parent's workers
  run(After::produce, kept, 0, false);        // a producer takes from the shelf
  run(After::exit, bin, 0, false, true);      // a thread freeing its own blocks shelves none
  std::printf("ok: cap %zu blocks of %zu bytes\n", cap, cls);
  return 0;
}

// The thread cache (LOWTIDE_THREAD_CACHE, small_path.hpp) seen through the
// small_thread_cached gauge: a warm thread keeps at most its cap of a class, the
// cache goes back to mimalloc when the thread exits, calls lowtide_release()
// or malloc_trim, and a forked child does not count its parent's other
// threads' caches. With LOWTIDE_THREAD_CACHE=0 nothing is ever cached.
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
constexpr int kFrees = 40;  // more than any cap of a ~3 KiB class

std::atomic<int> stage{0};
std::size_t cls = 0, cap = 0;  // the class's size and the blocks a thread may keep of it
enum class After { exit, release, trim };
After after = After::exit;

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
  void* p[kFrees];
  for (auto& q : p) {
    q = malloc(lt::opaque(kRequest));
    CHECK(q != nullptr);
  }
  for (auto* q : p) free(lt::opaque(q));
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


// One worker: what its frees added to the gauge, and what its end left.
void run(After how, std::uint64_t want_added, std::uint64_t want_left, bool fork_too) {
  stage.store(0);
  after = how;
  pthread_t t;
  CHECK(pthread_create(&t, nullptr, worker, nullptr) == 0);
  wait_for(1);
  const std::uint64_t before = cached();
  stage.store(2);
  wait_for(3);
  const std::uint64_t during = cached();
  CHECK(during == before + want_added, "the worker's frees added %llu bytes to the gauge, expected %llu",
        static_cast<unsigned long long>(during - before), static_cast<unsigned long long>(want_added));
  if (fork_too) {
    // The worker is still alive and holds its cache: the child has no such
    // thread, so its gauge is the main thread's alone.
    const pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      alarm(10);
      const std::uint64_t in_child = cached();
      if (in_child != before) {
        std::fprintf(stderr, "FAIL: the child counts %llu cached bytes, its only thread %llu\n",
                     static_cast<unsigned long long>(in_child), static_cast<unsigned long long>(before));
        _exit(1);
      }
      // The child's own thread caches as usual: two blocks of the class
      // (the first is the one main() freed, taken back), both freed.
      void* q = malloc(lt::opaque(kRequest));
      void* r = malloc(lt::opaque(kRequest));
      free(lt::opaque(q));
      free(lt::opaque(r));
      _exit(cached() == before + (cap >= 2 ? cls : 0) ? 0 : 2);
    }
    int status = 0;
    CHECK(lt::wait_bounded(pid, 15, &status), "the child did not finish");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed (status %#x)", status);
  }
  stage.store(4);
  CHECK(pthread_join(t, nullptr) == 0);
  const std::uint64_t end = cached();
  CHECK(end == before + want_left, "after the worker's end the gauge is %llu above where it started, expected %llu",
        static_cast<unsigned long long>(end - before), static_cast<unsigned long long>(want_left));
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
  // default), at most 64 blocks.
  std::size_t per_class = 16 << 10;
  if (env != nullptr) per_class = std::strtoull(env, nullptr, 10);  // plain bytes in this test
  cap = per_class / cls;
  if (cap > 64) cap = 64;
  CHECK(cap < static_cast<std::size_t>(kFrees));
  const std::uint64_t kept = cap * cls;
  if (env == nullptr) CHECK(kept > 0, "a ~3 KiB class is cached by default");

  run(After::exit, kept, 0, false);     // given back at the thread's exit
  run(After::release, 0, 0, false);     // lowtide_release() empties the caller's cache
  run(After::trim, 0, 0, false);        // and so does malloc_trim
  run(After::exit, kept, 0, true);      // a child does not count the parent's workers
  std::printf("ok: cap %zu blocks of %zu bytes\n", cap, cls);
  return 0;
}

// Call sites must not deadlock with the loader: one thread dlopens and
// dlcloses a library (whose constructor allocates a large block) in a loop
// while three others allocate large blocks, every one of them captured
// (LOWTIDE_SITE_SAMPLE=0), and the main thread forks children that allocate
// large blocks too, and writes on-demand reports (which walk the live large
// blocks while the others free theirs). Every wait is bounded (watchdog,
// waitpid deadline).
//
// Usage: sites_dlopen <path to libsites_dltarget.so> [report file]
#include "lowtide_test.hpp"

#include <atomic>
#include <thread>
#include <vector>

#include <dlfcn.h>

using lt::opaque;

namespace {

std::atomic<bool> g_stop{false};
std::atomic<long> g_blocks{0};

__attribute__((noinline)) void allocator_thread(int id) {
  const std::size_t sizes[] = {std::size_t{200} << 10, std::size_t{1} << 20, std::size_t{3} << 20};
  std::vector<void*> held;
  std::size_t k = static_cast<std::size_t>(id);
  while (!g_stop.load(std::memory_order_relaxed)) {
    void* p = malloc(opaque(sizes[k++ % 3]));
    CHECK(p != nullptr);
    static_cast<char*>(p)[0] = 1;
    held.push_back(p);
    if (held.size() > 4) {
      free(held.front());
      held.erase(held.begin());
    }
    g_blocks.fetch_add(1, std::memory_order_relaxed);
  }
  for (void* p : held) free(p);
}

}  // namespace

int main(int argc, char** argv) {
  lt::arm_watchdog(120, "sites_dlopen");
  CHECK(argc > 1, "usage: sites_dlopen <libsites_dltarget.so>");
  std::vector<std::thread> workers;
  for (int i = 0; i < 3; ++i) workers.emplace_back(allocator_thread, i);

  constexpr int kLoops = 300;
  std::vector<void*> survivors;  // allocated by the library, freed after it is gone
  for (int i = 0; i < kLoops; ++i) {
    void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    CHECK(h != nullptr, "dlopen: %s", dlerror());
    auto fn = reinterpret_cast<void* (*)(std::size_t)>(dlsym(h, "sites_target_alloc"));
    CHECK(fn != nullptr, "dlsym: %s", dlerror());
    void* p = fn(opaque(std::size_t{512} << 10));
    CHECK(p != nullptr);
    if (i % 10 == 0) survivors.push_back(p);
    else free(p);
    CHECK(dlclose(h) == 0, "dlclose: %s", dlerror());
    if (argc > 2 && i % 30 == 7) {
      using WriteFn = int (*)(const char*, int);
      auto write_report = reinterpret_cast<WriteFn>(dlsym(RTLD_DEFAULT, "lowtide_write_report"));
      CHECK(write_report != nullptr, "lowtide_write_report not found: is lowtide preloaded?");
      CHECK(write_report(argv[2], 3) == 0, "on-demand report failed");
    }
    if (i % 50 == 25) {
      pid_t pid = fork();
      CHECK(pid >= 0);
      if (pid == 0) {
        void* q = malloc(opaque(std::size_t{2} << 20));
        if (q == nullptr) _exit(3);
        static_cast<char*>(q)[0] = 1;
        free(q);
        _exit(0);
      }
      int status = 0;
      CHECK(lt::wait_bounded(pid, 30, &status), "forked child did not finish");
      CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    }
  }
  g_stop.store(true);
  for (auto& t : workers) t.join();
  // Kept past the dlclose on purpose: live at exit, from a site in a module
  // that is gone.
  std::printf("{\"loops\": %d, \"blocks\": %ld, \"survivors\": %zu}\n", kLoops, g_blocks.load(), survivors.size());
  return 0;
}

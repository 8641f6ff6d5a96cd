// dlopen/dlclose a C++ library (dltarget) 200 times while another thread
// allocates. The library allocates in its global constructor and destructor
// and in its functions; blocks cross the module boundary both ways and some
// outlive the dlclose of the library that allocated them.
//
// Usage: dlopen_loop <path to libdltarget.so>   (or DLTARGET_PATH in the env)

#include "dltarget_algo.hpp"
#include "lowtide_test.hpp"

#include <atomic>
#include <thread>

#include <dlfcn.h>

using lt::opaque;

namespace {

std::atomic<bool> g_stop{false};
std::atomic<long> g_ops{0};

void allocator_thread() {
  const std::size_t c = lt::cutoff();
  const std::size_t sizes[] = {32, 700, 9000, c, 2 * c + 77};
  std::size_t k = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    const std::size_t n = sizes[k++ % (sizeof sizes / sizeof sizes[0])];
    auto* p = static_cast<unsigned char*>(malloc(opaque(n)));
    CHECK(p != nullptr);
    lt::fill_pattern(p, n, 3, 4096);
    auto* v = new std::vector<std::string>(20, std::string(50, 's'));
    CHECK(lt::find_pattern_mismatch(p, n, 3, 4096) == SIZE_MAX, "allocator thread: block corrupted");
    delete v;
    free(p);
    g_ops.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace

int main(int argc, char** argv) {
  lt::arm_watchdog(150, "dlopen_loop");
  const char* path = argc > 1 ? argv[1] : std::getenv("DLTARGET_PATH");
  CHECK(path != nullptr && path[0] != '\0', "usage: dlopen_loop <libdltarget.so> (or DLTARGET_PATH)");

  std::thread worker(allocator_thread);

  constexpr int kLoops = 200;
  std::vector<unsigned char*> survivors;  // allocated by the library, freed after its dlclose
  std::vector<char*> strings;
  int unloaded = 0;
  for (int i = 0; i < kLoops; ++i) {
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK(h != nullptr, "dlopen #%d: %s", i, dlerror());
    auto check = lt::dl_sym<int (*)()>(h, "dltarget_check");
    auto work = lt::dl_sym<unsigned long long (*)(int)>(h, "dltarget_work");
    auto dup = lt::dl_sym<char* (*)(const char*)>(h, "dltarget_strdup");
    auto lib_free = lt::dl_sym<void (*)(void*)>(h, "dltarget_free");
    auto new_large = lt::dl_sym<unsigned char* (*)(std::size_t)>(h, "dltarget_new_large");
    auto delete_vector = lt::dl_sym<void (*)(std::vector<int>*)>(h, "dltarget_delete_vector");

    const int st = check();
    CHECK(st == 0, "dlopen #%d: library global state check failed with code %d", i, st);
    const int n = i % 60;
    const unsigned long long got = work(n);
    const unsigned long long want = dltarget_algo(n);
    CHECK(got == want, "dlopen #%d: dltarget_work(%d) = %llu, expected %llu", i, n, got, want);

    char* s = dup("lowtide dlopen loop");
    CHECK(s != nullptr && std::strcmp(s, "lowtide dlopen loop") == 0, "dltarget_strdup returned bad data");
    strings.push_back(s);

    void* mine = malloc(opaque(i % 2 ? std::size_t{100} : 2 * lt::cutoff()));
    CHECK(mine != nullptr);
    lib_free(mine);  // allocated here, freed inside the library

    delete_vector(new std::vector<int>(static_cast<std::size_t>(i + 1), i));

    if (i % 10 == 0) {
      unsigned char* big = new_large(opaque(3 * lt::cutoff() + 5));
      CHECK(big[0] == 0x5A && big[3 * lt::cutoff() + 4] == 0xA5);
      survivors.push_back(big);
    }

    CHECK(dlclose(h) == 0, "dlclose #%d: %s", i, dlerror());
    void* still = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (still == nullptr) {
      ++unloaded;
    } else {
      dlclose(still);
    }
  }
  // Free what the (now unloaded) library allocated.
  for (char* s : strings) {
    CHECK(std::strcmp(s, "lowtide dlopen loop") == 0, "string from unloaded library corrupted");
    free(s);
  }
  for (unsigned char* b : survivors) {
    CHECK(b[0] == 0x5A && b[3 * lt::cutoff() + 4] == 0xA5, "block from unloaded library corrupted");
    delete[] b;
  }
  g_stop = true;
  worker.join();
  std::printf("dlopen_loop: %d loops, library really unloaded %d times, %ld allocator ops meanwhile\n", kLoops,
              unloaded, g_ops.load());
  // If the library is never unloaded (e.g. STB_GNU_UNIQUE symbols), the
  // constructor/destructor paths were not exercised: that would make this
  // test meaningless, so it is a failure.
  CHECK(unloaded == kLoops, "libdltarget stayed loaded after dlclose in %d of %d loops", kLoops - unloaded, kLoops);
  std::printf("PASS dlopen_loop\n");
  return 0;
}

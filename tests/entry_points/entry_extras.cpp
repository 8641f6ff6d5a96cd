// lowtide's and mimalloc's extra exports (entry_points.cpp runs them under
// lowtide only).
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>

#include "entry_points.hpp"

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace entry {

// ------------------------------------------ lowtide / mimalloc extra exports
void test_extra_exports() {
  using malloc_size_t = std::size_t (*)(const void*);
  using good_size_t = std::size_t (*)(std::size_t);
  using reallocf_t = void* (*)(void*, std::size_t);
  using reallocarr_t = int (*)(void*, std::size_t, std::size_t);
  using vfree_t = void (*)(void*);
  using aligned_malloc_t = void* (*)(std::size_t, std::size_t);

  auto sym = [](const char* name) {
    void* s = dlsym(RTLD_DEFAULT, name);
    CHECK(s != nullptr, "extra export %s not found with dlsym(RTLD_DEFAULT)", name);
    return s;
  };
  auto f_malloc_size = reinterpret_cast<malloc_size_t>(sym("malloc_size"));
  auto f_good_size = reinterpret_cast<good_size_t>(sym("malloc_good_size"));
  auto f_reallocf = reinterpret_cast<reallocf_t>(sym("reallocf"));
  auto f_reallocarr = reinterpret_cast<reallocarr_t>(sym("reallocarr"));
  auto f_vfree = reinterpret_cast<vfree_t>(sym("vfree"));
  auto f_aligned_malloc = reinterpret_cast<aligned_malloc_t>(sym("_aligned_malloc"));

  for (std::size_t n : {std::size_t{1}, std::size_t{100}, std::size_t{5000}, g_cutoff, 3 * g_cutoff + 1}) {
    void* p = xmalloc(n);
    CHECK(f_malloc_size(p) >= n, "malloc_size(malloc(%zu)) = %zu", n, f_malloc_size(p));
    CHECK(f_malloc_size(p) == malloc_usable_size(p), "malloc_size != malloc_usable_size for %zu", n);
    release(p);
    CHECK(f_good_size(n) >= n, "malloc_good_size(%zu) = %zu", n, f_good_size(n));
  }

  // reallocf: like realloc, but frees the block on failure.
  for (std::size_t n : {std::size_t{64}, 2 * g_cutoff}) {
    void* p = xmalloc(n);
    lt::fill_pattern(p, n, 5);
    void* q = f_reallocf(p, opaque(n * 2));
    CHECK(q != nullptr && lt::find_prefix_mismatch(q, n, n, 5) == SIZE_MAX, "reallocf(%zu -> %zu) lost data", n,
          n * 2);
    errno = 0;
    void* r = f_reallocf(q, opaque(SIZE_MAX - 10));
    CHECK(r == nullptr && errno == ENOMEM, "reallocf(huge) = %p errno %d", r, errno);
    // q has been freed by reallocf; not touched again (death.cpp checks it was).
  }

  // reallocarr(void* pptr, n, size): returns 0 or an errno value.
  void* arr = nullptr;
  int rc = f_reallocarr(&arr, opaque(std::size_t{100}), 8);
  CHECK(rc == 0 && arr != nullptr, "reallocarr(&NULL, 100, 8) = %d", rc);
  lt::fill_pattern(arr, 800, 9);
  rc = f_reallocarr(&arr, opaque(g_cutoff), 4);
  CHECK(rc == 0 && arr != nullptr && lt::find_pattern_mismatch(arr, 800, 9) == SIZE_MAX,
        "reallocarr grow to large: rc %d", rc);
  void* before = arr;
  rc = f_reallocarr(&arr, opaque(SIZE_MAX / 2), 4);
  CHECK(rc != 0, "reallocarr overflow returned 0");
  CHECK(arr == before, "reallocarr failure modified *pptr");
  CHECK(lt::find_pattern_mismatch(arr, 800, 9) == SIZE_MAX, "reallocarr failure damaged block");
  rc = f_reallocarr(&arr, opaque(std::size_t{10}), 8);
  CHECK(rc == 0 && arr != nullptr && lt::find_pattern_mismatch(arr, 80, 9) == SIZE_MAX, "reallocarr shrink: %d", rc);
  release(arr);

  for (std::size_t n : {std::size_t{10}, 3 * g_cutoff}) f_vfree(xmalloc(n));

  for (std::size_t a : {std::size_t{16}, std::size_t{64}, std::size_t{4096}, std::size_t{1} << 21}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{1000}, g_cutoff, 2 * g_cutoff + 3}) {
      void* p = f_aligned_malloc(opaque(n), opaque(a));
      CHECK(p != nullptr && lt::aligned_to(p, a), "_aligned_malloc(%zu, %zu) = %p", n, a, p);
      static_cast<unsigned char*>(p)[n - 1] = 1;
      release(p);
    }
  }
}

}  // namespace entry

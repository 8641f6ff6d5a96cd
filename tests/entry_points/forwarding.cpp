// Forwarding mode (docs/design.md): when lowtide is not the process's
// malloc, every call must reach the allocator that won, so that no pointer
// meets an allocator that did not make it.
//
//   forwarding preload   run with LD_PRELOAD="libjemalloc.so.2 liblowtide.so":
//                        jemalloc's malloc is bound first; lowtide is loaded
//                        (its API answers) but must stay out of the way
//   forwarding dlopen LIB  not preloaded: lowtide dlopen'ed later, and its own
//                        exported malloc family called through dlsym on its
//                        handle; every block must be glibc's (freed by
//                        glibc's free, sized by glibc's malloc_usable_size)
#include <dlfcn.h>
#include <malloc.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "../lowtide_test.hpp"
#include "lowtide/lowtide.h"

namespace {

using MallctlFn = int (*)(const char*, void*, std::size_t*, void*, std::size_t);

// Bytes jemalloc says this thread has allocated so far.
std::uint64_t jemalloc_allocated() {
  static auto mallctl = reinterpret_cast<MallctlFn>(dlsym(RTLD_DEFAULT, "mallctl"));
  CHECK(mallctl != nullptr, "jemalloc is not loaded");
  std::uint64_t v = 0;
  std::size_t len = sizeof v;
  CHECK(mallctl("thread.allocated", &v, &len, nullptr, 0) == 0);
  return v;
}

void check_family(void* (*m)(std::size_t), void (*f)(void*), void* (*c)(std::size_t, std::size_t),
                  void* (*r)(void*, std::size_t), void* (*al)(std::size_t, std::size_t),
                  int (*pm)(void**, std::size_t, std::size_t), std::size_t (*us)(void*)) {
  for (std::size_t n : {std::size_t{24}, std::size_t{5000}, std::size_t{300} << 10, std::size_t{10} << 20}) {
    auto* p = static_cast<unsigned char*>(m(lt::opaque(n)));
    CHECK(p != nullptr && lt::aligned_to(p, 16), "malloc(%zu)", n);
    CHECK(us(p) >= n, "usable size of %zu: %zu", n, us(p));
    std::memset(p, 0x5a, n);
    p = static_cast<unsigned char*>(r(p, lt::opaque(2 * n)));
    CHECK(p != nullptr);
    for (std::size_t i = 0; i < n; i += 509) CHECK(p[i] == 0x5a, "realloc kept byte %zu of %zu", i, n);
    f(p);
    auto* z = static_cast<unsigned char*>(c(lt::opaque(n), 1));
    CHECK(z != nullptr);
    for (std::size_t i = 0; i < n; i += 4093) CHECK(z[i] == 0, "calloc zero at %zu", i);
    f(z);
  }
  void* a = al(std::size_t{1} << 16, 1000);
  CHECK(a != nullptr && lt::aligned_to(a, std::size_t{1} << 16));
  f(a);
  void* q = nullptr;
  CHECK(pm(&q, 4096, 100) == 0 && lt::aligned_to(q, 4096));
  f(q);
}

int preload_case() {
  // lowtide is loaded (its API answers) but jemalloc serves every block.
  auto get_stats = reinterpret_cast<int (*)(lowtide_stats*)>(dlsym(RTLD_DEFAULT, "lowtide_get_stats"));
  CHECK(get_stats != nullptr, "lowtide is not loaded");
  const std::uint64_t before = jemalloc_allocated();
  check_family(malloc, free, calloc, realloc, aligned_alloc, posix_memalign, malloc_usable_size);
  void* v = valloc(100);
  void* pv = pvalloc(100);
  CHECK(v != nullptr && pv != nullptr && lt::aligned_to(v, 4096) && lt::aligned_to(pv, 4096));
  free(v);
  free(pv);
  void* big = new char[std::size_t{20} << 20];
  delete[] static_cast<char*>(lt::opaque(big));
  // jemalloc has no malloc_trim or mallopt: they reach glibc's, as without
  // lowtide (lowtide's own, forwarding to itself, spun forever; the
  // watchdog stops a hang).
  (void)malloc_trim(0);
  CHECK(mallopt(M_TRIM_THRESHOLD, 1 << 20) == 1, "mallopt");
  const std::uint64_t after = jemalloc_allocated();
  CHECK(after - before >= (std::size_t{40} << 20), "jemalloc served the blocks: %llu bytes",
        static_cast<unsigned long long>(after - before));
  lowtide_stats s{};
  s.size = sizeof s;
  CHECK(get_stats(&s) == 0);
  CHECK(s.large_maps == 0 && s.large_out == 0, "lowtide made no large block (%llu maps)",
        static_cast<unsigned long long>(s.large_maps));
  std::printf("forwarding (preload): jemalloc served %llu bytes; lowtide made none\n",
              static_cast<unsigned long long>(after - before));
  return 0;
}

int dlopen_case(const char* lib) {
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  CHECK(h != nullptr, "dlopen: %s", dlerror());
  auto m = lt::dl_sym<void* (*)(std::size_t)>(h, "malloc");
  auto f = lt::dl_sym<void (*)(void*)>(h, "free");
  auto c = lt::dl_sym<void* (*)(std::size_t, std::size_t)>(h, "calloc");
  auto r = lt::dl_sym<void* (*)(void*, std::size_t)>(h, "realloc");
  auto al = lt::dl_sym<void* (*)(std::size_t, std::size_t)>(h, "aligned_alloc");
  auto pm = lt::dl_sym<int (*)(void**, std::size_t, std::size_t)>(h, "posix_memalign");
  auto us = lt::dl_sym<std::size_t (*)(void*)>(h, "malloc_usable_size");
  CHECK(m != &malloc, "dlsym on the handle found lowtide's own malloc");
  check_family(m, f, c, r, al, pm, us);
  // Blocks from lowtide's entry points are glibc's: glibc's own free and
  // malloc_usable_size take them (glibc would abort on a foreign pointer).
  for (std::size_t n : {std::size_t{40}, std::size_t{1} << 20}) {
    void* p = m(n);
    CHECK(p != nullptr && malloc_usable_size(p) >= n);
    free(p);
    p = malloc(n);
    void* q = r(p, 3 * n);  // lowtide's realloc of glibc's block
    CHECK(q != nullptr && malloc_usable_size(q) >= 3 * n);
    free(q);
  }
  std::printf("forwarding (dlopen): every block was glibc's\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  lt::arm_watchdog(60, "forwarding");
  if (argc == 2 && std::strcmp(argv[1], "preload") == 0) return preload_case();
  if (argc == 3 && std::strcmp(argv[1], "dlopen") == 0) return dlopen_case(argv[2]);
  std::fprintf(stderr, "usage: forwarding preload | dlopen LIB\n");
  return 2;
}

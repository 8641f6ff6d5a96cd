// The exported C symbols and the replaceable C++ operators: one line each,
// forwarding to lowtide::api. No logic lives here.
#include <cerrno>
#include <climits>
#include <cstdio>
#include <malloc.h>
#include <new>
#include <stdlib.h>

#include <sys/syscall.h>
#include <unistd.h>

#include "api.hpp"
#include "report.hpp"
#include "stats_table.hpp"
#include "lowtide/lowtide.h"

#define LT_EXPORT extern "C" __attribute__((visibility("default")))

using lowtide::api::operator_new;

LT_EXPORT void* malloc(size_t n) noexcept { return lowtide::api::malloc(n); }
LT_EXPORT void free(void* p) noexcept { lowtide::api::free(p); }
LT_EXPORT void* calloc(size_t n, size_t size) noexcept { return lowtide::api::calloc(n, size); }
LT_EXPORT void* realloc(void* p, size_t n) noexcept { return lowtide::api::realloc(p, n); }
LT_EXPORT void* reallocarray(void* p, size_t n, size_t size) noexcept {
  return lowtide::api::reallocarray(p, n, size);
}
LT_EXPORT int posix_memalign(void** out, size_t align, size_t n) noexcept {
  return lowtide::api::posix_memalign(out, align, n);
}
LT_EXPORT void* aligned_alloc(size_t align, size_t n) noexcept { return lowtide::api::memalign(align, n); }
LT_EXPORT void* memalign(size_t align, size_t n) noexcept { return lowtide::api::memalign(align, n); }
LT_EXPORT void* valloc(size_t n) noexcept { return lowtide::api::valloc(n); }
LT_EXPORT void* pvalloc(size_t n) noexcept { return lowtide::api::pvalloc(n); }
LT_EXPORT size_t malloc_usable_size(void* p) noexcept { return lowtide::api::usable_size(p); }
LT_EXPORT int mallopt(int param, int value) noexcept { return lowtide::api::mallopt(param, value); }
LT_EXPORT int malloc_trim(size_t pad) noexcept { return lowtide::api::trim(pad); }
LT_EXPORT struct mallinfo2 mallinfo2() noexcept { return lowtide::api::info(); }
namespace {
struct mallinfo saturated_info() {
  // The old int fields saturate instead of wrapping past 2 GiB.
  struct mallinfo2 m2 = lowtide::api::info();
  auto sat = [](size_t v) { return v > static_cast<size_t>(INT_MAX) ? INT_MAX : static_cast<int>(v); };
  struct mallinfo m;
  m.arena = sat(m2.arena);
  m.ordblks = sat(m2.ordblks);
  m.smblks = sat(m2.smblks);
  m.hblks = sat(m2.hblks);
  m.hblkhd = sat(m2.hblkhd);
  m.usmblks = sat(m2.usmblks);
  m.fsmblks = sat(m2.fsmblks);
  m.uordblks = sat(m2.uordblks);
  m.fordblks = sat(m2.fordblks);
  m.keepcost = sat(m2.keepcost);
  return m;
}
}  // namespace
LT_EXPORT struct mallinfo mallinfo() noexcept { return saturated_info(); }
LT_EXPORT struct mallinfo __libc_mallinfo() noexcept { return saturated_info(); }
LT_EXPORT void malloc_stats() noexcept { lowtide::api::print_stats(); }
LT_EXPORT int malloc_info(int options, FILE* fp) noexcept { return lowtide::api::print_info(options, fp); }

// Old names glibc and mimalloc still export.
LT_EXPORT void cfree(void* p) noexcept { lowtide::api::free(p); }
LT_EXPORT void vfree(void* p) noexcept { lowtide::api::free(p); }
LT_EXPORT size_t malloc_size(const void* p) noexcept { return lowtide::api::usable_size(p); }
LT_EXPORT size_t malloc_good_size(size_t n) noexcept { return lowtide::api::good_size(n); }
LT_EXPORT void* _aligned_malloc(size_t n, size_t align) noexcept { return lowtide::api::memalign(align, n); }
LT_EXPORT void* reallocf(void* p, size_t n) noexcept {
  // BSD: free p when the resize fails. realloc(p, 0) has already freed it.
  void* q = lowtide::api::realloc(p, n);
  if (q == nullptr && p != nullptr && n != 0) lowtide::api::free(p);
  return q;
}
LT_EXPORT int reallocarr(void* pp, size_t n, size_t size) noexcept {
  // NetBSD: returns 0 or an errno value; *pp is untouched on failure.
  if (pp == nullptr) return EINVAL;
  void** slot = static_cast<void**>(pp);
  int saved = errno;
  if (n == 0 || size == 0) {
    lowtide::api::free(*slot);
    *slot = nullptr;
    return 0;
  }
  void* q = lowtide::api::reallocarray(*slot, n, size);
  if (q == nullptr) {
    int e = errno;
    errno = saved;
    return e;
  }
  *slot = q;
  return 0;
}

// glibc's internal names, which some programs and libraries call directly.
LT_EXPORT void* __libc_malloc(size_t n) noexcept { return lowtide::api::malloc(n); }
LT_EXPORT void __libc_free(void* p) noexcept { lowtide::api::free(p); }
LT_EXPORT void __libc_cfree(void* p) noexcept { lowtide::api::free(p); }
LT_EXPORT void* __libc_calloc(size_t n, size_t size) noexcept { return lowtide::api::calloc(n, size); }
LT_EXPORT void* __libc_realloc(void* p, size_t n) noexcept { return lowtide::api::realloc(p, n); }
LT_EXPORT void* __libc_memalign(size_t align, size_t n) noexcept { return lowtide::api::memalign(align, n); }
LT_EXPORT void* __libc_valloc(size_t n) noexcept { return lowtide::api::valloc(n); }
LT_EXPORT void* __libc_pvalloc(size_t n) noexcept { return lowtide::api::pvalloc(n); }
LT_EXPORT int __libc_mallopt(int param, int value) noexcept { return lowtide::api::mallopt(param, value); }

LT_EXPORT int __posix_memalign(void** out, size_t align, size_t n) noexcept {
  return lowtide::api::posix_memalign(out, align, n);
}


// The public API.
LT_EXPORT const char* lowtide_version(void) { return LOWTIDE_VERSION; }
LT_EXPORT int lowtide_get_stats(struct lowtide_stats* s) { return lowtide::api::get_stats(s); }
LT_EXPORT const char* lowtide_stats_fields(void) { return lowtide::stats::field_names(); }
LT_EXPORT int lowtide_write_report(const char* path, int format) { return lowtide::report::write(path, format); }
LT_EXPORT size_t lowtide_release(void) { return lowtide::api::release_now(); }

// A process that leaves through _exit (a forked multiprocessing worker's
// os._exit) runs no destructors: report first, then leave.
LT_EXPORT void _exit(int status) {
  lowtide::report::at_exit(true);
  for (;;) syscall(SYS_exit_group, status);
}
LT_EXPORT void _Exit(int status) {
  lowtide::report::at_exit(true);
  for (;;) syscall(SYS_exit_group, status);
}

// The 20 replaceable allocation functions. mimalloc 2.0.9's own operator new
// aborts on failure; these honour std::new_handler and throw std::bad_alloc.
#define LT_NEW_EXPORT __attribute__((visibility("default")))
LT_NEW_EXPORT void* operator new(std::size_t n) { return operator_new(n, 0, false); }
LT_NEW_EXPORT void* operator new[](std::size_t n) { return operator_new(n, 0, false); }
LT_NEW_EXPORT void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return operator_new(n, 0, true); }
LT_NEW_EXPORT void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return operator_new(n, 0, true); }
LT_NEW_EXPORT void* operator new(std::size_t n, std::align_val_t a) { return operator_new(n, static_cast<std::size_t>(a), false); }
LT_NEW_EXPORT void* operator new[](std::size_t n, std::align_val_t a) { return operator_new(n, static_cast<std::size_t>(a), false); }
LT_NEW_EXPORT void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return operator_new(n, static_cast<std::size_t>(a), true);
}
LT_NEW_EXPORT void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return operator_new(n, static_cast<std::size_t>(a), true);
}
LT_NEW_EXPORT void operator delete(void* p) noexcept { lowtide::api::free(p); }
LT_NEW_EXPORT void operator delete[](void* p) noexcept { lowtide::api::free(p); }
LT_NEW_EXPORT void operator delete(void* p, const std::nothrow_t&) noexcept { lowtide::api::free(p); }
LT_NEW_EXPORT void operator delete[](void* p, const std::nothrow_t&) noexcept { lowtide::api::free(p); }
LT_NEW_EXPORT void operator delete(void* p, std::size_t) noexcept { lowtide::api::free(p); }
LT_NEW_EXPORT void operator delete[](void* p, std::size_t) noexcept { lowtide::api::free(p); }
LT_NEW_EXPORT void operator delete(void* p, std::align_val_t) noexcept { lowtide::api::free(p); }
LT_NEW_EXPORT void operator delete[](void* p, std::align_val_t) noexcept { lowtide::api::free(p); }
LT_NEW_EXPORT void operator delete(void* p, std::size_t, std::align_val_t) noexcept { lowtide::api::free(p); }
LT_NEW_EXPORT void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { lowtide::api::free(p); }
LT_NEW_EXPORT void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { lowtide::api::free(p); }
LT_NEW_EXPORT void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { lowtide::api::free(p); }

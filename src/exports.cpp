// The exported C symbols and the replaceable C++ operators: one line each,
// forwarding to lowtide::api. No logic lives here.
#include <cerrno>
#include <climits>
#include <cstdio>
#include <malloc.h>
#include <new>
#include <stdlib.h>
#include <sys/resource.h>


#include "init.hpp"
#include "libc.hpp"
#include "report.hpp"
#include "signals.hpp"
#include "stats_table.hpp"
#include "lowtide/lowtide.h"

#define LT_EXPORT extern "C" __attribute__((visibility("default")))

using lowtide::libc::operator_new;
using lowtide::libc::operator_new_aligned;

LT_EXPORT void* malloc(size_t n) noexcept { return lowtide::libc::malloc(n); }
LT_EXPORT void free(void* p) noexcept { lowtide::libc::free(p); }
LT_EXPORT void* calloc(size_t n, size_t size) noexcept { return lowtide::libc::calloc(n, size); }
LT_EXPORT void* realloc(void* p, size_t n) noexcept { return lowtide::libc::realloc(p, n); }
LT_EXPORT void* reallocarray(void* p, size_t n, size_t size) noexcept {
  return lowtide::libc::reallocarray(p, n, size);
}
LT_EXPORT int posix_memalign(void** out, size_t align, size_t n) noexcept {
  return lowtide::libc::posix_memalign(out, align, n);
}
LT_EXPORT void* aligned_alloc(size_t align, size_t n) noexcept { return lowtide::libc::memalign(align, n); }
LT_EXPORT void* memalign(size_t align, size_t n) noexcept { return lowtide::libc::memalign(align, n); }
LT_EXPORT void* valloc(size_t n) noexcept { return lowtide::libc::valloc(n); }
LT_EXPORT void* pvalloc(size_t n) noexcept { return lowtide::libc::pvalloc(n); }
LT_EXPORT size_t malloc_usable_size(void* p) noexcept { return lowtide::libc::usable_size(p); }
LT_EXPORT int mallopt(int param, int value) noexcept { return lowtide::libc::mallopt(param, value); }
LT_EXPORT int malloc_trim(size_t pad) noexcept { return lowtide::libc::trim(pad); }
LT_EXPORT struct mallinfo2 mallinfo2() noexcept { return lowtide::libc::info(); }
LT_EXPORT struct mallinfo mallinfo() noexcept { return lowtide::libc::info_int(); }
LT_EXPORT struct mallinfo __libc_mallinfo() noexcept { return lowtide::libc::info_int(); }
LT_EXPORT void malloc_stats() noexcept { lowtide::libc::print_stats(); }
LT_EXPORT int malloc_info(int options, FILE* fp) noexcept { return lowtide::libc::print_info(options, fp); }

// Old names glibc and mimalloc still export.
LT_EXPORT void cfree(void* p) noexcept { lowtide::libc::free(p); }
LT_EXPORT void vfree(void* p) noexcept { lowtide::libc::free(p); }
LT_EXPORT size_t malloc_size(const void* p) noexcept { return lowtide::libc::usable_size(p); }
LT_EXPORT size_t malloc_good_size(size_t n) noexcept { return lowtide::libc::good_size(n); }
LT_EXPORT void* _aligned_malloc(size_t n, size_t align) noexcept { return lowtide::libc::memalign(align, n); }
LT_EXPORT void* reallocf(void* p, size_t n) noexcept { return lowtide::libc::reallocf(p, n); }
LT_EXPORT int reallocarr(void* pp, size_t n, size_t size) noexcept { return lowtide::libc::reallocarr(pp, n, size); }

// glibc's internal names, which some programs and libraries call directly.
LT_EXPORT void* __libc_malloc(size_t n) noexcept { return lowtide::libc::malloc(n); }
LT_EXPORT void __libc_free(void* p) noexcept { lowtide::libc::free(p); }
LT_EXPORT void __libc_cfree(void* p) noexcept { lowtide::libc::free(p); }
LT_EXPORT void* __libc_calloc(size_t n, size_t size) noexcept { return lowtide::libc::calloc(n, size); }
LT_EXPORT void* __libc_realloc(void* p, size_t n) noexcept { return lowtide::libc::realloc(p, n); }
LT_EXPORT void* __libc_memalign(size_t align, size_t n) noexcept { return lowtide::libc::memalign(align, n); }
LT_EXPORT void* __libc_valloc(size_t n) noexcept { return lowtide::libc::valloc(n); }
LT_EXPORT void* __libc_pvalloc(size_t n) noexcept { return lowtide::libc::pvalloc(n); }
LT_EXPORT int __libc_mallopt(int param, int value) noexcept { return lowtide::libc::mallopt(param, value); }

LT_EXPORT int __posix_memalign(void** out, size_t align, size_t n) noexcept {
  return lowtide::libc::posix_memalign(out, align, n);
}


// The public API.
LT_EXPORT const char* lowtide_version(void) { return LOWTIDE_VERSION; }
LT_EXPORT int lowtide_get_stats(struct lowtide_stats* s) { return lowtide::libc::get_stats(s); }
LT_EXPORT const char* lowtide_stats_fields(void) { return lowtide::stats::field_names(); }
LT_EXPORT int sigaction(int sig, const struct sigaction* act, struct sigaction* old) noexcept {
  return lowtide::sig::sigaction(sig, act, old);
}
LT_EXPORT lowtide::sig::Handler signal(int sig, lowtide::sig::Handler h) noexcept { return lowtide::sig::signal(sig, h); }
LT_EXPORT int lowtide_write_report(const char* path, int format) { return lowtide::report::write(path, format); }
LT_EXPORT size_t lowtide_release(void) { return lowtide::libc::release_now(); }

LT_EXPORT void _exit(int status) { lowtide::libc::exit_now(status); }
// Interposed to know when mlockall(MCL_FUTURE) is in force: freed large
// extents are then made PROT_NONE, not read-write (platform.hpp).
LT_EXPORT int mlockall(int flags) noexcept { return lowtide::libc::mlockall(flags); }
LT_EXPORT int munlockall(void) noexcept { return lowtide::pal::munlockall(); }
// Interposed to know that some memory may be locked (pal::mremap_growth_ok).
LT_EXPORT int mlock(const void* p, std::size_t len) noexcept { return lowtide::libc::mlock2(p, len, 0); }
LT_EXPORT int mlock2(const void* p, std::size_t len, unsigned int flags) noexcept {
  return lowtide::libc::mlock2(p, len, flags);
}
// Interposed to know that a freed large block may have lost its write
// permission (libc.hpp).
LT_EXPORT int mprotect(void* p, std::size_t len, int prot) noexcept { return lowtide::libc::mprotect(p, len, prot); }
LT_EXPORT int pkey_mprotect(void* p, std::size_t len, int prot, int pkey) noexcept {
  return lowtide::libc::pkey_mprotect(p, len, prot, pkey);
}
// Interposed to cut lowtide's range to a lower RLIMIT_AS first (libc.hpp).
// By their symbol names: with _FILE_OFFSET_BITS=64 glibc's header makes
// `setrlimit` and `prlimit` in C++ names for setrlimit64 and prlimit64.
// rlimit and rlimit64 are one layout on x86-64 (64-bit rlim_t), as glibc's
// own setrlimit64 and prlimit64 take them.
static_assert(sizeof(struct rlimit) == 16 && sizeof(rlim_t) == 8, "rlimit is not rlimit64's layout");
LT_EXPORT int lt_setrlimit(int resource, const struct rlimit* rl) noexcept __asm__("setrlimit");
LT_EXPORT int lt_setrlimit64(int resource, const struct rlimit* rl) noexcept __asm__("setrlimit64");
LT_EXPORT int lt_prlimit(pid_t pid, int resource, const struct rlimit* nl, struct rlimit* ol) noexcept
    __asm__("prlimit");
LT_EXPORT int lt_prlimit64(pid_t pid, int resource, const struct rlimit* nl, struct rlimit* ol) noexcept
    __asm__("prlimit64");
int lt_setrlimit(int resource, const struct rlimit* rl) noexcept { return lowtide::libc::prlimit(0, resource, rl, nullptr); }
int lt_setrlimit64(int resource, const struct rlimit* rl) noexcept {
  return lowtide::libc::prlimit(0, resource, rl, nullptr);
}
int lt_prlimit(pid_t pid, int resource, const struct rlimit* nl, struct rlimit* ol) noexcept {
  return lowtide::libc::prlimit(pid, resource, nl, ol);
}
int lt_prlimit64(pid_t pid, int resource, const struct rlimit* nl, struct rlimit* ol) noexcept {
  return lowtide::libc::prlimit(pid, resource, nl, ol);
}
// Interposed for one look at AT_SECURE before libmimalloc reads its
// variables (init.hpp).
LT_EXPORT int __cxa_atexit(void (*f)(void*), void* arg, void* dso) noexcept { return lowtide::cxa_atexit(f, arg, dso); }
LT_EXPORT void _Exit(int status) { lowtide::libc::exit_now(status); }
// Interposed so that lowtide's fork handlers are registered before any
// other (init.cpp, register_atfork).
LT_EXPORT int __register_atfork(void (*prepare)(), void (*parent)(), void (*child)(), void* dso) noexcept {
  return lowtide::register_atfork(prepare, parent, child, dso);
}

// The 20 replaceable allocation functions. mimalloc 2.0.9's own operator new
// aborts on failure; these honour std::new_handler and throw std::bad_alloc.
#define LT_NEW_EXPORT __attribute__((visibility("default")))
LT_NEW_EXPORT void* operator new(std::size_t n) { return operator_new(n, 0, false); }
LT_NEW_EXPORT void* operator new[](std::size_t n) { return operator_new(n, 0, false); }
LT_NEW_EXPORT void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return operator_new(n, 0, true); }
LT_NEW_EXPORT void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return operator_new(n, 0, true); }
LT_NEW_EXPORT void* operator new(std::size_t n, std::align_val_t a) { return operator_new_aligned(n, static_cast<std::size_t>(a), false); }
LT_NEW_EXPORT void* operator new[](std::size_t n, std::align_val_t a) { return operator_new_aligned(n, static_cast<std::size_t>(a), false); }
LT_NEW_EXPORT void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return operator_new_aligned(n, static_cast<std::size_t>(a), true);
}
LT_NEW_EXPORT void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return operator_new_aligned(n, static_cast<std::size_t>(a), true);
}
LT_NEW_EXPORT void operator delete(void* p) noexcept { lowtide::libc::free(p); }
LT_NEW_EXPORT void operator delete[](void* p) noexcept { lowtide::libc::free(p); }
LT_NEW_EXPORT void operator delete(void* p, const std::nothrow_t&) noexcept { lowtide::libc::free(p); }
LT_NEW_EXPORT void operator delete[](void* p, const std::nothrow_t&) noexcept { lowtide::libc::free(p); }
LT_NEW_EXPORT void operator delete(void* p, std::size_t) noexcept { lowtide::libc::free(p); }
LT_NEW_EXPORT void operator delete[](void* p, std::size_t) noexcept { lowtide::libc::free(p); }
LT_NEW_EXPORT void operator delete(void* p, std::align_val_t) noexcept { lowtide::libc::free(p); }
LT_NEW_EXPORT void operator delete[](void* p, std::align_val_t) noexcept { lowtide::libc::free(p); }
LT_NEW_EXPORT void operator delete(void* p, std::size_t, std::align_val_t) noexcept { lowtide::libc::free(p); }
LT_NEW_EXPORT void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { lowtide::libc::free(p); }
LT_NEW_EXPORT void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { lowtide::libc::free(p); }
LT_NEW_EXPORT void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { lowtide::libc::free(p); }

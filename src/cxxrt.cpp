#include "cxxrt.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>

#include "platform.hpp"

// Weak references by mangled name, with default visibility so the loader
// binds them from the global scope (a hidden undefined weak symbol would be
// null for good). lowtide is linked by the C driver with no C++ runtime on
// the line, so these add no DT_NEEDED and no version requirement; they stay
// null unless the program itself links a runtime. Nothing in this file may
// name std::get_new_handler, std::nothrow or abi::__cxa_demangle directly:
// that would be a strong reference, and the link would need the library.
// Throwing goes by dlopen handle only (throw_bad_alloc): the name of
// libstdc++'s thrower is one the library defines for itself
// (cxxrt_helpers.cpp).
extern "C" {
using lt_handler_fn = void (*)();
__attribute__((weak, visibility("default"))) lt_handler_fn lt_rt_get_new_handler() noexcept
    __asm__("_ZSt15get_new_handlerv");
__attribute__((weak, visibility("default"))) char* lt_rt_cxa_demangle(const char*, char*, std::size_t*, int*)
    __asm__("__cxa_demangle");
}

namespace lowtide::cxxrt {

namespace {

using GetHandler = lt_handler_fn (*)() noexcept;
using Thrower = void (*)();
using NothrowNew = void* (*)(std::size_t, const std::nothrow_t&) noexcept;
using NothrowNewAligned = void* (*)(std::size_t, std::align_val_t, const std::nothrow_t&) noexcept;

// The runtime's functions, found once (prepare() at start-up, else at first
// need) and kept: at the moment they are needed memory may be short, and
// dlopen may need some.
std::atomic<void*> g_libstdcxx{nullptr};
std::atomic<GetHandler> g_get_handler{nullptr};
std::atomic<Thrower> g_throw{nullptr};
std::atomic<NothrowNew> g_nothrow{nullptr};
std::atomic<NothrowNewAligned> g_nothrow_aligned{nullptr};

// libstdc++.so.6 as a dlopen handle: the copy already in the process (any
// scope) or, when `load`, one loaded now with its symbols kept private.
// Handles from a race are the same object with one more reference: harmless.
void* libstdcxx(bool load) noexcept {
  void* h = g_libstdcxx.load(std::memory_order_acquire);
  if (h != nullptr) return h;
  h = ::dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (h == nullptr && load) h = ::dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL);
  if (h != nullptr) g_libstdcxx.store(h, std::memory_order_release);
  return h;
}

// A libstdc++ function by name, cached in `slot`. dlsym on a handle
// searches that object first: libstdc++'s own definition, never lowtide's
// interposed one (which RTLD_DEFAULT would find first).
template <typename F>
F from_libstdcxx(std::atomic<F>& slot, const char* name, bool load) noexcept {
  F f = slot.load(std::memory_order_acquire);
  if (f != nullptr) return f;
  void* h = libstdcxx(load);
  if (h == nullptr) return nullptr;
  f = reinterpret_cast<F>(::dlsym(h, name));
  if (f != nullptr) slot.store(f, std::memory_order_release);
  return f;
}

constexpr char kGetHandler[] = "_ZSt15get_new_handlerv";
constexpr char kThrow[] = "_ZSt17__throw_bad_allocv";
constexpr char kNothrow[] = "_ZnwmRKSt9nothrow_t";
constexpr char kNothrowAligned[] = "_ZnwmSt11align_val_tRKSt9nothrow_t";

}  // namespace

// A function of the object `h` (and its dependencies) into `slot`.
template <typename F>
void from_handle(std::atomic<F>& slot, void* h, const char* name) noexcept {
  if (slot.load(std::memory_order_acquire) != nullptr) return;
  if (void* f = ::dlsym(h, name); f != nullptr) slot.store(reinterpret_cast<F>(f), std::memory_order_release);
}

void prepare() noexcept {
  // The program's runtime in the global scope, libstdc++ or LLVM's
  // libc++abi (both export these names): the object that defines the
  // std::get_new_handler lowtide bound to. Not RTLD_NEXT for the nothrow
  // forms: libmimalloc, also after lowtide, exports its own, which has no
  // try/catch.
  if (lt_rt_get_new_handler != nullptr) {
    Dl_info info;
    if (::dladdr(reinterpret_cast<void*>(lt_rt_get_new_handler), &info) != 0 && info.dli_fname != nullptr) {
      if (void* h = ::dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD); h != nullptr) {
        from_handle(g_nothrow, h, kNothrow);
        from_handle(g_nothrow_aligned, h, kNothrowAligned);
        from_handle(g_throw, h, kThrow);
      }
    }
  }
  // libc++ keeps its thrower in libc++.so, not libc++abi: the next
  // definition after lowtide's own (which is local: RTLD_NEXT cannot
  // return it; libmimalloc has none).
  from_handle(g_throw, RTLD_NEXT, kThrow);
  // And a libstdc++ loaded but not global. A process without any may never
  // need one: nothing is loaded here.
  if (libstdcxx(false) == nullptr) return;
  from_libstdcxx(g_get_handler, kGetHandler, false);
  from_libstdcxx(g_throw, kThrow, false);
  from_libstdcxx(g_nothrow, kNothrow, false);
  from_libstdcxx(g_nothrow_aligned, kNothrowAligned, false);
}

std::new_handler new_handler() noexcept {
  if (lt_rt_get_new_handler != nullptr) return lt_rt_get_new_handler();
  // Not loading one: a runtime nobody loaded holds no handler.
  GetHandler get = from_libstdcxx(g_get_handler, kGetHandler, false);
  return get != nullptr ? get() : nullptr;
}

void throw_bad_alloc() {
  // Found by dlsym, never a weak reference: the name is also defined in
  // lowtide itself (cxxrt_helpers.cpp), which a reference would bind to.
  if (Thrower t = g_throw.load(std::memory_order_acquire); t != nullptr) t();
  if (Thrower t = from_libstdcxx(g_throw, kThrow, true); t != nullptr) t();
  static const char msg[] = "lowtide: out of memory in operator new, and no C++ runtime to throw std::bad_alloc\n";
  pal::write_stderr(msg, sizeof msg - 1);
  std::abort();
}

void* nothrow_new(std::size_t n, std::size_t align, bool* called) noexcept {
  *called = false;
  const std::nothrow_t nt{};
  if (align == 0) {
    NothrowNew f = g_nothrow.load(std::memory_order_acquire);
    if (f == nullptr) f = from_libstdcxx(g_nothrow, kNothrow, true);
    if (f == nullptr) return nullptr;
    *called = true;
    return f(n, nt);
  }
  NothrowNewAligned f = g_nothrow_aligned.load(std::memory_order_acquire);
  if (f == nullptr) f = from_libstdcxx(g_nothrow_aligned, kNothrowAligned, true);
  if (f == nullptr) return nullptr;
  *called = true;
  return f(n, static_cast<std::align_val_t>(align), nt);
}

DemangleFn resolve_demangler() noexcept {
  if (lt_rt_cxa_demangle != nullptr) return lt_rt_cxa_demangle;
  void* h = libstdcxx(true);
  return h == nullptr ? nullptr : reinterpret_cast<DemangleFn>(::dlsym(h, "__cxa_demangle"));
}

}  // namespace lowtide::cxxrt

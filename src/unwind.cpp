#include "unwind.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include "log.hpp"

namespace lowtide::unwind {

namespace {

using BacktraceFn = int (*)(void** buffer, int size);

BacktraceFn backtrace_fn = nullptr;
// liblowtide's own mapping: its frames (malloc, the paths, the capture
// itself) are the same for every site and would only add noise to the hash.
std::uintptr_t self_lo = 0, self_hi = 0;
char exe[1024];

}  // namespace

bool load() {
  // RTLD_LOCAL keeps libunwind's _Unwind_* out of the global scope, so
  // libstdc++ and everything else keep binding them to libgcc_s.
  void* h = ::dlopen("libunwind.so.8", RTLD_LOCAL | RTLD_NOW);
  if (h == nullptr) {
    const char* why = ::dlerror();
    log::warn("LOWTIDE_SITES: cannot load libunwind.so.8 ({}); call sites are off", why ? why : "?");
    return false;
  }
  void* fn = ::dlsym(h, "unw_backtrace");
  if (fn == nullptr) {
    log::warn("LOWTIDE_SITES: libunwind.so.8 has no unw_backtrace; call sites are off");
    return false;
  }
  dl_find_object self;
  if (::_dl_find_object(reinterpret_cast<void*>(&load), &self) == 0) {
    self_lo = reinterpret_cast<std::uintptr_t>(self.dlfo_map_start);
    self_hi = reinterpret_cast<std::uintptr_t>(self.dlfo_map_end);
  }
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = '\0';
  backtrace_fn = reinterpret_cast<BacktraceFn>(fn);
  return true;
}

int capture(std::uintptr_t* ips, int max) {
  if (backtrace_fn == nullptr || max <= 0) return 0;
  int n = backtrace_fn(reinterpret_cast<void**>(ips), max);
  int skip = 0;
  while (skip < n && ips[skip] - self_lo < self_hi - self_lo) ++skip;
  for (int i = skip; i < n; ++i) ips[i - skip] = ips[i];
  return n - skip;
}

const char* exe_path() { return exe; }

}  // namespace lowtide::unwind

#include "forward.hpp"

#include <dlfcn.h>
#include <stdlib.h>

#include "route.hpp"
#include "small_path.hpp"
#include "state.hpp"
#include "stats.hpp"

namespace lowtide::forward {

Winner winner{};
std::atomic<bool> probe_hit{false};

namespace {
// Whether f is a function of lowtide's own object.
bool ours(void* f) {
  Dl_info mine{}, its{};
  return dladdr(reinterpret_cast<void*>(&detect), &mine) != 0 && dladdr(f, &its) != 0 &&
         mine.dli_fbase == its.dli_fbase;
}

template <typename F>
bool bind(F* slot, const char* name) {
  void* f = dlsym(RTLD_DEFAULT, name);
  // The winner may not define this one (an executable that defines only
  // malloc, free, calloc and realloc, as glibc's manual allows; jemalloc and
  // mimalloc have no malloc_trim): the global lookup then finds lowtide's
  // own, and forwarding to it would call itself forever (a process spinning
  // in malloc_trim). What the program reaches without lowtide is the next
  // definition after lowtide's: glibc's.
  if (f != nullptr && ours(f)) f = dlsym(RTLD_NEXT, name);
  *slot = reinterpret_cast<F>(f);
  return f != nullptr;
}
}  // namespace

// The probe's request (a small block).
constexpr std::size_t kProbeSize = 24;

bool detect() {
  // Ask the dynamic linker for the malloc everyone else is bound to and call
  // it once while our own entry points watch for the call. Comparing
  // addresses is not enough: in a non-PIE executable dlsym returns the
  // executable's PLT stub, which may well lead to us.
  using MallocFn = void* (*)(std::size_t);
  auto global_malloc = reinterpret_cast<MallocFn>(dlsym(RTLD_DEFAULT, "malloc"));
  if (global_malloc == nullptr) return false;
  int expected = kReady;
  if (!g.mode.compare_exchange_strong(expected, kProbing, std::memory_order_acq_rel)) return false;
  // This thread's probe must reach malloc_slow, which notes the hit.
  route::close_fast_paths();
  forward::probe_hit.store(false, std::memory_order_relaxed);
  t_local.in_init = 1;
  void* p = global_malloc(kProbeSize);
  t_local.in_init = 0;
  bool ours = forward::probe_hit.load(std::memory_order_relaxed);
  bool ok = !ours && bind(&winner.malloc, "malloc") && bind(&winner.free, "free") &&
            bind(&winner.calloc, "calloc") && bind(&winner.realloc, "realloc") &&
            bind(&winner.memalign, "memalign") && bind(&winner.posix_memalign, "posix_memalign") &&
            bind(&winner.usable, "malloc_usable_size");
  if (ok) {
    bind(&winner.trim, "malloc_trim");
    bind(&winner.mallopt, "mallopt");
  }
  g.mode.store(ok ? kForwarding : kReady, std::memory_order_release);
  if (!ok) route::open_fast_paths();
  if (p != nullptr) {
    if (ours) {
      // A small block: ours went straight to mimalloc, through
      // route::allocate, which counted it as the program's malloc. It is
      // lowtide's own call: its count is taken back (the block is freed
      // uncounted), else every process started with one malloc and 32
      // bytes live it never made, live until its exit report.
      stats::uncount_small_alloc(stats::slot(), stats::malloc_calls, kProbeSize, small::usable(p));
      small::release(p);
    } else if (winner.free != nullptr) {
      winner.free(p);
    }
  }
  return ok;
}

}  // namespace lowtide::forward

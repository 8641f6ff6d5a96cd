// Stack capture for call sites, through libunwind loaded privately: linked
// as an ordinary dependency, libunwind.so.8's 18 _Unwind_* exports would take
// over C++ exception unwinding in the host, so it is dlopen'ed RTLD_LOCAL and
// only reached through the pointers looked up here.
#pragma once
#include <cstdint>

namespace lowtide::unwind {

// Load libunwind. Must run outside any malloc call (dlopen takes the
// loader's lock, which a caller of malloc may hold): lowtide's constructor
// calls it. false, after one warning, when libunwind cannot be had.
bool load();

// Return addresses of the calling thread's stack, innermost first, with
// lowtide's own frames left out. Returns how many were written (0 if
// libunwind is not loaded).
int capture(std::uintptr_t* ips, int max);

// Path of the main executable (the loader names it ""), read at load().
const char* exe_path();

}  // namespace lowtide::unwind

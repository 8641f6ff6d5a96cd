// First-call initialisation, the fork handlers, and the mode every entry
// point checks on its way in.
#pragma once
#include "state.hpp"

namespace lowtide {

// Slow part of mode(): runs init if nobody has; returns kReady or
// kForwarding (a thread inside init is served as kReady: its calls go to
// mimalloc, the arena not being ready yet).
int mode_slow();

inline int mode() {
  int m = g.mode.load(std::memory_order_acquire);
  if (__builtin_expect(m == kReady, 1)) return m;
  return mode_slow();
}

}  // namespace lowtide

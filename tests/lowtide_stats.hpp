// lowtide's counters read through its C API, looked up with dlsym (so test
// programs link and run without the shim, and fail there with a message).
// Needs include/ on the include path (lowtide/lowtide.h).
#pragma once

#include <dlfcn.h>

#include <cerrno>
#include <cstring>

#include "lowtide/lowtide.h"
#include "lowtide_test.hpp"

namespace lt {

inline lowtide_stats read_stats() {
  using get_stats_fn = int (*)(lowtide_stats*);
  static auto fn = reinterpret_cast<get_stats_fn>(dlsym(RTLD_DEFAULT, "lowtide_get_stats"));
  CHECK(fn != nullptr, "lowtide_get_stats not found: is liblowtide.so preloaded?");
  lowtide_stats s{};
  s.size = sizeof s;
  CHECK(fn(&s) == 0, "lowtide_get_stats failed: %s", std::strerror(errno));
  return s;
}

}  // namespace lt

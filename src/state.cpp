// The process-wide state (state.hpp), apart from init.cpp so that the
// large path and its cache link into tests/unit without the constructor.
#include "state.hpp"

#include "platform.hpp"
#include "stats.hpp"

namespace lowtide {

constinit Process g;
namespace {
// Counted into by threads without a slot yet, at once and unlocked: never
// read. Its bins stay empty and closed (nothing is ever put in them).
constinit stats::Slot parked_slot{};
}  // namespace
small::ThreadCache* const kParkedCache = &parked_slot.cache;
// The initial value is in the TLS image (.tdata, relocated before any
// thread's block is copied from it: ld.so initialises the main thread's TLS
// only after relocation, and new threads copy the relocated image).
__thread ThreadLocal t_local __attribute__((tls_model("initial-exec"))) = {
    .stats = nullptr, .tid = 0, .in_init = 0, .in_capture = 0, .site_left = 0, .site_rng = 0, .errno_ptr = nullptr,
    .cache = &parked_slot.cache, .cache_armed = 0, .in_report = 0};

std::uint32_t current_tid() {
  if (t_local.tid == 0) t_local.tid = static_cast<std::uint32_t>(pal::current_tid());
  return t_local.tid;
}

}  // namespace lowtide

#include "invariants.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "large_cache.hpp"
#include "large_space.hpp"
#include "platform.hpp"
#include "state.hpp"

namespace lowtide::invariants {

namespace {
// Above this a counter has wrapped below zero.
constexpr std::uint64_t kNegative = std::uint64_t{1} << 63;
std::atomic<unsigned> ops{0};
}  // namespace

const char* check_counters() {
  if (large::space.blocks.load(std::memory_order_relaxed) >= kNegative) return "counters: large_blocks below zero";
  if (large::space.mapped.load(std::memory_order_relaxed) >= kNegative) return "counters: large_mapped below zero";
  if (stats::large_live_now() >= kNegative) return "counters: large_live below zero";
  return nullptr;
}

const char* check_all(bool with_arena) {
  const char* why = check_counters();
  if (why == nullptr) why = cache::production_cache.check();
  if (why == nullptr && with_arena) why = large::space.arena.check();
  return why;
}

void fail(const char* what) {
  constexpr char kPrefix[] = "lowtide: invariant violated: ";
  char line[256];
  std::size_t n = sizeof(kPrefix) - 1;
  std::memcpy(line, kPrefix, n);
  for (const char* s = what; *s != '\0' && n < sizeof(line) - 1; ++s) line[n++] = *s;
  line[n++] = '\n';
  pal::write_stderr(line, n);
  std::abort();
}

void after_large_op() {
  const bool with_arena = ops.fetch_add(1, std::memory_order_relaxed) % kArenaEvery == 0;
  if (const char* why = check_all(with_arena)) fail(why);
}

}  // namespace lowtide::invariants

// The soft memory limit (LOWTIDE_LIMIT, else the process's cgroup's): how
// much the reuse cache may hold so that the process's resident memory stays
// under it, as tcmalloc's SetMemoryLimit and Go's GOMEMLIMIT do. Only what
// lowtide holds for reuse is given up; live blocks are never refused.
//
// Resident memory is an estimate that costs the small path nothing: an
// RSS sample (/proc/self/statm) taken by the decay thread each time it
// wakes, and by large calls when the last one is over 100 ms old, plus what
// the large path has committed or dropped since (large::space.mapped, exact).
// Between two samples the small path's growth is not seen.
#pragma once
#include <cstddef>
#include <cstdint>

#include "cgroup.hpp"

namespace lowtide::limit {

// How many bytes the cache may hold: with the process's other resident
// memory (`resident` minus `held`) the total stays under seven eighths of
// the limit, so release starts before the limit is reached and the cache
// never takes the process near it; at or over the limit that is nothing.
// SIZE_MAX without a limit (0). Pure; tests/unit/mem_limit_test.cpp.
std::size_t room_for(std::uint64_t limit, std::int64_t resident, std::size_t held);

// At first-call init, after the configuration is read: LOWTIDE_LIMIT, or
// the cgroup's limit (found under LOWTIDE_CGROUP_ROOT); the first RSS
// sample. release_small gives back the small path's retained memory (it
// calls mimalloc, which only the small path may).
void init(void (*release_small)());

// The decay thread, each time it wakes (outside every lock): a new RSS
// sample; the cgroup's limit read again every 4 s (a container's limit can
// be changed while it runs), or discovered again at once where init's
// discovery could not read a file (cgroup::Found::refused); while over the
// limit, the small path's
// retained memory released, at most once a second.
void tick();

// Large calls, outside every lock: a new RSS sample if the last one is
// more than 100 ms old (keeps the estimate close when the decay thread is
// off or asleep). Nothing without a limit.
void maybe_sample();

// The reuse cache's Deps::room: room_for with the current estimate, given
// the cache holds `held` bytes.
std::size_t cache_room(std::size_t held);

// The limit in effect (0: none) and where it came from, for the report.
// fork: the child must not inherit a collect in progress (tick).
void fork_prepare();
// Run fn (a mimalloc collect: malloc_trim, lowtide_release) under the lock
// fork_prepare takes, for the same reason.
void collect_guarded(void (*fn)());
// The same where the lock is free, with every signal blocked while it is
// held (a handler that forks would wait in fork_prepare for the lock its
// own thread holds; one that allocates must not meet fn half done); false,
// fn not run, where another collect holds it. For small::trim_own, run on
// an allocating thread's slow path: it must never wait.
bool collect_if_idle(void (*fn)());
void fork_parent();
void fork_child();

std::uint64_t current();
cgroup::Source source();

}  // namespace lowtide::limit

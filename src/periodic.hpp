// LOWTIDE_STATS_INTERVAL: the configured report, rewritten every interval
// by a thread of lowtide's own, "lowtide-report" (docs/report.md,
// "Periodic reports"). Opt-in: without the setting there is no thread.
#pragma once

namespace lowtide::periodic {

// From lowtide's constructor (the loader has bound every symbol; not from
// first-call init, which may run inside the loader or a malloc): starts the
// thread when LOWTIDE_STATS_INTERVAL is set and this process writes a
// report. Warns once when it is set to no effect (the report off).
void start();

// fork, in the child (after lowtide's locks are reset): the thread is not
// copied; a child that writes a report of its own (%p) starts its own.
void on_fork_child();

}  // namespace lowtide::periodic

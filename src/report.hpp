// The exit-time report (text and JSON), and the decision of whether this
// process writes one.
#pragma once
#include <cstddef>

namespace lowtide::report {

enum Format : int { kText = 1, kJson = 2, kBoth = 3, kPrometheus = 4 };

// Write a report now. path: nullptr = the configured LOWTIDE_STATS_FILE
// (stderr by default); "%p" and "%%" are expanded. format 0 = as configured
// (text when stats are off). Returns 0, or -1 with errno set.
int write(const char* path, int format);

// The JSON report of this moment, as the exit report renders it, handed to
// sink(data, len, arg) in one piece: for the live server (src/live.cpp),
// which adds it to its answer. Rendered into a scratch mapping of its own
// (no malloc, and no fallback buffer: -1 with ENOMEM when that cannot be
// mapped); locks are taken as lowtide_write_report takes them, and none is
// held while sink runs. Returns 0, or -1 with errno set.
using Sink = void (*)(const char* data, std::size_t len, void* arg);
int json_now(Sink sink, void* arg);

// Called from lowtide's ELF destructor (from_exit_call false) and from
// _exit/_Exit (true: possibly inside a signal handler): writes the
// configured report once, if this process should (see docs/report.md).
// Takes no lock another thread or the interrupted code may hold, and never
// calls malloc from _exit (docs/security.md).
void at_exit(bool from_exit_call);

// Whether this process writes the configured report (on, and the owner or
// a child with a file of its own: docs/report.md, "Which processes write
// one"). The periodic report and the signal handlers follow it.
bool this_process_reports();

// The periodic report (periodic.cpp's thread): the configured report,
// written now unless the exit-time report has started (which it then never
// overwrites). Waits for the registry lock like lowtide_write_report, so it
// is never partial; calls no malloc (C++ names stay mangled).
int write_periodic();

// Constructor-time bookkeeping: start time, and the owner-pid marker that
// tells exec'd children they are children.
void on_start();
void on_fork_child();

}  // namespace lowtide::report

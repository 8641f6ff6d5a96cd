// The report for a process ended by SIGTERM or SIGINT under the default
// action (docs/report.md, "Ended by a signal"). Where the disposition of
// one is SIG_DFL when lowtide starts, lowtide's handler stands in for it:
// it writes the exit-time report (the async-signal-safe path _exit uses),
// restores SIG_DFL and raises the signal again, so the process ends exactly
// as it would have (same wait status). It is invisible to the program:
// sigaction() reports SIG_DFL where it stands, and a program that sets
// SIG_DFL gets it back in its place; any other handler, or SIG_IGN,
// replaces it as usual. A handler installed with SA_RESETHAND (Node.js's)
// is called through lowtide's own, which makes the reset to lowtide's
// handler where the kernel would make it to the real SIG_DFL.
#pragma once
#include <csignal>

namespace lowtide::sig {

// From lowtide's constructor, when this process writes a report (never in
// an AT_SECURE process).
void install();

// The interposed sigaction(2) (exports.cpp): glibc's, except that where
// lowtide's handler stands in for SIG_DFL, that is what it shows, and
// SIG_DFL asked for puts lowtide's handler back; a handler with
// SA_RESETHAND is shown as given. Async-signal-safe.
int sigaction(int sig, const struct sigaction* act, struct sigaction* old);

// The interposed signal(3) (glibc's calls its sigaction internally, past
// ours): for SIG_DFL on SIGTERM and SIGINT, while our handler is in use,
// our handler back in its place through the sigaction above; otherwise
// glibc's (its BSD semantics, and siginterrupt's record), with our handler
// shown as SIG_DFL in what it returns.
using Handler = void (*)(int);
Handler signal(int sig, Handler h);

}  // namespace lowtide::sig

// The live query: `lowtide stats PID` / `lowtide top PID` read a running
// process's counters from outside, without a signal and without stopping it.
//
// A thread named lowtide-live waits in accept() on an abstract Unix socket,
// "lowtide/<pid namespace inode>/<pid>" (or, where another process holds
// that name, the same followed by "/<16 random hex digits>"), and answers
// one line ("stats\n") from a peer of the same uid as our effective uid, or
// root (SO_PEERCRED), with one JSON document: the live resident-memory
// breakdown and the JSON report the exit report writes (report::json_now).
// Connections it does not answer get at most 2 % of a core (live.cpp,
// Budget). Details and the reasons for each rule: docs/design-notes.md
// ("The live query"), docs/security.md ("The live socket").
#pragma once

namespace lowtide::live {

// Called where the lowtide-decay thread has just been started (at a large
// allocation, under the decay thread's start lock, which fork's prepare
// handler also takes, and no other lowtide lock; every signal blocked, so
// the new thread inherits a full mask): starts the server thread, which
// takes the socket prepare() made or makes its own, once per process,
// unless LOWTIDE_LIVE=off or the process is AT_SECURE. Failures are silent (the process is then just not reachable;
// docs/usage.md says when). Allocates only through glibc's pthread_create.
void start();

// Called under the same start lock just before the decay thread is created
// (make true), and after a start that created none (make false). With
// make: in a process that has no other thread, makes the listening socket
// here, which start()'s server then takes. Moving it above fd 1023 grows
// the fd table, which costs nothing while no other thread shares the table
// and an RCU grace period (milliseconds) once one does: the server thread
// makes it itself otherwise (live.cpp, open_listening). Without make:
// closes a socket made here that no server took. Silent, as start().
void prepare(bool make);

// The fork child handler: the listening socket and any connection being
// answered belong to the parent, whose server thread does not exist here.
// Closes them (close(2) only: async-signal-safe) so the child never holds
// the parent's name alive; the child's own decay thread, when it starts,
// opens a socket under the child's pid.
void fork_child();

}  // namespace lowtide::live

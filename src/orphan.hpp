// A process whose threads have all ended ends, as under glibc alone.
//
// When the main thread calls pthread_exit, the process goes on until its
// last thread ends; glibc then calls exit(0) from that thread. It counts
// every thread, lowtide's own included (lowtide-decay, lowtide-live,
// lowtide-report), and those never end: a program that ended main with
// pthread_exit after a large allocation lived on with nothing but them,
// for good, and as every lowtide thread blocks every signal and the
// exited leader takes none, even SIGTERM left it standing. So lowtide's
// threads look, at each wake-up, whether only they are left.
#pragma once
#include <cstdint>

namespace lowtide::orphan {

// At the start of each of lowtide's own threads, and at the end of one
// that ends (the live server, when the program closed its socket).
void own_thread_started();
void own_thread_ending();

// From the exit destructor of every thread that allocated
// (cache::note_thread_exit): true when lowtide's threads should look soon
// (the main thread has exited, and threads are ending).
bool note_exit();

// From lowtide's threads at each wake-up, outside every lock. When the main
// thread has exited and only lowtide's threads are left, it has exit(0)
// called, as glibc's last thread would, and returns. Otherwise returns how
// long until the next look is due (ns): at most a second, 10 ms after an
// exit that may have been the last.
std::uint64_t check(std::uint64_t now);

// In a forked child: none of lowtide's threads exist there.
void fork_child();

// Tests: the leader's state read from `reader` instead of pal::leader_gone,
// and `end` called instead of exit(0) (nullptr: the real ones again);
// forgets lowtide's threads and every look, as fork_child.
void set_for_test(bool (*reader)(int, long*), void (*end)());

}  // namespace lowtide::orphan

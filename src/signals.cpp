#include "signals.hpp"

#include <atomic>
#include <cerrno>
#include <pthread.h>

#include "report.hpp"

// glibc's sigaction under its other public name (GLIBC_2.2.5): the one our
// interposed sigaction forwards to, without dlsym.
extern "C" int __sigaction(int sig, const struct sigaction* act, struct sigaction* old);
// glibc's signal() under another name of the same function.
extern "C" void (*bsd_signal(int sig, void (*h)(int)))(int);

namespace lowtide::sig {

namespace {

// install() ran: this process writes a report, so SIG_DFL for SIGTERM and
// SIGINT means lowtide's handler.
std::atomic<bool> enabled{false};

bool ours_to_take(int sig) { return sig == SIGTERM || sig == SIGINT; }

extern "C" void lowtide_on_signal(int sig) {
  // Only async-signal-safe work from here: the path _exit takes (try-locks,
  // no malloc; it keeps errno).
  report::at_exit(true);
  struct sigaction dfl{};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  __sigaction(sig, &dfl, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  // The default action now: the process ends by `sig`, as without lowtide.
  raise(sig);
}

bool is_ours(const struct sigaction& sa) {
  return (sa.sa_flags & SA_SIGINFO) == 0 && sa.sa_handler == &lowtide_on_signal;
}

// A handler of the program's installed with SA_RESETHAND (Node.js's for
// SIGTERM and SIGINT: it puts the terminal back, then raises the signal
// again to die by it). The kernel resets such a disposition to the real
// SIG_DFL as it delivers the signal, past our sigaction, so the raise
// ended the process without the report that SIG_DFL means here. lowtide
// makes that reset itself: the kernel holds lowtide_on_oneshot (the
// program's mask and flags, without SA_RESETHAND), which puts lowtide's
// handler back and then calls the program's. What the program gave is kept
// here for that call and for sigaction's answers, in two copies so that the
// signal handler never reads one being written (a writer fills the other,
// then publishes it, before the kernel's disposition changes; two threads
// installing such handlers for the same signal at once are not expected).
struct Oneshot {
  struct sigaction given[2];
  std::atomic<int> cur{0};
};
Oneshot oneshots[2];  // SIGTERM, SIGINT

Oneshot& oneshot_of(int sig) { return oneshots[sig == SIGTERM ? 0 : 1]; }

// The handler the kernel holds for a program's SA_RESETHAND action.
extern "C" void lowtide_on_oneshot(int sig, siginfo_t* info, void* uc);

bool is_oneshot(const struct sigaction& sa) {
  return (sa.sa_flags & SA_SIGINFO) != 0 && sa.sa_sigaction == &lowtide_on_oneshot;
}

// A real handler (not SIG_DFL, SIG_IGN) that the kernel would reset.
bool wants_reset(const struct sigaction& sa) {
  return (sa.sa_flags & SA_RESETHAND) != 0 && sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN;
}

bool is_default(const struct sigaction& sa) { return (sa.sa_flags & SA_SIGINFO) == 0 && sa.sa_handler == SIG_DFL; }

// Both signals blocked while the handler runs on this thread, so the other
// one cannot end the process halfway through the report (a second signal to
// another thread still can: SA_RESETHAND makes a second SIGTERM or Ctrl-C
// end the process at once, without waiting for the report).
struct sigaction our_action() {
  struct sigaction sa{};
  sa.sa_handler = &lowtide_on_signal;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaddset(&sa.sa_mask, SIGINT);
  // SA_RESTART: the handler does not return (the process ends by the
  // signal), but should it, the program's system calls go on as they would
  // without lowtide's handler.
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  return sa;
}

extern "C" void lowtide_on_oneshot(int sig, siginfo_t* info, void* uc) {
  Oneshot& o = oneshot_of(sig);
  const struct sigaction prog = o.given[o.cur.load(std::memory_order_acquire)];
  // The reset SA_RESETHAND stands for: SIG_DFL, which is lowtide's handler.
  struct sigaction ours = our_action(), prev{};
  __sigaction(sig, &ours, &prev);
  if (!is_oneshot(prev)) {
    // Not ours to reset: the program set another action meanwhile (put it
    // back), or another thread's delivery of this signal reset it first,
    // and this one meets SIG_DFL, as it would in the kernel.
    __sigaction(sig, &prev, nullptr);
    if (is_ours(prev)) lowtide_on_signal(sig);
  }
  if ((prog.sa_flags & SA_SIGINFO) != 0) {
    prog.sa_sigaction(sig, info, uc);
  } else if (prog.sa_handler != SIG_DFL && prog.sa_handler != SIG_IGN) {
    prog.sa_handler(sig);
  }
}

struct sigaction oneshot_action(const struct sigaction& given) {
  struct sigaction sa = given;
  sa.sa_sigaction = &lowtide_on_oneshot;
  sa.sa_flags = (given.sa_flags & ~static_cast<int>(SA_RESETHAND)) | SA_SIGINFO;  // SA_RESETHAND is 1u << 31
  return sa;
}

}  // namespace

void install() {
  if (!report::this_process_reports()) return;
  // A pid namespace's init (a container's entry point run without
  // --init): the kernel ignores SIGTERM and SIGINT sent to it while their
  // action is the default, so a handler of ours would change what the
  // signal does (the report, then a raise the kernel ignores again, and
  // EINTR in the program). Its report comes at its exit as usual.
  if (::getpid() == 1) return;
  enabled.store(true);
  for (int sig : {SIGTERM, SIGINT}) {
    struct sigaction cur{};
    // Only where the default action is in force: SIG_IGN (inherited, e.g.
    // from nohup or a shell's background job) or a handler stays.
    if (__sigaction(sig, nullptr, &cur) != 0 || !is_default(cur)) continue;
    struct sigaction sa = our_action();
    __sigaction(sig, &sa, nullptr);
  }
}

int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  if (!ours_to_take(sig) || !enabled.load(std::memory_order_relaxed)) return __sigaction(sig, act, old);
  struct sigaction want{};
  if (act != nullptr) want = *act;  // act and old may be the same object
  Oneshot& o = oneshot_of(sig);
  const int cur = o.cur.load(std::memory_order_relaxed);
  const struct sigaction given_before = o.given[cur];  // for the answer
  if (act != nullptr && is_default(want)) {
    want = our_action();
  } else if (act != nullptr && wants_reset(want)) {
    o.given[1 - cur] = want;
    o.cur.store(1 - cur, std::memory_order_release);
    want = oneshot_action(want);
  }
  struct sigaction prev{};
  if (__sigaction(sig, act != nullptr ? &want : nullptr, &prev) != 0) {
    o.cur.store(cur, std::memory_order_release);
    return -1;
  }
  if (old != nullptr) {
    if (is_ours(prev)) {
      *old = {};
      old->sa_handler = SIG_DFL;
      sigemptyset(&old->sa_mask);
    } else if (is_oneshot(prev)) {
      // What the program gave, with what glibc adds to every answer (its
      // restorer and the flag that says so).
      const int added = prev.sa_flags & ~oneshot_action(given_before).sa_flags;
      *old = given_before;
      old->sa_flags |= added;
      old->sa_restorer = prev.sa_restorer;
    } else {
      *old = prev;
    }
  }
  return 0;
}

Handler signal(int sig, Handler h) {
  if (!ours_to_take(sig) || !enabled.load(std::memory_order_relaxed)) return bsd_signal(sig, h);
  // A handler of the program's (or SIG_IGN): glibc's own signal(), which
  // leaves out SA_RESTART where the program called siginterrupt(sig, 1),
  // from glibc's record of it that lowtide cannot read. Made here with
  // SA_RESTART always, a program that had asked for its blocking read to
  // end by EINTR at Ctrl-C waited in it for ever under the report.
  // Only the answer is lowtide's to change: its handler shows as SIG_DFL.
  if (h != SIG_DFL) {
    const Handler prev = bsd_signal(sig, h);
    if (prev == &lowtide_on_signal) return SIG_DFL;
    if (reinterpret_cast<void*>(prev) == reinterpret_cast<void*>(&lowtide_on_oneshot)) {
      // The program's SA_RESETHAND handler it stood for; no reset comes now.
      const Oneshot& o = oneshot_of(sig);
      return o.given[o.cur.load(std::memory_order_acquire)].sa_handler;
    }
    return prev;
  }
  struct sigaction act{}, old{};
  act.sa_handler = h;
  sigemptyset(&act.sa_mask);
  sigaddset(&act.sa_mask, sig);
  act.sa_flags = SA_RESTART;
  if (sig::sigaction(sig, &act, &old) != 0) return SIG_ERR;
  return old.sa_handler;
}

}  // namespace lowtide::sig

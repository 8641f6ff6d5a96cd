// The only place lowtide talks to the kernel: mappings, advice, raw file
// reads. Nothing here allocates, so every function is safe inside malloc.
#pragma once
#include <atomic>
#include <cstddef>
#include <csignal>
#include <cstdint>

struct rlimit;

namespace lowtide::pal {

constexpr std::size_t kPageSize = 4096;

// Reserve address space: PROT_NONE, MAP_NORESERVE. nullptr on failure.
void* reserve(std::size_t len);
// Reserve len bytes aligned to `align` (a power of two >= page size).
void* reserve_aligned(std::size_t len, std::size_t align);
// Make [p, p+len) read-write. Its pages must already have been dropped (a
// free extent of the range is), so it reads as zeros. Usually one mmap over
// it; past vm.max_map_count, where the kernel refuses every mmap, and in
// overcommit mode 2, mprotect. over_limit: refused up front, where the
// kernel's overcommit check would refuse an accounted mapping (see
// platform.cpp). refused: the kernel said no (the map count, RLIMIT_DATA,
// an mlock limit, mode 2's charge). The range is then left reserved, or
// read-write in part, its pages still dropped; or, rarely, in part a hole
// (a kernel before 6.12 unmaps before some of its checks): the caller asks
// recover_destination before it releases the range.
enum class Commit { ok, over_limit, refused };
Commit commit(void* p, std::size_t len);
// Reads the soft RLIMIT_DATA (at start-up, after each setrlimit/prlimit of
// the process's own through lowtide's symbols, and every 250 ms to 1.25 s from
// the decay thread, which is what sees one set from outside with prlimit
// --pid; without that thread such a one is not seen). Safe from any thread at
// any time: a getrlimit and one relaxed store of a flag, errno kept. Under a
// finite one commit() and drop_writable have the kernel check what they make
// writable against it; the read-write free space drop_writable leaves between
// live blocks counts against it too, and a refusal the limit can have caused
// (data_limit_near) makes it PROT_NONE before it tries again
// (LargePath::give_up_held).
bool note_data_limit();  // true: finite
// Under a finite RLIMIT_DATA, would `want` bytes more of data pass it
// (VmData from /proc/self/status; true where it cannot be read)? false
// without a limit. For a refusal: the limit's, or another (the map count).
bool data_limit_near(std::size_t want);
// Would the kernel refuse an accounted private mapping of len bytes (the
// heuristic overcommit check)? commit() asks this first, since it maps with
// MAP_NORESERVE, and so must anyone handing a request to mimalloc, which
// does too.
bool overcommit_refuses(std::size_t len);
// Test hook: vm.overcommit_memory as if read (-1: not read yet, asked at
// the next call).
void set_overcommit_for_test(int mode);
// Drop the pages of [p, p+len), which must be read-write, and make it
// reserved PROT_NONE space again. Never leaves a hole another thread's mmap
// could land in. Past vm.max_map_count the range may stay read-write (its
// pages dropped all the same); either way it reads as zeros once committed
// again.
void decommit(void* p, std::size_t len);
// Drop the pages of [p, p+len) where another allocator's read-write
// memory lies (mimalloc's free spans: small::trim_own), leaving the
// mapping as it is: the range reads as zeros and costs no memory until it
// is written again. errno is kept.
void discard(void* p, std::size_t len);
// A free extent's other release: a fresh read-write mapping over
// [p, p+len) (every page dropped, zeros, the mapping's flags reset, merged
// with read-write neighbours), so that free space between live blocks
// splits no mapping (Arena::give_back; issue 14 part 5). Under a finite
// RLIMIT_DATA a fresh PROT_NONE mapping made read-write by mprotect, so that
// the limit is checked; where the limit (or the map count) refuses the
// mprotect, the range stays fresh PROT_NONE space, as decommit leaves it,
// and true all the same: either way the range is released. false, leaving
// the range as it was, where it must not or cannot be done: under
// vm.overcommit_memory=2 (a read-write private mapping is charged against
// CommitLimit even with MAP_NORESERVE; a PROT_NONE one is not), while
// mlockall(MCL_FUTURE) is in force (the kernel would populate and lock the
// whole fresh mapping), and when the kernel refuses the mmap (the map
// count).
bool drop_writable(void* p, std::size_t len);
// mlockall and munlockall for the interposed exports: the system calls,
// and whether MCL_FUTURE is in force after them. -1 with errno on failure.
// A program that makes the system call itself is not seen. mlockall_begin()
// first (libc::mlockall): from then until mlockall returns, drop_writable
// refuses.
void mlockall_begin();
// In a forked child: no mlockall flags, none under way.
void mlock_fork_child();
int mlockall(int flags);
int munlockall();
// Move the pages of [src, src+len) to dst (which must be a reservation of
// ours) without unmapping src: MREMAP_DONTUNMAP keeps src mapped, so no hole
// appears. Moved.bytes: how many bytes moved, from the front: len, or less
// where the kernel refused part (vm.max_map_count, a mapping it will not
// move). Then [src, src+bytes) is mapped and empty and [dst, dst+bytes)
// holds those pages; the rest is where it was. Moved a mapping at a time
// (each staying a mapping of its own: docs/design-notes.md, "Mappings"),
// each asked of the kernel (PROCMAP_QUERY, Linux 6.11), and only where
// mremap_growth_ok(): nothing is moved (0) where a refusal can be
// foreseen, since kernels before 6.17 unmap the destination before most of
// their checks (a refused move would leave a hole there). A kernel that
// answers PROCMAP_QUERY with ENOTTY (before 6.11) gets the whole range in
// one call, which it moves whole or refuses whole, if uname agrees that it
// is older than 6.17 (a seccomp filter may answer ENOTTY on a newer one);
// where /proc cannot be opened nothing is moved (such a kernel may be one
// that moves part of a range and stops).
//
// Moved.refused: the length of an mremap that was made and refused, at
// dst+bytes (0: none was). Every kernel unmaps a move's destination before
// move_vma, which can still fail (out of memory, KSM), so that piece may
// have been a hole for a moment, which another thread's mmap may have
// taken. recover_destination decides: Moved.lost false, the piece is ours
// (as it was, or reserved again: its data, a cached block's pages, may be
// gone, so the caller commits it before use); true, it may be someone
// else's now, and the caller must never map over it (Arena::keep_out). The
// caller holds dst out of Arena::contains for the call (a pointer into a
// mapping someone made in the hole is theirs).
struct Moved {
  std::size_t bytes = 0;
  std::size_t refused = 0;
  bool lost = false;
};
Moved move_pages(void* src, std::size_t len, void* dst);
// After a refused mremap into [p, p+len): true where it is ours. Mapped
// throughout (mincore), it was not unmapped (kernels from 6.17 make
// their checks first, and a mapping they will not move, a sealed one or one
// a userfaultfd watches, is refused that way); else it is mapped again
// as reservation (fill_hole, MAP_FIXED_NOREPLACE), which fails where any of
// it was taken. Left undecided: a mapping someone made that covers exactly
// the piece and merged with ours on both sides looks like the piece never
// unmapped (it takes a refused move, then an mmap of the same flags landing
// in those microseconds on that very spot).
bool recover_destination(void* p, std::size_t len);
// For tests: as if the kernel had answered PROCMAP_QUERY with ENOTTY (true),
// or had not yet been asked (false); and as if uname gave `release` (null:
// ask uname again when it matters).
void set_procmap_query_missing(bool missing, const char* release = nullptr);
// Whether a kernel release string ("6.1.0-28-amd64") is below major.minor;
// false for one that does not start with two numbers.
bool release_below(const char* release, int major, int minor);
// /proc/self/maps opened read only (O_CLOEXEC), never created, not through
// a link at the last step (O_NOFOLLOW), never blocking (O_NONBLOCK,
// O_NOCTTY), and kept only if it is a regular file (procfs's are; whatever
// a chroot put at that path is closed again): the fd, or -1. The caller
// closes it. The one place lowtide opens that file (move_pages and
// one_mapping ask it PROCMAP_QUERY; the live server reads it).
int open_maps();
// Whether [p, p+len) lies within one mapping (Linux 6.11's PROCMAP_QUERY
// on /proc/self/maps, one open, one ioctl, one close: ~6 us here). False
// when it does not, or when it cannot be told (an older kernel, no /proc).
bool one_mapping(const void* p, std::size_t len);
// Move the pages of [src, src+len) to dst and grow the mapping there to
// new_len, as one mapping (mremap without MREMAP_DONTUNMAP, which refuses to
// grow): the block stays one mapping however often it moves, where a move
// into a tail committed beforehand leaves it one mapping more each time
// (the kernel does not merge moved anonymous memory with memory mapped where
// it lands). The price: src is left unmapped, a hole another thread's mmap
// may take until fill_hole maps it again. Only for a src within one mapping
// (one_mapping), where mremap_growth_ok(). False when the kernel refused,
// which it may do after unmapping dst (up to 6.16 at least): dst is then
// either still mapped or a hole, and only fill_hole can tell (and it cannot
// tell a hole someone else's mmap filled meanwhile from dst still mapped).
bool move_grow(void* src, std::size_t len, void* dst, std::size_t new_len);
// Whether the kernel checks a move_grow's limits (RLIMIT_DATA) before it
// unmaps the destination: from 6.17, by the release uname gives (6.18 here
// refuses a growth past the data limit with the destination still
// mapped). Before, it unmaps first, so fill_hole tells a refused move's
// destination ours; from 6.17 a destination still mapped is ours too
// (recover_destination), with the risk recover_destination always takes:
// a refusal after the unmap (the kernel out of memory) whose hole another
// thread's mmap filled at once would be taken for ours.
bool growth_checked_first();
// Whether move_grow and grow_mapping may be tried: not where the kernel
// would charge the growth (overcommit mode 2) or populate and lock it
// (mlockall(MCL_FUTURE); mlockall(MCL_CURRENT) or mlock/mlock2 since the
// last munlockall, as lowtide sees them: a program making the system call
// itself is not seen), and not under a finite RLIMIT_AS; under a finite
// RLIMIT_DATA only where VmData plus `counted`, what the call adds to the
// data pages the kernel counts (a growth's new room; the whole source for
// a move that keeps it mapped), is within the limit (the kernel checks a
// move for just that, where a copy would commit the whole new block beside
// the old one). The refusals that come after mremap may have unmapped its
// destination, and these can be foreseen.
bool mremap_growth_ok(std::size_t counted);
// mlock and mlock2 for the interposed exports (mlock is mlock2 with flags
// 0): the system call. note_locked(): a lock may now cover a large block
// (libc::mlock2 calls it for a lock that overlaps the range, before the call).
int mlock2(const void* p, std::size_t len, unsigned flags);
void note_locked();
// mprotect and pkey_mprotect for the interposed exports: the system calls.
// note_protected(): the program is about to take write permission from part
// of the range (libc::mprotect calls it before the call; keyed: after a
// pkey_mprotect that may have given a key), so a large block may be freed
// that way.
// writable_again(p, len): before the reuse cache keeps a freed block
// (LargePath::release): nothing where no such call was ever made, else the
// block is made read-write again (with the default key where keys were
// used); false where the kernel refused, and the block is given back
// instead. glibc unmaps such a block at its free; a cache that kept it as
// it was handed it to the next malloc of its size, whose first write died
// (reliability.md no. 76).
void note_protected(bool keyed);
int mprotect(void* p, std::size_t len, int prot);
int pkey_mprotect(void* p, std::size_t len, int prot, int pkey);
// prlimit for the interposed setrlimit/prlimit (and their 64 forms, the
// same on x86-64): the system call (prlimit64), 0 or -1 with errno.
int prlimit(int pid, int resource, const struct rlimit* new_limit, struct rlimit* old_limit);
bool writable_again(void* p, std::size_t len);
// Grow the mapping [p, p+len) in place to new_len as the same mapping
// (munmap of [p+len, p+new_len), then mremap without MREMAP_MAYMOVE): a
// block move_grow moved stays one mapping, where a tail mapped behind its
// moved pages would be a mapping of its own. The tail is a hole between
// the two calls; if the mremap is refused (another mapping took some of
// it, p's range is no longer one mapping) it is mapped again with
// fill_hole. Only where mremap_growth_ok().
enum class Grow { grown, refused, lost };  // lost: fill_hole refused, the tail is not ours
Grow grow_mapping(void* p, std::size_t len, std::size_t new_len);
// Map the hole [p, p+len) that move_grow left PROT_NONE again, as the
// reservation around it (MAP_FIXED_NOREPLACE: never over a mapping someone
// else made there meanwhile). False if any of it was taken: the caller must
// then never map there again (Arena: the extent stays used for good).
bool fill_hole(void* p, std::size_t len);
// Ask for transparent huge pages on [p, p+len) (best effort).
void advise_hugepage(void* p, std::size_t len);
// Fault [p, p+len) in now, as writes would (MADV_POPULATE_WRITE, Linux
// 5.14): one call instead of a trap per page. Best effort: a kernel without
// it (EINVAL) turns it off for the process; out of memory or a fatal signal
// pending leaves the rest to fault when written, as it would have.
// True only where the whole range was faulted in (the call returned 0):
// large.populated counts no more than that (reliability.md no. 126).
bool populate(void* p, std::size_t len);
void unmap(void* p, std::size_t len);
// Bytes of [p, p+len) that are resident (the range rounded out to pages):
// PAGEMAP_SCAN's runs of present pages (Linux 6.7+, /proc/thread-self/
// pagemap opened and closed for the call) until a sixteenth of the range's
// pages are found present, then mincore page by page for the rest; mincore
// alone where the scan is not there. The two differ only on pages in
// transit: a page swapped out but still in the swap cache, or under
// migration, counts for mincore and not for the scan. Parts not mapped
// count as not resident. Takes the kernel's mmap lock for reading (and,
// for the open, the task's exec_update_lock for reading), no lock of
// lowtide's or the program's; not a cancellation point.
std::size_t resident_bytes(const void* p, std::size_t len);
// Make [p, p+len) of lowtide's private anonymous memory read as zero,
// writing only the pages that hold something (present, swapped out): a
// page with nothing behind it (never touched, or dropped by a decommit)
// reads as zero already, and writing it would fault it in (a page fault
// each, and memory the program may never touch: calloc of a sparse table
// taken from the reuse cache). By PAGEMAP_SCAN; everything is written
// where the scan is not there, and below 256 KiB.
void zero_held(void* p, std::size_t len);
// The same for each of n ranges (at most kSpansMax; out[i] for spans[i]),
// with one pagemap descriptor for all of them: the reuse cache measures
// the entries freed since its last miss at once.
struct Span {
  const void* p;
  std::size_t len;
};
constexpr int kSpansMax = 32;
void resident_bytes_many(const Span* spans, int n, std::size_t* out);
// The same by mincore alone (the fallback; tests compare the two). A call
// the kernel refuses for another reason than an unmapped part (EAGAIN
// under memory pressure, a filter) counts its pages as resident: the
// cache needs an upper bound (the live query then reports them too). An
// unmapped hole's end is found by galloping: a mapped island inside the
// span galloped over goes uncounted.
std::size_t resident_bytes_mincore(const void* p, std::size_t len);
// Whether resident_bytes answers by PAGEMAP_SCAN here (for tests; asks the
// kernel once, and a refusal makes mincore the answer from then on).
bool resident_scan_works();
// Windows a fork must not fall into (a hole in the large range, a scan's
// descriptor: the child would inherit it), and the forks being prepared.
// A window opens only while no fork is being prepared; fork's prepare
// handler waits for the ones other threads hold (a descriptor or a hole
// the child would inherit), not for its own thread's (fork called from a
// signal handler that interrupted one: it cannot close meanwhile). Each
// thread counts the windows it holds (thread-local, per gate). The wait is
// bounded (2 s) only so that fork can never hang for good: a window is
// microseconds of CPU, and a holder descheduled for 10 ms under load (the
// bound until 2026-12-06) let 2 children of 1,500 inherit a hole. Takes no
// lock, never allocates. Sequentially consistent on both sides: either the fork sees
// the window or the window sees the fork. Both are counts: two threads
// may fork at once, and the first one's parent handler must not reopen
// the gate while the second still prepares.
struct ForkGate {
  static constexpr int kGates = 2;  // the large path's holes (0), the scans (1)
  std::atomic<int> windows{0};
  std::atomic<int> forking{0};
  // The process whose threads the counts are of: 0 for the one
  // fork_gates_init named, else the child fork_done(true) ran in. A process
  // made without fork's handlers (_Fork, clone) inherits counts of threads
  // it does not have: its first fork, or its first window opened while the
  // parent was preparing a fork, sees another pid and starts the counts
  // afresh (adopt) instead of waiting 2 s at every fork, or never opening a
  // window. (A clone(CLONE_VM) child without CLONE_THREAD that forks would
  // reset its parent's counts: the parent's fork may then not wait for a
  // window open at that moment.)
  std::atomic<int> owner{0};
  int which = 0;  // this gate's index into the threads' own counts
  bool open();   // false (nothing open) while a fork is being prepared
  void close();  // never below 0: a child's reset may have come between
  // False where it gave up waiting (2 s) with other threads' windows open.
  bool fork_wait();
  // After the fork: the parent lets its fork go; the child has neither
  // window nor fork under way.
  void fork_done(bool child);
  // True (and the counts are this thread's own windows, no fork under way)
  // where owner names another process than this one. A system call: only
  // on fork's and the refused window's paths.
  bool adopt();
};
// The process the gates' counts are of, from lowtide's start (init.cpp).
void fork_gates_init(int pid);

// How many ranges the scan has answered (resident_bytes counts one,
// resident_bytes_many one per range), and how many scans hold a
// descriptor now (for tests).
std::uint64_t resident_scan_answers();
// Descriptors the scans have opened (for tests: a batch opens one).
std::uint64_t resident_scan_opens();
int scans_open_now();
// fork's prepare and after handlers (init.cpp): a fork waits (ForkGate:
// at most 2 s, on top of the large path's hole windows' 2) for other
// threads' scans under way (and rss_bytes' reads of /proc/self/statm) to
// close their descriptors, and none opens until every fork being prepared
// is done. A fork from a signal handler that interrupted a scan of its own
// thread does not wait for it, and that scan, resumed in the child, reads
// the parent's pagemap once (a wrong measure of one block, then closed). A
// child made without fork's handlers (clone, _Fork) starts the counts
// afresh at its first fork (ForkGate::owner).
void fork_wait_scans();
void fork_scans_done(bool child);
// A window of the same gate for the descriptors lowtide's threads open for
// a moment (pal::read_file's, the live server's /proc/self/maps and the
// connection it accepts): a fork waits for it as for a scan, and the child
// inherits none of them. false (no window) while a fork is being prepared.
bool fork_window_open();
// The same, waited for while forks are being prepared (sched_yield between
// tries; a fork's preparation is short): false after `within_ns` of them,
// the caller then goes on without one or tries later. The live server and
// the report writer wait 20 ms where a later turn will do, 2 s where a
// descriptor must not be left to a child (a program forking in a tight
// loop can refuse windows for tens of milliseconds).
bool fork_window_wait(std::uint64_t within_ns);
void fork_window_close();
// Fresh read-write zero memory for lowtide's own tables, committed as it is
// touched (MAP_NORESERVE). nullptr on failure.
void* map_lazy(std::size_t len);
// Make part of a reserve()d table read-write, keeping what it holds (an
// mprotect: pages already open are left as they are). For tables too large
// to be read-write whole: mlockall(MCL_CURRENT) populates and locks every
// read-write page, and vm.overcommit_memory=2 charges them (Arena's tables).
// false with errno kept when the kernel refuses (the map count, the
// overcommit limit).
bool open_table(void* p, std::size_t len);

// A counter shared by a process tree (report.cpp: the processes started
// from the reporting one that wrote no report). One page of a memfd, mapped
// shared, its fd close-on-exec like every fd lowtide opens (nothing leaks
// into the programs this one runs): a forked child shares the mapping, a
// process exec'd from this one opens /proc/PID/fd/FD of the creator. *fd,
// *dev, *ino identify it; nullptr on failure (no memfd_create under a
// seccomp filter, no fd left).
std::uint64_t* shared_counter_create(int* fd, std::uint64_t* dev, std::uint64_t* ino);
// Map the counter shared_counter_create made in process `pid`: through fd
// if this process still has that very file there (same device and inode:
// a program may have closed it and reused the number), else through
// /proc/PID/fd/FD of the creator while it lives: stat'ed first, opened only
// if it is that file (a reused fd number may name a device, whose open
// alone can act), then checked again on what was opened, owned by our uid.
// nullptr if neither is the counter.
std::uint64_t* shared_counter_open(int pid, int fd, std::uint64_t dev, std::uint64_t ino);

// SIGPIPE blocked on this thread for a scope, and the one a write in it
// raised taken back (one already pending before is left for the process):
// writing to a pipe or FIFO whose reader is gone then fails with EPIPE
// instead of ending the process.
class NoSigpipe {
 public:
  NoSigpipe() noexcept;
  ~NoSigpipe();
  NoSigpipe(const NoSigpipe&) = delete;
  NoSigpipe& operator=(const NoSigpipe&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};
// Writes s to fd 2 (stderr is reached only through fd 2), SIGPIPE blocked
// (NoSigpipe), within budget_ns: a regular file is written whole; anything
// else (a pipe nobody drains, a terminal stopped by ^S, an fd 2 someone
// made non-blocking) is written in chunks of at most 512 bytes, each after
// poll says POLLOUT, so no write blocks, until the budget runs out. 0, or
// -1 with errno (ETIMEDOUT: the rest unwritten, EPIPE: no reader). Once one
// call ran out of time, later ones take no time waiting (fd 2 is stuck)
// until one goes through whole. Allocates nothing; async-signal-safe.
int write_stderr_within(const char* s, std::size_t n, std::uint64_t budget_ns);
// A warning or a fatal line: write_stderr_within(s, n, 2 s), errno kept.
// Before 2026-12-06 a plain write(2): a bad LOWTIDE_* value in a process
// whose stderr was a full pipe hung it for good, and one whose stderr
// reader was gone died of SIGPIPE (reliability.md no. 49).
void write_stderr(const char* s, std::size_t n);
// Read a whole small regular file (e.g. under /proc; never a FIFO or a
// device, so it never blocks) into buf; returns bytes read, -1, or
// kNoWindow where no window of the fork gate came within 10 ms (a fork
// being prepared: the file is not opened, so no child can inherit its
// descriptor). buf is NUL-terminated. The fd is checked (OwnFd) before
// each read and before its close.
constexpr long kNoWindow = -2;
long read_file(const char* path, char* buf, std::size_t cap);
// A report's search for a separate debug file (symbolize.cpp): a regular
// file opened read only (O_CLOEXEC, never blocking), *dev and *ino its
// identity; -1 else. The fd may be handed to libdw, which closes it.
int open_debug_file(const char* path, std::uint64_t* dev, std::uint64_t* ino);
// stat's identity of path (the main file, which a candidate must not be).
bool file_identity(const char* path, std::uint64_t* dev, std::uint64_t* ino);
// pread: bytes read (0 at the end), -1 on error (EINTR retried).
long read_at(int fd, void* buf, std::size_t n, std::uint64_t off);
void close_fd(int fd);
// realpath into out[cap] (cap >= PATH_MAX): false where it fails.
bool real_path(const char* path, char* out, std::size_t cap);
// The first number on each of the /proc/self/status lines named keys[0..n)
// ("VmRSS:"), into kib[i] (the file's unit), 0 where the line is missing.
// The file is scanned line by line, not read whole: its Groups line grows
// with the process's supplementary groups (~600 push VmRSS past 4 KiB).
// false where it cannot be read to its end.
bool read_status_kib(const char* const* keys, std::uint64_t* kib, std::size_t n);

// Has the thread group's leader (the main thread) exited (pthread_exit:
// a zombie until the whole group ends)? *threads: the threads the kernel
// still counts, the zombie leader included. From the leader's
// /proc/self/task/PID/stat, read only inside a window of the fork gate
// (never after its bound without one); false where it cannot be read.
bool leader_gone(int pid, long* threads);

// An fd lowtide opened for itself, from a thread of its own (the decay and
// live threads) while the program runs: a program that closes every fd it
// did not open (close_range, a loop up to the limit: daemons, the children
// they spawn) may close it and get the number back for a file of its own,
// which lowtide must then neither read, write nor close. So its identity
// is kept (own: fstat's device and inode) and checked before each use
// (still_own), and it is closed only while it is still ours (close_own).
struct OwnFd {
  int fd = -1;
  unsigned long long dev = 0, ino = 0;
};
bool own(int fd, OwnFd* o);  // false where fstat fails (o->fd stays fd)
bool still_own(const OwnFd& o);
void close_own(const OwnFd& o);
// A seccomp filter the program installs after start can kill the process
// on a system call it never makes itself (sshd's pre-authentication child,
// browsers' sandboxed children, any program that locks itself down:
// SECCOMP_RET_KILL on clone3, socket, ...). lowtide's own threads and its
// live socket are made late (the decay thread and the live server at the
// first large allocation, the decay thread alone at a working thread's
// exit, the periodic report's in a forked child), so
// before making either it asks whether the calling thread is still as the
// process was at start. note_sandbox_at_start() reads the seccomp mode,
// the filter count (kernels 5.9+) and no_new_privs from
// /proc/thread-self/status (at load, from the library's constructor, on
// the main thread); sandbox_since_start() reads the calling thread's
// again (filters are per thread). `filtered`: a filter was added since
// (or the mode raised; where the kernel shows no count, no_new_privs set
// since, which an unprivileged filter needs), for good: no filter is ever
// taken away. `unreadable`: the file could be read at start and cannot
// now (a chroot without /proc, a filter that refuses the open, out of
// fds), which may pass. `as_at_start` also where nothing was known at
// start. Filters inherited at exec (a container runtime's, systemd's) are
// the start state, not a change. Never allocates; reads in 256-byte
// pieces. latch false: a `filtered` of this thread is not remembered for
// the process (an exiting thread's filter may be its own alone).
// forks_held: the caller holds a lock fork's prepare handler takes once it
// has shut the file gate (the decay thread's start lock): the file is then
// read even without a window of the gate (no child can be made before it
// is closed), where otherwise a fork being prepared makes it `unreadable`.
enum class Sandbox { as_at_start, filtered, unreadable };
void note_sandbox_at_start();
Sandbox sandbox_since_start(bool latch = true, bool forks_held = false);
// Test hook: the status file read instead of /proc/thread-self/status
// (nullptr: that one again); forgets the start state and the latch.
void set_status_path_for_test(const char* path);
// Starts fn(arg) on a detached thread with every signal blocked (the
// host's signals never land on lowtide's threads), whose stack leaves at
// least `need` bytes for fn. glibc carves the static TLS block (the
// executable's and initial-exec libraries' __thread data) out of the stack
// it is asked for and only insists that ~16 KiB stay free, so asking for
// `need` alone can leave a thread a few KiB: the stack asked for is `need`
// plus the static TLS size (glibc's _dl_get_tls_static_info). Where that
// is not known, `need` is doubled while glibc refuses it (EINVAL: the TLS
// does not fit), up to 8 MiB, then glibc's default size is tried. Returns
// pthread_create's result; the caller's signal mask is as it was.
int start_thread(void* (*fn)(void*), void* arg, std::size_t need);
// Whether a process of this process's own (non-root) uid may read what
// /proc shows of it (its maps, command line): what the kernel asks of a
// ptrace-mode read (ptrace_may_access). The process must be dumpable
// (PR_GET_DUMPABLE 1: a process that changed credentials, as a daemon
// dropping root does, is not, unless it says so again), and its real,
// effective and saved uids, and gids, each the same: a process still
// holding another id (a saved root uid, a setuid program's real user)
// keeps them from that user. Three system calls, no allocation.
bool readable_by_own_uid();
// Resident set size in bytes from /proc/self/statm, 0 if unreadable.
std::size_t rss_bytes();
// The process's environment as the kernel gave it: environ, or, where
// the first allocation comes before libc has set environ (a program's
// .preinit_array runs before any library's initialiser, libc's among them:
// environ is NULL there), the array on the initial stack, after argc and
// argv (the System V ABI's layout, found from ld.so's __libc_stack_end).
// nullptr if neither is known.
const char* const* initial_environ();
// The machine's RAM in bytes (sysinfo), 0 if unknown.
std::uint64_t ram_bytes();
int current_tid();
// Sleep while *word == expected, for at most timeout_ns (FUTEX_WAIT on a
// private word); returns early on futex_wake, a signal, or a changed word.
void futex_wait(const std::uint32_t* word, std::uint32_t expected, std::uint64_t timeout_ns);
// Wake one thread in futex_wait on word.
void futex_wake(const std::uint32_t* word);
// The calling thread's name (its task comm, as pthread_setname_np or
// PR_SET_NAME set it) into out[16], NUL-terminated: one prctl(PR_GET_NAME),
// no file to open. out is left as it was if the kernel refuses.
void thread_name_self(char* out);
// Copy n bytes of this process's own memory at src into dst without
// faulting: process_vm_readv on the own thread's id (not getpid(): a
// zombie leader after the main thread's pthread_exit has no mm) answers EFAULT where a byte of
// [src, src+n) is not mapped or not readable (a library another thread
// dlclose'd meanwhile: its pages unmapped, its link_map and name freed)
// where a plain read would raise SIGSEGV. false where not all n bytes
// could be read, or where the call itself is refused (a seccomp filter's
// ENOSYS or EPERM): the caller then does without what it wanted to read.
// Pages are read as the kernel has them mapped (a PROT_NONE page is
// refused, as a plain read would fault). No ptrace check applies within
// the own thread group (Yama's ptrace_scope, a process that is not
// dumpable: __ptrace_may_access answers yes first). Never allocates, takes
// no lock of lowtide's or the program's (the kernel's mmap lock, for
// reading); errno is left as it was.
bool read_own_memory(const void* src, void* dst, std::size_t n);
// The NUL-terminated string at src into dst[cap], by read_own_memory in
// pieces that end at page boundaries (never a page the string does not
// reach). Its length, or -1 where a byte could not be read or no NUL came
// within cap bytes.
long read_own_string(const char* src, char* dst, std::size_t cap);
// Whether the NUL-terminated string at src is `want` (compared in pieces
// of at most 256 bytes, as read_own_string reads): 1 it is, 0 it is not,
// -1 a byte that had to be read to tell could not be.
int own_string_is(const char* src, const char* want);
// Has thread `tid` of process `pid` gone for good: the kernel has released
// it, so it runs no more code and writes no more memory? tgkill with signal
// 0 (nothing is sent). A tid the kernel has already handed to a new thread
// of this process reads as not gone, so a caller only ever waits longer.
// errno is left as it was.
// Whether thread tid of process pid is gone (tgkill(pid, tid, 0)): gone on
// ESRCH, alive when the signal could be sent, unknown when the call itself
// is refused (a seccomp filter denying tgkill, say).
enum class ThreadState { alive, gone, unknown };
ThreadState thread_state(int pid, int tid);
// 64 unpredictable bits (report files' temporary names): getrandom(2), or,
// where it is unavailable or would block, the clock, the pid and a stack
// address mixed (still different in every process and every call). errno
// is left as it was.
std::uint64_t random_u64();
// CLOCK_MONOTONIC in nanoseconds: every age and interval lowtide measures.
std::uint64_t now_ns();
// Let another thread run (sched_yield): for the short waits on work another
// thread is finishing outside a lock (a give-back's re-map).
void yield();

// The page operations of the large path and its reuse cache, as one table:
// production code uses kPageOps (the functions above), tests a fake that
// fails on demand. Large calls make a syscall anyway, so the indirect call
// costs nothing there; the small-block path never goes through it.
struct PageOps {
  Commit (*commit)(void* p, std::size_t len);
  void (*decommit)(void* p, std::size_t len);
  Moved (*move_pages)(void* src, std::size_t len, void* dst);
  void (*advise_hugepage)(void* p, std::size_t len);
  bool (*overcommit_refuses)(std::size_t len);
  std::size_t (*resident)(const void* p, std::size_t len);
  // Arena::give_back's read-write release; null: always decommit (tests).
  bool (*drop_writable)(void* p, std::size_t len) = nullptr;
  // A move that keeps the block one mapping (move_grow, after one_mapping,
  // then fill_hole on its source); null: moves as move_pages (tests).
  bool (*one_mapping)(const void* p, std::size_t len) = nullptr;
  bool (*move_grow)(void* src, std::size_t len, void* dst, std::size_t new_len) = nullptr;
  bool (*fill_hole)(void* p, std::size_t len) = nullptr;
  Grow (*grow_mapping)(void* p, std::size_t len, std::size_t new_len) = nullptr;
  bool (*mremap_growth_ok)(std::size_t counted) = nullptr;
  // After a refused commit: whether the range is still reserved (mapped
  // again if it had become a hole), false where it may be someone else's.
  bool (*recover)(void* p, std::size_t len) = &recover_destination;
  // Before a freed block is cached (writable_again); null: always (tests).
  bool (*writable_again)(void* p, std::size_t len) = nullptr;
  // calloc's zeroing of a block taken from the cache; null: memset (tests).
  void (*zero)(void* p, std::size_t len) = nullptr;
  // After a refusal of `want` bytes: a finite RLIMIT_DATA near enough to
  // be its cause (data_limit_near); null: never (tests).
  bool (*data_limit_near)(std::size_t want) = nullptr;
  // A grown block's new pages faulted in ahead of the writes (populate);
  // null: never (tests).
  bool (*populate)(void* p, std::size_t len) = nullptr;
  // Whether a refused move_grow left its destination mapped when refused
  // for a limit (growth_checked_first); null: not known (tests).
  bool (*growth_checked_first)() = nullptr;
};
inline constexpr PageOps kPageOps{&commit,           &decommit,      &move_pages, &advise_hugepage, &overcommit_refuses,
                                  &resident_bytes,   &drop_writable, &one_mapping, &move_grow, &fill_hole, &grow_mapping, &mremap_growth_ok,
                                  &recover_destination, &writable_again, &zero_held, &data_limit_near, &populate,
                                  &growth_checked_first};

}  // namespace lowtide::pal

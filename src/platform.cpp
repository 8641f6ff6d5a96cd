#include "platform.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/magic.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <unistd.h>

#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif
#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

// ld.so's (GLIBC_2.2.5): the initial stack pointer (initial_environ).
extern "C" __attribute__((weak)) void* __libc_stack_end;

namespace lowtide::pal {

namespace {
// lowtide's own mprotect calls: the system call, not the exported mprotect
// (which would take lowtide's PROT_NONE releases for the program's).
int sys_mprotect(void* p, std::size_t len, int prot) {
  return ::syscall(SYS_mprotect, p, len, prot) == 0 ? 0 : -1;
}
}  // namespace

namespace {
constexpr int kReserveFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
}

void* reserve(std::size_t len) {
  void* p = ::mmap(nullptr, len, PROT_NONE, kReserveFlags, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void* reserve_aligned(std::size_t len, std::size_t align) {
  // Over-reserve, then trim both ends: the trimmed ends are outside the range
  // we will ever carve from, so unmapping them leaves no hole inside it.
  std::size_t over = len + align;
  if (over < len) return nullptr;
  auto* raw = static_cast<char*>(reserve(over));
  if (raw == nullptr) return nullptr;
  auto addr = reinterpret_cast<std::uintptr_t>(raw);
  std::uintptr_t aligned = (addr + align - 1) & ~(static_cast<std::uintptr_t>(align) - 1);
  std::size_t head = aligned - addr;
  std::size_t tail = over - head - len;
  if (head) ::munmap(raw, head);
  if (tail) ::munmap(reinterpret_cast<char*>(aligned) + len, tail);
  return reinterpret_cast<void*>(aligned);
}

namespace {

// vm.overcommit_memory, read at the first commit: 0 heuristic, 1 always, 2 never.
std::atomic<int> overcommit_mode{-1};
// RAM + swap in pages, as of the last sysinfo().
std::atomic<unsigned long long> ram_swap_pages{0};

// The mode: 0, 1 or 2; -1 where it could not be read for want of a window
// (a fork storm in another thread), not cached: asked again next time.
int overcommit() {
  int m = overcommit_mode.load(std::memory_order_relaxed);
  if (m < 0) {
    char buf[16];
    const long n = read_file("/proc/sys/vm/overcommit_memory", buf, sizeof buf);
    if (n == kNoWindow) return -1;
    m = n > 0 && buf[0] >= '0' && buf[0] <= '2' ? buf[0] - '0' : 0;
    overcommit_mode.store(m, std::memory_order_relaxed);
  }
  return m;
}

// Mode 2, or not known: commits go mode 2's way (by mprotect, free space
// PROT_NONE), which is right in every mode.
bool mode2_way(int mode) { return mode == 2 || mode < 0; }

// RAM and swap in bytes, from one sysinfo(); false if it failed.
bool read_ram_swap(unsigned long long* ram, unsigned long long* swap) {
  struct sysinfo si;
  if (::sysinfo(&si) != 0) return false;
  const unsigned long long unit = si.mem_unit != 0 ? si.mem_unit : 1;
  *ram = static_cast<unsigned long long>(si.totalram) * unit;
  *swap = static_cast<unsigned long long>(si.totalswap) * unit;
  return true;
}

unsigned long long read_ram_swap_pages() {
  unsigned long long ram = 0, swap = 0;
  return read_ram_swap(&ram, &swap) ? (ram + swap) / kPageSize : ~0ull;
}

}  // namespace

std::uint64_t ram_bytes() {
  unsigned long long ram = 0, swap = 0;
  return read_ram_swap(&ram, &swap) ? ram : 0;
}

// Commits carry MAP_NORESERVE so that a committed block has exactly the
// flags of the reserved space around it: after a free the kernel can merge
// the two again, which past vm.max_map_count is the only way the count comes
// back down (an accounted mapping made PROT_NONE keeps VM_ACCOUNT and never
// merges). MAP_NORESERVE also skips the kernel's overcommit check, so the
// check it would have made is made here. In the heuristic mode (0) the kernel
// refuses one mapping larger than RAM + swap. In mode 2 it ignores
// MAP_NORESERVE and accounts as usual; in mode 1 it refuses nothing.
namespace {
// Mode 1 refuses nothing, and mode 2 charges the commit whatever its flags.
// A mode not known (overcommit's -1) is checked as the heuristic mode, the
// default: taken for mode 2 it let through what mode 0 refuses, since
// MAP_NORESERVE skips the kernel's check in every mode but 2 (mode 2's own
// limit is lower but for an overcommit_ratio past 100; mode 1 alone would
// grant it).
bool refuses(int mode, std::size_t len) {
  if (mode > 0) return false;
  unsigned long long pages = len / kPageSize;
  unsigned long long known = ram_swap_pages.load(std::memory_order_relaxed);
  // RAM and swap change (swapon, hotplug), but seldom by half: re-read only
  // for a request that comes near the last figure.
  if (known != 0 && pages <= known / 2) return false;
  known = read_ram_swap_pages();
  ram_swap_pages.store(known, std::memory_order_relaxed);
  return pages > known;
}

}  // namespace

void set_overcommit_for_test(int mode) { overcommit_mode.store(mode, std::memory_order_relaxed); }

bool overcommit_refuses(std::size_t len) { return refuses(overcommit(), len); }

namespace {
// mlockall(MCL_FUTURE) in force, kept by the interposed mlockall and
// munlockall; `locking`: an mlockall call is under way (its free extents
// are being made PROT_NONE, and no free may make one read-write meanwhile).
std::atomic<bool> locked_future{false};
std::atomic<int> locking{0};
// Some memory may be locked: mlockall(MCL_CURRENT) or mlock/mlock2 called
// through lowtide's symbols since the last munlockall. mremap populates
// and locks what it grows of a locked mapping (mremap_growth_ok).
std::atomic<bool> locked_some{false};

// A finite soft RLIMIT_DATA, as note_data_limit last read it. Written by
// whichever thread read the limit (the program's in setrlimit, the decay
// thread's periodic re-read) while others commit: each user reads it once
// and only picks which syscall to use, both right for the state a stale
// value describes (the limit as it was a moment before), so relaxed.
std::atomic<bool> data_limit_finite{false};

// commit() under a finite RLIMIT_DATA. The kernel checks a MAP_FIXED mmap
// against the limit only after taking off the pages it replaces, and the
// range's PROT_NONE reservation is among them although it never counted:
// every commit over the range passed, and malloc(512 MiB) under a 256 MiB
// limit got a pointer where glibc gets NULL (reliability.md no. 109).
// mprotect is checked for the pages it makes writable (a free extent
// already read-write, counted already, adds nothing) and merges with
// read-write neighbours as the mmap did (tests/memory/map_count: 400
// blocks, one mapping). Not where memory may be locked: the reservation
// itself is locked after mlockall(MCL_CURRENT), and under MCL_FUTURE a
// block must be locked and populated as a fresh mapping is. There a
// mapping made anywhere (checked in full, locked where it is made) is moved
// over the range (mremap checks nothing more for a move, and replaces the
// reservation under the same lock); each such block is a mapping of its
// own (moved memory is never merged with memory mapped where it lands).
// Refused (the limit, or the map count): mprotect as above.
Commit commit_counted(void* p, std::size_t len, int saved) {
  const bool locks = locked_future.load(std::memory_order_relaxed) || locked_some.load(std::memory_order_relaxed) ||
                     locking.load(std::memory_order_seq_cst) != 0;
  void* t = locks ? ::mmap(nullptr, len, PROT_READ | PROT_WRITE, kReserveFlags, -1, 0) : MAP_FAILED;
  if (t != MAP_FAILED) {
    if (::mremap(t, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, p) == p) {
      errno = saved;
      return Commit::ok;
    }
    // A refused move may have unmapped p first (see move_grow): the caller
    // asks recover_destination.
    ::munmap(t, len);
    return Commit::refused;
  }
  if ((!locks || errno == ENOMEM) && sys_mprotect(p, len, PROT_READ | PROT_WRITE) == 0) {
    // As in mode 2: a range left read-write by a decommit at the map count
    // may hold a write made after its free.
    ::madvise(p, len, MADV_DONTNEED);
    errno = saved;
    return Commit::ok;
  }
  return Commit::refused;
}
}  // namespace

bool note_data_limit() {
  const int saved = errno;
  struct rlimit data;
  const bool finite = ::getrlimit(RLIMIT_DATA, &data) == 0 && data.rlim_cur != RLIM_INFINITY;
  errno = saved;
  data_limit_finite.store(finite, std::memory_order_relaxed);
  return finite;
}

Commit commit(void* p, std::size_t len) {
  // Asked once: a mode not read waited 10 ms for a window.
  const int mode = overcommit();
  if (refuses(mode, len)) return Commit::over_limit;
  const int saved = errno;
  // In mode 2 the commit is charged whatever the flags, and a kernel before
  // 6.12 (Debian 12's 6.1) unmaps the range before it checks the charge:
  // a refused mmap there leaves a hole in the reserved range, which
  // another thread's mmap may take. mprotect charges without unmapping and
  // fails cleanly (ENOMEM). The merging MAP_NORESERVE buys is lost in mode 2
  // anyway (the kernel accounts every writable private mapping there).
  if (mode2_way(mode)) {
    if (sys_mprotect(p, len, PROT_READ | PROT_WRITE) != 0) return Commit::refused;  // or the map count
    // As below: a range left read-write by a decommit at the map count may
    // hold a write made after its free.
    ::madvise(p, len, MADV_DONTNEED);
    errno = saved;
    return Commit::ok;
  }
  if (data_limit_finite.load(std::memory_order_relaxed)) return commit_counted(p, len, saved);
  void* r = ::mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (r == p) return Commit::ok;
  // Past vm.max_map_count the kernel refuses every mmap (ENOMEM), even one
  // that would add no mapping; mprotect it refuses only where a mapping must
  // be split. Any other refusal stands: EAGAIN is an mlock limit, which
  // mprotect would get around. (A partial success leaves part of the range
  // read-write with its pages dropped, a valid state for a free extent.)
  if (errno == ENOMEM && sys_mprotect(p, len, PROT_READ | PROT_WRITE) == 0) {
    // The pages were dropped when the extent was freed. Drop them again
    // (this changes no mapping, so it works at the limit) so that a write
    // after free cannot show through a calloc.
    ::madvise(p, len, MADV_DONTNEED);
    errno = saved;
    return Commit::ok;
  }
  return Commit::refused;
}


void mlockall_begin() { locking.fetch_add(1, std::memory_order_seq_cst); }

void mlock_fork_child() {
  // The kernel does not pass mlockall's flags to a child, and an mlockall
  // another thread was making is not under way in it.
  locked_future.store(false, std::memory_order_relaxed);
  locked_some.store(false, std::memory_order_relaxed);  // no lock is inherited either
  locking.store(0, std::memory_order_relaxed);
}

int mlockall(int flags) {
  const long r = ::syscall(SYS_mlockall, flags);
  // The kernel replaces the process's default lock flags on every call.
  if (r == 0) locked_future.store((flags & MCL_FUTURE) != 0, std::memory_order_relaxed);
  if (r == 0 && (flags & MCL_CURRENT) != 0) locked_some.store(true, std::memory_order_relaxed);
  locking.fetch_sub(1, std::memory_order_seq_cst);
  return r == 0 ? 0 : -1;
}

int munlockall() {
  if (::syscall(SYS_munlockall) != 0) return -1;
  locked_future.store(false, std::memory_order_relaxed);
  locked_some.store(false, std::memory_order_relaxed);
  return 0;
}

void note_locked() { locked_some.store(true, std::memory_order_seq_cst); }

namespace {
// 0 until the program takes write permission from part of lowtide's range
// (mprotect or pkey_mprotect: note_protected); 1 then, 2 once a
// pkey_mprotect gave part of it a protection key. Only grows.
std::atomic<int> protected_kind{0};
}  // namespace

void note_protected(bool keyed) {
  int k = protected_kind.load(std::memory_order_relaxed);
  const int want = keyed ? 2 : 1;
  while (k < want && !protected_kind.compare_exchange_weak(k, want, std::memory_order_seq_cst)) {
  }
}

int mprotect(void* p, std::size_t len, int prot) { return sys_mprotect(p, len, prot); }

int pkey_mprotect(void* p, std::size_t len, int prot, int pkey) {
  // As glibc's: key -1 is mprotect, which works where the system call is
  // refused (a kernel before 4.9, a seccomp filter).
  if (pkey == -1) return sys_mprotect(p, len, prot);
  return ::syscall(SYS_pkey_mprotect, p, len, prot, pkey) == 0 ? 0 : -1;
}

int prlimit(int pid, int resource, const struct rlimit* new_limit, struct rlimit* old_limit) {
  return ::syscall(SYS_prlimit64, pid, resource, new_limit, old_limit) == 0 ? 0 : -1;
}

bool writable_again(void* p, std::size_t len) {
  const int k = protected_kind.load(std::memory_order_seq_cst);
  if (k == 0) return true;
  // Read-write again, and with the default key where the program has used
  // keys (a key whose writes a thread disabled would fault as surely).
  const int saved = errno;
  const bool ok = k == 2 ? pkey_mprotect(p, len, PROT_READ | PROT_WRITE, 0) == 0
                         : sys_mprotect(p, len, PROT_READ | PROT_WRITE) == 0;
  errno = saved;
  return ok;
}

int mlock2(const void* p, std::size_t len, unsigned flags) {
  if (flags == 0) return ::syscall(SYS_mlock, p, len) == 0 ? 0 : -1;
  if (::syscall(SYS_mlock2, p, len, flags) == 0) return 0;
  if (errno == ENOSYS) errno = EINVAL;  // as glibc: the only flag needs mlock2
  return -1;
}

bool drop_writable(void* p, std::size_t len) {
  if (mode2_way(overcommit()) || locked_future.load(std::memory_order_relaxed) ||
      locking.load(std::memory_order_seq_cst) != 0)
    return false;
  const int saved = errno;
  if (data_limit_finite.load(std::memory_order_relaxed)) {
    // The run may take in PROT_NONE free neighbours, and a MAP_FIXED mmap
    // is checked against RLIMIT_DATA only after the pages it replaces are
    // taken off, those among them: a read-write one made them data
    // unchecked (reliability.md no. 117). A PROT_NONE one adds no data, so
    // the run is re-mapped PROT_NONE first (pages and page tables dropped,
    // flags reset: kept by an mprotect alone, a freed block's
    // MADV_HUGEPAGE gave a sparse block committed there later 2 MiB per
    // byte touched, its MADV_DONTFORK left that block out of a forked
    // child, no. 119; a locked block unlocked, no populate) and then made
    // read-write by mprotect, which is checked for every page of it and
    // merges with read-write neighbours as the mmap does. Two system calls,
    // as mprotect and MADV_DONTNEED were. The mprotect refused (the limit,
    // or the map count), the run is what decommit makes of it, fresh
    // PROT_NONE space with no pages, so it counts as released: decommit
    // again would be a third call, and its last resort (a memset where no
    // madvise drops locked pages) must not meet PROT_NONE. The mmap
    // refused (the map count): the run as it was, for the caller's
    // decommit.
    const bool ok = ::mmap(p, len, PROT_NONE, kReserveFlags | MAP_FIXED, -1, 0) == p;
    if (ok) sys_mprotect(p, len, PROT_READ | PROT_WRITE);
    errno = saved;
    return ok;
  }
  void* r = ::mmap(p, len, PROT_READ | PROT_WRITE, kReserveFlags | MAP_FIXED, -1, 0);
  if (r == p) return true;
  errno = saved;  // past vm.max_map_count: the caller's decommit copes
  return false;
}

void discard(void* p, std::size_t len) {
  const int saved = errno;
  ::madvise(p, len, MADV_DONTNEED);
  errno = saved;
}

void decommit(void* p, std::size_t len) {
  void* r = ::mmap(p, len, PROT_NONE, kReserveFlags | MAP_FIXED, -1, 0);
  if (r == p) return;
  // Past vm.max_map_count: drop the pages in place, then make the range
  // PROT_NONE. When it is a whole mapping between reserved ones with the
  // same flags, that merges the three and lowers the count; when it would
  // split a mapping the kernel refuses, and the range stays read-write with
  // its pages gone. MADV_DONTNEED refuses locked pages (mlockall);
  // MADV_DONTNEED_LOCKED (Linux 5.18) takes them.
  if (::madvise(p, len, MADV_DONTNEED) == 0 || ::madvise(p, len, MADV_DONTNEED_LOCKED) == 0) {
    sys_mprotect(p, len, PROT_NONE);
    return;
  }
  // An older kernel and locked pages: the range must at least read as zeros
  // when it is handed out again. (Callers pass only read-write ranges.)
  std::memset(p, 0, len);
}

namespace {
// open, read and close as raw system calls: glibc's wrappers are
// cancellation points, and these run inside malloc (the memory limit's RSS
// sample, the cache's resident measure, realloc's PROCMAP_QUERY), where a
// deferred cancel acted on would unwind out of lowtide with its state half
// changed (it is built without exceptions: nothing would put it back).
int raw_open(const char* path, int flags) { return static_cast<int>(::syscall(SYS_openat, AT_FDCWD, path, flags)); }
ssize_t raw_read(int fd, void* buf, std::size_t n) { return ::syscall(SYS_read, fd, buf, n); }
void raw_close(int fd) { ::syscall(SYS_close, fd); }

// A file opened for reading as lowtide's readers need it (open_maps,
// open_regular): never blocking (O_NONBLOCK), a regular file only (/proc and
// cgroup files are; a FIFO or a terminal under a test's fake root is not),
// with `extra` flags; *st its fstat. -1 (errno from the failing call) else.
int open_regular_fd(const char* path, int extra, struct stat* st) {
  const int fd = raw_open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | extra);
  if (fd < 0) return -1;
  if (::fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    const int e = errno;
    raw_close(fd);
    errno = e;
    return -1;
  }
  return fd;
}
}  // namespace

int open_maps() {
  struct stat st;
  return open_regular_fd("/proc/self/maps", O_NOFOLLOW, &st);
}

namespace {
// PROCMAP_QUERY's argument (include/uapi/linux/fs.h, Linux 6.11): Debian
// 12's headers predate it. The kernel checks `size`, so a kernel with a
// longer struct still accepts this one.
struct ProcmapQuery {
  std::uint64_t size, query_flags, query_addr;
  std::uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
  std::uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
  std::uint64_t vma_name_addr, build_id_addr;
};
static_assert(sizeof(ProcmapQuery) == 104, "PROCMAP_QUERY's struct is 104 bytes");
constexpr unsigned long kProcmapQuery = _IOWR('f', 17, ProcmapQuery);

// Whether a refused move of several mappings moves none of them: true on
// kernels before 6.17, which move a range whole or refuse it whole; from
// 6.17 a move goes a mapping at a time and stops at one it cannot move,
// with the ones before it moved. Asked only where PROCMAP_QUERY was
// answered ENOTTY, which is a kernel before 6.11, unless a seccomp filter
// answers ENOTTY for a newer one: then the release says which (a process
// that made uname lie with the UNAME26 personality, setarch --uname-2.6,
// is taken for a new kernel: its blocks are copied, never moved part-way).
// Unknown (-1) until asked; 0 or 1 after.
std::atomic<int> whole_moves{-1};
bool moves_whole() {
  int v = whole_moves.load(std::memory_order_relaxed);
  if (v < 0) {
    const int saved = errno;
    struct utsname u;
    const int persona = ::personality(0xffffffff);
    v = ::uname(&u) == 0 && persona != -1 && (persona & UNAME26) == 0 && release_below(u.release, 6, 17) ? 1 : 0;
    errno = saved;
    whole_moves.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

// Set once PROCMAP_QUERY was answered ENOTTY (a kernel before 6.11): every
// later question would get the same answer, so /proc is not opened again
// for it (each realloc that moves a block would otherwise pay an open, a
// refused ioctl and a close to learn that nothing can be moved).
std::atomic<bool> query_missing{false};

// /proc/self/maps to be asked with PROCMAP_QUERY (open_maps), or -1, also
// once the kernel said it has no such ioctl. Opened each time, not kept: a
// program closing every descriptor it did not open (daemons do) would
// leave a kept one pointing at its next file.
int open_for_query() {
  if (query_missing.load(std::memory_order_relaxed)) return -1;
  return open_maps();
}

// Bytes from p to the end of the mapping that covers it, at most len; 0
// when it cannot be told (no PROCMAP_QUERY before Linux 6.11, nothing
// mapped at p).
std::size_t mapping_left(int fd, const void* p, std::size_t len) {
  ProcmapQuery q{};
  q.size = sizeof q;
  q.query_addr = reinterpret_cast<std::uintptr_t>(p);  // flags 0: the mapping covering it
  if (::ioctl(fd, kProcmapQuery, &q) != 0) {
    if (errno == ENOTTY) query_missing.store(true, std::memory_order_relaxed);
    return 0;
  }
  if (q.vma_start > q.query_addr || q.vma_end <= q.query_addr) return 0;
  const std::uint64_t left = q.vma_end - q.query_addr;
  return left < len ? static_cast<std::size_t>(left) : len;
}

}  // namespace

namespace {
// Whether [p, p+len) (page-aligned) is mapped throughout: mincore fails
// with ENOMEM over any part that is not (its residency answer is not
// wanted; 512 bytes of vector cover 2 MiB a call, and this runs only
// after a refused move).
bool covered(const char* p, std::size_t len) {
  unsigned char vec[512];
  for (std::size_t at = 0; at < len;) {
    std::size_t n = (len - at) / kPageSize;
    n = n < sizeof vec ? n : sizeof vec;
    if (::mincore(const_cast<char*>(p) + at, n * kPageSize, vec) != 0 && errno == ENOMEM) return false;
    at += n * kPageSize;
  }
  return true;
}
bool recover(char* p, std::size_t len) { return covered(p, len) || fill_hole(p, len); }
}  // namespace

Moved move_pages(void* src, std::size_t len, void* dst) {
  Moved m;
  // Where a refusal can be foreseen, nothing is tried: a kernel before
  // 6.17 unmaps the destination before it checks the source and the
  // limits, so a refused mremap there would leave a hole where the caller
  // copies or commits next (RLIMIT_AS, RLIMIT_DATA and overcommit mode 2
  // are checked after that unmap, and so is a range of several mappings,
  // which kernels before 6.17 refuse).
  if (!mremap_growth_ok(len)) return m;  // MREMAP_DONTUNMAP: the source stays counted
  const int saved = errno;
  auto* s = static_cast<char*>(src);
  auto* d = static_cast<char*>(dst);
  // One mapping at a time, each asked of the kernel (PROCMAP_QUERY, 6.11
  // on): one mapping moves whole or not at all, where a range of several
  // is refused whole before 6.17 (after unmapping the destination, above)
  // and since 6.17 moved a mapping at a time by the kernel, which stops at
  // one it cannot move (one a userfaultfd watches, a sealed one) with the
  // ones before it moved (issue 13's realloc lost those bytes). So a
  // refusal part-way says how much moved, and the caller copies the rest.
  const auto move = [&](std::size_t piece) {
    char* to = d + m.bytes;
    if (::mremap(s + m.bytes, piece, piece, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, to) == to) {
      m.bytes += piece;
      return true;
    }
    m.refused = piece;
    m.lost = !recover(to, piece);
    return false;
  };
  const int fd = open_for_query();
  if (fd >= 0) {
    while (m.bytes < len) {
      const std::size_t piece = mapping_left(fd, s + m.bytes, len - m.bytes);
      if (piece == 0 || !move(piece)) break;
    }
    raw_close(fd);
  }
  // A kernel that answered PROCMAP_QUERY with ENOTTY is older than 6.11
  // (Debian 12's 6.1), so older than 6.17: it moves a range whole or not
  // at all (several mappings: EFAULT, after it unmapped the destination,
  // which move() maps again). The whole range in one call, then. Not
  // where the question could not be asked at all (no /proc: a kernel that
  // may move part of a range and stop).
  if (m.bytes == 0 && m.refused == 0 && query_missing.load(std::memory_order_relaxed) && moves_whole()) move(len);
  errno = saved;
  return m;
}

bool growth_checked_first() { return !moves_whole(); }

void set_procmap_query_missing(bool missing, const char* release) {
  query_missing.store(missing, std::memory_order_relaxed);
  whole_moves.store(release == nullptr ? -1 : release_below(release, 6, 17) ? 1 : 0, std::memory_order_relaxed);
}

bool release_below(const char* release, int major, int minor) {
  // "6.1.0-28-amd64", "5.10.0", "6.18.44-fc-v1147": the first two numbers.
  int v[2] = {-1, -1};
  const char* s = release;
  for (int i = 0; i < 2; ++i) {
    if (*s < '0' || *s > '9') return false;
    int n = 0;
    while (*s >= '0' && *s <= '9' && n < 100000) n = n * 10 + (*s++ - '0');
    v[i] = n;
    if (i == 0 && *s++ != '.') return false;
  }
  return v[0] < major || (v[0] == major && v[1] < minor);
}

bool recover_destination(void* p, std::size_t len) {
  const int saved = errno;
  const bool ours = recover(static_cast<char*>(p), len);
  errno = saved;
  return ours;
}

bool one_mapping(const void* p, std::size_t len) {
  const int saved = errno;
  const int fd = open_for_query();
  const bool ok = fd >= 0 && mapping_left(fd, p, len) == len;
  if (fd >= 0) raw_close(fd);
  errno = saved;
  return ok;
}

namespace {
// Whether VmData (from /proc/self/status, in KiB: data and stack pages, a
// little more than RLIMIT_DATA counts) plus `want` bytes passes `limit`;
// taken as past where it cannot be read (no /proc, no file window).
// data_limit_near's question and mremap_growth_ok's; errno kept by them.
bool data_past(std::uint64_t limit, std::size_t want) {
  static constexpr const char* kKeys[] = {"VmData:"};
  std::uint64_t kib = 0;
  if (!read_status_kib(kKeys, &kib, 1) || kib == 0) return true;
  return kib * 1024 + want > limit;
}
}  // namespace

bool mremap_growth_ok(std::size_t counted) {
  if (mode2_way(overcommit()) || locked_future.load(std::memory_order_relaxed) ||
      locked_some.load(std::memory_order_relaxed) || locking.load(std::memory_order_seq_cst) != 0)
    return false;
  const int saved = errno;
  struct rlimit as, data;
  bool ok = ::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur == RLIM_INFINITY && ::getrlimit(RLIMIT_DATA, &data) == 0;
  // Under a finite RLIMIT_DATA the kernel checks a move for what it adds to
  // the data pages (a growth's new room; the source kept by
  // MREMAP_DONTUNMAP), so the refusal is foreseen from VmData (data and
  // stack pages: a little more than the kernel counts). Moving matters
  // there: a copy commits the whole new block beside the old one, and a
  // doubling at a third of the limit failed where glibc's mremap stays
  // within it (reliability.md no. 128). Another thread's commit between
  // this read and the move may still get it refused, which the callers'
  // hole windows are for.
  if (ok && data.rlim_cur != RLIM_INFINITY) ok = !data_past(data.rlim_cur, counted);
  errno = saved;
  return ok;
}

bool move_grow(void* src, std::size_t len, void* dst, std::size_t new_len) {
  const int saved = errno;
  const bool ok = ::mremap(src, len, new_len, MREMAP_MAYMOVE | MREMAP_FIXED, dst) == dst;
  errno = saved;
  return ok;
}

Grow grow_mapping(void* p, std::size_t len, std::size_t new_len) {
  const int saved = errno;
  char* tail = static_cast<char*>(p) + len;
  // munmap refuses only where it would split a mapping past
  // vm.max_map_count, and then unmaps nothing.
  if (::munmap(tail, new_len - len) != 0) {
    errno = saved;
    return Grow::refused;
  }
  const bool ok = ::mremap(p, len, new_len, 0) == p;
  errno = saved;
  if (ok) return Grow::grown;
  return fill_hole(tail, new_len - len) ? Grow::refused : Grow::lost;
}

bool fill_hole(void* p, std::size_t len) {
  const int saved = errno;
  void* r = ::mmap(p, len, PROT_NONE, kReserveFlags | MAP_FIXED_NOREPLACE, -1, 0);
  errno = saved;
  if (r == p) return true;
  // A kernel before 4.17 takes the flag as a hint and maps elsewhere.
  if (r != MAP_FAILED) ::munmap(r, len);
  return false;
}

void unmap(void* p, std::size_t len) { ::munmap(p, len); }

void* map_lazy(std::size_t len) {
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, kReserveFlags, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

bool open_table(void* p, std::size_t len) {
  const int saved = errno;
  const bool ok = sys_mprotect(p, len, PROT_READ | PROT_WRITE) == 0;
  errno = saved;
  return ok;
}

void advise_hugepage(void* p, std::size_t len) { ::madvise(p, len, MADV_HUGEPAGE); }

namespace {
std::atomic<bool> populate_refused{false};
}

bool populate(void* p, std::size_t len) {
  if (populate_refused.load(std::memory_order_relaxed)) return false;
  const int saved = errno;
  // EINVAL: a kernel before 5.14 (the advice is unknown); every later call
  // would be refused the same way.
  const bool done = ::madvise(p, len, MADV_POPULATE_WRITE) == 0;
  if (!done && errno == EINVAL) populate_refused.store(true, std::memory_order_relaxed);
  errno = saved;
  return done;
}

namespace {
// PAGEMAP_SCAN's argument and result (include/uapi/linux/fs.h, Linux 6.7):
// Debian 12's headers predate it. The kernel checks `size`.
struct PageRegion {
  std::uint64_t start, end, categories;
};
struct PmScanArg {
  std::uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
  std::uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
static_assert(sizeof(PmScanArg) == 96 && sizeof(PageRegion) == 24, "PAGEMAP_SCAN's structs");
constexpr unsigned long kPagemapScan = _IOWR('f', 16, PmScanArg);
constexpr std::uint64_t kPageIsPresent = 1u << 3;

// A request for the runs of [a, end) into `runs`; the caller says which.
template <std::size_t N>
PmScanArg scan_request(std::uintptr_t a, std::uintptr_t end, PageRegion (&runs)[N]) {
  PmScanArg q{};
  q.size = sizeof q;
  q.start = a;
  q.end = end;
  q.vec = reinterpret_cast<std::uintptr_t>(runs);
  q.vec_len = N;
  return q;
}

// The end of a span's range rounded up to a page.
std::uintptr_t page_end(const Span& sp) {
  return (reinterpret_cast<std::uintptr_t>(sp.p) + sp.len + kPageSize - 1) & ~(kPageSize - 1);
}

// Set once PAGEMAP_SCAN cannot be used here (a kernel before 6.7 answers
// ENOTTY; no /proc, or a sandbox that refuses it): mincore from then on.
std::atomic<bool> scan_missing{false};
std::atomic<std::uint64_t> scan_answers{0};  // for tests (resident_scan_answers)
std::atomic<std::uint64_t> scan_opens{0};    // for tests (resident_scan_opens)

// A scan's descriptor is open only inside a window of this gate: a fork
// in another thread while it was open would leave the child a descriptor
// it never closes, to the parent's pagemap.
constinit ForkGate scan_gate{.which = 1};

// The mount of the pagemap, once one open through it has been checked to
// be procfs (fstatfs): a later open through the same mount needs no
// fstatfs of its own. By the mount's unique id (STATX_MNT_ID_UNIQUE,
// Linux 6.8), which the kernel never hands out again; not by the device
// number, which it does: once a procfs is unmounted its number goes to the
// next filesystem mounted (a tmpfs over /proc with a regular file at
// thread-self/pagemap was taken for procfs and sent the ioctl:
// reliability.md no. 91). 0: none (and where the kernel has no such id,
// fstatfs is asked at every open).
std::atomic<std::uint64_t> proc_mnt{0};

// STATX_MNT_ID_UNIQUE (Linux 6.8): Debian 12's headers predate it.
constexpr unsigned kStatxMntIdUnique = 0x4000;

// fstat's device, inode and type of fd, and its mount's unique id in *mnt
// (0 where the kernel gives none), by one statx; by fstat where statx is
// refused (a seccomp filter's ENOSYS or EPERM), with *mnt 0. The device as
// glibc's fstat gives it (makedev of the two numbers, as glibc itself does
// where its fstat is a statx): OwnFd compares it with fstat's.
bool stat_mount(int fd, struct stat* st, std::uint64_t* mnt) {
  *mnt = 0;
  struct statx sx;
  constexpr unsigned kWant = STATX_TYPE | STATX_INO;
  if (::statx(fd, "", AT_EMPTY_PATH, kWant | kStatxMntIdUnique, &sx) == 0 && (sx.stx_mask & kWant) == kWant) {
    st->st_dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
    st->st_ino = sx.stx_ino;
    st->st_mode = sx.stx_mode;
    if ((sx.stx_mask & kStatxMntIdUnique) != 0) *mnt = sx.stx_mnt_id;
    return true;
  }
  return ::fstat(fd, st) == 0;
}

// A scan's descriptor, open for one or more ranges (scan_open, scan_range,
// scan_close). How it is opened and why:
// - /proc/thread-self, not /proc/self: /proc/self is the thread group's
//   leader, and once the main thread has exited it has no mm, which
//   kernels from 6.7 until "proc: fix the issue of proc_mem_open returning
//   NULL" (2025) let a root process open and then oops on in the scan
//   (syzbot f9238a0a31f9b5603fef). The calling thread always has its mm.
// - Opened for each measure, not kept (open_for_query's reason: a program
//   closing every descriptor it did not open; and a forked child's kept one
//   would scan the parent). An open, its check and a close cost ~1.5 us
//   here, so a batch of ranges (resident_bytes_many: the cache measures
//   every entry freed since its last miss at once) shares one.
// - Its identity is checked (OwnFd) before each ioctl but the first (the
//   open's own statx or fstat has just checked it) and before the close:
//   a program thread that closes every descriptor and opens a file at the
//   same number meanwhile must not have lowtide's ioctl sent to it, nor
//   its file closed.
// - Opened and closed by raw system calls: glibc's open and close are
//   cancellation points, and a deferred cancel acted on inside malloc
//   would unwind out of the cache with an extent taken (lowtide is built
//   without exceptions: nothing would put it back).
// - Inside a scan window (above), which scan_close closes.
struct Scan {
  OwnFd o;
  bool fresh = false;  // checked since the last ioctl: no fstat before the next
};

// false: no descriptor (and no window held); the caller uses mincore.
bool scan_open(Scan* sc) {
  if (scan_missing.load(std::memory_order_relaxed) || !scan_gate.open()) return false;
  static constexpr const char* kPagemap = "/proc/thread-self/pagemap";
  // O_NONBLOCK: a /proc that is not procfs (a chroot, a build sandbox) may
  // have a FIFO there, which a plain open would wait on for good.
  const int fd = raw_open(kPagemap, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT || errno == EACCES || errno == EPERM || errno == ENOSYS || errno == ENOTDIR ||
        errno == ELOOP)
      scan_missing.store(true, std::memory_order_relaxed);
    scan_gate.close();
    return false;
  }
  // The pagemap is a regular file on procfs: anything else is another
  // /proc (not asked again), or a program thread's file at the number it
  // took over since the open (no ioctl is sent to it). Closed only where
  // the path still names what the descriptor holds (a stat, which cannot
  // block). The filesystem's type is asked once per mount (proc_mnt).
  struct stat st;
  struct statfs sf;
  std::uint64_t mnt = 0;
  const bool fst = stat_mount(fd, &st, &mnt);
  const bool known = fst && mnt != 0 && mnt == proc_mnt.load(std::memory_order_relaxed);
  if (!fst || !S_ISREG(st.st_mode) || (!known && (::fstatfs(fd, &sf) != 0 || sf.f_type != PROC_SUPER_MAGIC))) {
    struct stat ps;
    if (fst && ::fstatat(AT_FDCWD, kPagemap, &ps, AT_SYMLINK_NOFOLLOW) == 0 && ps.st_dev == st.st_dev &&
        ps.st_ino == st.st_ino)
      raw_close(fd);
    scan_missing.store(true, std::memory_order_relaxed);
    scan_gate.close();
    return false;
  }
  if (!known && mnt != 0) proc_mnt.store(mnt, std::memory_order_relaxed);
  scan_opens.fetch_add(1, std::memory_order_relaxed);
  sc->o.fd = fd;
  sc->o.dev = st.st_dev;
  sc->o.ino = st.st_ino;
  sc->fresh = true;
  return true;
}

void scan_close(const Scan& sc) {
  if (still_own(sc.o)) raw_close(sc.o.fd);
  scan_gate.close();
}

// Resident bytes of [a, end) (page-aligned) by PAGEMAP_SCAN on an open
// Scan, while they are sparse: the kernel returns the runs of present
// pages, so a sparse block costs a walk of its page tables and a few runs,
// where mincore writes a byte per page and, for each page not present,
// makes a call (15 MiB written one page in 64: 5 against 12 us here;
// bench/many_large measures every block it frees). But the scan costs more
// than mincore per present page (15 MiB written in full: 26 against 5 us),
// so it stops once it has found a sixteenth of the range's pages present
// (max_pages) and *stopped says where: the caller counts the rest with
// mincore (15 MiB written in full: 6 us in all, one page in 8: 10 against
// 12).
// false: not answered (the caller uses mincore for all of it); *usable
// false as well where the descriptor must not be used again (no longer
// ours, or the scan is off for good).
// Not inlined into resident_bytes_many, nor is resident_bytes_mincore:
// their buffers (1.5 and 4 KiB) then never share one frame on a malloc's
// stack.
[[gnu::noinline]] bool scan_range(Scan* sc, std::uintptr_t a, std::uintptr_t end, std::size_t* bytes,
                                  std::uintptr_t* stopped, bool* usable) {
  // 64 runs (1.5 KiB of stack) a call. Zeroed once: valgrind does not
  // know this ioctl, so it would take what the kernel writes there for
  // uninitialised memory (the unit tests run under it).
  PageRegion runs[64] = {};
  const std::uint64_t limit = (end - a) / kPageSize / 16 + 1;
  std::uint64_t found = 0;
  bool ok = true;
  while (a < end && found < limit) {
    if (!sc->fresh && !still_own(sc->o)) {
      ok = false;
      *usable = false;
      break;
    }
    sc->fresh = false;
    PmScanArg q = scan_request(a, end, runs);
    q.max_pages = limit - found;
    q.category_mask = kPageIsPresent;  // only present pages are reported
    q.return_mask = kPageIsPresent;
    const long n = ::ioctl(sc->o.fd, kPagemapScan, &q);
    // No progress would loop for ever: never seen, not relied on (and not
    // asked again). Any error but a transient one turns the scan off for
    // good (EBADF or ENOTTY where a program thread closed the number and
    // opened another file there in the instant between the check and the
    // ioctl, too: mincore then answers, as on an older kernel).
    if (n < 0 || q.walk_end <= a || q.walk_end > end) {
      if (n >= 0 || (errno != EINTR && errno != ENOMEM && errno != EFAULT)) {
        scan_missing.store(true, std::memory_order_relaxed);
        *usable = false;
      }
      ok = false;
      break;
    }
    for (long i = 0; i < n; ++i) found += (runs[i].end - runs[i].start) / kPageSize;
    a = q.walk_end;
  }
  *bytes = found * kPageSize;
  *stopped = a;
  if (ok) scan_answers.fetch_add(1, std::memory_order_relaxed);
  return ok;
}

// One range on a descriptor of its own (resident_scan_works).
bool scan_resident(std::uintptr_t a, std::uintptr_t end, std::size_t* bytes, std::uintptr_t* stopped) {
  Scan sc;
  if (!scan_open(&sc)) return false;
  bool usable = true;
  const bool ok = scan_range(&sc, a, end, bytes, stopped, &usable);
  scan_close(sc);
  return ok;
}
}  // namespace

namespace {
// The windows of each gate this thread holds (ForkGate::which): a fork from
// a signal handler on this thread does not wait for them. Counted after the
// gate's count goes up and before it goes down, so that a handler between
// the two sees one window too many (it waits out the bound) rather than
// one too few (it would not wait for another thread's).
thread_local int own_windows[ForkGate::kGates];
}  // namespace

namespace {
std::atomic<int> gates_pid{0};
}  // namespace

void fork_gates_init(int pid) { gates_pid.store(pid, std::memory_order_relaxed); }

bool ForkGate::adopt() {
  int o = owner.load(std::memory_order_relaxed);
  if (o == 0) o = gates_pid.load(std::memory_order_relaxed);
  const int me = static_cast<int>(::getpid());
  if (o == 0 || o == me) return false;
  owner.store(me, std::memory_order_relaxed);
  windows.store(own_windows[which], std::memory_order_seq_cst);
  forking.store(0, std::memory_order_seq_cst);
  return true;
}

bool ForkGate::open() {
  windows.fetch_add(1, std::memory_order_seq_cst);
  if (forking.load(std::memory_order_seq_cst) == 0) {
    ++own_windows[which];
    return true;
  }
  int n = windows.load(std::memory_order_seq_cst);
  while (n > 0 && !windows.compare_exchange_weak(n, n - 1, std::memory_order_seq_cst)) {
  }
  // A fork under way, or the count of one the parent was preparing when
  // this process was made without fork's handlers.
  if (adopt()) return open();
  return false;
}
void ForkGate::close() {
  if (own_windows[which] > 0) --own_windows[which];
  int n = windows.load(std::memory_order_seq_cst);
  while (n > 0 && !windows.compare_exchange_weak(n, n - 1, std::memory_order_seq_cst)) {
  }
}
bool ForkGate::fork_wait() {
  adopt();
  forking.fetch_add(1, std::memory_order_seq_cst);
  const int mine = own_windows[which];
  if (windows.load(std::memory_order_seq_cst) <= mine) return true;
  const std::uint64_t until = now_ns() + 2'000'000'000;
  while (windows.load(std::memory_order_seq_cst) > mine) {
    if (now_ns() >= until) return false;
    yield();
  }
  return true;
}
void ForkGate::fork_done(bool child) {
  if (child) {
    // The only thread: a window of its own a handler's fork interrupted
    // closes into the guards above.
    own_windows[which] = 0;
    owner.store(static_cast<int>(::getpid()), std::memory_order_relaxed);
    windows.store(0, std::memory_order_relaxed);
    forking.store(0, std::memory_order_seq_cst);
    return;
  }
  int n = forking.load(std::memory_order_seq_cst);
  while (n > 0 && !forking.compare_exchange_weak(n, n - 1, std::memory_order_seq_cst)) {
  }
}

void fork_wait_scans() { scan_gate.fork_wait(); }
void fork_scans_done(bool child) { scan_gate.fork_done(child); }
bool fork_window_open() { return scan_gate.open(); }
bool fork_window_wait(std::uint64_t within_ns) {
  const std::uint64_t until = now_ns() + within_ns;
  for (;;) {
    if (fork_window_open()) return true;
    if (now_ns() > until) return false;
    yield();
  }
}
void fork_window_close() { scan_gate.close(); }

int scans_open_now() { return scan_gate.windows.load(std::memory_order_seq_cst); }

std::uint64_t resident_scan_answers() { return scan_answers.load(std::memory_order_relaxed); }
std::uint64_t resident_scan_opens() { return scan_opens.load(std::memory_order_relaxed); }

bool resident_scan_works() {
  const int saved = errno;
  std::size_t b = 0;
  std::uintptr_t stopped = 0;
  const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(&b) & ~(kPageSize - 1);
  // The stack page is present.
  const bool ok = scan_resident(a, a + kPageSize, &b, &stopped) && b == kPageSize && stopped == a + kPageSize;
  errno = saved;
  return ok;
}

[[gnu::noinline]] std::size_t resident_bytes_mincore(const void* p, std::size_t len) {
  // One byte of vector per page; 4 KiB of it covers 16 MiB per call.
  unsigned char vec[4096];
  std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p) & ~(kPageSize - 1);
  const std::uintptr_t end = (reinterpret_cast<std::uintptr_t>(p) + len + kPageSize - 1) & ~(kPageSize - 1);
  std::size_t pages = 0;
  int saved = errno;
  // mincore answers nothing for a call whose range has an unmapped part
  // (ENOMEM): the call is halved until the mapped pages before the hole
  // are counted; from a page refused alone, the next mapped page is found
  // by single-page calls at doubling distances, then halving (a hole of k
  // pages costs ~2 log2 k calls; a mapped island inside the span galloped
  // over would go uncounted). The ranges the cache asks about are the
  // arena's, mapped but for a moment of grow_mapping's; the live query's
  // mimalloc mappings may be unmapped while it counts. Any other refusal
  // (EAGAIN under memory pressure, a filter) counts the call's pages as
  // resident: the cache needs an upper bound.
  auto mapped = [&vec](std::uintptr_t x) {
    return ::mincore(reinterpret_cast<void*>(x), kPageSize, vec) == 0 || errno != ENOMEM;
  };
  std::size_t step = sizeof vec;
  while (a < end) {
    std::size_t n = (end - a) / kPageSize;
    n = n < step ? n : step;
    if (::mincore(reinterpret_cast<void*>(a), n * kPageSize, vec) == 0) {
      for (std::size_t i = 0; i < n; ++i) pages += vec[i] & 1u;
      a += n * kPageSize;
      step = step * 2 < sizeof vec ? step * 2 : sizeof vec;
    } else if (errno != ENOMEM) {
      pages += n;
      a += n * kPageSize;
    } else if (n > 1) {
      step = n / 2;
    } else {
      std::uintptr_t lo = a, hi = end;  // lo not mapped; hi mapped, or the end
      for (std::size_t d = 1; a + d * kPageSize < end; d *= 2) {
        if (mapped(a + d * kPageSize)) {
          hi = a + d * kPageSize;
          break;
        }
        lo = a + d * kPageSize;
      }
      while (hi - lo > kPageSize) {
        const std::uintptr_t mid = lo + (hi - lo) / kPageSize / 2 * kPageSize;
        if (mapped(mid)) hi = mid;
        else lo = mid;
      }
      a = hi;
      step = 1;
    }
  }
  errno = saved;
  return pages * kPageSize;
}

void resident_bytes_many(const Span* spans, int n, std::size_t* out) {
  const int saved = errno;
  // Where each range's scan stopped (its start: not scanned at all); the
  // rest is counted by mincore once the descriptor is closed, so that the
  // window a fork waits out is the scan's alone.
  std::uintptr_t stopped[kSpansMax];
  if (n > kSpansMax) n = kSpansMax;
  Scan sc;
  bool usable = scan_open(&sc);
  const bool opened = usable;
  for (int i = 0; i < n; ++i) {
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(spans[i].p) & ~(kPageSize - 1);
    out[i] = 0;
    stopped[i] = a;
    if (usable && !scan_range(&sc, a, page_end(spans[i]), &out[i], &stopped[i], &usable)) {
      out[i] = 0;
      stopped[i] = a;
    }
  }
  if (opened) scan_close(sc);
  errno = saved;
  for (int i = 0; i < n; ++i) {
    const std::uintptr_t end = page_end(spans[i]);
    if (stopped[i] < end) out[i] += resident_bytes_mincore(reinterpret_cast<const void*>(stopped[i]), end - stopped[i]);
  }
}

std::size_t resident_bytes(const void* p, std::size_t len) {
  const Span one{p, len};
  std::size_t bytes = 0;
  resident_bytes_many(&one, 1, &bytes);
  return bytes;
}

namespace {
constexpr std::uint64_t kPageIsSwapped = 1u << 4, kPageIsPfnZero = 1u << 5;
// Below this a block is zeroed whole: the scan's open, checks, ioctl and
// close (~2 us) would cost more than writing pages that are mostly there.
constexpr std::size_t kZeroScanMin = std::size_t{256} << 10;
}  // namespace

void zero_held(void* p, std::size_t len) {
  const auto from = reinterpret_cast<std::uintptr_t>(p), to = from + len;
  auto zero = [from, to](std::uintptr_t a, std::uintptr_t b) {  // [a, b) clipped to the block
    a = a < from ? from : a;
    b = b > to ? to : b;
    if (a < b) std::memset(reinterpret_cast<void*>(a), 0, b - a);
  };
  std::uintptr_t a = from & ~(kPageSize - 1);
  const std::uintptr_t end = (to + kPageSize - 1) & ~(kPageSize - 1);
  // Every page that holds something: present (but the shared zero page,
  // which reads as zero) or not present but not empty either (swapped out,
  // under migration: the kernel reports any such entry as swapped). What is
  // not reported has no page table entry: in lowtide's private anonymous
  // mappings it reads as zero, and nobody writes it until it is touched.
  // One ioctl per descriptor: the runs are written after the descriptor is
  // closed, outside the fork gate's window (a dense block of a GiB takes a
  // while to write, and a fork must not wait for that). Whatever the scan
  // does not answer is written whole.
  PageRegion runs[64] = {};  // zeroed once: valgrind does not know this ioctl
  // The open, the ioctl and the close may set errno (ENOTTY from a kernel
  // before 6.7 or a sandbox refusing the ioctl, EMFILE): calloc succeeds
  // here, and a successful calloc leaves errno as it was (as every pal
  // function that makes system calls for it keeps it).
  const int saved = errno;
  while (len >= kZeroScanMin && a < end) {
    Scan sc;
    if (!scan_open(&sc)) break;
    PmScanArg q = scan_request(a, end, runs);
    q.category_anyof_mask = kPageIsPresent | kPageIsSwapped;
    q.return_mask = kPageIsPresent | kPageIsSwapped | kPageIsPfnZero;
    const long n = ::ioctl(sc.o.fd, kPagemapScan, &q);
    // As scan_range: any error but a transient one (ENOTTY from a kernel
    // before 6.7, a sandbox's refusal) turns the scan off for good, so that
    // each calloc does not open the pagemap to be refused again.
    if (n < 0 && errno != EINTR && errno != ENOMEM && errno != EFAULT)
      scan_missing.store(true, std::memory_order_relaxed);
    scan_close(sc);
    if (n < 0 || q.walk_end <= a || q.walk_end > end || n > static_cast<long>(q.vec_len)) break;
    for (long i = 0; i < n; ++i) {
      const bool zero_page = (runs[i].categories & (kPageIsPresent | kPageIsPfnZero)) ==
                             (kPageIsPresent | kPageIsPfnZero);
      // (A run outside [a, walk_end) would be the kernel's error: written.)
      if (!zero_page) zero(runs[i].start, runs[i].end);
    }
    a = q.walk_end;
  }
  errno = saved;
  zero(a, end);  // what was not scanned (nothing where the walk finished)
}

NoSigpipe::NoSigpipe() noexcept {
  sigemptyset(&pipe_);
  sigaddset(&pipe_, SIGPIPE);
  sigset_t pending;
  was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
}

NoSigpipe::~NoSigpipe() {
  sigset_t pending;
  if (!was_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
    timespec zero{0, 0};
    sigtimedwait(&pipe_, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

namespace {
// Set when a write to fd 2 ran out of time, cleared when one goes through:
// a process whose stderr nobody drains pays the wait once, not per line.
std::atomic<bool> stderr_stuck{false};
}  // namespace

int write_stderr_within(const char* s, std::size_t n, std::uint64_t budget_ns) {
  NoSigpipe guard;
  struct stat st;
  const bool regular = ::fstat(2, &st) == 0 && S_ISREG(st.st_mode);
  if (stderr_stuck.load(std::memory_order_relaxed)) budget_ns = 0;
  const std::uint64_t until_ns = now_ns() + budget_ns;
  // fd 2 is shared with other processes, so it stays as it is (blocking,
  // mostly): each write waits for POLLOUT and is at most kChunk bytes, which
  // a pipe (a free slot of PIPE_BUF), a socket or a terminal reporting
  // POLLOUT takes without blocking. A regular file never blocks.
  constexpr std::size_t kChunk = 512;
  while (n > 0) {
    if (!regular) {
      const std::uint64_t now = now_ns();
      pollfd pf{2, POLLOUT, 0};
      const int wait_ms = now >= until_ns ? 0 : static_cast<int>((until_ns - now) / 1'000'000u) + 1;
      const int r = ::poll(&pf, 1, wait_ms);
      if (r < 0 && errno != EINTR) return -1;
      if (r <= 0) {
        if (now_ns() < until_ns) continue;  // EINTR, or woken early
        stderr_stuck.store(true, std::memory_order_relaxed);
        errno = ETIMEDOUT;
        return -1;
      }
    }
    const ssize_t w = ::write(2, s, regular || n < kChunk ? n : kChunk);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return -1;
    }
    s += w;
    n -= static_cast<std::size_t>(w);
  }
  stderr_stuck.store(false, std::memory_order_relaxed);
  return 0;
}

void write_stderr(const char* s, std::size_t n) {
  const int saved = errno;
  (void)write_stderr_within(s, n, 2'000'000'000u);
  errno = saved;
}

namespace {
std::uint64_t* map_counter(int fd) {
  void* p = ::mmap(nullptr, kPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<std::uint64_t*>(p);
}

// fd is the counter: a regular file of at least a page, this device and
// inode, our uid.
bool is_counter(int fd, std::uint64_t dev, std::uint64_t ino) {
  struct stat st;
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_dev) == dev &&
         static_cast<std::uint64_t>(st.st_ino) == ino && st.st_uid == ::geteuid() &&
         st.st_size >= static_cast<off_t>(kPageSize);
}

char* put_decimal(char* o, char* end, unsigned long v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0 && o < end) *o++ = tmp[--n];
  return o;
}
}  // namespace

std::uint64_t* shared_counter_create(int* fd, std::uint64_t* dev, std::uint64_t* ino) {
  int f = static_cast<int>(::syscall(SYS_memfd_create, "lowtide-children", MFD_CLOEXEC));
  if (f < 0) return nullptr;
  struct stat st;
  std::uint64_t* p = nullptr;
  if (::ftruncate(f, static_cast<off_t>(kPageSize)) == 0 && ::fstat(f, &st) == 0) p = map_counter(f);
  if (p == nullptr) {
    ::close(f);
    return nullptr;
  }
  *fd = f;
  *dev = static_cast<std::uint64_t>(st.st_dev);
  *ino = static_cast<std::uint64_t>(st.st_ino);
  return p;
}

std::uint64_t* shared_counter_open(int pid, int fd, std::uint64_t dev, std::uint64_t ino) {
  if (fd >= 0 && is_counter(fd, dev, ino)) return map_counter(fd);
  char path[64];
  char* end = path + sizeof path - 1;
  char* o = path;
  for (const char* t = "/proc/"; *t; ++t) *o++ = *t;
  o = put_decimal(o, end, static_cast<unsigned long>(pid));
  for (const char* t = "/fd/"; *t && o < end; ++t) *o++ = *t;
  o = put_decimal(o, end, static_cast<unsigned long>(fd));
  *o = '\0';
  struct stat st;
  if (::stat(path, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_dev) != dev ||
      static_cast<std::uint64_t>(st.st_ino) != ino)
    return nullptr;
  int f = ::open(path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (f < 0) return nullptr;
  std::uint64_t* p = is_counter(f, dev, ino) ? map_counter(f) : nullptr;
  ::close(f);
  return p;
}

bool own(int fd, OwnFd* o) {
  o->fd = fd;
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0) return false;
  o->dev = st.st_dev;
  o->ino = st.st_ino;
  return true;
}

bool still_own(const OwnFd& o) {
  struct stat st;
  return o.fd >= 0 && ::fstat(o.fd, &st) == 0 && st.st_dev == o.dev && st.st_ino == o.ino;
}

void close_own(const OwnFd& o) {
  if (still_own(o)) raw_close(o.fd);
}

namespace {

// A small file opened for reading as read_file and the seccomp check
// (read_seccomp) need it: never blocking (O_NONBLOCK, and only a regular
// file: /proc and cgroup files are; a FIFO or a terminal under a test's
// fake root is not), its identity kept (OwnFd) so that a program that
// closes fds it did not open cannot have us read its file. false (errno
// from the failing call) where any of that fails.
bool open_regular(const char* path, OwnFd* o) {
  // One fstat for both the type and the identity (own() would make a
  // second: every process start reads several such files).
  struct stat st;
  const int fd = open_regular_fd(path, 0, &st);
  if (fd < 0) return false;
  o->fd = fd;
  o->dev = st.st_dev;
  o->ino = st.st_ino;
  return true;
}

// One read of an open_regular file, retried on EINTR: bytes read, 0 at its
// end, -1 on an error or where the fd is no longer ours (closed under us,
// the number reused).
ssize_t read_own(const OwnFd& o, char* buf, std::size_t n) {
  for (;;) {
    if (!still_own(o)) return -1;
    const ssize_t r = raw_read(o.fd, buf, n);
    if (r >= 0 || errno != EINTR) return r;
  }
}

}  // namespace

namespace {
// A file read (read_file, read_status_kib, read_seccomp) is opened, read
// and closed inside a window of the scan gate: a fork in another thread
// meanwhile waits for the close, so no child keeps a copy of the
// descriptor. While a fork is being prepared the window is waited for, at
// most 10 ms (signal and exit paths read files too, and a handler may have
// interrupted its own thread's fork); then the file is not read at all
// (read_file's kNoWindow). Until 2026-12-07 it was read without a window
// after the 10 ms: a program thread forking in a tight loop for longer
// (fork_scan_fds, reliability.md no. 85) then gave its child the
// descriptor of whatever lowtide's threads read meanwhile (the memory
// limit's statm, the cgroup's limit files). Every caller takes an unread
// file as "unknown" and keeps what it knew (rss_bytes' callers, the
// cgroup limit's re-read, overcommit's mode). true: a window is open
// (close it after the close).
bool file_window_open() {
  bool gated = scan_gate.open();
  for (const std::uint64_t until = gated ? 0 : now_ns() + 10'000'000; !gated && now_ns() < until;) {
    yield();
    gated = scan_gate.open();
  }
  return gated;
}

// The first number on each line of a status-like file that starts with
// one of keys[0..n) (values[k], 0 if none; bit k of *found set), the file
// read to its end a line at a time, each line's first 63 bytes kept (the
// lines wanted are short, and the whole file, whose Groups line grows
// with the process's groups, need not fit anywhere), the last line even
// without its newline. Opened inside a file window (file_window_open);
// where `path` is missing (ENOENT) and `fallback` is not null, `fallback`.
// forks_held: the caller holds a lock fork's prepare handler takes after it
// has shut the gate (sandbox_since_start's), so a fork being prepared waits
// for the caller, and no window would come in the 10 ms: opened without
// one then (no child can be made before the close).
// false: not opened, or not read to its end (a read failed, the fd was
// not ours any more). errno kept.
bool status_fields(const char* path, const char* fallback, const char* const* keys, std::uint64_t* values,
                   std::size_t n, unsigned* found, bool forks_held) {
  for (std::size_t k = 0; k < n; ++k) values[k] = 0;
  *found = 0;
  const int saved = errno;
  const bool gated = forks_held ? scan_gate.open() : file_window_open();
  if (!gated && !forks_held) {
    errno = saved;
    return false;
  }
  OwnFd o;
  bool opened = open_regular(path, &o);
  if (!opened && fallback != nullptr && errno == ENOENT) opened = open_regular(fallback, &o);
  if (!opened) {
    if (gated) scan_gate.close();
    errno = saved;
    return false;
  }
  char line[64] = {};  // (cppcheck cannot see that take_line reads only what was written)
  std::size_t len = 0;
  const auto take_line = [&] {
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t kl = std::strlen(keys[k]);
      if (len <= kl || std::strncmp(line, keys[k], kl) != 0) continue;
      std::size_t i = kl;
      while (i < len && (line[i] < '0' || line[i] > '9')) ++i;
      std::uint64_t v = 0;  // bounded: a test's file may hold anything
      for (; i < len && line[i] >= '0' && line[i] <= '9' && v < (std::uint64_t{1} << 50); ++i)
        v = v * 10 + static_cast<std::uint64_t>(line[i] - '0');
      values[k] = v;
      *found |= 1u << k;
    }
    len = 0;
  };
  char buf[1024];  // (status is ~1.4 KiB: three reads, the last one 0)
  ssize_t r = 0;
  while ((r = read_own(o, buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < r; ++i) {
      if (buf[i] == '\n')
        take_line();
      else if (len < sizeof line - 1)
        line[len++] = buf[i];
    }
  }
  take_line();
  close_own(o);
  if (gated) scan_gate.close();
  errno = saved;
  return r == 0;
}
}  // namespace

int open_debug_file(const char* path, std::uint64_t* dev, std::uint64_t* ino) {
  struct stat st;
  const int fd = open_regular_fd(path, 0, &st);
  if (fd < 0) return -1;
  *dev = st.st_dev;
  *ino = st.st_ino;
  return fd;
}

bool file_identity(const char* path, std::uint64_t* dev, std::uint64_t* ino) {
  struct stat st;
  if (::stat(path, &st) != 0) return false;
  *dev = st.st_dev;
  *ino = st.st_ino;
  return true;
}

long read_at(int fd, void* buf, std::size_t n, std::uint64_t off) {
  for (;;) {
    const long r = ::syscall(SYS_pread64, fd, buf, n, static_cast<off_t>(off));
    if (r >= 0 || errno != EINTR) return r;
  }
}

void close_fd(int fd) { raw_close(fd); }

bool real_path(const char* path, char* out, std::size_t cap) {
  return cap >= PATH_MAX && ::realpath(path, out) != nullptr;
}

long read_file(const char* path, char* buf, std::size_t cap) {
  if (cap == 0) return -1;
  const int saved = errno;
  if (!file_window_open()) {
    errno = saved;
    buf[0] = '\0';
    return kNoWindow;
  }
  OwnFd o;
  if (!open_regular(path, &o)) {
    scan_gate.close();
    errno = saved;
    buf[0] = '\0';
    return -1;
  }
  std::size_t got = 0;
  ssize_t r = 0;
  while (got + 1 < cap && (r = read_own(o, buf + got, cap - 1 - got)) > 0) got += static_cast<std::size_t>(r);
  // (close_own's check, made once.)
  const bool ours = still_own(o);
  if (ours) raw_close(o.fd);
  scan_gate.close();
  errno = saved;
  buf[got] = '\0';
  return ours ? static_cast<long>(got) : -1;
}

bool leader_gone(int pid, long* threads) {
  char path[48], buf[1024];
  // The leader's own stat, not the process's (/proc/self/stat), which sums
  // every thread's times under the process's signal lock. Both callers
  // take "cannot be read" (no window, read_file) as "not gone, count
  // unknown".
  char* o = path;
  for (const char* t = "/proc/self/task/"; *t != '\0'; ++t) *o++ = *t;
  o = put_decimal(o, path + sizeof path - 8, static_cast<unsigned long>(pid));
  for (const char* t = "/stat"; *t != '\0'; ++t) *o++ = *t;
  *o = '\0';
  if (read_file(path, buf, sizeof buf) <= 0) return false;
  // "pid (comm) S ppid ...": comm may hold spaces and parentheses, so the
  // fields are counted from the last ')'. The state is field 3, the
  // number of threads field 20.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return false;
  ++p;
  char state = 0;
  long value = 0;
  for (int field = 3; field <= 20; ++field) {
    while (*p == ' ') ++p;
    if (*p == '\0') return false;
    if (field == 3) state = *p;
    if (field == 20) value = std::strtol(p, nullptr, 10);
    while (*p != ' ' && *p != '\0') ++p;
  }
  *threads = value;
  // Z: the leader has exited and waits for its group; X: being reaped.
  return state == 'Z' || state == 'X';
}

bool read_status_kib(const char* const* keys, std::uint64_t* kib, std::size_t n) {
  unsigned found = 0;
  return status_fields("/proc/self/status", nullptr, keys, kib, n, &found, false);
}

bool data_limit_near(std::size_t want) {
  if (!data_limit_finite.load(std::memory_order_relaxed)) return false;
  const int saved = errno;
  struct rlimit data;
  const bool finite = ::getrlimit(RLIMIT_DATA, &data) == 0 && data.rlim_cur != RLIM_INFINITY;
  // Not read (no /proc, no window): taken as near, the give-up's old rule.
  const bool near = finite && data_past(data.rlim_cur, want);
  errno = saved;
  return near;
}

namespace {

// The seccomp mode (0 none, 1 strict, 2 filter), filter count (kernels
// 5.9+) and no_new_privs of the calling thread, from its status lines
// "Seccomp:", "Seccomp_filters:" and "NoNewPrivs:"; false where the file
// cannot be read or has no "Seccomp:" line (a kernel without seccomp:
// nothing to fear).
struct SeccompState {
  long mode = 0, filters = 0, nnp = 0;
  bool has_filters = false;
};
std::atomic<const char*> status_path{nullptr};
bool read_seccomp(SeccompState* out, bool forks_held) {
  const char* path = status_path.load(std::memory_order_relaxed);
  static constexpr const char* kKeys[] = {"Seccomp:", "Seccomp_filters:", "NoNewPrivs:"};
  std::uint64_t v[3];
  unsigned found = 0;
  // /proc/self/status before 3.17, which has no /proc/thread-self.
  const bool whole = status_fields(path != nullptr ? path : "/proc/thread-self/status",
                                   path != nullptr ? nullptr : "/proc/self/status", kKeys, v, 3, &found, forks_held);
  out->mode = static_cast<long>(v[0]);
  out->filters = static_cast<long>(v[1]);
  out->has_filters = (found & 2u) != 0;
  out->nnp = static_cast<long>(v[2]);
  return (found & 1u) != 0 && whole;  // read to its end, still ours
}

// What note_sandbox_at_start read (start_known false until then, and where
// it could not read it).
std::atomic<bool> start_known{false};
std::atomic<long> start_mode{0}, start_filters{0}, start_nnp{0};
std::atomic<bool> filtered_latch{false};  // for good: no filter is ever taken away

}  // namespace

void note_sandbox_at_start() {
  SeccompState s;
  if (!read_seccomp(&s, false)) return;
  start_mode.store(s.mode, std::memory_order_relaxed);
  start_filters.store(s.filters, std::memory_order_relaxed);
  start_nnp.store(s.nnp, std::memory_order_relaxed);
  start_known.store(true, std::memory_order_release);
}

Sandbox sandbox_since_start(bool latch, bool forks_held) {
  if (filtered_latch.load(std::memory_order_relaxed)) return Sandbox::filtered;
  if (!start_known.load(std::memory_order_acquire)) return Sandbox::as_at_start;
  SeccompState s;
  if (!read_seccomp(&s, forks_held)) return Sandbox::unreadable;
  // A kernel that shows no count (before 5.9): a filter installed over one
  // from start leaves the mode at 2, but an unprivileged process must set
  // no_new_privs first (sshd does), so that going from 0 to 1 counts.
  const bool added = s.mode > start_mode.load(std::memory_order_relaxed) ||
                     (s.has_filters ? s.filters > start_filters.load(std::memory_order_relaxed)
                                    : s.nnp > start_nnp.load(std::memory_order_relaxed));
  if (!added) return Sandbox::as_at_start;
  if (latch) filtered_latch.store(true, std::memory_order_relaxed);
  return Sandbox::filtered;
}

void set_status_path_for_test(const char* path) {
  status_path.store(path, std::memory_order_relaxed);
  filtered_latch.store(false, std::memory_order_relaxed);
  start_known.store(false, std::memory_order_relaxed);
}

std::size_t rss_bytes() {
  char buf[128];
  // (read_file reads inside a window of the scans' fork gate: the memory
  // limit reads this inside a large malloc, and a fork meanwhile would
  // leave the child the descriptor. A second window around it made a fork
  // and this thread wait 10 ms for each other: review.)
  if (read_file("/proc/self/statm", buf, sizeof buf) <= 0) return 0;
  const char* s = buf;
  while (*s && *s != ' ') ++s;  // skip total size
  while (*s == ' ') ++s;
  std::size_t pages = 0;
  while (*s >= '0' && *s <= '9') pages = pages * 10 + static_cast<std::size_t>(*s++ - '0');
  return pages * kPageSize;
}

int current_tid() { return static_cast<int>(::syscall(SYS_gettid)); }

bool readable_by_own_uid() {
  uid_t ru, eu, su;
  gid_t rg, eg, sg;
  return ::prctl(PR_GET_DUMPABLE) == 1 && ::getresuid(&ru, &eu, &su) == 0 && ru == eu && eu == su &&
         ::getresgid(&rg, &eg, &sg) == 0 && rg == eg && eg == sg;
}

void futex_wait(const std::uint32_t* word, std::uint32_t expected, std::uint64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000u), static_cast<long>(timeout_ns % 1'000'000'000u)};
  int saved = errno;
  ::syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
  errno = saved;
}

void futex_wake(const std::uint32_t* word) {
  int saved = errno;
  ::syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  errno = saved;
}

void thread_name_self(char* out) {
  // For the calling thread glibc's pthread_getname_np makes this same call;
  // for any other thread it opens /proc/self/task/<tid>/comm.
  char buf[16] = {};
  int saved = errno;
  if (::prctl(PR_GET_NAME, buf, 0, 0, 0) == 0) {
    buf[15] = '\0';
    std::memcpy(out, buf, sizeof buf);
  }
  errno = saved;
}

namespace {

// Bytes from p to the end of its page, at most n.
std::size_t to_page_end(const void* p, std::size_t n) {
  const std::size_t left = kPageSize - (reinterpret_cast<std::uintptr_t>(p) & (kPageSize - 1));
  return left < n ? left : n;
}

}  // namespace

bool read_own_memory(const void* src, void* dst, std::size_t n) {
  if (n == 0) return true;
  const int saved = errno;
  iovec local{dst, n};
  iovec remote{const_cast<void*>(src), n};
  // The kernel copies page by page and stops at the first it cannot pin:
  // a short count is a fault part-way.
  // Asked by this thread's own id, not getpid(): after the main thread's
  // pthread_exit the thread group leader is a zombie without an mm, and the
  // kernel answers ESRCH for its pid (every read refused).
  const long got = ::syscall(SYS_process_vm_readv, static_cast<long>(::syscall(SYS_gettid)), &local, 1UL, &remote,
                             1UL, 0UL);
  errno = saved;
  return got == static_cast<long>(n);
}

long read_own_string(const char* src, char* dst, std::size_t cap) {
  std::size_t got = 0;
  while (got < cap) {
    const std::size_t piece = to_page_end(src + got, cap - got);
    if (!read_own_memory(src + got, dst + got, piece)) return -1;
    if (const void* nul = std::memchr(dst + got, '\0', piece); nul != nullptr)
      return static_cast<long>(static_cast<const char*>(nul) - dst);
    got += piece;
  }
  return -1;
}

int own_string_is(const char* src, const char* want) {
  char buf[256];
  const std::size_t need = std::strlen(want) + 1;  // the NUL too
  for (std::size_t at = 0; at < need;) {
    std::size_t piece = to_page_end(src + at, need - at);
    if (piece > sizeof buf) piece = sizeof buf;
    if (!read_own_memory(src + at, buf, piece)) return -1;
    if (std::memcmp(buf, want + at, piece) != 0) return 0;
    at += piece;
  }
  return 1;
}

ThreadState thread_state(int pid, int tid) {
  int saved = errno;
  ThreadState st = ThreadState::alive;
  if (::syscall(SYS_tgkill, pid, tid, 0) != 0) st = errno == ESRCH ? ThreadState::gone : ThreadState::unknown;
  errno = saved;
  return st;
}

std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

void yield() { sched_yield(); }

// ld.so's (GLIBC_PRIVATE, the sanitizers use it to size their threads'
// stacks): the static TLS size and alignment, read from two of its
// globals, no lock, no allocation. Weak, not dlsym: dlsym may allocate and
// takes the loader lock, and this runs inside malloc. Absent (another libc,
// a glibc that drops it): nullptr, and the stack is found by doubling.
extern "C" void _dl_get_tls_static_info(std::size_t* size, std::size_t* align) __attribute__((weak));

namespace {

// need plus the static TLS block, rounded as glibc rounds it, in whole
// pages: glibc adds the guard page itself and takes the TLS (and its
// thread descriptor, part of the static size) from the rest.
std::size_t thread_stack_size(std::size_t need, std::size_t tls, std::size_t align) {
  const std::size_t page = 4096;
  if (align > 1) tls = (tls + align - 1) / align * align;
  return (need + tls + page - 1) / page * page;
}

}  // namespace

int start_thread(void* (*fn)(void*), void* arg, std::size_t need) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  // The ordinary policy (SCHED_OTHER), not the creating thread's: a
  // real-time thread's large allocation or exit must not give lowtide's
  // housekeeping (the decay thread's collects, a report) its priority over
  // the program's other real-time threads. And the main thread's CPUs, not
  // the creating thread's: a worker pinned to a CPU set apart for it
  // (isolcpus, a latency-critical thread) must not bring lowtide's threads
  // onto that CPU for good. Where the kernel refuses either (EPERM: leaving
  // SCHED_IDLE without RLIMIT_NICE room; EINVAL: CPUs outside the cpuset
  // since), less is asked for, down to the creator's, as before.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const int saved = errno;
  const bool main_cpus = ::sched_getaffinity(::getpid(), sizeof cpus, &cpus) == 0;
  errno = saved;
  const auto create = [&](std::size_t stack) {  // stack 0: glibc's default size
    int rc = EPERM;
    for (int ask = main_cpus ? 2 : 1; ask >= 0 && (rc == EPERM || rc == EINVAL); --ask) {
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      if (stack != 0) pthread_attr_setstacksize(&attr, stack);
      if (ask >= 1) {
        sched_param sp{};
        sp.sched_priority = 0;
        pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
        pthread_attr_setschedpolicy(&attr, SCHED_OTHER);
        pthread_attr_setschedparam(&attr, &sp);
      }
      if (ask == 2) pthread_attr_setaffinity_np(&attr, sizeof cpus, &cpus);
      pthread_t t;
      rc = pthread_create(&t, &attr, fn, arg);
      pthread_attr_destroy(&attr);
    }
    return rc;
  };
  int rc = EINVAL;
  if (_dl_get_tls_static_info != nullptr) {
    std::size_t tls = 0, align = 0;
    _dl_get_tls_static_info(&tls, &align);
    rc = create(thread_stack_size(need, tls, align));
  } else {
    for (std::size_t stack = need; rc == EINVAL && stack <= (std::size_t{8} << 20); stack *= 2) rc = create(stack);
  }
  if (rc == EINVAL) rc = create(0);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return rc;
}

std::uint64_t random_u64() {
  const int saved = errno;
  std::uint64_t v = 0;
  if (::syscall(SYS_getrandom, &v, sizeof v, 1 /* GRND_NONBLOCK */) == static_cast<long>(sizeof v)) {
    errno = saved;
    return v;
  }
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  v = static_cast<std::uint64_t>(ts.tv_nsec) ^ (static_cast<std::uint64_t>(ts.tv_sec) << 32) ^
      reinterpret_cast<std::uintptr_t>(&ts) ^ (static_cast<std::uint64_t>(::getpid()) << 17);
  v ^= v >> 33;
  v *= 0xff51afd7ed558ccdull;
  v ^= v >> 33;
  errno = saved;
  return v;
}

const char* const* initial_environ() {
  if (environ != nullptr) return environ;
  // ld.so sets it, before any code of the program runs, to the initial
  // stack pointer: argc, argv[0..argc), NULL, then envp. (A weak
  // reference: where it is missing the defaults apply, as before.)
  if (&__libc_stack_end == nullptr || __libc_stack_end == nullptr) return nullptr;
  const auto* sp = static_cast<const std::uintptr_t*>(__libc_stack_end);
  const std::uintptr_t argc = sp[0];
  if (argc > (std::uintptr_t{1} << 24)) return nullptr;  // not the layout expected
  const auto* argv = reinterpret_cast<const char* const*>(sp + 1);
  if (argv[argc] != nullptr) return nullptr;
  return argv + argc + 1;
}

}  // namespace lowtide::pal

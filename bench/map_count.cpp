// How many mappings (VMAs, lines of /proc/self/maps) large blocks cost, and
// what the ways of giving a free extent's pages back cost (issue 14, part 5).
//
//   map_count patterns   run under LD_PRELOAD=liblowtide.so, or none (glibc):
//                        the map count for a checkerboard of live blocks of
//                        mixed sizes, alloc/free cycles, and realloc growth.
//   map_count release [reps]   no allocator involved: in a PROT_NONE reservation,
//                        the cost of dropping a touched extent's pages by
//                        mmap(PROT_NONE, MAP_FIXED) (lowtide today),
//                        mmap(read-write, MAP_FIXED) (a fresh mapping),
//                        madvise(MADV_DONTNEED) keeping it read-write, and
//                        madvise(MADV_FREE); then of committing it again
//                        (mmap read-write over it, or nothing for a range
//                        that stayed read-write) and of writing it; and the
//                        map count each leaves for a checkerboard of extents.
// Timing only: nothing here passes or fails.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifndef MADV_FREE
#define MADV_FREE 8
#endif

namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;
constexpr std::size_t kPage = 4096;

// /proc/self/maps lines, read with plain syscalls (no stdio buffer of ours
// to add a mapping).
std::size_t vmas() {
  static char buf[1 << 16];
  int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::size_t n = 0;
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r <= 0) break;
    for (ssize_t i = 0; i < r; ++i) n += buf[i] == '\n';
  }
  ::close(fd);
  return n;
}

double now_ns() {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void* volatile sink;

void touch(void* p, std::size_t len) {
  auto* c = static_cast<volatile char*>(p);
  for (std::size_t o = 0; o < len; o += kPage) c[o] = 1;
}

// ---- patterns, through malloc ----

int patterns() {
  const std::size_t sizes[] = {256 * KiB, 1 * MiB, 600 * KiB, 3 * MiB, 2 * MiB + 64 * KiB};
  const std::size_t base = vmas();
  std::printf("pattern                               VMAs above start   live blocks\n");

  // Checkerboard: N blocks of mixed sizes, every other one freed.
  constexpr int N = 2000;
  std::vector<void*> b(N);
  for (int i = 0; i < N; ++i) {
    b[i] = std::malloc(sizes[i % 5]);
    touch(b[i], 1);
  }
  std::printf("checkerboard: %d held                 %8zu   %d\n", N, vmas() - base, N);
  for (int i = 1; i < N; i += 2) std::free(b[i]);
  std::printf("checkerboard: every other freed       %8zu   %d\n", vmas() - base, N / 2);
  for (int i = 0; i < N; i += 2) std::free(b[i]);
  std::printf("checkerboard: all freed               %8zu   0\n", vmas() - base);

  // The same with one size (256 KiB, under the 2 MiB alignment): only the
  // frees make holes.
  for (int i = 0; i < N; ++i) {
    b[i] = std::malloc(256 * KiB);
    touch(b[i], 1);
  }
  std::printf("checkerboard 256 KiB: %d held         %8zu   %d\n", N, vmas() - base, N);
  for (int i = 1; i < N; i += 2) std::free(b[i]);
  std::printf("checkerboard 256 KiB: every other freed %6zu   %d\n", vmas() - base, N / 2);
  for (int i = 0; i < N; i += 2) std::free(b[i]);
  std::printf("checkerboard 256 KiB: all freed       %8zu   0\n", vmas() - base);

  // Cycles: 64 slots, each step frees one and allocates another of a
  // pseudo-random size.
  std::vector<void*> slot(64, nullptr);
  std::uint64_t x = 88172645463325252ull;
  std::size_t most = 0;
  for (int i = 0; i < 20000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    void*& s = slot[x % 64];
    std::free(s);
    s = std::malloc(128 * KiB + (x >> 20) % (6 * MiB));
    touch(s, 1);
    if (i % 500 == 0 && vmas() - base > most) most = vmas() - base;
  }
  std::printf("cycles: 20000 in 64 slots (max seen)  %8zu   64\n", most);
  std::printf("cycles: end                           %8zu   64\n", vmas() - base);
  for (void*& s : slot) std::free(s);

  // Realloc growth: 32 buffers grown in turn by 1.25x from 64 KiB to 32 MiB
  // (a bytearray or a std::vector built by appends).
  std::vector<void*> g(32, nullptr);
  std::vector<std::size_t> len(32, 64 * KiB);
  for (auto& p : g) p = std::malloc(64 * KiB);
  for (int step = 0; step < 28; ++step)
    for (int i = 0; i < 32; ++i) {
      len[i] = len[i] * 5 / 4;
      g[i] = std::realloc(g[i], len[i]);
      touch(static_cast<char*>(g[i]) + len[i] - 1, 1);
    }
  std::printf("realloc growth: 32 to %4zu MiB         %8zu   32\n", len[0] / MiB, vmas() - base);
  for (int i = 1; i < 32; i += 2) std::free(g[i]);
  std::printf("realloc growth: every other freed     %8zu   16\n", vmas() - base);
  for (int i = 0; i < 32; i += 2) std::free(g[i]);
  std::printf("realloc growth: all freed             %8zu   0\n", vmas() - base);
  return 0;
}

// ---- release variants, raw syscalls ----

enum class Drop { prot_none, rw_mmap, dontneed, free_ };
const char* name(Drop d) {
  return d == Drop::prot_none ? "mmap PROT_NONE"
         : d == Drop::rw_mmap ? "mmap RW"
         : d == Drop::dontneed ? "MADV_DONTNEED"
                               : "MADV_FREE";
}

constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

void* commit(void* p, std::size_t len) {
  return ::mmap(p, len, PROT_READ | PROT_WRITE, kFlags | MAP_FIXED, -1, 0);
}

void drop(Drop d, void* p, std::size_t len) {
  if (d == Drop::prot_none) ::mmap(p, len, PROT_NONE, kFlags | MAP_FIXED, -1, 0);
  else if (d == Drop::rw_mmap) commit(p, len);  // a fresh read-write mapping over it
  else ::madvise(p, len, d == Drop::dontneed ? MADV_DONTNEED : MADV_FREE);
}

// n extents of len bytes with a live extent of len bytes between each two
// (a checkerboard), committed in address order (as lowtide carves them, so
// they merge into one mapping) in a fresh reservation; every page written;
// the n extents dropped; then committed again (not for a range left
// read-write) and written again. Medians of `reps` runs, in us per extent.
struct Times {
  double drop, commit, write;
  std::size_t vmas;
  bool zero;
};

Times release_once(std::size_t len, int n, Drop d, bool recommit) {
  const std::size_t span = 2 * len * static_cast<std::size_t>(n);
  char* r = static_cast<char*>(::mmap(nullptr, span, PROT_NONE, kFlags, -1, 0));
  if (r == MAP_FAILED) return Times{};
  const std::size_t v0 = vmas();
  for (std::size_t o = 0; o < span; o += len) {
    commit(r + o, len);
    touch(r + o, len);
  }
  const double t0 = now_ns();
  for (int i = 0; i < n; ++i) drop(d, r + 2 * len * i, len);
  const double t1 = now_ns();
  const std::size_t v_dropped = vmas() - v0;
  if (recommit)
    for (int i = 0; i < n; ++i) commit(r + 2 * len * i, len);
  const double t2 = now_ns();
  // What the extent reads before it is written (MADV_FREE need not give
  // zeros): the first byte of its last page, which was written, kept out of
  // the timing.
  bool zero = true;
  for (int i = 0; i < n; ++i) zero = zero && r[2 * len * i + len - kPage] == 0;
  const double tw = now_ns();
  for (int i = 0; i < n; ++i) touch(r + 2 * len * i, len);
  const double t3 = now_ns();
  ::munmap(r, span);
  return Times{(t1 - t0) / 1e3 / n, (t2 - t1) / 1e3 / n, (t3 - tw) / 1e3 / n, v_dropped, zero};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void release_case(std::size_t len, int n, Drop d, bool recommit, int reps) {
  std::vector<double> dr, co, wr;
  Times t{};
  for (int k = 0; k < reps; ++k) {
    t = release_once(len, n, d, recommit);
    dr.push_back(t.drop);
    co.push_back(t.commit);
    wr.push_back(t.write);
  }
  std::printf("%6zu KiB x %3d  %-15s %-8s drop %8.1f  commit %6.1f  write %9.1f  VMAs %3zu%s\n", len / KiB, n, name(d),
              recommit ? "mmap RW" : "(none)", median(dr), median(co), median(wr), t.vmas,
              t.zero ? "" : "  (old data read back)");
}

int release(int reps) {
  std::printf("median of %d runs, us per extent; VMAs: the reservation's mappings after the drop\n", reps);
  const struct {
    std::size_t len;
    int n;
  } cases[] = {{256 * KiB, 64}, {2 * MiB, 16}, {16 * MiB, 4}};
  for (auto c : cases) {
    release_case(c.len, c.n, Drop::prot_none, true, reps);
    release_case(c.len, c.n, Drop::rw_mmap, false, reps);
    release_case(c.len, c.n, Drop::dontneed, true, reps);
    release_case(c.len, c.n, Drop::dontneed, false, reps);
    release_case(c.len, c.n, Drop::free_, false, reps);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "patterns";
  if (std::strcmp(what, "patterns") == 0) return patterns();
  if (std::strcmp(what, "release") == 0) return release(argc > 2 ? std::atoi(argv[2]) : 5);
  std::fprintf(stderr, "usage: map_count [patterns|release]\n");
  return 2;
}

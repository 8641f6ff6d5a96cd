// Shared helpers for the native benchmark workloads (larson, churn): the same
// JSON line the Python workloads print (see bench/workloads/_common.py):
// wall_s, rss_before, peak_rss, rss_after_free, rss_after_decay (bytes),
// allocator, plus workload-specific fields.
#pragma once

#include <dlfcn.h>
#include <sched.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace bench {

constexpr double kDecayS = 1.0;

struct Status {
  long rss = 0;  // VmRSS, bytes
  long hwm = 0;  // VmHWM, bytes
};

inline Status read_status() {
  Status s;
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return s;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    long kb = 0;
    if (std::sscanf(line, "VmRSS: %ld kB", &kb) == 1) s.rss = kb * 1024;
    else if (std::sscanf(line, "VmHWM: %ld kB", &kb) == 1) s.hwm = kb * 1024;
  }
  std::fclose(f);
  return s;
}

// Size multiplier: --scale X on the command line, else BENCH_SCALE, else 1.
inline double scale(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--scale") == 0) return std::atof(argv[i + 1]);
  const char* e = std::getenv("BENCH_SCALE");
  return e && *e ? std::atof(e) : 1.0;
}

// Integer option "--name N" (e.g. --threads 2), else def.
inline long opt(int argc, char** argv, const char* name, long def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atol(argv[i + 1]);
  return def;
}

inline std::string allocator() {
  if (dlsym(RTLD_DEFAULT, "lowtide_version")) return "lowtide";
  const char* pre = std::getenv("LD_PRELOAD");
  if (!pre || !*pre) return "glibc";
  const char* slash = std::strrchr(pre, '/');
  return slash ? slash + 1 : pre;
}

// xorshift64*: fixed-seed, cheap, no allocation (std::mt19937 is fine too, but
// this keeps the per-op overhead that is not malloc/free small).
struct Rng {
  std::uint64_t s;
  explicit Rng(std::uint64_t seed) : s(seed ? seed : 0x9e3779b97f4a7c15ull) {}
  std::uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545f4914f6cdd1dull;
  }
  std::uint32_t below(std::uint32_t n) {
    return static_cast<std::uint32_t>((next() >> 32) * n >> 32);
  }
};

// Object sizes 16 B .. 4 KiB, log-uniform (each power-of-two band 16-32,
// 32-64, ..., 2048-4096 equally likely, uniform within the band), so small
// sizes are as well represented as in real small-object heaps.
inline std::size_t rand_size(Rng& r) {
  std::uint32_t band = r.below(8);                // 16 << 0..7
  std::size_t lo = std::size_t{16} << band;
  return lo + r.below(static_cast<std::uint32_t>(lo) + 1);  // lo .. 2*lo
}

// Object sizes 16 B .. 1 KiB, log-uniform the same way (bands 16-32 .. 512-1024):
// the range issue 15's small-block programs use (xthread, pair).
inline std::size_t rand_size_1k(Rng& r) {
  std::uint32_t band = r.below(6);                // 16 << 0..5
  std::size_t lo = std::size_t{16} << band;
  return lo + r.below(static_cast<std::uint32_t>(lo) + 1);  // lo .. 2*lo
}

// Write the first and last byte so the pages really are touched (the
// allocator cannot hand back untouched memory for free) without a memset
// dominating the timing for the larger sizes.
inline void touch(void* p, std::size_t n) {
  auto* c = static_cast<volatile unsigned char*>(p);
  c[0] = static_cast<unsigned char>(n);
  c[n - 1] = static_cast<unsigned char>(n >> 8);
}

// User + system CPU seconds of the whole process so far. For the
// cross-thread workloads: next to wall time it tells work from waiting for a
// thread the scheduler has not run (on a loaded 2-core machine the wall time
// of a two-thread pipeline can triple while its CPU time does not).
inline double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

inline double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Pins the calling thread to the index-th CPU (modulo their number) the
// process may run on; false, and nothing changed, if it may run on fewer
// than two. For the two-thread pipelines (xthread, pair --threads 2) with
// --pin 1. Left to itself the scheduler sometimes keeps both threads on one
// core, where they take turns and every block is freed from a warm cache
// (40-60 ns per pair on this VM), and sometimes runs them on two, where
// every remote free moves cache lines between cores (300-800 ns): run to
// run the figure jumps between the two. Pinned, every run is the cross-core
// case, but only on a quiet machine: on a loaded one a pinned thread cannot
// leave a busy core and its peer spends the wait in sched_yield (on
// 2026-12-03 at load 6, pinned runs took 200-860 ns per pair under both
// mimalloc and lowtide; at load ~2, 71-118 ns, within 1.5x run to run).
// The programs default to off, as real programs run; scripts/bench pins.
inline bool pin_to_cpu(int index) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < 2) return false;
  int k = index % CPU_COUNT(&allowed);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &allowed) || k-- > 0) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(c, &one);
    return sched_setaffinity(0, sizeof one, &one) == 0;
  }
  return false;
}

// The clock starts when every worker has done its setup: each calls
// start_line() when ready and waits there for the others.
inline std::atomic<int> g_ready{0};
inline std::atomic<bool> g_go{false};
inline void start_line() {
  g_ready.fetch_add(1);
  while (!g_go.load(std::memory_order_acquire)) std::this_thread::yield();
}

// Run body(t) on n threads; returns the wall seconds from the start line
// until all have finished.
template <typename Body>
double run_threads(int n, Body body) {
  std::vector<std::thread> ts;
  for (int t = 0; t < n; ++t) ts.emplace_back(body, t);
  while (g_ready.load() < n) std::this_thread::yield();
  auto t0 = std::chrono::steady_clock::now();
  g_go.store(true, std::memory_order_release);
  for (auto& t : ts) t.join();
  return since(t0);
}

// Sample rss_after_free now, rss_after_200ms 0.2 s later (what the process
// holds just after a free: issue 14's headline, as the Python workloads'
// _common.finish), rss_after_decay kDecayS after the first sample, and print
// the line. extra: additional JSON members, already formatted
// ("\"k\": v, ...") or "".
inline void finish(const char* workload, long rss_before, double wall_s, const std::string& extra) {
  constexpr double kEarlyS = 0.2;
  Status now = read_status();
  std::this_thread::sleep_for(std::chrono::duration<double>(kEarlyS));
  Status early = read_status();
  std::this_thread::sleep_for(std::chrono::duration<double>(kDecayS - kEarlyS));
  Status later = read_status();
  std::printf("{\"workload\": \"%s\", %s%s\"allocator\": \"%s\", \"wall_s\": %.4f, "
              "\"rss_before\": %ld, \"peak_rss\": %ld, \"rss_after_free\": %ld, "
              "\"rss_after_200ms\": %ld, \"rss_after_decay\": %ld}\n",
              workload, extra.c_str(), extra.empty() ? "" : ", ", allocator().c_str(), wall_s,
              rss_before, later.hwm, now.rss, early.rss, later.rss);
  std::fflush(stdout);
}

}  // namespace bench

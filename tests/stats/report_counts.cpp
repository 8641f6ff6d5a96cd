// A deterministic allocation workload for the exit-time report tests
// (tests/stats/check_report.py reads what this prints and what lowtide
// writes). Modes:
//   counts  3 threads named alpha/beta/gamma: 1000 large (2 MiB) and 10000
//           small (100 B) mallocs in all, plus known callocs, reallocs and
//           aligned allocations; everything freed. Prints, as one JSON line on
//           stdout, what each thread did (calls, bytes requested, usable
//           bytes), for the checker to compare row for row.
//   live5   as counts, then 5 large blocks left live at exit; prints their
//           usable sizes.
//   names   threads named before allocating, one renaming itself after
//           allocating and exiting, one renaming itself and still alive at exit.
//   many    300 threads that each malloc once and are all alive at exit.
//   recycle 300 threads that each malloc/free once and exit, then 20 more
//           (past 256 exited threads the lightest are folded).
//   churn   5,000 short-lived threads, 10 at a time, each with one large
//           block of its own size (all sizes distinct) and one memalign;
//           prints the sizes and their usable sizes, the registry's row
//           count (lowtide_stats.threads) after the last join and the main
//           thread's tid.
// Threads are raw pthreads (std::thread allocates its state in the parent and
// frees it in the child, which would put one stray free in the child's row),
// and nothing in a worker prints. Every wait is bounded by alarm().
#include <malloc.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "../lowtide_stats.hpp"
#include "../lowtide_test.hpp"

namespace {

constexpr std::size_t kLarge = std::size_t{2} << 20;
constexpr std::size_t kSmall = 100;
constexpr int kBatch = 10;  // large blocks held at once per thread

struct Did {
  std::uint64_t malloc_calls = 0, calloc_calls = 0, realloc_calls = 0, aligned_calls = 0, free_calls = 0;
  std::uint64_t small_requested = 0, small_out = 0;
  std::uint64_t large_requested = 0, large_out = 0, large_maps = 0;
};

struct Work {
  const char* name;
  int nlarge;
  int nsmall;
  Did did;
};

pthread_barrier_t first_batch;
void* volatile sink;  // keeps the compiler from eliding allocations

void* keep(void* p) {
  CHECK(p != nullptr);
  sink = p;
  return p;
}

void small_block(Did& d, void* p, std::size_t requested) {
  d.small_requested += requested;
  d.small_out += malloc_usable_size(p);
}

void* worker(void* arg) {
  auto* w = static_cast<Work*>(arg);
  // Named before its first allocation.
  CHECK(pthread_setname_np(pthread_self(), w->name) == 0);
  Did& d = w->did;

  // Large: batches of kBatch held at once; the first batch of every thread
  // is held across a barrier, so all three first batches are live together.
  for (int done = 0; done < w->nlarge; done += kBatch) {
    void* blocks[kBatch];
    for (int i = 0; i < kBatch; ++i) {
      blocks[i] = keep(std::malloc(kLarge));
      std::memset(blocks[i], i, 4096);  // touch the first page
      ++d.malloc_calls;
      ++d.large_maps;
      d.large_requested += kLarge;
      d.large_out += malloc_usable_size(blocks[i]);
    }
    if (done == 0) pthread_barrier_wait(&first_batch);
    for (int i = 0; i < kBatch; ++i) {
      std::free(blocks[i]);
      ++d.free_calls;
    }
  }

  // Small: nsmall blocks of 100 B, the first 100 of them through operator
  // new / delete (which count as malloc / free).
  for (int i = 0; i < w->nsmall; ++i) {
    void* p = i < 100 ? ::operator new(kSmall) : std::malloc(kSmall);
    keep(p);
    ++d.malloc_calls;
    small_block(d, p, kSmall);
    if (i < 100) ::operator delete(p);
    else std::free(p);
    ++d.free_calls;
  }

  // 7 callocs of 10 x 10 bytes.
  for (int i = 0; i < 7; ++i) {
    void* p = keep(std::calloc(10, 10));
    ++d.calloc_calls;
    small_block(d, p, 100);
    std::free(p);
    ++d.free_calls;
  }

  // 5 x (realloc(NULL, 200), realloc(p, 300), realloc(p, 0)): 15 realloc
  // calls, and no free call (realloc(p, 0) frees without counting one).
  for (int i = 0; i < 5; ++i) {
    void* p = keep(std::realloc(nullptr, 200));
    ++d.realloc_calls;
    small_block(d, p, 200);
    void* q = keep(std::realloc(p, 300));
    ++d.realloc_calls;
    small_block(d, q, 300);
    CHECK(std::realloc(q, 0) == nullptr);
    ++d.realloc_calls;
  }

  // 11 aligned: 3 memalign, 3 aligned_alloc, 3 posix_memalign, 2 aligned new.
  for (int i = 0; i < 3; ++i) {
    void* p = keep(memalign(64, 100));
    ++d.aligned_calls;
    small_block(d, p, 100);
    std::free(p);
    ++d.free_calls;
    p = keep(aligned_alloc(256, 512));
    ++d.aligned_calls;
    small_block(d, p, 512);
    std::free(p);
    ++d.free_calls;
    void* r = nullptr;
    CHECK(posix_memalign(&r, 128, 1000) == 0);
    keep(r);
    ++d.aligned_calls;
    small_block(d, r, 1000);
    std::free(r);
    ++d.free_calls;
  }
  for (int i = 0; i < 2; ++i) {
    void* p = keep(::operator new(100, std::align_val_t{64}));
    ++d.aligned_calls;
    small_block(d, p, 100);
    ::operator delete(p, std::align_val_t{64});
    ++d.free_calls;
  }
  return nullptr;
}

std::string did_json(const Work& w) {
  const Did& d = w.did;
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "\"%s\": {\"malloc\": %llu, \"calloc\": %llu, \"realloc\": %llu, \"aligned\": %llu, \"free\": %llu, "
                "\"small_requested\": %llu, \"small_out\": %llu, \"large_requested\": %llu, \"large_out\": %llu, "
                "\"large_maps\": %llu}",
                w.name, (unsigned long long)d.malloc_calls, (unsigned long long)d.calloc_calls,
                (unsigned long long)d.realloc_calls, (unsigned long long)d.aligned_calls,
                (unsigned long long)d.free_calls, (unsigned long long)d.small_requested,
                (unsigned long long)d.small_out, (unsigned long long)d.large_requested,
                (unsigned long long)d.large_out, (unsigned long long)d.large_maps);
  return buf;
}

int run_counts(bool leave_live) {
  Work work[3] = {{"alpha", 400, 4000, {}}, {"beta", 300, 3000, {}}, {"gamma", 300, 3000, {}}};
  CHECK(pthread_barrier_init(&first_batch, nullptr, 3) == 0);
  pthread_t t[3];
  for (int i = 0; i < 3; ++i) CHECK(pthread_create(&t[i], nullptr, worker, &work[i]) == 0);
  for (int i = 0; i < 3; ++i) CHECK(pthread_join(t[i], nullptr) == 0);

  std::string out = "{\"threads\": {";
  for (int i = 0; i < 3; ++i) out += (i ? ", " : "") + did_json(work[i]);
  out += "}";
  // Every 2 MiB block has the same usable size (no extra allocation here:
  // the run makes exactly 1000 large mallocs).
  char buf[256];
  std::snprintf(buf, sizeof buf, ", \"large_block\": %zu, \"large_usable\": %llu, \"batch\": %d", kLarge,
                (unsigned long long)(work[0].did.large_out / work[0].did.large_maps), kBatch);
  out += buf;
  if (leave_live) {
    // 5 large blocks of assorted sizes, still live at exit.
    const std::size_t sizes[5] = {std::size_t{1} << 20, (std::size_t{3} << 19) + 3, std::size_t{3} << 20,
                                  (std::size_t{5} << 20) + 17, (std::size_t{8} << 20) + 1};
    static void* live[5];
    std::uint64_t usable = 0;
    for (int i = 0; i < 5; ++i) {
      live[i] = keep(std::malloc(sizes[i]));
      usable += malloc_usable_size(live[i]);
    }
    std::snprintf(buf, sizeof buf, ", \"live_usable\": %llu", (unsigned long long)usable);
    out += buf;
  }
  out += "}\n";
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  return 0;
}

// --- names -------------------------------------------------------------------

pthread_mutex_t park_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t park_cv = PTHREAD_COND_INITIALIZER;
int parked = 0;

void alloc_some() {
  for (int i = 0; i < 50; ++i) std::free(keep(std::malloc(64)));
  std::free(keep(std::malloc(kLarge)));
}

void* named_early(void* arg) {
  CHECK(pthread_setname_np(pthread_self(), static_cast<const char*>(arg)) == 0);
  alloc_some();
  return nullptr;
}

void* renames_late(void*) {
  alloc_some();  // under the inherited name
  CHECK(pthread_setname_np(pthread_self(), "renamed-late") == 0);
  return nullptr;
}

void* renames_and_parks(void*) {
  alloc_some();
  CHECK(pthread_setname_np(pthread_self(), "still-here") == 0);
  pthread_mutex_lock(&park_mu);
  ++parked;
  pthread_cond_signal(&park_cv);
  pthread_mutex_unlock(&park_mu);
  for (;;) pause();  // alive until the process exits
}

int run_names() {
  pthread_t a, b, c, d;
  CHECK(pthread_create(&a, nullptr, named_early, const_cast<char*>("early-one")) == 0);
  CHECK(pthread_join(a, nullptr) == 0);
  CHECK(pthread_create(&b, nullptr, named_early, const_cast<char*>("early-two")) == 0);
  CHECK(pthread_join(b, nullptr) == 0);
  CHECK(pthread_create(&c, nullptr, renames_late, nullptr) == 0);
  CHECK(pthread_join(c, nullptr) == 0);
  CHECK(pthread_create(&d, nullptr, renames_and_parks, nullptr) == 0);
  pthread_mutex_lock(&park_mu);
  while (parked == 0) pthread_cond_wait(&park_cv, &park_mu);  // bounded by alarm()
  pthread_mutex_unlock(&park_mu);
  CHECK(pthread_setname_np(pthread_self(), "main-renamed") == 0);
  alloc_some();
  std::printf("{\"main_tid\": %d}\n", static_cast<int>(gettid()));
  std::fflush(stdout);
  std::exit(0);  // d is still alive
}

// --- many threads: the "N other threads" row ----------------------------------

pthread_barrier_t all_started;

void* alive_worker(void*) {
  keep(std::malloc(100));  // stays live
  pthread_barrier_wait(&all_started);
  for (;;) pause();
}

void* quick_worker(void*) {
  std::free(keep(std::malloc(100)));
  return nullptr;
}

int run_many() {
  constexpr int kThreads = 300;
  CHECK(pthread_barrier_init(&all_started, nullptr, kThreads + 1) == 0);
  pthread_attr_t attr;
  CHECK(pthread_attr_init(&attr) == 0);
  CHECK(pthread_attr_setstacksize(&attr, 64 << 10) == 0);
  for (int i = 0; i < kThreads; ++i) {
    pthread_t t;
    CHECK(pthread_create(&t, &attr, alive_worker, nullptr) == 0);
  }
  pthread_barrier_wait(&all_started);  // bounded by alarm()
  std::printf("{\"threads\": %d}\n", kThreads);
  std::fflush(stdout);
  std::exit(0);
}

int run_recycle() {
  auto wave = [](int n) {
    for (int i = 0; i < n; ++i) {
      pthread_t t;
      CHECK(pthread_create(&t, nullptr, quick_worker, nullptr) == 0);
      CHECK(pthread_join(t, nullptr) == 0);
    }
  };
  wave(300);
  wave(20);
  std::printf("{\"threads\": 320}\n");
  std::fflush(stdout);
  return 0;
}

// --- churn: many short-lived threads ------------------------------------------

constexpr int kChurnThreads = 5000;
constexpr int kChurnRound = 10;

// Thread i's large block: 256 KiB + a distinct multiple of 4 KiB (7919 is
// prime to 5,000, so i -> i * 7919 % 5,000 is a permutation): the heaviest
// threads are spread over the run, not the last ones.
std::size_t churn_size(int i) {
  return (std::size_t{256} << 10) + static_cast<std::size_t>((i * 7919) % kChurnThreads) * 4096;
}

std::size_t churn_usable[kChurnThreads];  // the weights the registry ranks by

void* churn_worker(void* arg) {
  const int i = static_cast<int>(reinterpret_cast<std::intptr_t>(arg));
  void* p = keep(std::malloc(churn_size(i)));
  churn_usable[i] = malloc_usable_size(p);
  std::free(p);
  std::free(keep(memalign(64, 64)));
  return nullptr;
}

int run_churn() {
  pthread_attr_t attr;
  CHECK(pthread_attr_init(&attr) == 0);
  CHECK(pthread_attr_setstacksize(&attr, 64 << 10) == 0);
  for (int r = 0; r < kChurnThreads; r += kChurnRound) {
    pthread_t t[kChurnRound];
    for (int k = 0; k < kChurnRound; ++k)
      CHECK(pthread_create(&t[k], &attr, churn_worker, reinterpret_cast<void*>(static_cast<std::intptr_t>(r + k))) == 0);
    for (pthread_t& x : t) CHECK(pthread_join(x, nullptr) == 0);
  }
  const lowtide_stats s = lt::read_stats();
  std::string out = "{\"threads\": " + std::to_string(kChurnThreads) + ", \"registry\": " + std::to_string(s.threads) +
                    ", \"main_tid\": " + std::to_string(gettid()) + ", \"sizes\": [";
  for (int i = 0; i < kChurnThreads; ++i) out += (i ? ", " : "") + std::to_string(churn_size(i));
  out += "], \"usable\": [";
  for (int i = 0; i < kChurnThreads; ++i) out += (i ? ", " : "") + std::to_string(churn_usable[i]);
  out += "]}\n";
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  alarm(120);
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "counts") return run_counts(false);
  if (mode == "live5") return run_counts(true);
  if (mode == "names") return run_names();
  if (mode == "many") return run_many();
  if (mode == "recycle") return run_recycle();
  if (mode == "churn") return run_churn();
  std::fprintf(stderr, "usage: %s counts|live5|names|many|recycle|churn\n", argv[0]);
  return 2;
}

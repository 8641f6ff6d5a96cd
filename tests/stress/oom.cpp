// Out of memory under `ulimit -v` (RLIMIT_AS set before exec, 768 MiB): this
// program re-executes itself under the limit and, three times over, runs the
// address space dry and recovers:
//   - 8 MiB, then 1 MiB, then cutoff-sized blocks until malloc fails (lowtide's
//     range, reserved at an eighth of the limit, fills first and further large
//     blocks go to mimalloc, until that fails too), then 100 KiB and 64-byte
//     blocks until those fail;
//   - every failure must be NULL + ENOMEM (bad_alloc from operator new, ENOMEM
//     from posix_memalign), and at that point large and small requests, calloc
//     and realloc must all fail cleanly, the failed realloc leaving its block
//     intact;
//   - half of everything is freed, and then large and small requests must
//     work again; every block's stamp is checked before it is freed.
// The last round exhausts memory from 4 threads at once. At the end all is
// freed and lowtide's live-byte counters are back at their start values.

#include "stress_common.hpp"

#include <malloc.h>
#include <mutex>
#include <new>
#include <sys/resource.h>
#include <thread>
#include <vector>

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace {

constexpr std::size_t kLimit = 768 * MiB;

struct Held {
  void* p;
  std::uint64_t tag;
};

void put_tag(void* p, std::uint64_t tag) { std::memcpy(p, &tag, sizeof tag); }
bool has_tag(const Held& h) {
  std::uint64_t v;
  std::memcpy(&v, h.p, sizeof v);
  return v == h.tag;
}

std::mutex g_mu;
std::atomic<long> g_failures{0};

// Allocate n-byte blocks until one fails; the failure must be NULL + ENOMEM.
void fill(std::vector<Held>* out, std::size_t n, std::uint64_t tag_base, std::size_t cap) {
  for (std::size_t i = 0; i < cap; ++i) {
    errno = 0;
    void* p = malloc(opaque(n));
    if (p == nullptr) {
      CHECK(errno == ENOMEM, "malloc(%zu) failed with errno %d, not ENOMEM", n, errno);
      g_failures.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    put_tag(p, tag_base + i);
    std::lock_guard<std::mutex> lk(g_mu);
    out->push_back({p, tag_base + i});
  }
  CHECK(false, "%zu blocks of %zu bytes fit under a %zu MiB RLIMIT_AS", cap, n, kLimit / MiB);
}

// With memory exhausted, every kind of request fails cleanly.
void check_exhausted(std::vector<Held>* held) {
  const std::size_t c = lt::cutoff();
  errno = 0;
  CHECK(malloc(opaque(8 * MiB)) == nullptr && errno == ENOMEM, "large malloc when exhausted");
  errno = 0;
  CHECK(calloc(opaque(c), 4) == nullptr && errno == ENOMEM, "large calloc when exhausted");
  void* q = nullptr;
  CHECK(posix_memalign(&q, 4096, opaque(4 * MiB)) == ENOMEM && q == nullptr, "posix_memalign when exhausted");
  bool threw = false;
  try {
    void* o = ::operator new(opaque(100 * KiB));
    ::operator delete(o);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  CHECK(threw, "operator new(100 KiB) did not throw when exhausted");
  // A large held block asked to grow a lot: NULL, and the block untouched.
  for (Held& h : *held) {
    if (malloc_usable_size(h.p) < c) continue;
    errno = 0;
    void* r = realloc(h.p, opaque(512 * MiB));
    CHECK(r == nullptr && errno == ENOMEM, "realloc to 512 MiB when exhausted: %p errno %d", r, errno);
    CHECK(has_tag(h), "a failed realloc damaged its block");
    break;
  }
}

// In place: memory may be exhausted, so no new vector.
void free_some(std::vector<Held>* held, int keep_every) {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < held->size(); ++i) {
    Held h = (*held)[i];
    CHECK(has_tag(h), "block %zu lost its stamp", i);
    if (keep_every != 0 && i % static_cast<std::size_t>(keep_every) == 0) (*held)[kept++] = h;
    else free(h.p);
  }
  held->resize(kept);
}

void check_recovered() {
  const std::size_t sizes[] = {64, 100 * KiB, 3 * lt::cutoff(), 8 * MiB};
  for (std::size_t n : sizes) {
    lt::Block b = lt::make_block(n, n);
    lt::drop(b, "after recovery");
  }
}

int child_main() {
  alarm(100);
  std::vector<Held> held;
  held.reserve(2 << 20);  // never grown while memory is exhausted
  lt::Block warm = lt::make_block(3 * lt::cutoff(), 1);
  lt::drop(warm, "warm");
  lt::warm_thread_cache(4);
  const lt::Live start = lt::start_counting("oom");
  const double t0 = lt::now_seconds();
  std::size_t most = 0;
  for (int round = 0; round < 4; ++round) {
    const std::uint64_t base = static_cast<std::uint64_t>(round) << 40;
    if (round == 3) {
      std::vector<std::thread> ts;
      for (int t = 0; t < 4; ++t)
        ts.emplace_back([&held, base, t] {
          fill(&held, t % 2 ? 100 * KiB : 8 * MiB, base + (static_cast<std::uint64_t>(t + 8) << 30), 100000);
        });
      for (auto& t : ts) t.join();
    }
    const std::size_t sizes[] = {8 * MiB, MiB, lt::cutoff(), 100 * KiB, 64};
    for (std::size_t k = 0; k < 5; ++k)
      fill(&held, sizes[k], base + (static_cast<std::uint64_t>(k) << 30), 1500000);
    if (held.size() > most) most = held.size();
    check_exhausted(&held);
    free_some(&held, 2);
    check_recovered();
  }
  free_some(&held, 0);
  std::printf("oom: 4 rounds under RLIMIT_AS %zu MiB, up to %zu blocks held, %ld allocations failed with ENOMEM, "
              "%.1f s\n",
              kLimit / MiB, most, g_failures.load(), lt::now_seconds() - t0);
  lt::check_balanced(start, "oom");
  std::printf("PASS oom\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--child") == 0) return child_main();
  lt::arm_watchdog(110, "oom");
  std::fflush(stdout);
  const pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    const rlimit rl{kLimit, kLimit};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(120);
    char mode[] = "--child";
    char* args[] = {argv[0], mode, nullptr};
    execv("/proc/self/exe", args);
    _exit(121);
  }
  int status = 0;
  CHECK(lt::wait_bounded(pid, 105, &status), "the child under RLIMIT_AS did not finish (hang?)");
  char desc[128];
  lt::describe_status(status, desc, sizeof desc);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child under RLIMIT_AS %s", desc);
  return 0;
}

// The sampled call-site estimates against the truth (sites_test.py, cases
// estimate and at_peak). Each scenario allocates from one function of its
// own, so each is one site, and prints, as one JSON object on stdout, the
// exact figures of that site and every piece the sampler saw: (bytes that
// went through the countdown, usable bytes handed out) per allocation and per
// realloc growth, from which the test computes each estimate's standard
// deviation. Blocks are never written: only their headers' pages are touched,
// so gigabytes of blocks cost little memory.
//
// Usage: sites_estimate estimate | phases | threads
#include "lowtide_test.hpp"

#include <malloc.h>
#include <pthread.h>
#include <string>
#include <vector>

using lt::opaque;

namespace est {

constexpr std::size_t kCutoff = std::size_t{128} << 10;  // LOWTIDE_CUTOFF's default: the large path from here

struct Piece {
  unsigned long long counted, usable;  // counted: through the countdown (sites.hpp); usable: handed out
  int birth;                           // 1: a block's allocation; 0: a realloc's growth
};

struct Truth {
  const char* name;
  unsigned long long blocks = 0, bytes = 0, live = 0, peak = 0;
  std::vector<Piece> pieces;
  std::vector<long> rounds;  // temporaries: pieces per round (for the peak's union bound)
  void add(unsigned long long usable) {
    live += usable;
    if (live > peak) peak = live;
  }
};

std::uint64_t rng = 0x9e3779b97f4a7c15ULL;
std::size_t uniform(std::size_t lo, std::size_t hi) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return lo + static_cast<std::size_t>(rng % (hi - lo + 1));
}

// One bytearray-like buffer: appends of `chunk`, capacity grown as CPython's
// bytearray does (size + size/8 + 6), from the small path across the cutoff
// into the large path.
struct Buffer {
  void* p = nullptr;
  std::size_t size = 0, cap = 0;
};

__attribute__((noinline)) void append_to(Truth* t, Buffer* b, std::size_t chunk) {
  b->size += chunk;
  if (b->size + 1 <= b->cap) return;
  const std::size_t want = b->size + (b->size >> 3) + 6;
  const bool was_large = b->cap >= kCutoff;
  const unsigned long long old_usable = b->p != nullptr ? malloc_usable_size(b->p) : 0;
  void* q = realloc(b->p, opaque(want));
  CHECK(q != nullptr);
  b->p = q;
  b->cap = want;
  if (want < kCutoff) return;  // still small: not the large path's
  const unsigned long long u = malloc_usable_size(q);
  if (!was_large) {
    // Moved over from the small path: a new large block of `want` bytes.
    t->blocks += 1;
    t->bytes += u;
    t->pieces.push_back({want, u, 1});
    t->add(u);
  } else if (u > old_usable) {
    t->bytes += u - old_usable;
    t->pieces.push_back({want - old_usable, u - old_usable, 0});
    t->add(u - old_usable);
  }
  asm volatile("" ::: "memory");
}

// (a) growth by realloc: `n` buffers appended to in turn until each holds
// `upto` bytes, then all freed.
__attribute__((noinline)) void growth(Truth* t, int n, std::size_t upto, std::size_t chunk) {
  std::vector<Buffer> bufs(static_cast<std::size_t>(n));
  for (bool more = true; more;) {
    more = false;
    for (Buffer& b : bufs) {
      if (b.size >= upto) continue;
      append_to(t, &b, chunk);
      more = true;
    }
  }
  for (Buffer& b : bufs) {
    t->live -= malloc_usable_size(b.p);
    free(b.p);
  }
}

__attribute__((noinline)) void* temp_block(std::size_t n) {
  void* p = malloc(opaque(n));
  CHECK(p != nullptr);
  return p;
}

// (b) temporaries: `rounds` rounds of `k` blocks, all live, then all freed.
__attribute__((noinline)) void temporaries(Truth* t, int rounds, int k, std::size_t lo, std::size_t hi) {
  std::vector<void*> held;
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < k; ++i) {
      const std::size_t n = uniform(lo, hi);
      void* p = temp_block(n);
      const unsigned long long u = malloc_usable_size(p);
      t->blocks += 1;
      t->bytes += u;
      t->pieces.push_back({n, u, 1});
      t->add(u);
      held.push_back(p);
    }
    t->rounds.push_back(k);
    for (void* p : held) {
      t->live -= malloc_usable_size(p);
      free(p);
    }
    held.clear();
  }
}

__attribute__((noinline)) void* kept_block(std::size_t n) {
  void* p = malloc(opaque(n));
  CHECK(p != nullptr);
  return p;
}

// (c) long-lived blocks: `k` blocks kept to the end (leaked on purpose).
__attribute__((noinline)) void long_lived(Truth* t, int k, std::size_t lo, std::size_t hi) {
  for (int i = 0; i < k; ++i) {
    const std::size_t n = uniform(lo, hi);
    void* p = kept_block(n);
    const unsigned long long u = malloc_usable_size(p);
    t->blocks += 1;
    t->bytes += u;
    t->pieces.push_back({n, u, 1});
    t->add(u);
  }
}

// Heap at peak: three sites whose live bytes peak at different times.
std::vector<void*> a_blocks, b_blocks, c_blocks;
__attribute__((noinline)) void site_a(Truth* t, int n, std::size_t size) {
  for (int i = 0; i < n; ++i) {
    a_blocks.push_back(temp_block(size));
    const unsigned long long u = malloc_usable_size(a_blocks.back());
    t->blocks += 1;
    t->bytes += u;
    t->pieces.push_back({size, u, 1});
    t->add(u);
  }
}
__attribute__((noinline)) void site_b(Truth* t, int n, std::size_t size) {
  for (int i = 0; i < n; ++i) {
    b_blocks.push_back(kept_block(size));
    const unsigned long long u = malloc_usable_size(b_blocks.back());
    t->blocks += 1;
    t->bytes += u;
    t->pieces.push_back({size, u, 1});
    t->add(u);
  }
}
__attribute__((noinline)) void site_c(Truth* t, int n, std::size_t size) {
  for (int i = 0; i < n; ++i) {
    c_blocks.push_back(temp_block(size));
    const unsigned long long u = malloc_usable_size(c_blocks.back());
    t->blocks += 1;
    t->bytes += u;
    t->pieces.push_back({size, u, 1});
    t->add(u);
  }
}
void drop(Truth* t, std::vector<void*>* v) {
  for (void* p : *v) {
    t->live -= malloc_usable_size(p);
    free(p);
  }
  v->clear();
}

// Threads that allocate, grow, shrink (in place, and below the cutoff into
// the small path and back) and free large blocks at random, all at once,
// then free everything: whatever was sampled, every site must be back at
// zero live bytes and blocks.
__attribute__((noinline)) void* churn(void* arg) {
  std::uint64_t r = 0x2545f4914f6cdd1dULL * (reinterpret_cast<std::uintptr_t>(arg) + 1);
  auto next = [&r](std::size_t lo, std::size_t hi) {
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    return lo + static_cast<std::size_t>(r % (hi - lo + 1));
  };
  void* slot[16] = {};
  for (int i = 0; i < 4000; ++i) {
    void*& p = slot[next(0, 15)];
    switch (next(0, 3)) {
      case 0:
        free(p);
        p = malloc(opaque(next(kCutoff, std::size_t{4} << 20)));
        break;
      case 1:
      case 2:  // grow or shrink, sometimes below the cutoff
        p = realloc(p, opaque(next(std::size_t{64} << 10, std::size_t{6} << 20)));
        break;
      default:
        free(p);
        p = nullptr;
    }
    asm volatile("" ::: "memory");
  }
  for (void* p : slot) free(p);
  return nullptr;
}

void print(const std::vector<Truth>& all, const char* extra) {
  std::printf("{\"scenarios\": [");
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Truth& t = all[i];
    std::printf("%s{\"name\": \"%s\", \"blocks\": %llu, \"bytes\": %llu, \"live\": %llu, \"peak\": %llu, "
                "\"rounds\": [", i ? ", " : "", t.name, t.blocks, t.bytes, t.live, t.peak);
    for (std::size_t k = 0; k < t.rounds.size(); ++k) std::printf("%s%ld", k ? ", " : "", t.rounds[k]);
    std::printf("], \"pieces\": [");
    for (std::size_t k = 0; k < t.pieces.size(); ++k)
      std::printf("%s[%llu, %llu, %d]", k ? ", " : "", t.pieces[k].counted, t.pieces[k].usable, t.pieces[k].birth);
    std::printf("]}");
  }
  std::printf("]%s}\n", extra);
}

}  // namespace est

int main(int argc, char** argv) {
  using namespace est;
  lt::arm_watchdog(120, "sites_estimate");
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "estimate") {
    std::vector<Truth> all(3);
    all[0].name = "est::growth";
    growth(&all[0], 96, std::size_t{32} << 20, std::size_t{16} << 10);
    all[1].name = "est::temporaries";
    temporaries(&all[1], 16, 128, std::size_t{2} << 20, std::size_t{8} << 20);
    all[2].name = "est::long_lived";
    long_lived(&all[2], 1600, std::size_t{1} << 20, std::size_t{4} << 20);
    print(all, "");
    return 0;
  }
  if (mode == "phases") {
    // a and b live together (the process's peak), a freed, then c: c's own
    // peak comes later, under the process's.
    std::vector<Truth> all(3);
    all[0].name = "est::site_a";
    all[1].name = "est::site_b";
    all[2].name = "est::site_c";
    site_a(&all[0], 40, std::size_t{8} << 20);
    site_b(&all[1], 20, std::size_t{8} << 20);
    const unsigned long long a_at_peak = all[0].live, b_at_peak = all[1].live;
    drop(&all[0], &a_blocks);
    site_c(&all[2], 30, std::size_t{8} << 20);
    drop(&all[2], &c_blocks);
    char extra[128];
    std::snprintf(extra, sizeof extra, ", \"at_peak\": {\"est::site_a\": %llu, \"est::site_b\": %llu, \"est::site_c\": 0}",
                  a_at_peak, b_at_peak);
    print(all, extra);
    return 0;
  }
  if (mode == "threads") {
    pthread_t th[4];
    for (std::uintptr_t i = 0; i < 4; ++i) CHECK(pthread_create(&th[i], nullptr, churn, reinterpret_cast<void*>(i)) == 0);
    for (pthread_t& t : th) CHECK(pthread_join(t, nullptr) == 0);
    print({}, "");
    return 0;
  }
  std::fprintf(stderr, "usage: sites_estimate estimate|phases|threads\n");
  return 2;
}

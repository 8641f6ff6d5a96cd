// bignum: a single-thread mixed-size workload of the kind a bignum program
// makes (cfrac factoring with its own multi-precision numbers): every
// arithmetic result is a fresh heap block sized to its digits, most of them
// temporaries freed within the step, some kept in a working set.
//
// A number is a block of an 8-byte header and n 32-bit limbs (8 + 4n bytes,
// n = 0..126, so 8-512 B). Each step takes two live numbers x and y, cuts
// each to its low k limbs (k log-uniform in 0..126: the sizes are skewed
// small, median ~8 limbs), adds the cuts, multiplies the sum by the low 1-4
// limbs of the second cut (a word-sized factor, so the multiply stays short
// and the step's time is mostly its allocations) and cuts the product to a
// third such k, then frees the temporaries: six mallocs and five frees a
// step, blocks of 8-512 B. The product joins the
// working set, replaces a random member of it or is freed with one, so that
// the set tracks a target that rises from 1,000 to 40,000 numbers and falls
// back, over and over (period 400,000 steps). One step in four appends a
// number's low limbs as hex to one of three log buffers, each grown by
// realloc on every append to its limit (16, 32 or 64 KiB) and then freed and
// started again. Limbs are computed for real (schoolbook add and multiply),
// so the blocks are written as a real program writes them.
//
// usage: bignum [--scale X]   (scale: BENCH_SCALE, default 1; scale 1 = 2M steps)
// Prints one JSON line: wall_s, steps, mallocs, reallocs, frees, RSS fields.
#include <cmath>
#include <cstdint>
#include <vector>

#include "bench_util.hpp"

namespace {

constexpr long kSteps = 2'000'000;  // at scale 1
constexpr std::uint32_t kMaxLimbs = 126;
constexpr long kLow = 1'000, kHigh = 40'000, kPeriod = 400'000;

struct Num {
  std::uint32_t n;  // limbs in use
  std::uint32_t cap;
  // The limbs follow the header in the same block.
  std::uint32_t* d() { return reinterpret_cast<std::uint32_t*>(this + 1); }
  const std::uint32_t* d() const { return reinterpret_cast<const std::uint32_t*>(this + 1); }
};
static_assert(sizeof(Num) == 8);

long g_mallocs = 0, g_frees = 0, g_reallocs = 0;

Num* make(std::uint32_t cap) {
  auto* x = static_cast<Num*>(std::malloc(sizeof(Num) + 4 * std::size_t{cap}));
  if (!x) std::abort();
  ++g_mallocs;
  x->n = 0;
  x->cap = cap;
  return x;
}

void drop(Num* x) {
  ++g_frees;
  std::free(x);
}

void trim(Num* x) {
  while (x->n > 0 && x->d()[x->n - 1] == 0) --x->n;
}

// The low k limbs of x, in a block of its own.
Num* low(const Num* x, std::uint32_t k) {
  const std::uint32_t n = x->n < k ? x->n : k;
  Num* r = make(n);
  for (std::uint32_t i = 0; i < n; ++i) r->d()[i] = x->d()[i];
  r->n = n;
  trim(r);
  return r;
}

Num* add(const Num* a, const Num* b) {
  if (a->n < b->n) std::swap(a, b);
  Num* r = make(a->n + 1);
  std::uint64_t carry = 0;
  for (std::uint32_t i = 0; i < a->n; ++i) {
    carry += std::uint64_t{a->d()[i]} + (i < b->n ? b->d()[i] : 0);
    r->d()[i] = static_cast<std::uint32_t>(carry);
    carry >>= 32;
  }
  r->d()[a->n] = static_cast<std::uint32_t>(carry);
  r->n = a->n + 1;
  trim(r);
  return r;
}

Num* mul(const Num* a, const Num* b) {
  Num* r = make(a->n + b->n);
  for (std::uint32_t i = 0; i < a->n + b->n; ++i) r->d()[i] = 0;
  for (std::uint32_t i = 0; i < a->n; ++i) {
    std::uint64_t carry = 0;
    for (std::uint32_t j = 0; j < b->n; ++j) {
      carry += std::uint64_t{a->d()[i]} * b->d()[j] + r->d()[i + j];
      r->d()[i + j] = static_cast<std::uint32_t>(carry);
      carry >>= 32;
    }
    r->d()[i + b->n] = static_cast<std::uint32_t>(carry);
  }
  r->n = a->n + b->n;
  trim(r);
  return r;
}

// Log-uniform limb count 0..126: 1 << band, then uniform up to twice that.
std::uint32_t skewed(bench::Rng& r) {
  const std::uint32_t band = r.below(8);  // 0-1, 1-2, 2-4, ..., 64-128 limbs
  const std::uint32_t lo = (1u << band) >> 1;
  const std::uint32_t k = lo + r.below(lo + 1 + (band == 0));
  return k > kMaxLimbs ? kMaxLimbs : k;
}

Num* random_num(bench::Rng& r) {
  const std::uint32_t n = 1 + r.below(kMaxLimbs);
  Num* x = make(n);
  for (std::uint32_t i = 0; i < n; ++i) x->d()[i] = static_cast<std::uint32_t>(r.next() | 1);
  x->n = n;
  return x;
}

struct Log {
  char* buf = nullptr;
  std::size_t len = 0, limit = 0;

  void append(const Num* x) {
    char tmp[48];
    int k = 0;
    for (std::uint32_t i = 0; i < x->n && i < 4 && k < 40; ++i)
      k += std::snprintf(tmp + k, sizeof tmp - static_cast<std::size_t>(k), "%08x", x->d()[i]);
    tmp[k++] = ' ';
    auto* nb = static_cast<char*>(std::realloc(buf, len + static_cast<std::size_t>(k)));
    if (!nb) std::abort();
    ++g_reallocs;
    buf = nb;
    std::memcpy(buf + len, tmp, static_cast<std::size_t>(k));
    len += static_cast<std::size_t>(k);
    if (len >= limit) {
      std::free(buf);
      ++g_frees;
      buf = nullptr;
      len = 0;
    }
  }
};

// The working set's target at step i: a triangle wave kLow..kHigh.
long target(long i) {
  const long ph = i % kPeriod;
  const long half = kPeriod / 2;
  const long up = ph < half ? ph : kPeriod - ph;
  return kLow + (kHigh - kLow) * up / half;
}

}  // namespace

int main(int argc, char** argv) {
  const long steps = std::lround(static_cast<double>(kSteps) * bench::scale(argc, argv));
  const long rss_before = bench::read_status().rss;
  bench::Rng rng(0xcf7ac000u);
  std::vector<Num*> live;
  live.reserve(kHigh + 16);
  Log logs[3];
  logs[0].limit = 16 << 10;
  logs[1].limit = 32 << 10;
  logs[2].limit = 64 << 10;
  std::uint64_t check = 0;

  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < kLow; ++i) live.push_back(random_num(rng));
  for (long i = 0; i < steps; ++i) {
    const Num* x = live[rng.below(static_cast<std::uint32_t>(live.size()))];
    const Num* y = live[rng.below(static_cast<std::uint32_t>(live.size()))];
    Num* a = low(x, skewed(rng));
    Num* b = low(y, skewed(rng));
    Num* s = add(a, b);
    Num* c = low(b, 1 + rng.below(4));  // a word-sized factor: keeps the multiply short
    Num* p = mul(s, c);
    Num* r = low(p, skewed(rng));
    drop(a);
    drop(b);
    drop(s);
    drop(c);
    drop(p);
    if (r->n == 0) {  // keep the set's members non-zero, so products do not die out
      if (r->cap == 0) {
        drop(r);
        r = make(1);
      }
      r->d()[0] = static_cast<std::uint32_t>(rng.next() | 1);
      r->n = 1;
    }
    check += r->n;
    if ((i & 3) == 0) logs[rng.below(3)].append(r);
    const long want = target(i);
    const auto k = rng.below(static_cast<std::uint32_t>(live.size()));
    if (static_cast<long>(live.size()) < want) {
      live.push_back(r);
    } else if (static_cast<long>(live.size()) > want) {
      drop(r);
      drop(live[k]);
      live[k] = live.back();
      live.pop_back();
    } else {
      drop(live[k]);
      live[k] = r;
    }
  }
  for (Num* x : live) drop(x);
  for (Log& l : logs) {
    if (l.buf) ++g_frees;
    std::free(l.buf);
  }
  const double wall = bench::since(t0);

  char extra[256];
  std::snprintf(extra, sizeof extra,
                "\"steps\": %ld, \"mallocs\": %ld, \"reallocs\": %ld, \"frees\": %ld, \"check\": %llu", steps,
                g_mallocs, g_reallocs, g_frees, static_cast<unsigned long long>(check));
  bench::finish("bignum", rss_before, wall, extra);
  return 0;
}

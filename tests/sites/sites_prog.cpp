// Allocates large blocks from distinct named functions, so the report's
// call-site table can be checked row by row (sites_test.py). Prints, as one
// JSON object on stdout, what each function did: blocks, usable bytes (those
// a realloc's growth added included), peak live bytes, captures (every
// allocation and every growth, with LOWTIDE_SITE_SAMPLE=0) and the blocks it
// leaked on purpose.
//
// Usage: sites_prog named | many
#include "lowtide_test.hpp"

#include <malloc.h>
#include <string>
#include <vector>

using lt::opaque;

namespace sitetest {

struct Did {
  const char* name;
  long blocks = 0, growths = 0;
  unsigned long long bytes = 0, peak = 0, live = 0;
  std::vector<unsigned long long> leaked;
};

void* volatile sink;

// Each function calls the allocator from exactly one place, so each is one
// stack, hence one site.
__attribute__((noinline)) void* one_block(std::size_t n) {
  void* p = malloc(opaque(n));
  CHECK(p != nullptr);
  sink = p;
  return p;
}

// n blocks of `size`, all live at once, then `keep` of them leaked.
__attribute__((noinline)) void fill_and_drop(Did* d, std::size_t size, int n, int keep) {
  std::vector<void*> held;
  for (int i = 0; i < n; ++i) {
    void* p = calloc(1, opaque(size));
    CHECK(p != nullptr);
    unsigned long long u = malloc_usable_size(p);
    d->blocks += 1;
    d->bytes += u;
    d->live += u;
    if (d->live > d->peak) d->peak = d->live;
    held.push_back(p);
  }
  for (int i = 0; i < n; ++i) {
    if (i < keep) {
      d->leaked.push_back(malloc_usable_size(held[static_cast<std::size_t>(i)]));
      continue;
    }
    d->live -= malloc_usable_size(held[static_cast<std::size_t>(i)]);
    free(held[static_cast<std::size_t>(i)]);
  }
}

__attribute__((noinline)) void alloc_small_buffers(Did* d) {
  // one block at a time: peak is one block
  for (int i = 0; i < 6; ++i) {
    void* p = one_block(300 * 1024);
    unsigned long long u = malloc_usable_size(p);
    d->blocks += 1;
    d->bytes += u;
    if (u > d->peak) d->peak = u;
    free(p);
  }
}

// The empty asm after each call keeps it out of tail position: a tail call
// would take the function's own frame off the stack.
__attribute__((noinline)) void alloc_and_leak(Did* d) {
  fill_and_drop(d, std::size_t{1} << 20, 5, 2);
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) void alloc_big_table(Did* d) {
  fill_and_drop(d, (std::size_t{5} << 20) / 2, 3, 1);
  asm volatile("" ::: "memory");
}

// A large block right behind the one being grown, so that some growth
// steps cannot happen in place.
__attribute__((noinline)) void* place_wall(Did* d) {
  void* p = malloc(opaque(std::size_t{256} << 10));
  CHECK(p != nullptr);
  unsigned long long u = malloc_usable_size(p);
  d->blocks += 1;
  d->bytes += u;
  if (u > d->peak) d->peak = u;
  return p;
}

// Grows one block by realloc: the site's live bytes follow the block, each
// growth adds its new bytes to the site's allocated bytes, and moves count
// as remaps.
__attribute__((noinline)) void grow_buffer(Did* d, Did* wall_did) {
  void* p = one_block(200 * 1024);
  unsigned long long u = malloc_usable_size(p);
  d->blocks += 1;
  d->bytes += u;
  for (std::size_t n = 400 * 1024; n <= (std::size_t{12} << 20); n *= 2) {
    // something in the way, so some steps cannot grow in place
    void* wall = place_wall(wall_did);
    p = realloc(p, opaque(n));
    CHECK(p != nullptr);
    free(wall);
    const unsigned long long grown = malloc_usable_size(p);
    if (grown > u) {
      d->bytes += grown - u;
      d->growths += 1;
    }
    u = grown;
    if (u > d->peak) d->peak = u;
  }
  d->leaked.push_back(u);
  sink = p;
}

void print(const std::vector<Did>& all) {
  std::printf("{\"functions\": [");
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Did& d = all[i];
    std::printf("%s{\"name\": \"%s\", \"blocks\": %ld, \"captures\": %ld, \"bytes\": %llu, \"peak\": %llu, "
                "\"leaked\": [", i ? ", " : "", d.name, d.blocks, d.blocks + d.growths, d.bytes, d.peak);
    for (std::size_t k = 0; k < d.leaked.size(); ++k) std::printf("%s%llu", k ? ", " : "", d.leaked[k]);
    std::printf("]}");
  }
  std::printf("]}\n");
}

}  // namespace sitetest

int main(int argc, char** argv) {
  using namespace sitetest;
  lt::arm_watchdog(60, "sites_prog");
  std::string mode = argc > 1 ? argv[1] : "named";
  if (mode == "named") {
    std::vector<Did> all(5);
    all[0].name = "sitetest::alloc_small_buffers";
    alloc_small_buffers(&all[0]);
    all[1].name = "sitetest::alloc_and_leak";
    alloc_and_leak(&all[1]);
    all[2].name = "sitetest::alloc_big_table";
    alloc_big_table(&all[2]);
    all[3].name = "sitetest::grow_buffer";
    all[4].name = "sitetest::place_wall";
    grow_buffer(&all[3], &all[4]);
    print(all);
    return 0;
  }
  if (mode == "many") {
    // One site, many blocks: the sampled estimate against the truth.
    std::vector<Did> all(1);
    all[0].name = "sitetest::alloc_small_buffers";
    for (int k = 0; k < 400; ++k) alloc_small_buffers(&all[0]);
    print(all);
    return 0;
  }
  std::fprintf(stderr, "usage: sites_prog named|many\n");
  return 2;
}

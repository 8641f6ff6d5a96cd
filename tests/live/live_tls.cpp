// A process with a large static TLS block (200 KiB of __thread data) and a
// call site whose mangled name is ~1100 characters long, for
// tests/live/live_test.py's `bigtls` case. glibc carves the static TLS
// block out of every thread's stack; lowtide's threads once asked for
// 256 KiB in all, so this left the lowtide-live thread ~40 KiB, and
// demangling the call site's name in the answer's report (~72 bytes of
// stack per character) overflowed it: the process died of SIGSEGV.
// Prints "ready pid=P" after its large allocation (the lowtide threads
// start there), then "alive pid=P" for each line it reads.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

constexpr std::size_t kTls = std::size_t{200} << 10;
__thread char big[kTls] = {1};

// Template arguments with long names: the mangled name of alloc_here<...>.
// Outside an anonymous namespace, and the program linked with
// -rdynamic (meson.build): the function's name is in the dynamic symbol
// table, where lowtide finds names without libdw.
#define LT_STRUCT(n) struct Struct_number_##n##_with_a_deliberately_long_name_for_the_mangled_symbol_to_grow {}
LT_STRUCT(00);
LT_STRUCT(01);
LT_STRUCT(02);
LT_STRUCT(03);
LT_STRUCT(04);
LT_STRUCT(05);
LT_STRUCT(06);
LT_STRUCT(07);
LT_STRUCT(08);
LT_STRUCT(09);
LT_STRUCT(10);
LT_STRUCT(11);
#define LT_NAME(n) Struct_number_##n##_with_a_deliberately_long_name_for_the_mangled_symbol_to_grow

template <class... T>
__attribute__((noinline)) void* alloc_here(std::size_t n) {
  void* p = std::malloc(n);
  if (p != nullptr) std::memset(p, 1, 4096);
  asm volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
  return p;
}

int main() {
  big[kTls - 1] = 2;
  void* p = alloc_here<LT_NAME(00), LT_NAME(01), LT_NAME(02), LT_NAME(03), LT_NAME(04), LT_NAME(05), LT_NAME(06),
                       LT_NAME(07), LT_NAME(08), LT_NAME(09), LT_NAME(10), LT_NAME(11)>(std::size_t{4} << 20);
  std::printf("ready pid=%d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  char line[64];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    std::printf("alive pid=%d\n", static_cast<int>(getpid()));
    std::fflush(stdout);
  }
  return big[0] + (p != nullptr ? 0 : 1) - 1;
}

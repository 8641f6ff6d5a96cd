// Allocates through names_lib's static and hidden functions, keeps the
// blocks to exit (they show as live), and exits 0.
#include <cstdio>
#include <unistd.h>

extern "C" void names_run(void** out);

int main() {
  alarm(60);
  void* blocks[2];
  names_run(blocks);
  std::printf("%d\n", blocks[0] != nullptr && blocks[1] != nullptr);
  return 0;
}

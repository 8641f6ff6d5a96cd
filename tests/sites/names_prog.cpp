// Allocates through names_lib's static, hidden and inlining functions, keeps the
// blocks to exit (they show as live), and exits 0.
#include <cstdio>
#include <cstring>
#include <unistd.h>

extern "C" void names_run(void** out);

int main(int argc, char** argv) {
  alarm(60);
  void* blocks[3];
  names_run(blocks);
  std::printf("%d\n", blocks[0] != nullptr && blocks[1] != nullptr && blocks[2] != nullptr);
  std::fflush(stdout);
  if (argc > 1 && std::strcmp(argv[1], "_exit") == 0) _exit(0);
  return 0;
}

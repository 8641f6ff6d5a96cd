// When the large-block range cannot take a request, mimalloc does, with one
// warning that names the cause; what the kernel would refuse is refused.
// Run with LOWTIDE_RESERVE=64MiB (meson sets it):
//   - a 100 MiB block is larger than the whole range: it goes to mimalloc,
//     works, and the warning says the block is larger than the range;
//   - 1 MiB blocks fill the range: the rest go to mimalloc, all of them
//     work, and the warning says the range is full;
//   - a range block realloc'ed to 200 MiB moves to mimalloc with its data;
//   - a block larger than RAM + swap, and one of 2 TiB, are refused with
//     NULL + ENOMEM as glibc's malloc is refused (mimalloc maps with
//     MAP_NORESERVE, which the kernel does not check: lowtide must);
//   - stderr holds exactly those two warnings, once each.

#include "lowtide_test.hpp"

#include <string>
#include <vector>

#include <sys/mman.h>
#include <sys/wait.h>
#include <sys/sysinfo.h>

using lt::MiB;
using lt::opaque;

namespace {

std::size_t count_of(const std::string& s, const char* what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

// Everything lowtide is asked; stderr goes to the parent.
int child() {
  // Larger than the whole range.
  const std::size_t big = 100 * MiB;
  void* p = malloc(opaque(big));
  CHECK(p != nullptr, "malloc(100 MiB) with a 64 MiB range: %s", std::strerror(errno));
  lt::fill_pattern(p, big, 1);

  // Fill the range with 1 MiB blocks, and go on past it.
  std::vector<void*> blocks;
  for (int i = 0; i < 96; ++i) {
    void* b = malloc(opaque(MiB));
    CHECK(b != nullptr, "1 MiB block #%d: %s", i, std::strerror(errno));
    lt::fill_pattern(b, MiB, static_cast<unsigned>(i + 10));
    blocks.push_back(b);
  }

  // A range block (the first ones are) grown past the range's size moves,
  // data and all.
  void* r = realloc(blocks[0], opaque(200 * MiB));
  CHECK(r != nullptr, "realloc to 200 MiB: %s", std::strerror(errno));
  blocks[0] = r;
  CHECK(lt::find_pattern_mismatch(r, MiB, 10) == SIZE_MAX, "realloc to 200 MiB lost the data");

  // What the kernel would refuse.
  struct sysinfo si {};
  CHECK(sysinfo(&si) == 0);
  const std::size_t total = (static_cast<std::size_t>(si.totalram) + si.totalswap) * si.mem_unit;
  void* probe = mmap(nullptr, total + (std::size_t{1} << 30), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  const bool kernel_refuses = probe == MAP_FAILED;
  if (!kernel_refuses) munmap(probe, total + (std::size_t{1} << 30));
  for (std::size_t n : {total + (std::size_t{1} << 30), std::size_t{2} << 40}) {
    errno = 0;
    void* q = malloc(opaque(n));
    if (kernel_refuses) {
      CHECK(q == nullptr && errno == ENOMEM, "malloc(%zu MiB) beyond RAM + swap gave %p (errno %d)", n >> 20, q, errno);
    } else {
      free(q);  // overcommit mode 1: the kernel grants it, so may lowtide
    }
  }

  CHECK(lt::find_pattern_mismatch(p, big, 1) == SIZE_MAX, "the 100 MiB block was damaged");
  free(p);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    CHECK(lt::find_pattern_mismatch(blocks[i], MiB, static_cast<unsigned>(i + 10)) == SIZE_MAX, "block #%zu damaged", i);
    free(blocks[i]);
  }

  std::printf("child done\n");
  return 0;
}

int main() {
  lt::arm_watchdog(60, "range_fallback");
  const char* reserve = std::getenv("LOWTIDE_RESERVE");
  CHECK(reserve != nullptr && std::strcmp(reserve, "64MiB") == 0, "run with LOWTIDE_RESERVE=64MiB");
  CHECK(lt::under_lowtide(), "run with liblowtide.so preloaded");
  int err_pipe[2];
  CHECK(pipe(err_pipe) == 0);
  std::fflush(stdout);
  const pid_t pid = fork();
  CHECK(pid >= 0, "fork: %s", std::strerror(errno));
  if (pid == 0) {
    dup2(err_pipe[1], 2);
    close(err_pipe[0]);
    close(err_pipe[1]);
    std::exit(child());
  }
  close(err_pipe[1]);
  std::string said;
  char buf[4096];
  for (ssize_t got; (got = read(err_pipe[0], buf, sizeof buf)) != 0;) {
    if (got < 0 && errno == EINTR) continue;
    CHECK(got > 0, "read: %s", std::strerror(errno));
    said.append(buf, static_cast<std::size_t>(got));
  }
  close(err_pipe[0]);
  int status = 0;
  CHECK(lt::wait_bounded(pid, 30, &status), "the child hung");
  std::printf("range_fallback: the child's stderr:\n%s", said.c_str());
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed (status %#x)", status);
  CHECK(count_of(said, "larger than the large-block range (64 MiB)") == 1, "no (or a repeated) too-large warning");
  CHECK(count_of(said, "the large-block range (64 MiB) is full") == 1, "no (or a repeated) range-full warning");
  CHECK(count_of(said, "\n") == 2, "lowtide printed something else too");
  std::printf("PASS range_fallback\n");
  return 0;
}

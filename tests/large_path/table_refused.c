// A large allocation for which the kernel refused to open the range's
// tables says so, not that the range is full (reliability.md no. 101).
// The arena makes its tables read-write 256 MiB of range at a time
// (Arena::open_to, an mprotect); a process at its RLIMIT_DATA is refused
// that mprotect (the tables are private writable memory) as it is refused
// the block's own mapping. Arena::alloc returned kNone for both "no room"
// and "tables refused", so such a process, whose 1 TiB range was nearly
// empty, was told "the large-block range (1 TiB) is full; further large
// blocks go to mimalloc", once: the warning that names the real cause
// (the kernel refused, RLIMIT_DATA) never came. Here a seccomp filter
// refuses, with ENOMEM, the one mprotect the arena's live table makes per
// step (32 KiB, read-write: mimalloc commits in multiples of 64 KiB, glibc
// does not make memory read-write with mprotect here), after the range's
// first 256 MiB were opened at start; blocks of 64 MiB (never written but
// at their ends) then need the next step from the fourth on. Each must
// still be served (mimalloc takes it), and stderr must carry the warning
// that the kernel refused, and not the one that the range is full.
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "large_reused.h"

// The low and high 32-bit words of system call argument i (x86-64 and
// aarch64 are little-endian).
#define ARG_LO(i) (offsetof(struct seccomp_data, args) + 8 * (i))
#define ARG_HI(i) (offsetof(struct seccomp_data, args) + 8 * (i) + 4)

int main(void) {
  // lowtide's warnings go to fd 2 with write(2): kept in a memfd to be read.
  const int out = memfd_create("table_refused_stderr", 0);
  const int saved_err = dup(2);
  if (out < 0 || saved_err < 0 || dup2(out, 2) != 2) return 1;
  // The first large allocation starts lowtide's threads, before the filter
  // (a filter installed since start stops them being started at all).
  // (Through a volatile pointer: a compiler may drop a malloc freed unused.)
  char* volatile first = malloc(1 << 20);
  if (first == NULL) return 1;
  first[0] = 1;
  free(first);
  (void)large_reused("table_refused");  // exits 2 where not under lowtide
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mprotect, 0, 7),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(1)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 32768, 0, 5),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_HI(1)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(2)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PROT_READ | PROT_WRITE, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOMEM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {sizeof f / sizeof f[0], f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    dup2(saved_err, 2);
    printf("table_refused: no seccomp filter here (%s): skipped\n", strerror(errno));
    return 77;
  }
  enum { kBlocks = 12 };
  const size_t n = (size_t)64 << 20;
  char* b[kBlocks];
  int got = 0, bad_errno = 0;
  for (int i = 0; i < kBlocks; ++i) {
    errno = 0;
    b[i] = malloc(n);
    if (b[i] == NULL) {
      bad_errno += errno != ENOMEM;
      continue;
    }
    b[i][0] = 1;
    b[i][n - 1] = 2;
    ++got;
  }
  struct lowtide_stats s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  lowtide_get_stats(&s);
  for (int i = 0; i < kBlocks; ++i)
    if (b[i] != NULL && (b[i][0] != 1 || b[i][n - 1] != 2)) bad_errno += 100;
  for (int i = 0; i < kBlocks; ++i) free(b[i]);
  // What lowtide wrote to stderr.
  char text[8192];
  const off_t len = lseek(out, 0, SEEK_CUR);
  const ssize_t r = pread(out, text, sizeof text - 1, 0);
  text[r > 0 ? r : 0] = '\0';
  dup2(saved_err, 2);
  const int said_refused = strstr(text, "the kernel refused to map a large block") != NULL;
  const int said_full = strstr(text, "is full") != NULL;
  fprintf(stderr, "table_refused: %d of %d blocks of 64 MiB served, %llu by mimalloc; stderr (%lld bytes):\n%s",
          got, kBlocks, (unsigned long long)s.large_fallback, (long long)len, text);
  if (s.large_fallback == 0) {
    fprintf(stderr, "  no block went to mimalloc: the filter refused no table step (the premise failed)\n");
    return 1;
  }
  if (got != kBlocks || bad_errno != 0 || said_full || !said_refused) {
    fprintf(stderr, "  want every block served, intact, and the warning that the kernel refused, not that the "
                    "range is full\n");
    return 1;
  }
  printf("table_refused: ok\n");
  return 0;
}

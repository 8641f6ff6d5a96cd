// A calloc the reuse cache serves leaves errno as it was (reliability.md
// no. 99, found by its review). pal::zero_held opens the pagemap and sends
// it PAGEMAP_SCAN; where the ioctl is refused (a kernel before 6.7 answers
// ENOTTY, and so does a sandbox's seccomp filter here) or the open fails,
// errno was left set by a calloc that succeeded: ENOTTY after each one,
// which a program that reads errno after a successful call (or after a
// library that ran one) takes for its own error. Here a seccomp filter
// answers every ioctl with ENOTTY once a block of 1 MiB is written; it is
// freed, and a calloc of the size served from the cache (checked by the
// counters) must read zero throughout and leave errno 0.
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <malloc.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "large_reused.h"

int main(void) {
  const size_t n = 1 << 20;
  unsigned char* p = malloc(n);
  if (p == NULL) return 1;
  volatile unsigned char* v = p;
  for (size_t i = 0; i < n; i += 4096) v[i] = 0xa5;
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_ioctl, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOTTY),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {sizeof f / sizeof f[0], f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    printf("calloc_errno: no seccomp filter here (%s): skipped\n", strerror(errno));
    return 77;
  }
  const uint64_t before = large_reused("calloc_errno");
  free(p);
  errno = 0;
  unsigned char* c = calloc(1, n);
  const int e = errno;
  if (c == NULL || served_from_cache("calloc_errno", before) != 0) return 1;
  // Up to the size asked for (calloc_usable checks the usable tail): the
  // UBSan build's object-size check knows this constant size.
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += c[i] != 0;
  free(c);
  if (e != 0 || bad != 0) {
    fprintf(stderr, "calloc(%zu) from the cache: errno %d (%s) after it succeeded, %zu bytes not zero\n", n, e,
            strerror(e), bad);
    return 1;
  }
  printf("calloc_errno: ok\n");
  return 0;
}

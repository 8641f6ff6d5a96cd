// The interposed pkey_mprotect where protection keys cannot be used
// (reliability.md no. 76's follow-up): a CPU or kernel without keys, or
// pkey_mprotect refused as a system call (a kernel before 4.9, a seccomp
// filter). Each case runs in a child:
//  - keyless: a pkey_mprotect with a key that the kernel refuses (no key
//    can be allocated, or none was) marks the process as one that uses keys.
//    Where the kernel has no key 0 either (x86 without PKU: EINVAL for any
//    key), making a freed block read-write "with the default key" failed,
//    and from then on every large free was given back: the reuse cache
//    never served again. Checked: a block freed after it is still served
//    from the cache.
//  - nosys: pkey_mprotect refused as a system call (ENOSYS, here by a
//    seccomp filter). glibc's pkey_mprotect with key -1 is mprotect and
//    works there; the interposer made the system call and failed. Then a
//    keyed call (refused) must not stop the cache either.
//  - zero length: pkey_mprotect(p, 0, ..., key) returns 0 without looking
//    at the key (and mprotect(p, 0, ...) changes nothing); lowtide took
//    such a call for one that gave the block a key, and on a CPU without
//    keys every later large free was given back (no. 100).
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "large_reused.h"

#define MiB ((size_t)1 << 20)

// A block freed and one of its size taken again: 0 where the cache served
// it and every page takes a write.
static int freed_then_reused(void* p, size_t size) {
  const uint64_t before = large_reused("pkey_fallback");
  free(p);
  volatile unsigned char* q = malloc(size);
  if (q == NULL || served_from_cache("pkey_fallback", before) != 0) return 1;
  for (size_t i = 0; i < size; i += 4096) q[i] = 0x33;
  free((void*)q);
  return 0;
}

// pkey_mprotect refused with ENOSYS, as by a kernel before 4.9.
static int refuse_pkey_mprotect(void) {
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pkey_mprotect, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
}

enum { KEYLESS, NOSYS, ZERO_LENGTH };
static const char* const names[] = {"a refused keyed pkey_mprotect, then a free",
                                    "pkey_mprotect refused as a system call (ENOSYS)",
                                    "pkey_mprotect and mprotect of length 0, then a free"};

// 0: passed; 3: cannot run here (said why).
static int run_case(int which) {
  const size_t size = 4 * MiB;
  void* p = NULL;
  if (posix_memalign(&p, 4096, size) != 0) return 1;
  memset(p, 0x5a, size);
  if (which == KEYLESS) {
    // Key 15: never allocated here, refused everywhere (EINVAL); where the
    // CPU has no keys at all, key 0 is refused the same way.
    if (pkey_mprotect(p, size, PROT_READ, 15) == 0) {
      fprintf(stderr, "  pkey_mprotect with an unallocated key succeeded\n");
      return 1;
    }
    return freed_then_reused(p, size);
  }
  if (which == ZERO_LENGTH) {
    // Whatever the kernel answers (0 on Linux, any key), nothing changed:
    // the block is still read-write with no key, and the cache serves.
    (void)pkey_mprotect(p, 0, PROT_READ, 15);
    (void)mprotect(p, 0, PROT_NONE);
    ((volatile unsigned char*)p)[size - 1] = 0x11;
    return freed_then_reused(p, size);
  }
  if (refuse_pkey_mprotect() != 0) {
    printf("  (seccomp: %s: case not run)\n", strerror(errno));
    return 3;
  }
  // As glibc: key -1 is mprotect, which the filter lets through.
  if (pkey_mprotect(p, size, PROT_READ, -1) != 0) {
    fprintf(stderr, "  pkey_mprotect(PROT_READ, -1): %s (glibc: as mprotect)\n", strerror(errno));
    return 1;
  }
  if (freed_then_reused(p, size) != 0) return 1;
  // A keyed call, refused: the cache still serves.
  if (posix_memalign(&p, 4096, size) != 0) return 1;
  memset(p, 0x5a, size);
  if (pkey_mprotect(p, size, PROT_READ, 1) == 0 || errno != ENOSYS) {
    fprintf(stderr, "  a keyed pkey_mprotect was not refused with ENOSYS: %s\n", strerror(errno));
    return 1;
  }
  return freed_then_reused(p, size);
}

int main(void) {
  int failed = 0;
  for (int which = KEYLESS; which <= ZERO_LENGTH; ++which) {
    fflush(stdout);
    const pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) _exit(run_case(which));
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) return 1;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 3) continue;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
      printf("ok: %s\n", names[which]);
    } else {
      ++failed;
      if (WIFSIGNALED(st)) printf("FAIL: %s: killed by signal %d\n", names[which], WTERMSIG(st));
      else printf("FAIL: %s: exit %d\n", names[which], WEXITSTATUS(st));
    }
  }
  printf("%s pkey_fallback\n", failed ? "FAIL" : "PASS");
  return failed ? 1 : 0;
}

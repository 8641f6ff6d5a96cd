/* A library dlclose'd by another thread between lowtide finding it and
 * reading it (LOWTIDE_SITES, every large block captured). lowtide finds a
 * frame's object with _dl_find_object, then reads the loader's link_map and
 * the object's name (a new site's capture, and each frame a report names),
 * and the object's ELF header, program headers and notes in memory (its
 * build ID, which a report compares with the file's before libdw names the
 * frame). A dlclose in between frees the first two and unmaps the rest; a
 * plain read of them then killed the process with SIGSEGV (and while the
 * site table's lock is held every signal is blocked: the program's own
 * handler never ran). They are read with pal::read_own_memory now, and
 * what cannot be read leaves the frame named by its address.
 *
 * The race is made certain by standing in for _dl_find_object (lowtide's
 * calls bind to this program's definition first: export_dynamic): for an
 * address in the target library, looked up from inside lowtide, it answers
 * the real lookup and then takes away what a dlclose would take away:
 *   header: the library's first page (its ELF header and program headers)
 *           is made PROT_NONE until lowtide calls dladdr (defined here too)
 *           for the frame: a report's build-ID read then finds it gone;
 *   name:   the link_map given is a copy whose l_name points into a
 *           PROT_NONE page (the name freed and its page given back);
 *   map:    the link_map given is itself in a PROT_NONE page;
 *   sname:  as header (libdw cannot name the frame), and dladdr's answer
 *           then names the symbol by a string in a PROT_NONE page (the
 *           library dlclose'd right after dladdr returned).
 * Reports (on demand, so names come from libdw and dladdr) meet the three;
 * captures of new sites meet `name` and `map`. Each case must end with the
 * process alive, the report written, and the stand-in having been reached.
 * The build before this test died of SIGSEGV at the first one.
 *
 * With a third argument, `race`: the real thing, bounded. A thread
 * dlopens the library, allocates from it (a site in it at each address it
 * lands at) and dlcloses it, in a loop, while this one writes reports,
 * for 3 s. Whether a dlclose lands inside a read is chance here (the
 * window is microseconds wide); the cases above make it certain.
 *
 * Usage: sites_unmapped_names <libsites_dltarget.so> <report file> [race|CASE] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { kOff, kHeader, kName, kMap, kSname };
static volatile int mode;
static long reached;                 /* stand-in answers given in the current case */
static long snames_given;            /* dladdr answers given a name in the hole */
static int header_gone;              /* the library's first page is PROT_NONE now */
static uintptr_t lt_lo, lt_hi;       /* liblowtide's mapping */
static uintptr_t lib_lo, lib_hi;     /* the target library's */
static int lib_first_prot;           /* its first page's protection */
static char* hole;                   /* a PROT_NONE page */
static struct link_map fake_map;     /* readable, its name in the hole */
static int (*real_find)(void*, struct dl_find_object*);
static int (*real_dladdr)(const void*, Dl_info*);

static void find_real(void) {
  void* p = dlvsym(RTLD_NEXT, "_dl_find_object", "GLIBC_2.35");
  memcpy(&real_find, &p, sizeof p);
  p = dlsym(RTLD_NEXT, "dladdr");
  memcpy(&real_dladdr, &p, sizeof p);
}

static int from_lowtide(void* ret) { return (uintptr_t)ret - lt_lo < lt_hi - lt_lo; }

static void protect_header(int prot) {
  if (syscall(SYS_mprotect, (void*)lib_lo, (size_t)4096, prot) != 0) {
    static const char msg[] = "FAIL: mprotect of the library's first page\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
    _exit(1);
  }
  header_gone = prot == PROT_NONE;
}

int _dl_find_object(void* pc, struct dl_find_object* r) {
  if (real_find == NULL) find_real();
  int rc = real_find(pc, r);
  if (rc != 0 || mode == kOff || (uintptr_t)pc - lib_lo >= lib_hi - lib_lo ||
      !from_lowtide(__builtin_return_address(0)))
    return rc;
  ++reached;
  if (mode == kHeader || mode == kSname) {
    protect_header(PROT_NONE);
  } else if (mode == kName) {
    fake_map.l_addr = r->dlfo_link_map->l_addr;
    fake_map.l_name = hole + 100;
    r->dlfo_link_map = &fake_map;
  } else if (mode == kMap) {
    r->dlfo_link_map = (struct link_map*)(void*)(hole + 200);
  }
  return rc;
}

/* dladdr reads the library's symbol table, in the same first page: the
 * page comes back before it does (lowtide asks it only after the build-ID
 * read, where libdw could not name the frame). */
int dladdr(const void* addr, Dl_info* info) {
  if (real_dladdr == NULL) find_real();
  if (header_gone) protect_header(lib_first_prot);
  int rc = real_dladdr(addr, info);
  if (rc != 0 && mode == kSname && info->dli_sname != NULL && (uintptr_t)addr - lib_lo < lib_hi - lib_lo &&
      from_lowtide(__builtin_return_address(0))) {
    ++snames_given;
    info->dli_sname = hole + 300;
  }
  return rc;
}

static int first_load(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  (void)data;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    if (((info->dlpi_addr + ph->p_vaddr) & ~(uintptr_t)4095) != lib_lo) return 0;
    lib_first_prot = ((ph->p_flags & PF_R) ? PROT_READ : 0) | ((ph->p_flags & PF_W) ? PROT_WRITE : 0) |
                     ((ph->p_flags & PF_X) ? PROT_EXEC : 0);
    return 1;
  }
  return 0;
}

static void* volatile keep;
static void* (*target_alloc)(size_t);

/* Each its own stack, so that each capture is a new site (the sizes
 * differ so that no two are folded into one function). */
__attribute__((noinline)) static void* alloc_report(void) { return target_alloc((1 << 20) + 4096); }
__attribute__((noinline)) static void* alloc_name(void) { return target_alloc((1 << 20) + 8192); }
__attribute__((noinline)) static void* alloc_map(void) { return target_alloc((1 << 20) + 12288); }

static int (*write_report)(const char*, int);

static int report_case(const char* what, int how, const char* path) {
  reached = 0;
  snames_given = 0;
  mode = how;
  int rc = write_report(path, 3);
  mode = kOff;
  if (header_gone) protect_header(lib_first_prot);
  if (rc != 0) {
    fprintf(stderr, "FAIL: report, %s: the report was not written\n", what);
    return 1;
  }
  if (reached == 0) {
    fprintf(stderr, "FAIL: report, %s: lowtide never looked up the library's frames\n", what);
    return 1;
  }
  if (how == kSname && snames_given == 0) {
    fprintf(stderr, "FAIL: report, %s: lowtide never asked dladdr for the library's frames\n", what);
    return 1;
  }
  /* The library's frames are still listed, by the path recorded at capture. */
  FILE* f = fopen(path, "r");
  static char text[1 << 20];
  size_t n = f != NULL ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f != NULL) fclose(f);
  text[n] = '\0';
  if (strstr(text, "libsites_dltarget") == NULL) {
    fprintf(stderr, "FAIL: report, %s: the library's frames are missing from the report\n", what);
    return 1;
  }
  printf("report, %s: ok (%ld lookups met it)\n", what, reached);
  return 0;
}

static int capture_case(const char* what, int how, void* (*fn)(void)) {
  reached = 0;
  mode = how;
  keep = fn();
  mode = kOff;
  free(keep);
  if (reached == 0) {
    fprintf(stderr, "FAIL: capture, %s: the capture never looked up the library's frame\n", what);
    return 1;
  }
  printf("capture, %s: ok (%ld lookups met it)\n", what, reached);
  return 0;
}

static const char* lib_path;
static volatile int race_stop;
static long race_cycles;

static void* race_loader(void* arg) {
  (void)arg;
  while (!race_stop) {
    void* h = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) break;
    void* sym = dlsym(h, "sites_target_alloc");
    void* (*fn)(size_t);
    memcpy(&fn, &sym, sizeof sym);
    if (fn != NULL) free(fn(1 << 20));
    dlclose(h);
    ++race_cycles;
  }
  return NULL;
}

static int race(const char* path) {
  pthread_t t;
  if (pthread_create(&t, NULL, race_loader, NULL) != 0) {
    fprintf(stderr, "FAIL: race: pthread_create\n");
    return 1;
  }
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  long reports = 0;
  int rc = 0;
  do {
    if (write_report(path, 3) != 0) rc = 1;
    ++reports;
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while (rc == 0 && now.tv_sec - start.tv_sec < 3);
  race_stop = 1;
  pthread_join(t, NULL);
  if (rc != 0 || race_cycles == 0) {
    fprintf(stderr, "FAIL: race: %s\n", rc != 0 ? "a report was not written" : "the library never loaded");
    return 1;
  }
  printf("race: ok (%ld reports, %ld dlopen/dlclose cycles)\n", reports, race_cycles);
  return 0;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAIL: timed out\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
  _exit(1);
}

int main(int argc, char** argv) {
  signal(SIGALRM, on_alarm);
  alarm(60);
  if (argc < 3) {
    fprintf(stderr, "usage: sites_unmapped_names <libsites_dltarget.so> <report file>\n");
    return 2;
  }
  lib_path = argv[1];
  find_real();
  struct dl_find_object lt;
  Dl_info info;
  void* m;
  void* (*mf)(size_t) = malloc;
  memcpy(&m, &mf, sizeof m);
  if (real_find == NULL || real_dladdr == NULL || real_find(m, &lt) != 0 || real_dladdr(m, &info) == 0 ||
      info.dli_fname == NULL || strstr(info.dli_fname, "liblowtide") == NULL) {
    fprintf(stderr, "SKIP: not under lowtide\n");
    return 77;
  }
  lt_lo = (uintptr_t)lt.dlfo_map_start;
  lt_hi = (uintptr_t)lt.dlfo_map_end;
  void* sym = dlsym(RTLD_DEFAULT, "lowtide_write_report");
  memcpy(&write_report, &sym, sizeof sym);
  hole = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (write_report == NULL || hole == MAP_FAILED || h == NULL) {
    fprintf(stderr, "FAIL: setup (lowtide_write_report, a page, dlopen: %s)\n", h == NULL ? dlerror() : "ok");
    return 1;
  }
  sym = dlsym(h, "sites_target_alloc");
  memcpy(&target_alloc, &sym, sizeof sym);
  struct dl_find_object lib;
  if (target_alloc == NULL || real_find(sym, &lib) != 0) {
    fprintf(stderr, "FAIL: the library's function\n");
    return 1;
  }
  lib_lo = (uintptr_t)lib.dlfo_map_start;
  lib_hi = (uintptr_t)lib.dlfo_map_end;
  if (!dl_iterate_phdr(first_load, NULL)) {
    fprintf(stderr, "FAIL: the library's first PT_LOAD\n");
    return 1;
  }

  /* A third argument: `race`, or one case alone (capture-name,
   * capture-map, report-header, report-sname, report-name,
   * report-map). */
  const char* only = argc > 3 ? argv[3] : NULL;
  if (only != NULL && strcmp(only, "race") == 0) {
    dlclose(h);
    return race(argv[2]);
  }
#define RUN(name) (only == NULL || strcmp(only, name) == 0)

  /* Captures first (their sites are new stacks), then a site made with
   * nothing in the way, then the reports. */
  int rc = 0;
  if (RUN("capture-name")) rc = capture_case("name unreadable", kName, alloc_name);
  if (rc == 0 && RUN("capture-map")) rc = capture_case("link_map unreadable", kMap, alloc_map);
  if (rc == 0) {
    keep = alloc_report();
    free(keep);
  }
  /* The header case needs libdw (only a report that names frames with it
   * reads the build ID); lowtide loads it privately at start. */
  int have_libdw = dlopen("libdw.so.1", RTLD_NOW | RTLD_NOLOAD) != NULL;
  if (rc == 0 && RUN("report-header")) {
    if (have_libdw) rc = report_case("headers unmapped", kHeader, argv[2]);
    else printf("report, headers unmapped: skipped (no libdw.so.1 loaded)\n");
  }
  if (rc == 0 && RUN("report-sname")) rc = report_case("symbol name unmapped", kSname, argv[2]);
  if (rc == 0 && RUN("report-name")) rc = report_case("name unreadable", kName, argv[2]);
  if (rc == 0 && RUN("report-map")) rc = report_case("link_map unreadable", kMap, argv[2]);
  return rc;
}

// The program the report tests of the security suite run under lowtide
// (report_test.py drives it). One mode per run:
//   plant VICTIM         symlink the name the report's temporary file had
//                        before issue 13 (<target>.tmp.<pid>) to VICTIM, then
//                        exit normally (the exit-time report runs)
//   closed-stderr PATH   close fd 2, ask for a report on stderr (must fail
//                        with EBADF and be counted), then write a JSON report
//                        to PATH
//   readonly-stderr PATH the same with fd 2 open read-only
//   names                name this thread and another one with bytes that
//                        are not UTF-8, allocate on both, exit
//   oom PATH             cap the address space at what is mapped now, use up
//                        what malloc can still give, then malloc_stats(),
//                        lowtide_write_report(PATH) and exit(7)
// Prints "rc=<r> errno=<e>" for the report calls it makes.
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "lowtide/lowtide.h"

namespace {

int report_to(const char* path, int format) {
  errno = 0;
  int rc = lowtide_write_report(path, format);
  int e = errno;
  std::printf("rc=%d errno=%d\n", rc, rc == 0 ? 0 : e);
  std::fflush(stdout);
  return rc;
}

void* named_thread(void*) {
  prctl(PR_SET_NAME, "w\xff\xfe\xc0\x80x", 0, 0, 0);
  void* p = malloc(300 << 10);
  free(p);
  return nullptr;
}

std::size_t mapped_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long pages = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%lu", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  return pages * 4096;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::string mode = argv[1];
  if (mode == "plant" && argc == 3) {
    const char* target = std::getenv("LOWTIDE_STATS_FILE");
    if (target == nullptr) return 2;
    std::string old_tmp = std::string(target) + ".tmp." + std::to_string(getpid());
    if (symlink(argv[2], old_tmp.c_str()) != 0) return 3;
    return 0;
  }
  if ((mode == "closed-stderr" || mode == "readonly-stderr") && argc == 3) {
    if (mode == "closed-stderr") {
      close(2);
    } else {
      int fd = open("/dev/null", O_RDONLY);
      if (fd < 0 || dup2(fd, 2) != 2) return 3;
      close(fd);
    }
    report_to("stderr", LOWTIDE_REPORT_TEXT);
    report_to("/dev/stderr", LOWTIDE_REPORT_TEXT);
    malloc_stats();
    report_to(argv[2], LOWTIDE_REPORT_JSON);
    return 0;
  }
  if (mode == "names") {
    prctl(PR_SET_NAME, "m\xff\"\\\x01\xed\xa0\x80", 0, 0, 0);
    pthread_t t;
    if (pthread_create(&t, nullptr, named_thread, nullptr) != 0) return 3;
    pthread_join(t, nullptr);
    return 0;
  }
  if (mode == "oom" && argc == 3) {
    rlimit lim{};
    getrlimit(RLIMIT_AS, &lim);
    lim.rlim_cur = mapped_bytes();
    if (setrlimit(RLIMIT_AS, &lim) != 0) return 3;
    // What malloc can still give inside what is mapped: small blocks of
    // several classes until each is refused (bounded).
    void* head = nullptr;  // the blocks, chained through their first word
    unsigned long got = 0;
    for (std::size_t size : {64ul, 1024ul, 16384ul}) {
      for (unsigned long i = 0; i < 20'000'000; ++i) {
        void* p = malloc(size);
        if (p == nullptr) break;
        *static_cast<void**>(p) = head;
        head = p;
        ++got;
      }
    }
    std::printf("blocks held: %lu\n", got);
    std::fflush(stdout);
    malloc_stats();
    report_to(argv[2], LOWTIDE_REPORT_BOTH);
    std::exit(7);
  }
  return 2;
}

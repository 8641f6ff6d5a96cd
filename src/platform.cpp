#include "platform.hpp"

#include <cerrno>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

namespace lowtide::pal {

namespace {
constexpr int kReserveFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
}

void* reserve(std::size_t len) {
  void* p = ::mmap(nullptr, len, PROT_NONE, kReserveFlags, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void* reserve_aligned(std::size_t len, std::size_t align) {
  // Over-reserve, then trim both ends: the trimmed ends are outside the range
  // we will ever carve from, so unmapping them leaves no hole inside it.
  std::size_t over = len + align;
  if (over < len) return nullptr;
  auto* raw = static_cast<char*>(reserve(over));
  if (raw == nullptr) return nullptr;
  auto addr = reinterpret_cast<std::uintptr_t>(raw);
  std::uintptr_t aligned = (addr + align - 1) & ~(static_cast<std::uintptr_t>(align) - 1);
  std::size_t head = aligned - addr;
  std::size_t tail = over - head - len;
  if (head) ::munmap(raw, head);
  if (tail) ::munmap(reinterpret_cast<char*>(aligned) + len, tail);
  return reinterpret_cast<void*>(aligned);
}

bool commit_fixed(void* p, std::size_t len) {
  void* r = ::mmap(p, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  return r == p;
}

bool decommit_fixed(void* p, std::size_t len) {
  void* r = ::mmap(p, len, PROT_NONE, kReserveFlags | MAP_FIXED, -1, 0);
  return r == p;
}

bool move_pages(void* src, std::size_t len, void* dst) {
  void* r = ::mremap(src, len, len, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, dst);
  return r == dst;
}

bool discard(void* p, std::size_t len) { return ::madvise(p, len, MADV_DONTNEED) == 0; }

void unmap(void* p, std::size_t len) { ::munmap(p, len); }

void* map_lazy(std::size_t len) {
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, kReserveFlags, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void advise_hugepage(void* p, std::size_t len) { ::madvise(p, len, MADV_HUGEPAGE); }

void write_stderr(const char* s, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::write(2, s, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    s += w;
    n -= static_cast<std::size_t>(w);
  }
}

long read_file(const char* path, char* buf, std::size_t cap) {
  if (cap == 0) return -1;
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  std::size_t got = 0;
  while (got + 1 < cap) {
    ssize_t r = ::read(fd, buf + got, cap - 1 - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  ::close(fd);
  buf[got] = '\0';
  return static_cast<long>(got);
}

std::size_t rss_bytes() {
  char buf[128];
  if (read_file("/proc/self/statm", buf, sizeof buf) <= 0) return 0;
  const char* s = buf;
  while (*s && *s != ' ') ++s;  // skip total size
  while (*s == ' ') ++s;
  std::size_t pages = 0;
  while (*s >= '0' && *s <= '9') pages = pages * 10 + static_cast<std::size_t>(*s++ - '0');
  return pages * kPageSize;
}

int current_tid() { return static_cast<int>(::syscall(SYS_gettid)); }

}  // namespace lowtide::pal

// What the entry-point tests share (entry_points.cpp is the driver; each
// entry_*.cpp holds one family of tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include <unistd.h>

#include "lowtide_test.hpp"

namespace entry {

inline constexpr std::size_t kHuge = static_cast<std::size_t>(PTRDIFF_MAX) + 1;  // > PTRDIFF_MAX
inline const std::size_t kPage = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));

inline std::mutex g_new_handler_mutex;  // std::new_handler is process-global
inline bool g_lowtide = false;
inline std::size_t g_cutoff = lt::kDefaultCutoff;

inline void* xmalloc(std::size_t n) {
  void* p = malloc(lt::opaque(n));
  CHECK(p != nullptr, "malloc(%zu) returned NULL", n);
  return lt::opaque(p);
}

inline void release(void* p) { free(lt::opaque(p)); }

// The tests (entry_*.cpp).
void test_alignment();
void test_malloc_zero();
void test_overflow();
void test_free_errno();
void test_usable_size();
void test_calloc_large();
void test_trim_mallinfo();
void test_mallinfo_in_use();  // single-threaded: reads process-wide figures
void test_kernel_refusal(bool verbose);
void test_cross_thread_frees();
void test_aligned_alloc();
void test_memalign();
void test_posix_memalign();
void test_valloc();
void test_large_aligned();
void test_realloc_semantics();
void test_realloc_transitions();
void test_madvise_split_realloc(bool verbose);
void test_reallocarray();
void test_operator_new_failure();
void test_new_delete_forms();
void test_new_bad_alignment();
void test_extra_exports();

}  // namespace entry

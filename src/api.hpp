// The semantics layer: glibc 2.36's contract for each entry point (errno,
// overflow, alignment rules), routing between the small and large paths, and
// forwarding when lowtide is not the process's allocator. exports.cpp only
// forwards to these.
#pragma once
#include <cstddef>
#include <malloc.h>

#include "lowtide/lowtide.h"

namespace lowtide::api {

void* malloc(std::size_t n);
void free(void* p);
void* calloc(std::size_t n, std::size_t size);
void* realloc(void* p, std::size_t n);
void* reallocarray(void* p, std::size_t n, std::size_t size);
void* memalign(std::size_t align, std::size_t n);
int posix_memalign(void** out, std::size_t align, std::size_t n);
void* valloc(std::size_t n);
void* pvalloc(std::size_t n);
std::size_t usable_size(const void* p);
std::size_t good_size(std::size_t n);
void* operator_new(std::size_t n, std::size_t align, bool nothrow);

int mallopt(int param, int value);
int trim(std::size_t pad);
struct mallinfo2 info();
void print_stats();
int print_info(int options, FILE* fp);

int get_stats(struct ::lowtide_stats* out);
std::size_t release_now();

}  // namespace lowtide::api

// libstdc++'s headers call out-of-line helpers that live in the library:
// std::allocator's size check does, inside fmt's float formatting (its
// digit buffers). With no C++ runtime linked (cxxrt.hpp) they are defined
// here, kept local by src/lowtide.map, and unreachable in practice: fmt's
// buffers stay within their inline capacity for every format lowtide
// writes. Only in the shared library: a test program links the real ones.
#include <new>

#include "cxxrt.hpp"

namespace std {
void __throw_bad_alloc() { lowtide::cxxrt::throw_bad_alloc(); }
void __throw_bad_array_new_length() { lowtide::cxxrt::throw_bad_alloc(); }
}  // namespace std

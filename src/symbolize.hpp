// Names for captured return addresses, at report time. Never allocates
// unless asked to demangle (__cxa_demangle mallocs): a report written where
// malloc must not be entered (an _exit from a signal handler) shows the
// mangled name.
#pragma once
#include <cstdint>

#include "sites.hpp"

namespace lowtide::symbolize {

struct Symbol {
  const char* module;    // path recorded when the site was first seen ("?" if none)
  std::uint64_t offset;  // ip - the module's load bias: `addr2line -e module offset`
  char function[512];    // demangled when allowed; empty when unknown
  std::uint64_t function_offset;
};

// The module and offset come from the capture; the function name only if the
// module is still loaded where it was (dladdr on a dlclose'd library's old
// address would name whatever lives there now).
void frame(const sites::Frame& f, bool demangle, Symbol* out);

}  // namespace lowtide::symbolize

// Names for captured return addresses, at report time (it allocates: never
// called from inside an allocation).
#pragma once
#include <cstdint>
#include <string>

#include "sites.hpp"

namespace lowtide::symbolize {

struct Symbol {
  std::string module;    // path recorded when the site was first seen ("?" if none)
  std::uint64_t offset;  // ip - the module's load bias: `addr2line -e module offset`
  std::string function;  // demangled; empty when unknown
  std::uint64_t function_offset;
};

// The module and offset come from the capture; the function name only if the
// module is still loaded where it was (dladdr on a dlclose'd library's old
// address would name whatever lives there now).
Symbol frame(const sites::Frame& f);

}  // namespace lowtide::symbolize

// Makes security_setuid_prog_cxx a C++ executable: it links libstdc++ and
// registers a static destructor at start, as C++ programs do. Before lowtide
// interposed __cxa_atexit, libmimalloc's constructor read MIMALLOC_* in
// such a process before lowtide could stop it (docs/reliability.md no. 16).
#include <iostream>
#include <string>

namespace {
struct Registered {
  std::string name = std::string(64, 'x');  // a heap block, freed at exit
};
Registered registered;
// <iostream>'s std::ios_base::Init: a libstdc++ symbol, so the link keeps
// libstdc++ as a dependency (the string alone may be inlined away).
[[maybe_unused]] std::ostream& out = std::cout;
}  // namespace

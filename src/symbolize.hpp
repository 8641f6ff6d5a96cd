// Names for captured return addresses, at report time.
//
// Two sources. The loader's (dladdr: the dynamic symbol table, exported
// functions only) never allocates, but takes the loader's lock: not from a
// signal handler or _exit, where frames are module+offset only. elfutils' libdw names static and hidden
// functions too, from .symtab and DWARF (with file:line where debug info is
// installed, in the object or under /usr/lib/debug), but allocates and opens
// files: it is used only inside a Session that was allowed to (not from
// _exit, which may run in a signal handler that interrupted malloc), and
// only if libdw.so.1 could be dlopen'ed at start-up (load()); otherwise the
// loader's names, or module+offset, as before.
#pragma once
#include <cstdint>

#include "sites.hpp"

namespace lowtide::symbolize {

struct Symbol {
  const char* module;    // path recorded when the site was first seen ("?" if none)
  std::uint64_t offset;  // ip - the module's load bias: `addr2line -e module offset`
  char function[512];    // demangled when allowed; empty when unknown
  std::uint64_t function_offset;
  char file[512];        // source file from DWARF; empty when unknown
  int line;              // 0 when unknown
};

// Start-up, from sites::start (lowtide's constructor, never inside malloc:
// dlopen takes the loader's lock). Loads libdw.so.1 privately (RTLD_LOCAL:
// its symbols stay out of the host's scope); false when it cannot be had,
// silently: names then come from the loader, as without it. Also finds the
// C++ demangler (cxxrt::resolve_demangler: the program's, or libstdc++
// loaded privately when LOWTIDE_SITES is on in a process without one).
bool load();

// One report's use of libdw: the Dwfl (the files opened, their symbol
// tables and line tables read) is built as frames ask for it and freed when
// the Session ends. allowed: the caller may enter malloc and open files.
// loader: it may call dladdr, which takes the loader's lock (false from a
// signal handler or _exit: frames are then module+offset only).
// One Session at a time process-wide; a report that finds another running
// (two threads writing reports, or a signal handler's report interrupting
// one on its own thread) uses the loader's names. Sessions nest on a
// thread: each decides for the frames named while it lasts.
class Session {
 public:
  Session(bool allowed, bool loader);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

 private:
  bool owner_ = false;
  bool outer_session_, outer_no_loader_;  // the interrupted report's, restored at the end
};

// In a forked child: a Session another thread of the parent had open is
// gone (its Dwfl is left, never freed: that thread was half-way through it).
void fork_child();

// The module and offset come from the capture; the function name only if the
// module is still loaded where it was (dladdr on a dlclose'd library's old
// address would name whatever lives there now, and the file on disk may no
// longer be what was loaded: libdw's answer is used only when the file's
// build ID matches the one in memory).
void frame(const sites::Frame& f, bool demangle, Symbol* out);

}  // namespace lowtide::symbolize

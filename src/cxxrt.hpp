// The few things lowtide needs from a C++ runtime, taken from the process's
// own instead of linking one.
//
// Why: lowtide is compiled without exceptions and RTTI and links no
// libstdc++, libgcc_s or libm. Linking them cost every host that does not
// load them itself (a C program, a shell, a Go binary) ~1.3 MiB of RSS in
// their pages (docs/benchmarks.md "Fixed footprint"). And the new_handler
// operator new must honour is the one the program set in *its* runtime:
// a linked copy could only ever be the same object by luck of load order.
//
// Where from, in order: the process's global scope (a C++ program links
// libstdc++, or LLVM's libc++ and libc++abi, which export the same names):
// weak references bound at load, or dlsym(RTLD_NEXT) at start-up for names
// lowtide defines itself; else libstdc++.so.6 loaded privately by someone
// (a Python extension dlopen'ed RTLD_LOCAL), found with RTLD_NOLOAD; else,
// for what has to exist (a bad_alloc to throw, a demangler), libstdc++.so.6
// loaded now, privately. Lookups may dlopen: never call them holding a
// lowtide lock.
#pragma once
#include <cstddef>
#include <new>

namespace lowtide::cxxrt {

// At start-up (lowtide's constructor, where dlopen is safe): find what
// operator new's failure path needs in the runtime the process already has
// (global, or libstdc++ loaded privately), while memory is not short.
void prepare() noexcept;

// The handler std::set_new_handler installed, or nullptr (none, or no C++
// runtime in the process: then nobody can have set one).
std::new_handler new_handler() noexcept;

// Throws std::bad_alloc through the process's C++ runtime. With none to be
// had, says so on stderr and aborts (as mimalloc's operator new does
// without one). Only operator new calls it: its callers are C++ code.
[[noreturn]] void throw_bad_alloc();

// operator new's nothrow forms when a new_handler is installed: the
// runtime's own nothrow operator new, which calls the throwing form (ours,
// interposed) inside the try/catch lowtide cannot compile, so a handler that
// throws ends as nullptr. align 0: the default alignment. nullptr when no
// runtime can be had; then *called is false and the caller runs the handler
// itself.
void* nothrow_new(std::size_t n, std::size_t align, bool* called) noexcept;

// abi::__cxa_demangle, or nullptr when no runtime can be had. Resolved by
// resolve_demangler(), at start-up only (it may dlopen).
using DemangleFn = char* (*)(const char*, char*, std::size_t*, int*);
DemangleFn resolve_demangler() noexcept;

}  // namespace lowtide::cxxrt

// Loaded RTLD_LOCAL by cxx_local_host.c (a C program: no C++ runtime in the
// global scope, as in python3 loading a C++ extension). Its operator new
// calls bind to lowtide's; lowtide must still find this library's runtime
// for the new_handler it sets and to throw std::bad_alloc.
#include <cstdint>
#include <cstdio>
#include <new>

namespace {
int calls = 0;
void handler() {
  if (++calls >= 2) std::set_new_handler(nullptr);
}
struct Mine : std::bad_alloc {};
}  // namespace

// 0 when every check held; otherwise the number of the first that failed.
extern "C" __attribute__((visibility("default"))) int cxx_local_check(std::size_t huge) {
  std::set_new_handler(handler);
  bool threw = false;
  try {
    void* p = ::operator new(huge);
    ::operator delete(p);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  std::set_new_handler(nullptr);
  if (calls != 2) return 1;  // the handler this library's runtime holds was called
  if (!threw) return 2;      // and std::bad_alloc reached this catch

  calls = 0;
  std::set_new_handler(handler);
  void* q = ::operator new(huge, std::nothrow);
  std::set_new_handler(nullptr);
  if (q != nullptr || calls != 2) return 3;

  std::set_new_handler([] { throw Mine(); });
  bool escaped = false;
  try {
    q = ::operator new(huge, std::align_val_t{64}, std::nothrow);
  } catch (...) {
    escaped = true;
  }
  std::set_new_handler(nullptr);
  if (escaped || q != nullptr) return 4;

  threw = false;
  try {
    void* p = ::operator new(huge);
    ::operator delete(p);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  if (!threw) return 5;  // no handler: bad_alloc at once
  return 0;
}

// operator new's failure contract (new_handler, bad_alloc) and all 20
// replaceable new/delete forms (entry_points.cpp runs them).
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>

#include "entry_points.hpp"

using lt::KiB;
using lt::MiB;
using lt::opaque;

namespace entry {

// ------------------------------------------------------ operator new failure
int g_handler_calls = 0;
int g_handler_limit = 0;
void counting_handler() {
  if (++g_handler_calls >= g_handler_limit) std::set_new_handler(nullptr);
}

void test_operator_new_failure() {
  std::lock_guard<std::mutex> lock(g_new_handler_mutex);
  const std::size_t huge = opaque(SIZE_MAX - 2 * MiB);
  // libstdc++ 12's own aligned operator new computes (n + align - 1) & ~(align - 1)
  // without an overflow check, so new[](SIZE_MAX - 4096, align 1 MiB) "succeeds"
  // with a tiny block under plain glibc. lowtide replaces operator new and must
  // get it right, so that size is only tried under lowtide.
  std::vector<std::size_t> huge_sizes = {huge, kHuge};
  if (g_lowtide) huge_sizes.push_back(opaque(SIZE_MAX - 4096));

  struct Form {
    const char* name;
    void* (*call)(std::size_t);
    bool nothrow;
  };
  const Form forms[] = {
      {"new(n)", [](std::size_t n) { return ::operator new(n); }, false},
      {"new[](n)", [](std::size_t n) { return ::operator new[](n); }, false},
      {"new(n, align 64)", [](std::size_t n) { return ::operator new(n, std::align_val_t{64}); }, false},
      {"new[](n, align 4096)", [](std::size_t n) { return ::operator new[](n, std::align_val_t{4096}); }, false},
      {"new(n, nothrow)", [](std::size_t n) { return ::operator new(n, std::nothrow); }, true},
      {"new[](n, nothrow)", [](std::size_t n) { return ::operator new[](n, std::nothrow); }, true},
      {"new(n, align 64, nothrow)",
       [](std::size_t n) { return ::operator new(n, std::align_val_t{64}, std::nothrow); }, true},
      {"new[](n, align 1M, nothrow)",
       [](std::size_t n) { return ::operator new[](n, std::align_val_t{MiB}, std::nothrow); }, true},
  };
  for (const Form& f : forms) {
    for (std::size_t n : huge_sizes) {
      // 1) handler installed: called, allocation retried, handler uninstalls
      //    itself on the 3rd call, then bad_alloc (or NULL for nothrow).
      g_handler_calls = 0;
      g_handler_limit = 3;
      std::set_new_handler(counting_handler);
      bool threw = false;
      void* p = reinterpret_cast<void*>(1);
      try {
        p = f.call(n);
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      std::set_new_handler(nullptr);
      CHECK(g_handler_calls == 3, "%s: new_handler called %d times, expected 3", f.name, g_handler_calls);
      if (f.nothrow) {
        CHECK(!threw && p == nullptr, "%s: expected NULL after handler gave up (threw=%d p=%p)", f.name, threw, p);
      } else {
        CHECK(threw, "%s: expected std::bad_alloc", f.name);
      }

      // 2) no handler: bad_alloc straight away / NULL.
      threw = false;
      p = reinterpret_cast<void*>(1);
      try {
        p = f.call(n);
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      if (f.nothrow)
        CHECK(!threw && p == nullptr, "%s without handler: threw=%d p=%p", f.name, threw, p);
      else
        CHECK(threw, "%s without handler: no bad_alloc", f.name);
    }
  }

  // 3) A handler that throws its own exception: it must propagate from the
  //    throwing forms (the handler may throw bad_alloc-derived types only, so
  //    use one).
  struct MyBadAlloc : std::bad_alloc {};
  std::set_new_handler([] { throw MyBadAlloc(); });
  bool mine = false;
  try {
    void* p = ::operator new(huge);
    ::operator delete(p);
  } catch (const MyBadAlloc&) {
    mine = true;
  } catch (...) {
  }
  std::set_new_handler(nullptr);
  CHECK(mine, "exception thrown by new_handler did not propagate out of operator new");

  // 4) The same handler under the nothrow forms: they return NULL, nothing
  //    escapes ([new.delete.single]: as if the throwing form were called in
  //    a try block). lowtide, built without exceptions, gets this from the
  //    C++ runtime's own nothrow operator new (src/cxxrt.hpp).
  for (const Form& f : forms) {
    if (!f.nothrow) continue;
    g_handler_calls = 0;
    std::set_new_handler([] {
      ++g_handler_calls;
      throw MyBadAlloc();
    });
    bool escaped = false;
    void* p = reinterpret_cast<void*>(1);
    try {
      p = f.call(huge);
    } catch (...) {
      escaped = true;
    }
    std::set_new_handler(nullptr);
    CHECK(!escaped && p == nullptr, "%s with a throwing handler: escaped=%d p=%p", f.name, escaped, p);
    CHECK(g_handler_calls == 1, "%s with a throwing handler: handler called %d times, expected 1", f.name,
          g_handler_calls);
  }
}

// ------------------------------------------------- all 20 new/delete forms
// An alignment that is not a power of two (0 included) is undefined
// behaviour; libstdc++ answers it with std::bad_alloc at once (nothrow:
// NULL), without calling the new_handler, and a replacement must not
// serve it either (lowtide did, until 2026-12-05).
void test_new_bad_alignment() {
  std::lock_guard<std::mutex> lock(g_new_handler_mutex);
  g_handler_calls = 0;
  g_handler_limit = 1000;
  std::set_new_handler(counting_handler);
  for (std::size_t a : {std::size_t{0}, std::size_t{3}, std::size_t{24}, std::size_t{96}, std::size_t{4097}}) {
    const std::align_val_t al{opaque(a)};
    bool threw = false;
    try {
      void* p = ::operator new(opaque(std::size_t{100}), al);
      ::operator delete(p);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    CHECK(threw, "new(100, align %zu): no bad_alloc", a);
    threw = false;
    try {
      void* p = ::operator new[](opaque(std::size_t{100}), al);
      ::operator delete[](p);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    CHECK(threw, "new[](100, align %zu): no bad_alloc", a);
    void* p = ::operator new(opaque(std::size_t{100}), al, std::nothrow);
    CHECK(p == nullptr, "new(100, align %zu, nothrow) = %p, not NULL", a, p);
    void* q = ::operator new[](opaque(std::size_t{100}), al, std::nothrow);
    CHECK(q == nullptr, "new[](100, align %zu, nothrow) = %p, not NULL", a, q);
  }
  CHECK(g_handler_calls == 0, "the new_handler ran %d times for a bad alignment", g_handler_calls);
  std::set_new_handler(nullptr);
}

void test_new_delete_forms() {
  const std::size_t sizes[] = {1, 24, 1000, 100 * KiB, g_cutoff, 2 * g_cutoff + 10};
  const std::size_t aligns[] = {16, 64, 4096, 2 * MiB};
  auto touch = [](void* p, std::size_t n) {
    CHECK(p != nullptr);
    static_cast<unsigned char*>(p)[0] = 0x5A;
    static_cast<unsigned char*>(p)[n - 1] = 0xA5;
    return opaque(p);
  };
  const std::nothrow_t& nt = std::nothrow;
  for (std::size_t n : sizes) {
    n = opaque(n);
    void* p;
    p = touch(::operator new(n), n);           ::operator delete(p);              // 1 / d1
    p = touch(::operator new[](n), n);         ::operator delete[](p);            // 2 / d2
    p = touch(::operator new(n, nt), n);       ::operator delete(p, nt);          // 3 / d3
    p = touch(::operator new[](n, nt), n);     ::operator delete[](p, nt);        // 4 / d4
    p = touch(::operator new(n), n);           ::operator delete(p, n);           // d5 sized
    p = touch(::operator new[](n), n);         ::operator delete[](p, n);         // d6 sized array
    p = touch(::operator new(n, nt), n);       ::operator delete(p);
    p = touch(::operator new[](n, nt), n);     ::operator delete[](p, n);
    for (std::size_t a : aligns) {
      const std::align_val_t al{a};
      auto chk = [&](void* q, const char* what) {
        CHECK(lt::aligned_to(q, a), "%s(%zu, align %zu) = %p misaligned", what, n, a, q);
        return touch(q, n);
      };
      p = chk(::operator new(n, al), "new");               ::operator delete(p, al);          // 5 / d7
      p = chk(::operator new[](n, al), "new[]");           ::operator delete[](p, al);        // 6 / d8
      p = chk(::operator new(n, al), "new");               ::operator delete(p, n, al);       // d9
      p = chk(::operator new[](n, al), "new[]");           ::operator delete[](p, n, al);     // d10
      p = chk(::operator new(n, al, nt), "new nothrow");   ::operator delete(p, al, nt);      // 7 / d11
      p = chk(::operator new[](n, al, nt), "new[] nothrow"); ::operator delete[](p, al, nt);  // 8 / d12
    }
  }
  // delete of nullptr through every form is a no-op.
  auto np = [] { return opaque(static_cast<void*>(nullptr)); };
  ::operator delete(np());
  ::operator delete[](np());
  ::operator delete(np(), std::nothrow);
  ::operator delete[](np(), std::nothrow);
  ::operator delete(np(), std::size_t{8});
  ::operator delete[](np(), std::size_t{8});
  ::operator delete(np(), std::align_val_t{64});
  ::operator delete[](np(), std::align_val_t{64});
  ::operator delete(np(), std::size_t{8}, std::align_val_t{64});
  ::operator delete[](np(), std::size_t{8}, std::align_val_t{64});
  ::operator delete(np(), std::align_val_t{64}, std::nothrow);
  ::operator delete[](np(), std::align_val_t{64}, std::nothrow);

  // new-expressions of over-aligned types (compiler picks the align_val_t +
  // sized forms), and of std containers.
  struct alignas(256) Over {
    unsigned char b[300];
  };
  for (int k : {1, 10, 5000}) {
    Over* arr = opaque(new Over[static_cast<std::size_t>(k)]);
    CHECK(lt::aligned_to(arr, 256), "new Over[%d] misaligned", k);
    arr[k - 1].b[299] = 1;
    delete[] arr;
    Over* one = opaque(new Over);
    CHECK(lt::aligned_to(one, 256), "new Over misaligned");
    delete one;
  }
  std::vector<std::string> v;
  for (int i = 0; i < 200; ++i) v.emplace_back(static_cast<std::size_t>(i * 37 % 300), 'x');
  std::vector<char> bigv(opaque(3 * g_cutoff), 'y');
  CHECK(bigv[bigv.size() - 1] == 'y');
}

}  // namespace entry

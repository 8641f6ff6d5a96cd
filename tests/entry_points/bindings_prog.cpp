// Host program for bindings_test.py: exercises malloc/free and the
// replaceable operator new/delete forms so the dynamic linker has to bind
// each of them (they are looked up lazily, at first call). Every pointer
// escapes through a volatile sink so the compiler cannot elide the calls.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

void* volatile sink;

void use(void* p, std::size_t n) {
  std::memset(p, 0x5a, n);
  sink = p;
}

struct alignas(64) Wide {
  unsigned char bytes[64];
};

}  // namespace

int main() {
  // C allocation
  void* a = std::malloc(100);
  use(a, 100);
  void* big = std::malloc(std::size_t{3} << 20);  // large path
  use(big, std::size_t{3} << 20);
  void* c = std::calloc(10, 10);
  use(c, 100);
  a = std::realloc(a, 5000);
  use(a, 5000);
  std::free(big);
  std::free(c);
  std::free(a);

  // operator new / delete, every replaceable form
  int* i = new int(7);
  sink = i;
  delete i;
  int* arr = new int[1000];
  use(arr, sizeof(int) * 1000);
  delete[] arr;
  int* nt = new (std::nothrow) int(1);
  sink = nt;
  delete nt;
  int* nta = new (std::nothrow) int[10];
  sink = nta;
  delete[] nta;
  Wide* w = new Wide;
  use(w, sizeof(Wide));
  delete w;
  Wide* wa = new Wide[5];
  use(wa, sizeof(Wide) * 5);
  delete[] wa;
  Wide* wn = new (std::nothrow) Wide;
  sink = wn;
  delete wn;
  void* raw = ::operator new(std::size_t{2} << 20);  // large path
  use(raw, std::size_t{2} << 20);
  ::operator delete(raw, std::size_t{2} << 20);
  void* ral = ::operator new(256, std::align_val_t{128});
  use(ral, 256);
  ::operator delete(ral, std::align_val_t{128});

  // library code allocating through operator new
  std::vector<std::string> v;
  for (int k = 0; k < 1000; ++k) {
    v.emplace_back(100 + k % 50, 'x');
  }
  std::vector<char> large(std::size_t{4} << 20, 'y');
  auto up = std::make_unique<std::string>(1 << 21, 'z');
  sink = up.get();

  std::size_t total = large.size() + up->size();
  for (const auto& s : v) {
    total += s.size();
  }
  // A C++ exception after start-up, once lowtide has loaded libunwind (with
  // LOWTIDE_SITES): libstdc++'s lazy _Unwind_RaiseException binding happens
  // here and must still go to libgcc_s.
  try {
    throw std::runtime_error(std::string(300, 'e'));
  } catch (const std::exception& e) {
    total += std::strlen(e.what());
  }
  std::printf("bindings_prog ok %zu\n", total);
  return 0;
}

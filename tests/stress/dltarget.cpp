// Small C++ library that allocates from its constructor, its functions and its
// destructor; dlopen_loop.cpp loads and unloads it 200 times under the shim.

#include "dltarget_algo.hpp"

#include <cstdlib>
#include <cstring>

#define DLTARGET_API extern "C" __attribute__((visibility("default")))

namespace {

constexpr std::size_t kLarge = 2 * 1024 * 1024 + 123;

struct Global {
  std::vector<std::string>* names;
  std::string banner;
  unsigned char* raw_large;
  std::vector<char> big_vec;
  bool alive;

  Global() : names(new std::vector<std::string>), banner(300, 'g'), raw_large(nullptr), big_vec(3 * 1024 * 1024, 'v'), alive(true) {
    for (int i = 0; i < 100; ++i) names->push_back(std::string(static_cast<std::size_t>(20 + i), static_cast<char>('a' + i % 26)));
    raw_large = static_cast<unsigned char*>(std::malloc(kLarge));
    if (raw_large) {
      raw_large[0] = 0x11;
      raw_large[kLarge - 1] = 0x22;
    }
  }
  ~Global() {
    // Allocates while tearing down, too.
    std::string goodbye = banner + std::string(5000, 'z');
    big_vec.push_back(goodbye.back());
    delete names;
    names = nullptr;
    std::free(raw_large);
    raw_large = nullptr;
    alive = false;
  }
};

Global g_state;

}  // namespace

// 0 when the global constructed correctly and is intact.
DLTARGET_API int dltarget_check() {
  if (!g_state.alive || g_state.names == nullptr || g_state.names->size() != 100) return 1;
  for (int i = 0; i < 100; ++i)
    if ((*g_state.names)[static_cast<std::size_t>(i)] != std::string(static_cast<std::size_t>(20 + i), static_cast<char>('a' + i % 26))) return 2;
  if (g_state.banner != std::string(300, 'g')) return 3;
  if (g_state.raw_large == nullptr || g_state.raw_large[0] != 0x11 || g_state.raw_large[kLarge - 1] != 0x22) return 4;
  if (g_state.big_vec.size() != 3 * 1024 * 1024 || g_state.big_vec.back() != 'v') return 5;
  return 0;
}

DLTARGET_API unsigned long long dltarget_work(int n) { return dltarget_algo(n); }

// Memory crossing the module boundary in both directions.
DLTARGET_API char* dltarget_strdup(const char* s) {
  const std::size_t n = std::strlen(s) + 1;
  char* p = static_cast<char*>(std::malloc(n));
  if (p) std::memcpy(p, s, n);
  return p;
}
DLTARGET_API void dltarget_free(void* p) { std::free(p); }
DLTARGET_API unsigned char* dltarget_new_large(std::size_t n) {
  auto* p = new unsigned char[n];
  p[0] = 0x5A;
  p[n - 1] = 0xA5;
  return p;
}
DLTARGET_API void dltarget_delete_vector(std::vector<int>* v) { delete v; }

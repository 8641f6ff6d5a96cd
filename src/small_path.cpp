#include "small_path.hpp"

namespace lowtide::small {

std::size_t class_exact_max = 0;
std::uint16_t class_table[kTableMax / kMinAlign + 1];

bool class_sizes_match(std::size_t limit) {
  for (std::size_t r = kMinAlign; r <= limit; r += (r < 1024 ? kMinAlign : round_up(r / 8, kMinAlign))) {
    void* p = mi_malloc(r);
    if (p == nullptr) return false;
    bool same = mi_usable_size(p) == mi_good_size(r);
    mi_free(p);
    if (!same) return false;
  }
  void* p = mi_malloc(limit);
  bool same = p != nullptr && mi_usable_size(p) == mi_good_size(limit);
  mi_free(p);
  return same;
}

void configure() {
  class_exact_max = class_sizes_match(kClassExactMax) ? kClassExactMax : 0;
  if (class_exact_max == 0) return;
  static_assert(kTableMax <= kClassExactMax && kTableMax <= UINT16_MAX);
  for (std::size_t r = kMinAlign; r <= kTableMax; r += kMinAlign)
    class_table[r / kMinAlign] = static_cast<std::uint16_t>(mi_good_size(r));
}

}  // namespace lowtide::small

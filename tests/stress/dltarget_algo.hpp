// Shared between dltarget.cpp and dlopen_loop.cpp: the library computes this,
// the loader recomputes it locally and compares.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

inline std::uint64_t dltarget_algo(int n) {
  std::vector<std::string> items;
  for (int k = 0; k < n; ++k) items.push_back("item-" + std::to_string(k * 7919) + std::string(static_cast<std::size_t>(k % 40), 'x'));
  std::map<std::string, int> index;
  for (int k = 0; k < n; ++k) index[items[static_cast<std::size_t>(k)]] = k;
  std::string joined;
  for (const auto& [s, k] : index) joined += s + ";";
  auto owned = std::make_unique<std::vector<std::uint64_t>>(static_cast<std::size_t>(n) + 1, 3);
  auto* raw = new std::uint64_t[static_cast<std::size_t>(n) + 5]();
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : joined) h = (h ^ ch) * 1099511628211ull;
  for (std::uint64_t v : *owned) h += v;
  h += raw[0] + joined.size();
  delete[] raw;
  return h;
}

// The report's call-site sections: the top LOWTIDE_SITES sites by peak live
// bytes, and the large blocks live when the report is written, grouped by
// site. Part of report.cpp's job, kept apart so each file stays small.
#pragma once
#include <cstdint>
#include <fmt/format.h>
#include <vector>

#include "sites.hpp"

namespace lowtide::report_sites {

struct LiveBlock {
  std::uint32_t site;
  std::uint64_t usable;
};

struct LiveGroup {
  std::uint32_t site;
  std::uint64_t blocks = 0, bytes = 0;
  std::vector<std::uint64_t> sizes;  // usable sizes, largest first (at most kSizesShown)
};

struct Data {
  std::vector<sites::SiteRow> all;  // every site, by peak live bytes
  std::size_t top = 0;              // the first `top` of them are shown (LOWTIDE_SITES)
  std::vector<LiveGroup> live;      // by bytes, largest first
  std::uint64_t live_missed = 0;    // blocks that appeared while the list was taken
  bool live_partial = false;        // the arena lock was held at exit
};

void gather(Data* d, bool at_exit);
void text(fmt::memory_buffer& o, const Data& d, bool at_exit);
void json(fmt::memory_buffer& o, const Data& d);

}  // namespace lowtide::report_sites

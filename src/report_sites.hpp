// The report's call-site sections: the top LOWTIDE_SITES sites by peak live
// bytes, and the large blocks live when the report is written, grouped by
// site. Part of report.cpp's job, kept apart so each file stays small. Like
// the rest of the report, it takes its memory from the report's Scratch and
// never calls malloc.
#pragma once
#include <cstdint>

#include "report_out.hpp"
#include "sites.hpp"

namespace lowtide::report_sites {

constexpr std::size_t kSizesShown = 32;  // sizes listed per live group

struct LiveBlock {
  std::uint32_t site;
  std::uint64_t usable;
};

struct LiveGroup {
  std::uint32_t site;
  std::uint64_t blocks, bytes;
  std::uint32_t nsizes;
  std::uint64_t sizes[kSizesShown];  // usable sizes, largest first
};

struct Data {
  sites::SiteRow* all = nullptr;  // every site, by peak live bytes
  std::size_t nall = 0;
  std::size_t top = 0;              // the first `top` of them are shown (LOWTIDE_SITES)
  // The heap at the process's peak (sites.hpp, AtPeak): the rows'
  // at_peak_bytes are of a moment when the large live bytes were
  // at_peak_live (the snapshot's peak, or now when now is higher).
  std::uint64_t process_peak = 0, at_peak_live = 0;
  bool at_peak_now = false;
  LiveGroup* live = nullptr;        // by bytes, largest first
  std::size_t nlive = 0;
  std::uint64_t live_missed = 0;    // blocks not listed: appeared during the walk, or no room
  bool live_partial = false;        // the arena lock was held at exit
};

// at_exit: take no lock that may be held (try only). demangle: names may be
// demangled (it mallocs); false where malloc must not be entered.
void gather(Data* d, report::Scratch& scratch, bool at_exit);
void text(report::Out& o, const Data& d, bool at_exit, bool demangle);
void json(report::Out& o, const Data& d, bool demangle);

}  // namespace lowtide::report_sites

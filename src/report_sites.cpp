#include "report_sites.hpp"

#include <algorithm>
#include <string>

#include "state.hpp"
#include "symbolize.hpp"

namespace lowtide::report_sites {

namespace {

constexpr std::size_t kSizesShown = 32;   // sizes listed per live group
constexpr std::uint32_t kTextFrames = 24;  // frames per site in the text report
constexpr std::size_t kTextSizes = 8;      // sizes per live group in the text report

std::string human(double v) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{:.0f} B", v);
  return fmt::format("{:.1f} {}", v, units[u]);
}

std::string escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += ch;
    }
  }
  return out;
}

std::string frame_text(const symbolize::Symbol& s) {
  std::string where = fmt::format("{}+{:#x}", s.module, s.offset);
  if (s.function.empty()) return where;
  return fmt::format("{}+{:#x}  ({})", s.function, s.function_offset, where);
}

const sites::SiteRow* find_row(const Data& d, std::uint32_t id) {
  for (const auto& r : d.all)
    if (r.id == id) return &r;
  return nullptr;
}

}  // namespace

void gather(Data* d, bool at_exit) {
  // The report's own buffers are not the program's: no site for them.
  std::uint16_t was = t_local.in_capture;
  t_local.in_capture = 1;
  if (sites::enabled.load()) {
    std::vector<sites::SiteRow> rows(sites::count() + 8);
    rows.resize(sites::read_sites(rows.data(), rows.size()));
    std::sort(rows.begin(), rows.end(), [](const sites::SiteRow& a, const sites::SiteRow& b) {
      return a.peak_bytes != b.peak_bytes ? a.peak_bytes > b.peak_bytes : a.id < b.id;
    });
    d->top = std::min<std::size_t>(rows.size(), sites::shown());
    d->all.swap(rows);
  }
  if (!g.arena.ready()) {
    t_local.in_capture = was;
    return;
  }
  // Storage first: the walk holds the arena lock, under which nothing may
  // allocate (a large allocation would wait for that same lock).
  std::vector<LiveBlock> blocks(g.large_blocks.load(std::memory_order_relaxed) + 256);
  std::size_t n = 0;
  std::uint64_t missed = 0;
  d->live_partial = !g.arena.for_each_live(
      // Never the block's header: another thread may be freeing the block
      // (its live slot cleared, its pages being replaced) as we pass.
      [&](char* user, std::uint32_t first, std::uint32_t granules, std::uint32_t site) {
        if (user == reinterpret_cast<char*>(blocks.data())) return;
        if (n == blocks.size()) {
          ++missed;
          return;
        }
        std::uint64_t usable = (std::uint64_t{granules} << Arena::kGranuleShift) -
                               static_cast<std::uint64_t>(user - g.arena.addr(first));
        blocks[n++] = {site < sites::kSites ? site : 0, usable};
      },
      at_exit);
  t_local.in_capture = was;
  blocks.resize(n);
  d->live_missed = missed;
  std::sort(blocks.begin(), blocks.end(), [](const LiveBlock& a, const LiveBlock& b) {
    return a.site != b.site ? a.site < b.site : a.usable > b.usable;
  });
  for (const LiveBlock& b : blocks) {
    if (d->live.empty() || d->live.back().site != b.site) d->live.push_back(LiveGroup{b.site, 0, 0, {}});
    LiveGroup& grp = d->live.back();
    ++grp.blocks;
    grp.bytes += b.usable;
    if (grp.sizes.size() < kSizesShown) grp.sizes.push_back(b.usable);
  }
  std::sort(d->live.begin(), d->live.end(), [](const LiveGroup& a, const LiveGroup& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.site < b.site;
  });
}

void text(fmt::memory_buffer& o, const Data& d, bool at_exit) {
  // Without call sites the text report stays as it was (the JSON still lists
  // live blocks, all without a site).
  if (!sites::enabled.load()) return;
  auto out = std::back_inserter(o);
  {
    std::uint64_t t = sites::interval();
    fmt::format_to(out, "\n-- top {} large-allocation sites (by peak live bytes; {}) --\n", sites::shown(),
                   t == 0 ? std::string("every large block captured")
                          : fmt::format("sampled every {} on average, figures scaled", human(static_cast<double>(t))));
    if (d.top == 0) fmt::format_to(out, "(no large block captured)\n");
    for (std::size_t k = 0; k < d.top; ++k) {
      const sites::SiteRow& r = d.all[k];
      fmt::format_to(out, "site {}: peak live {}, live now {} in {:.0f} blocks; allocated {:.0f} blocks, {}; "
                     "moved by realloc {:.0f}; captured {}\n",
                     r.id, human(r.peak_bytes), human(r.live_bytes), r.live_blocks, r.blocks, human(r.bytes),
                     r.remaps, r.sampled);
      if (r.id == sites::kFullSite) fmt::format_to(out, "    (stacks seen after the site table filled up)\n");
      for (std::uint32_t i = 0; i < r.nframes && i < kTextFrames; ++i)
        fmt::format_to(out, "    #{:<2} {}\n", i, frame_text(symbolize::frame(r.frames[i])));
      if (r.nframes > kTextFrames) fmt::format_to(out, "    ... {} more frames (all in the JSON report)\n", r.nframes - kTextFrames);
    }
    if (sites::table_full()) fmt::format_to(out, "(the site table filled up: later new stacks are counted in site 1)\n");
  }
  fmt::format_to(out, "\n-- large blocks live {}, by site --\n", at_exit ? "at exit" : "now");
  if (d.live_partial) fmt::format_to(out, "PARTIAL     the arena lock was held; list read without it\n");
  if (d.live.empty()) fmt::format_to(out, "(none)\n");
  fmt::format_to(out, "{:>6}{:>8}{:>12}  {}\n", "site", "blocks", "bytes", "where / sizes");
  for (const LiveGroup& grp : d.live) {
    std::string where;
    if (grp.site == 0) where = "(not sampled, or allocated before start-up)";
    else if (grp.site == sites::kFullSite) where = "(site table full)";
    else if (const sites::SiteRow* r = find_row(d, grp.site); r != nullptr && r->nframes != 0)
      where = frame_text(symbolize::frame(r->frames[0]));
    else where = "?";
    fmt::format_to(out, "{:>6}{:>8}{:>12}  {}\n", grp.site == 0 ? std::string("-") : fmt::format("{}", grp.site),
                   grp.blocks, human(static_cast<double>(grp.bytes)), where);
    std::string sizes;
    std::size_t k = 0;
    for (; k < grp.sizes.size() && k < kTextSizes; ++k) sizes += (k ? ", " : "") + human(static_cast<double>(grp.sizes[k]));
    if (grp.blocks > k) sizes += fmt::format(", ... ({} more)", grp.blocks - k);
    fmt::format_to(out, "{:>28}{}\n", "", sizes);
  }
  if (d.live_missed != 0) fmt::format_to(out, "({} blocks allocated while the list was taken are not in it)\n", d.live_missed);
}

void json(fmt::memory_buffer& o, const Data& d) {
  auto out = std::back_inserter(o);
  auto r0 = [](double v) { return static_cast<std::int64_t>(v < 0 ? v - 0.5 : v + 0.5); };
  fmt::format_to(out, ",\n \"sites\": {{\"enabled\": {}, \"shown\": {}, \"sample_interval\": {}, \"count\": {}, "
                 "\"table_full\": {}, \"top\": [",
                 sites::enabled.load() ? "true" : "false", sites::enabled.load() ? sites::shown() : 0u,
                 sites::enabled.load() ? sites::interval() : 0u, d.all.size(), sites::table_full() ? "true" : "false");
  bool first = true;
  for (std::size_t k = 0; k < d.top; ++k) {
    const sites::SiteRow& r = d.all[k];
    fmt::format_to(out, "{}\n  {{\"id\": {}, \"captured\": {}, \"blocks\": {}, \"bytes\": {}, \"live_blocks\": {}, "
                   "\"live_bytes\": {}, \"peak_live_bytes\": {}, \"remaps\": {}, \"frames\": [",
                   first ? "" : ",", r.id, r.sampled, r0(r.blocks), r0(r.bytes), r0(r.live_blocks), r0(r.live_bytes),
                   r0(r.peak_bytes), r0(r.remaps));
    first = false;
    for (std::uint32_t i = 0; i < r.nframes; ++i) {
      symbolize::Symbol s = symbolize::frame(r.frames[i]);
      fmt::format_to(out, "{}{{\"module\": \"{}\", \"offset\": {}, \"function\": ", i == 0 ? "" : ", ",
                     escape(s.module), s.offset);
      if (s.function.empty()) fmt::format_to(out, "null, \"function_offset\": null}}");
      else fmt::format_to(out, "\"{}\", \"function_offset\": {}}}", escape(s.function), s.function_offset);
    }
    fmt::format_to(out, "]}}");
  }
  fmt::format_to(out, "],\n  \"live_partial\": {}, \"live_missed\": {}, \"live\": [", d.live_partial ? "true" : "false",
                 d.live_missed);
  first = true;
  for (const LiveGroup& grp : d.live) {
    fmt::format_to(out, "{}\n  {{\"site\": {}, \"blocks\": {}, \"bytes\": {}, \"sizes\": [",
                   first ? "" : ",", grp.site, grp.blocks, grp.bytes);
    first = false;
    for (std::size_t i = 0; i < grp.sizes.size(); ++i) fmt::format_to(out, "{}{}", i == 0 ? "" : ", ", grp.sizes[i]);
    fmt::format_to(out, "]}}");
  }
  fmt::format_to(out, "]}}");
}

}  // namespace lowtide::report_sites

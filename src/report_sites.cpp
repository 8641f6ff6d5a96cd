#include "report_sites.hpp"

#include <algorithm>

#include "large_space.hpp"
#include "pyframes.hpp"
#include "state.hpp"
#include "stats.hpp"
#include "symbolize.hpp"

namespace lowtide::report_sites {

namespace {

using report::Human;
using report::Shown;

constexpr std::uint32_t kTextFrames = 24;  // frames per site in the text report
constexpr std::size_t kTextSizes = 8;      // sizes per live group in the text report
// Live blocks listed at most: 4 MiB of scratch; the rest are counted as missed.
constexpr std::size_t kMaxLiveBlocks = std::size_t{1} << 18;

void frame_text(report::Out& o, const sites::Frame& f, bool demangle) {
  symbolize::Symbol s;
  symbolize::frame(f, demangle, &s);
  if (s.function[0] == '\0') o.put("{}+{:#x}", Shown(s.module), s.offset);
  else if (s.line == 0) o.put("{}+{:#x}  ({}+{:#x})", Shown(s.function), s.function_offset, Shown(s.module), s.offset);
  else
    o.put("{}+{:#x} at {}:{}  ({}+{:#x})", Shown(s.function), s.function_offset, Shown(s.file), s.line,
          Shown(s.module), s.offset);
}

const sites::SiteRow* find_row(const Data& d, std::uint32_t id) {
  for (std::size_t i = 0; i < d.nall; ++i)
    if (d.all[i].id == id) return &d.all[i];
  return nullptr;
}

}  // namespace

namespace {

void gather_sites(Data* d, report::Scratch& scratch) {
  std::size_t cap = 0;
  d->all = scratch.take<sites::SiteRow>(sites::count() + 8, &cap);
  sites::AtPeak at{};
  std::uint64_t live_now = 0;
  stats::large_live_peak(&live_now, &d->process_peak);
  d->nall = d->all != nullptr ? sites::read_sites(d->all, cap, &at) : 0;
  // No free since the last new peak (the process may be at its peak now):
  // the live figures are closer to the peak than the last copy.
  d->at_peak_now = live_now >= at.taken_at;
  d->at_peak_live = d->at_peak_now ? live_now : at.taken_at;
  if (d->at_peak_now)
    for (std::size_t i = 0; i < d->nall; ++i) d->all[i].at_peak_bytes = d->all[i].live_bytes;
  std::sort(d->all, d->all + d->nall, [](const sites::SiteRow& a, const sites::SiteRow& b) {
    return a.peak_bytes != b.peak_bytes ? a.peak_bytes > b.peak_bytes : a.id < b.id;
  });
  d->top = std::min<std::size_t>(d->nall, sites::shown());
}

// The live large blocks, by site then size. Returns how many were listed.
std::size_t walk_live(Data* d, LiveBlock* blocks, std::size_t cap, bool at_exit) {
  std::size_t n = 0;
  std::uint64_t missed = 0;
  d->live_partial = !large::space.arena.for_each_live(
      // Never the block's header: another thread may be freeing the block
      // (its live slot cleared, its pages being replaced) as we pass.
      [&](char* user, std::uint32_t first, std::uint32_t granules, std::uint32_t site) {
        if (n == cap) {
          ++missed;
          return;
        }
        std::uint64_t usable = (std::uint64_t{granules} << Arena::kGranuleShift) -
                               static_cast<std::uint64_t>(user - large::space.arena.addr(first));
        blocks[n++] = {site < sites::kSites ? site : 0, usable};
      },
      at_exit);
  d->live_missed = missed;
  std::sort(blocks, blocks + n, [](const LiveBlock& a, const LiveBlock& b) {
    return a.site != b.site ? a.site < b.site : a.usable > b.usable;
  });
  return n;
}

// Sorted blocks into one group per site, largest group first.
void group_live(Data* d, const LiveBlock* blocks, std::size_t n, report::Scratch& scratch) {
  std::size_t groups = 0;
  for (std::size_t i = 0; i < n; ++i) groups += (i == 0 || blocks[i].site != blocks[i - 1].site) ? 1 : 0;
  std::size_t gcap = 0;
  d->live = groups != 0 ? scratch.take<LiveGroup>(groups, &gcap) : nullptr;
  for (std::size_t i = 0; i < n; ++i) {
    const LiveBlock& b = blocks[i];
    if (d->nlive == 0 || d->live[d->nlive - 1].site != b.site) {
      if (d->nlive == gcap) {
        // No room for another group: these blocks go uncounted, and say so.
        d->live_missed += n - i;
        break;
      }
      d->live[d->nlive++] = LiveGroup{b.site, 0, 0, 0, {}};
    }
    LiveGroup& grp = d->live[d->nlive - 1];
    ++grp.blocks;
    grp.bytes += b.usable;
    if (grp.nsizes < kSizesShown) grp.sizes[grp.nsizes++] = b.usable;
  }
  std::sort(d->live, d->live + d->nlive, [](const LiveGroup& a, const LiveGroup& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.site < b.site;
  });
}

}  // namespace

void gather(Data* d, report::Scratch& scratch, bool at_exit) {
  if (sites::enabled.load()) gather_sites(d, scratch);
  if (!large::space.arena.ready()) return;
  std::size_t want = large::space.blocks.load(std::memory_order_relaxed) + 256;
  std::size_t cap = 0;
  LiveBlock* blocks = scratch.take<LiveBlock>(want < kMaxLiveBlocks ? want : kMaxLiveBlocks, &cap);
  std::size_t n = walk_live(d, blocks, cap, at_exit);
  group_live(d, blocks, n, scratch);
}

void text(report::Out& o, const Data& d, bool at_exit, bool demangle) {
  // Without call sites the text report stays as it was (the JSON still lists
  // live blocks, all without a site).
  if (!sites::enabled.load()) return;
  std::uint64_t t = sites::interval();
  o.put("\n-- top {} large-allocation sites (by peak live bytes; ", sites::shown());
  if (t == 0) o.put("every large block captured) --\n");
  else o.put("sampled every {} on average, figures scaled) --\n", Human(static_cast<double>(t)));
  if (d.top == 0) o.put("(no large block captured)\n");
  else o.put("(\"at the process's peak\": a site's live bytes when the large live bytes were {}; the peak: {})\n",
             Human(static_cast<double>(d.at_peak_live)), Human(static_cast<double>(d.process_peak)));
  for (std::size_t k = 0; k < d.top; ++k) {
    const sites::SiteRow& r = d.all[k];
    o.put("site {}: peak live {}, live now {} in {:.0f} blocks; allocated {:.0f} blocks, {}; "
          "moved by realloc {:.0f}; captured {}; at the process's peak {}\n",
          r.id, Human(r.peak_bytes), Human(r.live_bytes), r.live_blocks, r.blocks, Human(r.bytes), r.remaps,
          r.sampled, Human(r.at_peak_bytes));
    if (r.id == sites::kFullSite) o.put("    (stacks seen after the site table filled up)\n");
    pyframes::Frame py[pyframes::kMaxFrames];
    for (int i = 0, n = pyframes::frames(r.id, py, pyframes::kMaxFrames); i < n; ++i)
      o.put("    py  {} at {}:{}\n", Shown(py[i].name), Shown(py[i].file), py[i].line);
    for (std::uint32_t i = 0; i < r.nframes && i < kTextFrames; ++i) {
      o.put("    #{:<2} ", i);
      frame_text(o, r.frames[i], demangle);
      o.raw("\n", 1);
    }
    if (r.nframes > kTextFrames) o.put("    ... {} more frames (all in the JSON report)\n", r.nframes - kTextFrames);
  }
  if (sites::table_full()) o.put("(the site table filled up: later new stacks are counted in site 1)\n");
  o.put("\n-- large blocks live {}, by site --\n", at_exit ? "at exit" : "now");
  if (d.live_partial) o.put("PARTIAL     the arena lock was held; list read without it\n");
  if (d.nlive == 0) o.put("(none)\n");
  o.put("{:>6}{:>8}{:>12}  {}\n", "site", "blocks", "bytes", "where / sizes");
  for (std::size_t gi = 0; gi < d.nlive; ++gi) {
    const LiveGroup& grp = d.live[gi];
    if (grp.site == 0) o.put("{:>6}", "-");
    else o.put("{:>6}", grp.site);
    o.put("{:>8}{:>12}  ", grp.blocks, Human(static_cast<double>(grp.bytes)));
    if (grp.site == 0) o.put("(not sampled, or allocated before start-up)");
    else if (grp.site == sites::kFullSite) o.put("(site table full)");
    else if (pyframes::Frame py; pyframes::frames(grp.site, &py, 1) == 1)
      o.put("{} at {}:{} (Python)", Shown(py.name), Shown(py.file), py.line);
    else if (const sites::SiteRow* r = find_row(d, grp.site); r != nullptr && r->nframes != 0)
      frame_text(o, r->frames[0], demangle);
    else o.put("?");
    o.put("\n{:>28}", "");
    std::size_t k = 0;
    for (; k < grp.nsizes && k < kTextSizes; ++k) o.put("{}{}", k ? ", " : "", Human(static_cast<double>(grp.sizes[k])));
    if (grp.blocks > k) o.put(", ... ({} more)", grp.blocks - k);
    o.raw("\n", 1);
  }
  if (d.live_missed != 0) o.put("({} blocks are not in this list: allocated while it was taken, or no room)\n", d.live_missed);
}

void json(report::Out& o, const Data& d, bool demangle) {
  auto r0 = [](double v) { return static_cast<std::int64_t>(v < 0 ? v - 0.5 : v + 0.5); };
  const bool on = sites::enabled.load();
  o.put(",\n \"sites\": {{\"enabled\": {}, \"shown\": {}, \"sample_interval\": {}, \"count\": {}, "
        "\"table_full\": {}, ",
        on, on ? sites::shown() : 0u, on ? sites::interval() : 0u, d.nall, sites::table_full());
  // The sites not in the top list, summed, so that totals over all sites
  // (a flame graph's) can be had from the report.
  double o_bytes = 0, o_live = 0, o_peak = 0;
  for (std::size_t k = d.top; k < d.nall; ++k) {
    o_bytes += d.all[k].bytes;
    o_live += d.all[k].live_bytes;
    o_peak += d.all[k].at_peak_bytes;
  }
  o.put("\"heap_at_peak\": {{\"process_peak_live\": {}, \"live_then\": {}, \"source\": \"{}\"}},\n  "
        "\"not_shown\": {{\"sites\": {}, \"bytes\": {}, \"live_bytes\": {}, \"at_peak_bytes\": {}}}, \"top\": [",
        d.process_peak, d.at_peak_live, d.at_peak_now ? "now" : "copy", d.nall - d.top, r0(o_bytes), r0(o_live),
        r0(o_peak));
  for (std::size_t k = 0; k < d.top; ++k) {
    const sites::SiteRow& r = d.all[k];
    o.put("{}\n  {{\"id\": {}, \"captured\": {}, \"blocks\": {}, \"bytes\": {}, \"live_blocks\": {}, "
          "\"live_bytes\": {}, \"peak_live_bytes\": {}, \"at_peak_bytes\": {}, \"remaps\": {}, \"python\": [",
          k == 0 ? "" : ",", r.id, r.sampled, r0(r.blocks), r0(r.bytes), r0(r.live_blocks), r0(r.live_bytes),
          r0(r.peak_bytes), r0(r.at_peak_bytes), r0(r.remaps));
    pyframes::Frame py[pyframes::kMaxFrames];
    for (int i = 0, n = pyframes::frames(r.id, py, pyframes::kMaxFrames); i < n; ++i) {
      o.put("{}{{\"file\": ", i == 0 ? "" : ", ");
      o.json_string(py[i].file);
      o.put(", \"line\": {}, \"function\": ", py[i].line);
      o.json_string(py[i].name);
      o.raw("}", 1);
    }
    o.put("], \"frames\": [");
    for (std::uint32_t i = 0; i < r.nframes; ++i) {
      symbolize::Symbol s;
      symbolize::frame(r.frames[i], demangle, &s);
      o.put("{}{{\"module\": ", i == 0 ? "" : ", ");
      o.json_string(s.module);
      o.put(", \"offset\": {}, \"function\": ", s.offset);
      if (s.function[0] == '\0') {
        o.put("null, \"function_offset\": null, \"file\": null, \"line\": null}}");
      } else {
        o.json_string(s.function);
        o.put(", \"function_offset\": {}, \"file\": ", s.function_offset);
        if (s.line == 0) o.put("null, \"line\": null}}");
        else {
          o.json_string(s.file);
          o.put(", \"line\": {}}}", s.line);
        }
      }
    }
    o.put("]}}");
  }
  o.put("],\n  \"live_partial\": {}, \"live_missed\": {}, \"live\": [", d.live_partial, d.live_missed);
  for (std::size_t gi = 0; gi < d.nlive; ++gi) {
    const LiveGroup& grp = d.live[gi];
    o.put("{}\n  {{\"site\": {}, \"blocks\": {}, \"bytes\": {}, \"sizes\": [", gi == 0 ? "" : ",", grp.site,
          grp.blocks, grp.bytes);
    for (std::size_t i = 0; i < grp.nsizes; ++i) o.put("{}{}", i == 0 ? "" : ", ", grp.sizes[i]);
    o.put("]}}");
  }
  o.put("]}}");
}

}  // namespace lowtide::report_sites

// The report in the Prometheus text exposition format (version 0.0.4), for
// node_exporter's textfile collector: a report file whose name ends in
// ".prom", or LOWTIDE_STATS=prometheus (docs/report.md, "Prometheus").
// Every metric of include/lowtide/lowtide_stats.def, named from its row,
// plus a few process-level gauges; every sample labelled with the pid.
#pragma once
#include <cstdint>

#include "report_out.hpp"

namespace lowtide::report {

struct PromData {
  const std::uint64_t* fields;  // every field of lowtide_stats.def, in table order
  long pid;
  double uptime_s;
  std::uint64_t rss, peak_rss;  // VmRSS, VmHWM
  std::uint64_t limit;          // the memory limit in effect, 0 = none
  std::uint64_t dropped;        // reports for stderr dropped
  bool partial;                 // counters read without the registry lock
};

// The metric name of table field `i` into out[cap] (NUL-terminated):
// "lowtide_" + its name, "_bytes" for a BYTES field whose name does not say
// so already, "_total" for a COUNTER. False if it does not fit.
bool prom_name(unsigned i, char* out, unsigned cap);

// Writes the whole exposition; never allocates.
void format_prometheus(Out& o, const PromData& d);

}  // namespace lowtide::report

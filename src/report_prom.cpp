#include "report_prom.hpp"

#include <cstring>

#include "stats_table.hpp"

namespace lowtide::report {

namespace {

bool ends_with(const char* s, const char* tail) {
  std::size_t n = std::strlen(s), t = std::strlen(tail);
  return n >= t && std::memcmp(s + n - t, tail, t) == 0;
}

// HELP text: the exposition format escapes backslash and newline there.
void help_text(Out& o, const char* s) {
  for (const char* p = s; *p != '\0'; ++p) {
    if (*p == '\\') o.raw("\\\\", 2);
    else if (*p == '\n') o.raw("\\n", 2);
    else o.raw(p, 1);
  }
}

// One metric family with a single sample labelled with the pid.
template <typename V>
void metric(Out& o, const char* name, const char* type, const char* help, long pid, V value) {
  o.put("# HELP {} ", name);
  help_text(o, help);
  o.put("\n# TYPE {} {}\n{}{{pid=\"{}\"}} {}\n", name, type, name, pid, value);
}

}  // namespace

// Prometheus's counter is a value that only goes up (between restarts):
// the table's counters (summed over threads), and the byte-seconds the
// cache held, an integral over time (a GAUGE in the table, since it is
// read process-wide, but rate() of it is the cache's mean bytes held).
bool prom_counter(const stats::Field& f) {
  return f.kind == stats::Kind::counter || f.unit == stats::Unit::byte_seconds;
}

bool prom_name(unsigned i, char* out, unsigned cap) {
  const stats::Field& f = stats::kFields[i];
  const bool bytes = f.unit == stats::Unit::bytes && !ends_with(f.name, "_bytes");
  const bool total = prom_counter(f);
  auto r = fmt::format_to_n(out, cap - 1, "lowtide_{}{}{}", f.name, bytes ? "_bytes" : "", total ? "_total" : "");
  if (r.size >= cap) return false;
  out[r.size] = '\0';
  return true;
}

void format_prometheus(Out& o, const PromData& d) {
  o.put("# HELP lowtide_info lowtide is preloaded in this process; the version is a label\n"
        "# TYPE lowtide_info gauge\nlowtide_info{{pid=\"{}\",version=\"{}\"}} 1\n",
        d.pid, LOWTIDE_VERSION);
  // The counter table's rows, in table order.
  for (unsigned i = 0; i < stats::kFieldCount; ++i) {
    char name[96];
    if (!prom_name(i, name, sizeof name)) continue;
    const stats::Field& f = stats::kFields[i];
    metric(o, name, prom_counter(f) ? "counter" : "gauge", f.meaning, d.pid, d.fields[i]);
  }
  // What the report adds to the table: the process as the kernel sees it.
  metric(o, "lowtide_resident_bytes", "gauge", "resident set size of the process (VmRSS)", d.pid, d.rss);
  metric(o, "lowtide_peak_resident_bytes", "gauge", "highest resident set size of the process (VmHWM)", d.pid,
         d.peak_rss);
  metric(o, "lowtide_memory_limit_bytes", "gauge", "the memory limit lowtide keeps under (0: none)", d.pid, d.limit);
  metric(o, "lowtide_uptime_seconds", "gauge", "seconds since lowtide started in this process (since the fork in a "
         "forked child)", d.pid, d.uptime_s);
  metric(o, "lowtide_reports_dropped_total", "counter", "reports for stderr dropped (fd 2 closed or not writable)",
         d.pid, d.dropped);
  metric(o, "lowtide_report_partial", "gauge", "1 when the counters were read without the registry lock (at exit)",
         d.pid, d.partial ? 1 : 0);
}

}  // namespace lowtide::report

#!/usr/bin/python3
"""pandas (Debian's python3-pandas) under lowtide: bench/workloads/pandas_etl.py
at 200,000 rows a batch (DataFrame construction, string columns, CSV out
and back, groupby, merge, sort; two batches, each dropped), with and without
lowtide. The computed results (an aggregate's sum, the merged row count, a
string picked from the sorted result) must be identical, and under lowtide
the report must show the large path used. RSS before, at the peak and 1 s
after the last batch is printed for both runs, not checked: memory over
time is scripts/bench's pandas-etl (a fixed 1 s sample would make a loaded
machine's late decay a failure).

Usage: pandas_test.py <liblowtide.so> <source root>"""
import json
import os
import sys

from real_common import check, finish, with_and_without

def main():
    lib, src_root = sys.argv[1], sys.argv[2]
    script = os.path.join(src_root, "bench", "workloads", "pandas_etl.py")

    def session(runner, work):
        rc, so, se = runner.run(["/usr/bin/python3", script, "--scale", "0.1"], timeout=300, cwd=work)
        what = "pandas, " + ("under lowtide" if runner.under else "plain")
        lines = so.decode(errors="replace").strip().splitlines()
        if not check(rc == 0 and lines and lines[-1].startswith("{"),
                     f"{what}: exit {rc}: {se.decode(errors='replace')[-2000:]}"):
            return None
        d = json.loads(lines[-1])
        mib = 1 << 20
        print(f"{what}: {d['wall_s']:.2f} s, RSS before {d['rss_before'] // mib} MiB, peak {d['peak_rss'] // mib}, "
              f"1 s after the last batch {d['rss_after_decay'] // mib}; results {d['check']}", flush=True)
        return d["check"]

    plain, lt = with_and_without(lib, "pandas", session)
    check(plain is not None and plain == lt, f"pandas: results differ under lowtide: {plain} plain, {lt}")


if __name__ == "__main__":
    main()
    finish("pandas")

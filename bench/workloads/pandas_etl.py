#!/usr/bin/python3
"""pandas ETL: what a Python data job does with a result set, twice (two
batches), everything dropped after each: a DataFrame of 2,000,000 rows
(* scale) with integer, float and string (object) columns, a string column
built from two others, a quarter of it written to CSV and read back, a
groupby aggregation, a merge, a sort. Prints _common.finish's JSON line,
with "check": per batch, the rounded sum of a column of the aggregate and
the merged row count (the same under every allocator: tests/programs
pandas_test.py compares them).

usage: pandas_etl.py [--scale X]
"""
import gc
import io
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

rows = int(2_000_000 * _common.scale())
rng = np.random.default_rng(7)
rss_before, _ = _common.read_status()
t0 = time.perf_counter()
check = []
for batch in range(2):
    df = pd.DataFrame({
        "id": np.arange(rows, dtype=np.int64),
        "grp": rng.integers(0, 1000, rows),
        "x": rng.random(rows),
        "y": rng.standard_normal(rows),
        "name": pd.Series(rng.integers(0, 50000, rows)).map(lambda i: "customer-%06d" % i),
    })
    df["note"] = df["name"].str.cat(df["grp"].astype(str), sep="/")
    csv = df.head(rows // 4).to_csv(index=False)
    back = pd.read_csv(io.StringIO(csv))
    agg = df.groupby("grp").agg(n=("id", "size"), x=("x", "mean"), y=("y", "sum"))
    merged = back.merge(agg, left_on="grp", right_index=True).sort_values(["grp", "x_x"])
    check.append([round(float(agg["x"].sum()), 6), int(merged.shape[0]), str(merged["note"].iloc[rows // 8])])
    del df, csv, back, agg, merged
    gc.collect()
wall = time.perf_counter() - t0
_common.finish({"workload": "pandas-etl", "rows": rows, "check": check}, rss_before, wall)

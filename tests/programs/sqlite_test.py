#!/usr/bin/python3
"""sqlite3 (the command-line shell) on a generated database, with and
without lowtide: 300,000 rows from recursive CTEs, indexes, joins,
GROUP BY, window functions, a large sort, blobs of 256 KiB, UPDATE,
DELETE, VACUUM, integrity_check, and a full .dump. Every query's output
and the dump must be identical between the two runs.

Usage: sqlite_test.py <liblowtide.so>"""
import os
import sys

from real_common import check, check_same_steps, finish, with_and_without

SCRIPT = """
PRAGMA cache_size = -65536;
CREATE TABLE item(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, price REAL, payload BLOB);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000)
INSERT INTO item SELECT i, i % 97, 'item-' || (i * 7919 % 300007), (i % 1000) / 10.0,
  CASE WHEN i % 5000 = 0 THEN zeroblob(262144) ELSE x'' END FROM n;
CREATE TABLE grp(id INTEGER PRIMARY KEY, label TEXT);
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 96)
INSERT INTO grp SELECT i, printf('group %03d', i) FROM n;
CREATE INDEX item_grp ON item(grp, price);
CREATE INDEX item_name ON item(name);
SELECT count(*), sum(price), min(name), max(name), sum(length(payload)) FROM item;
SELECT g.label, count(*), round(avg(i.price), 4), max(i.name)
  FROM item i JOIN grp g ON g.id = i.grp GROUP BY g.label ORDER BY g.label;
SELECT id, name, price, rank() OVER (PARTITION BY grp ORDER BY price DESC, id) AS r
  FROM item WHERE grp IN (3, 50) ORDER BY r, id LIMIT 40;
SELECT name, count(*) FROM item GROUP BY name HAVING count(*) > 1 ORDER BY name LIMIT 20;
SELECT group_concat(name, ',') FROM (SELECT name FROM item ORDER BY name DESC LIMIT 2000);
UPDATE item SET price = price * 1.5, name = upper(name) WHERE id % 3 = 0;
DELETE FROM item WHERE id % 7 = 0;
SELECT count(*), sum(price), min(name) FROM item;
VACUUM;
PRAGMA integrity_check;
SELECT count(*) FROM item WHERE length(payload) > 0;
"""


def session(runner, work):
    db = os.path.join(work, "t.db")
    out = []
    rc, so, se = runner.run(["sqlite3", "-batch", "-bail", db], input=SCRIPT.encode(), timeout=600)
    check(rc == 0 and not se, f"sqlite3 script: exit {rc}: {se.decode(errors='replace')[-500:]}")
    out.append(("script", rc, so))
    rc, so, se = runner.run(["sqlite3", "-batch", db, ".dump item"], timeout=600)
    check(rc == 0, f"sqlite3 .dump: exit {rc}: {se.decode(errors='replace')[-500:]}")
    out.append((".dump", rc, so))
    return out


def main():
    lib = sys.argv[1]
    runs = dict(zip((False, True), with_and_without(lib, "sqlite3", session)))
    check_same_steps("sqlite3", runs[False], runs[True])
    script_out = runs[True][0][2].decode()
    check("ok" in script_out.split("\n"), "PRAGMA integrity_check did not say ok")
    print(f"sqlite3: script output {len(script_out)} bytes, dump {len(runs[True][1][2])} bytes, identical with and "
          f"without lowtide")
    finish("sqlite3")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What exact key accounting costs (issue 29): reconcile's per-page question "which of these keys does a row form?".

Data: a collection `exact_bench.asset` of N rows (bigint id, checksum text, kind text; templates
`studio/{checksum}.{kind}` and `thumbs/{id}.jpg`), indexes on `checksum` and `id` as an application would
have them. Pages of 1000 keys, half formed by a row and half orphans, a third of them with kind
`tar.gz` (two readings each).

- **Exact** (`blobgc.core.collections.accounted_keys`, today): every reading of a key narrows the look-up by
  the first comparable column; the key is accounted for only when a row forms it, compared in SQL.
- **Parse-back baseline** (1.4.0, kept here to measure against): one greedy reading per key, and a row with
  those column values decides. It is wrong for `tar.gz` (it counts those live keys as orphans), which is why
  it went; it is the speed to compare with.

    make up && source .blobgc/env && python bench/exact_keys.py            # 200k rows, 50 pages
    python bench/exact_keys.py --rows 20000 --pages 10                       # a quick look
"""
from __future__ import annotations

import argparse
import hashlib
import re
import statistics
import time

from bench_database import fresh_database, vacuum

import blobgc.kinds  # noqa: E402,F401 - installs the kinds (app_blob's column mode)
from blobgc.core.clients import pg_connect  # noqa: E402
from blobgc.core.collections import accounted_keys, bind, parse_collections  # noqa: E402

FILE = """
collections:
  exact_bench:
    table: exact_bench.asset
    id: id
    keys: ["studio/{checksum}.{kind}", "thumbs/{id}.jpg"]
"""
KINDS = ["png", "jpg", "tar.gz"]


def checksum(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def load(conn, rows: int) -> None:
    with conn.transaction():
        conn.execute("CREATE SCHEMA exact_bench")
        conn.execute("CREATE TABLE exact_bench.asset (id bigint PRIMARY KEY, checksum text NOT NULL, kind text NOT NULL)")
        conn.execute("INSERT INTO exact_bench.asset SELECT g, encode(sha256(g::text::bytea), 'hex'), "
                     "(ARRAY['png', 'jpg', 'tar.gz'])[1 + g %% 3] FROM generate_series(1, %s) g", (rows,))
        conn.execute("CREATE INDEX ON exact_bench.asset (checksum)")
    vacuum(conn, "exact_bench.asset")


def pages(rows: int, count: int) -> list[list[str]]:
    """`count` pages of 1000 keys: 500 that rows form, 500 that none does."""
    out = []
    for p in range(count):
        live = [p * 500 + i + 1 for i in range(500)]
        keys = [f"studio/{checksum(i)}.{KINDS[i % 3]}" if i % 2 else f"thumbs/{i}.jpg" for i in live]
        keys += [f"studio/{checksum(rows + i)}.{KINDS[i % 3]}" if i % 2 else f"thumbs/{rows + i}.jpg" for i in live]
        out.append(keys)
    return out


GREEDY = {"studio/": re.compile(r"studio/(?P<checksum>[^/]+)\.(?P<kind>[^/]+)"),
          "thumbs/": re.compile(r"thumbs/(?P<id>-?[0-9]{1,19})\.jpg")}


def parse_back(conn, keys: list[str]) -> set[str]:
    """1.4.0's check: one greedy reading per key, and a row with those values decides (one query per template)."""
    studio, thumbs = {}, {}
    for key in keys:
        if m := GREEDY["studio/"].fullmatch(key):
            studio[key] = (m["checksum"], m["kind"])
        elif m := GREEDY["thumbs/"].fullmatch(key):
            thumbs[key] = m["id"]
    found = {r[0] for r in conn.execute(
        "SELECT x.ord FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS x(c, k, ord) WHERE EXISTS "
        "(SELECT 1 FROM exact_bench.asset t WHERE t.checksum = x.c AND t.kind = x.k)",
        ([c for c, _ in studio.values()], [k for _, k in studio.values()]))}
    accounted = {key for i, key in enumerate(studio) if i + 1 in found}
    ids = {r[0] for r in conn.execute("SELECT id::text FROM exact_bench.asset WHERE id = ANY(%s::bigint[])",
                                      (list(thumbs.values()),))}
    return accounted | {key for key, i in thumbs.items() if i in ids}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--pages", type=int, default=50)
    args = parser.parse_args()
    dsn = fresh_database()
    with pg_connect(dsn) as conn:
        load(conn, args.rows)
        bound = bind(conn, parse_collections(FILE)["exact_bench"], default_bucket="blobgc")
        work = pages(args.rows, args.pages)
        timings: dict[str, list[float]] = {"exact": [], "parse-back": []}
        wrong = {"exact": 0, "parse-back": 0}
        for keys in work:
            live = set(keys[:500])
            for name, check in (("exact", lambda k: accounted_keys(conn, bound, k)[0]),
                                ("parse-back", lambda k: parse_back(conn, k))):
                start = time.perf_counter()
                accounted = check(keys)
                timings[name].append(time.perf_counter() - start)
                wrong[name] += len(live ^ accounted)
    print(f"{args.rows:,} rows, {args.pages} pages of 1000 keys (half formed by a row, a third with kind tar.gz)")
    for name, seconds in timings.items():
        median = statistics.median(seconds)
        print(f"  {name:<10} median {median * 1000:7.1f} ms/page  {1000 / median:>9,.0f} keys/s  "
              f"min {min(seconds) * 1000:.1f}  max {max(seconds) * 1000:.1f} ms  wrongly judged keys: {wrong[name]:,}")
    ratio = statistics.median(timings["exact"]) / statistics.median(timings["parse-back"])
    print(f"  exact / parse-back time: x{ratio:.2f}")


if __name__ == "__main__":
    main()

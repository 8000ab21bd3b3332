#!/usr/bin/env python3
"""Reads from a replica (issue 35): what the primary still does when the mark's and the planner's scans read a
replica (connection blobgc_postgres_replica), against a primary-only run: same data, same run.

Data: bench/scale.py's collection (`scale.asset`, N rows, 70% referenced through three tables with indexed foreign
keys, 30% not), marked once on the primary, the marks backdated past the 24-hour grace. The replica is a copy of that
database (`CREATE DATABASE ... TEMPLATE`) on the same server: an up-to-date replica, so both modes find the same
rows, and the figures compare the work alone. (On one machine the replica's reads still take the same CPU and disk;
on a real standby they are another machine's.)

For each step, primary-only then replica, one after the other on the same run:
- the steady mark (`mark_collection`, 2 workers as blobgc_mark: nothing changes): the primary's part with a replica is
  the range scans of the collection and the by-id look-ups of the rows the replica found unreferenced (the re-check);
- planning the sweep of the whole collection (`plan_collection`: the candidates read on the replica, the plan written
  on the primary either way; planning again replaces the part's plan).
Each step's wall time, and the rows and blocks it read on each database (`pg_stat_database`: tup_returned +
tup_fetched, blks_hit + blks_read, as deltas), with the ratio replica / primary-only for the primary's own reads.

    make up && source .blobgc/env && python bench/replica_reads.py             # 1M rows, 30% unused
    python bench/replica_reads.py --few-unused                                   # 1M rows, 1% unused
    python bench/replica_reads.py --rows 200000                                  # a quick look
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import bench_database
import psycopg
import scale
from bench_database import ROOT, timed, vacuum
from psycopg.conninfo import make_conninfo

from blobgc.collectors.mark import mark_collection  # noqa: E402
from blobgc.collectors.sweep import plan_collection  # noqa: E402
from blobgc.core.clients import pg_connect, require_env  # noqa: E402
from blobgc.core.collections import bind  # noqa: E402
from blobgc.core.plans import fix_plan  # noqa: E402
from blobgc.core.references import discover_references  # noqa: E402
from blobgc.core.runs import RunRef, ensure_run  # noqa: E402

PRIMARY_DB = bench_database.BENCH_DB = "blobgc_bench_primary"
REPLICA_DB = "blobgc_bench_replica"
WORKERS = 2
# --few-unused: a fourth referencing table pins the rows the other three leave unreferenced (id % 10 in 7..9), all but
# id % 100 in 7..9: 1% of the rows stay unused, as in a collection whose garbage is swept every day
PINS = """
CREATE TABLE scale.pin (id bigint PRIMARY KEY, asset_id bigint NOT NULL REFERENCES scale.asset);
INSERT INTO scale.pin SELECT g, g FROM generate_series(1, %(n)s) g WHERE g %% 10 BETWEEN 7 AND 9 AND g %% 100 > 9;
CREATE INDEX ON scale.pin (asset_id);
ANALYZE scale.pin"""
STATS = ("tup_returned", "tup_fetched", "blks_hit", "blks_read")


def admin() -> psycopg.Connection:
    return psycopg.connect(make_conninfo(require_env("BLOBGC_PG_DSN"), dbname="postgres"), autocommit=True)


def stats() -> dict[str, dict[str, int]]:
    """Each database's reads so far (after the closed backends' counters reached the shared statistics)."""
    time.sleep(1.2)
    with admin() as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute(f"SELECT datname, {', '.join(STATS)} FROM pg_stat_database WHERE datname = ANY(%s)",
                            ([PRIMARY_DB, REPLICA_DB],)).fetchall()
    return {r[0]: {"rows": r[1] + r[2], "blocks": r[3] + r[4]} for r in rows}


def measured(fn) -> dict:
    before = stats()
    seconds, value = timed(fn)
    after = stats()
    out = {"seconds": round(seconds, 2)}
    for db, name in ((PRIMARY_DB, "primary"), (REPLICA_DB, "replica")):
        for what in ("rows", "blocks"):
            out[f"{name}_{what}"] = after[db][what] - before[db][what]
    out["value"] = value
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--few-unused", action="store_true",
                        help="a fourth referencing table (scale.pin) leaves 1%% of the rows unused instead of 30%%")
    args = parser.parse_args()
    n = args.rows
    dsn = bench_database.fresh_database()
    replica_dsn = make_conninfo(dsn, dbname=REPLICA_DB)
    try:
        built = scale.build(dsn, n)
        if args.few_unused:
            with pg_connect(dsn) as conn, conn.transaction():
                for statement in PINS.split(";"):
                    conn.execute(statement, {"n": n})
        with pg_connect(dsn) as conn:
            bound = bind(conn, scale.COLLECTION, default_bucket="bench-replica")
            refs = discover_references(conn, scale.COLLECTION.table, id_column=scale.COLLECTION.id)
            first = mark_collection(conn, bound, refs, workers=WORKERS, connect=lambda: pg_connect(dsn))
            conn.execute(f"UPDATE {scale.MARKS} SET unused_since = unused_since - interval '3 days'")
            vacuum(conn, scale.COLLECTION.table, scale.MARKS)
            conn.execute("CHECKPOINT")
        with admin() as a:  # the replica: the same database, copied while nothing is connected to it
            a.execute(f'DROP DATABASE IF EXISTS "{REPLICA_DB}" WITH (FORCE)')
            a.execute(f'CREATE DATABASE "{REPLICA_DB}" TEMPLATE "{PRIMARY_DB}"')
        conn = pg_connect(dsn)
        run = RunRef("blobgc_sweep", "bench-replica-reads")
        ensure_run(conn, run)
        fix_plan(conn, run, None, 24)
        cutoff = conn.execute("SELECT now() - interval '24 hours'").fetchone()[0]

        def mark(read):
            result = mark_collection(conn, bound, refs, workers=WORKERS, connect=lambda: pg_connect(dsn), read=read)
            assert result.became_unused == result.became_used == 0, result
            return result.ranges

        def plan(read_dsn):
            with pg_connect(read_dsn) as read:
                result = plan_collection(conn, run, bound, refs, cutoff=cutoff, read=read)
            return result.rows_deleted

        results: dict = {"rows": n, "unused": first.became_unused, "build_s": round(built["build_s"], 1)}
        mark(None)  # a warm-up pass: both modes then read warm caches
        mark(lambda: pg_connect(replica_dsn))
        steps = {
            "mark": (lambda: mark(None), lambda: mark(lambda: pg_connect(replica_dsn))),
            "plan": (lambda: plan(dsn), lambda: plan(replica_dsn)),
        }
        for name, (alone, beside) in steps.items():
            primary_only, on_replica = measured(alone), measured(beside)
            assert primary_only["value"] == on_replica["value"], (primary_only, on_replica)
            results[name] = {"primary_only": primary_only, "replica": on_replica}
        conn.close()
    finally:
        with admin() as a:
            a.execute(f'DROP DATABASE IF EXISTS "{REPLICA_DB}" WITH (FORCE)')
        bench_database.drop_database()
    print(f"{n:,} rows ({results['unused']:,} unused, {len(refs.foreign_keys)} referencing tables), 2 mark workers, "
          "one plan task over the whole collection")
    print(f"{'step':<6} {'mode':<13} {'seconds':>8} {'primary rows':>14} {'primary blocks':>15} "
          f"{'replica rows':>13} {'replica blocks':>15}")
    for name in ("mark", "plan"):
        for mode in ("primary_only", "replica"):
            r = results[name][mode]
            print(f"{name:<6} {mode:<13} {r['seconds']:>8.2f} {r['primary_rows']:>14,} {r['primary_blocks']:>15,} "
                  f"{r['replica_rows']:>13,} {r['replica_blocks']:>15,}")
        p, rep = results[name]["primary_only"], results[name]["replica"]
        print(f"{name}: the primary reads x{rep['primary_rows'] / max(p['primary_rows'], 1):.3f} the rows and "
              f"x{rep['primary_blocks'] / max(p['primary_blocks'], 1):.3f} the blocks of a primary-only run; "
              f"wall time x{rep['seconds'] / p['seconds']:.2f}")
    out = ROOT / "bench" / "results" / f"replica_reads{'_few_unused' if args.few_unused else ''}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

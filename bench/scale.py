#!/usr/bin/env python3
"""Mark, plan and sweep at scale (issue 34): how the database side's cost grows from 1M to 10M (to 100M) rows.

Data, built in SQL with generate_series for each size N, in a database of its own (`blobgc_bench_scale`, dropped
at the end): a collection `scale.asset` (bigint id, a 32-character checksum, size, created_at a month ago; one key
template `assets/{checksum}/{id}.bin`, about 50 characters) and three referencing tables, each with an index on its
foreign key column, as an application has them:
- `scale.attachment` (ON DELETE RESTRICT): assets with id % 10 in 0..4;
- `scale.avatar` (ON DELETE SET NULL, nullable): id % 10 in 3..5;
- `scale.revision` (NO ACTION): id % 10 in 5..6.
So 70% of the rows are referenced (some twice) and 30% are not, spread evenly over the id space.

For each size, the engine functions blobgc's DAGs call, on the same settings (2 workers: the DAGs' default), each
timed alone, with the ratio to the previous size beside it (time ratio and row ratio: linear growth is equal
ratios):
1. the mark (`mark_collection`, into `blobgc.mark_scale_assets`): the first pass (records the 30%), then the steady
   pass (nothing changed; after a VACUUM ANALYZE, as autovacuum would have run; the best of 3, each listed);
2. planning a real run (`fix_plan`, `split_key_space`, `plan_collection` per id range in parallel), after the marks
   are backdated past the 24-hour grace;
3. executing the plan's database side (the gate, then `execute_plan_part` per part in parallel: claim, re-check,
   delete, deletion log and outbox): rows deleted and keys owed;
4. the outbox drain (`delete_owed_objects`, 2 drains side by side as the DAGs run it) on the local S3 server, for a
   sample of the deleted rows' keys (at most `--drain-sample`): the objects are loaded with the local server's bulk
   loader (`POST /_blobgc/bulk-put`), owed under a run of their own, and drained; every one must be deleted and
   counted exactly.
And the database's size after the build and after the sweep, for the projection to a billion rows.

A size is skipped, with the reason printed, when the free disk is less than three times its estimated footprint
(from the previous size's bytes per row, or 1 KB per row).

    make up && source .blobgc/env && python bench/scale.py                   # 1M and 10M rows
    python bench/scale.py --sizes 1000000,10000000,100000000                 # 100M if the disk allows
    python bench/scale.py --sizes 20000,200000 --drain-sample 5000          # a quick look
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import bench_database
import psycopg
from bench_database import ROOT, fresh_database, timed, vacuum
from psycopg.conninfo import make_conninfo

import blobgc.kinds  # noqa: E402,F401 - installs the kinds (what column_modes and the key layouts ask)
from blobgc.collectors.mark import mark_collection  # noqa: E402
from blobgc.collectors.sweep import execute_plan_part, plan_collection  # noqa: E402
from blobgc.core.clients import pg_connect, require_env, s3_client_from_env  # noqa: E402
from blobgc.core.collections import Collection, bind  # noqa: E402
from blobgc.core.gate import GateSettings, judge, record_judgement  # noqa: E402
from blobgc.core.key_space import split_key_space  # noqa: E402
from blobgc.core.outbox import delete_owed_objects, record_deletions  # noqa: E402
from blobgc.core.plans import APPROVED, PASSED, fix_plan, plan_parts, require_go  # noqa: E402
from blobgc.core.references import discover_references  # noqa: E402
from blobgc.core.runs import RunRef, ensure_run  # noqa: E402

bench_database.BENCH_DB = "blobgc_bench_scale"  # a database of its own: the other benchmarks use blobgc_bench

WORKERS = 2  # blobgc_mark's workers, blobgc_sweep's sweep_workers default, the DAGs' outbox drains
BATCH = 1000  # blobgc_sweep's batch_size default
GRACE = timedelta(hours=24)
PLAN_MAX_AGE_HOURS = 24
OBJECT_SIZE = 100  # bytes of each drained object (the drain's run logs this size, so its byte count is exact)
BULK_PUT_CHUNK = 20_000
STEADY_REPEAT = 3

COLLECTION = Collection(name="scale_assets", table="scale.asset", id="id", created_at="created_at",
                        size="size_bytes", keys=["assets/{checksum}/{id}.bin"])
BUILD = [
    ("asset", """
CREATE SCHEMA scale;
CREATE TABLE scale.asset (id bigint NOT NULL, checksum text NOT NULL, size_bytes bigint NOT NULL,
                          created_at timestamptz NOT NULL);
INSERT INTO scale.asset SELECT g, md5(g::text), 1000 + g %% 5000, now() - interval '30 days'
FROM generate_series(1, %(n)s) g;
ALTER TABLE scale.asset ADD PRIMARY KEY (id)"""),
    ("attachment", """
CREATE TABLE scale.attachment (id bigint NOT NULL, asset_id bigint NOT NULL, post_id bigint NOT NULL);
INSERT INTO scale.attachment SELECT g, g, g / 10 FROM generate_series(1, %(n)s) g WHERE g %% 10 < 5;
ALTER TABLE scale.attachment ADD PRIMARY KEY (id);
CREATE INDEX ON scale.attachment (asset_id);
ALTER TABLE scale.attachment ADD FOREIGN KEY (asset_id) REFERENCES scale.asset ON DELETE RESTRICT"""),
    ("avatar", """
CREATE TABLE scale.avatar (user_id bigint NOT NULL, asset_id bigint);
INSERT INTO scale.avatar SELECT g, g FROM generate_series(1, %(n)s) g WHERE g %% 10 BETWEEN 3 AND 5;
ALTER TABLE scale.avatar ADD PRIMARY KEY (user_id);
CREATE INDEX ON scale.avatar (asset_id);
ALTER TABLE scale.avatar ADD FOREIGN KEY (asset_id) REFERENCES scale.asset ON DELETE SET NULL"""),
    ("revision", """
CREATE TABLE scale.revision (doc_id bigint NOT NULL, rev integer NOT NULL, asset_id bigint NOT NULL);
INSERT INTO scale.revision SELECT g / 7, g %% 7, g FROM generate_series(1, %(n)s) g WHERE g %% 10 BETWEEN 5 AND 6;
ALTER TABLE scale.revision ADD PRIMARY KEY (doc_id, rev);
CREATE INDEX ON scale.revision (asset_id);
ALTER TABLE scale.revision ADD FOREIGN KEY (asset_id) REFERENCES scale.asset"""),
]
TABLES = ("scale.asset", "scale.attachment", "scale.avatar", "scale.revision")
MARKS = "blobgc.mark_scale_assets"


def in_parallel(fn, items: list) -> list:
    if len(items) == 1:
        return [fn(items[0])]
    with ThreadPoolExecutor(len(items)) as pool:
        return list(pool.map(fn, items))


def relation_bytes(conn, *names: str) -> int:
    return sum(conn.execute("SELECT pg_total_relation_size(%s::regclass)", (n,)).fetchone()[0] for n in names)


def database_bytes(conn) -> int:
    return conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]


def build(dsn: str, n: int) -> dict:
    out: dict = {}
    with pg_connect(dsn) as conn:
        conn.execute("SET maintenance_work_mem = '512MB'")
        for name, text in BUILD:
            start = time.perf_counter()
            with conn.transaction():
                for statement in text.split(";"):
                    if statement.strip():
                        conn.execute(statement, {"n": n})
            out[f"build_{name}_s"] = time.perf_counter() - start
        out["vacuum_s"], _ = timed(lambda: vacuum(conn, *TABLES))
        conn.execute("CHECKPOINT")  # the build's dirty pages written now, not by a checkpoint during the timed steps
        out["referencing_rows"] = sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES[1:])
        out["table_bytes"] = relation_bytes(conn, *TABLES)
        out["db_bytes_built"] = database_bytes(conn)
    out["build_s"] = sum(v for k, v in out.items() if k.startswith("build_"))
    return out


def steady_mark(size: dict) -> float:
    """One steady pass of the mark (nothing changed since the last): its seconds."""
    dsn, conn, bound, refs = size["dsn"], size["conn"], size["bound"], size["refs"]
    seconds, steady = timed(
        lambda: mark_collection(conn, bound, refs, workers=WORKERS, connect=lambda: pg_connect(dsn)))
    assert steady.became_unused == steady.became_used == 0, steady
    return seconds


def measure_mark(dsn: str, n: int) -> tuple[dict, dict]:
    """Build, then the mark's first pass and STEADY_REPEAT steady passes: (figures, what the later steps need)."""
    out: dict = {"rows": n, **build(dsn, n)}
    conn = pg_connect(dsn)
    bound = bind(conn, COLLECTION, default_bucket="bench-scale")
    refs = discover_references(conn, COLLECTION.table, id_column=COLLECTION.id)
    assert len(refs.foreign_keys) == 3, refs
    size = {"dsn": dsn, "conn": conn, "bound": bound, "refs": refs, "n": n}

    out["mark_first_s"], first = timed(
        lambda: mark_collection(conn, bound, refs, workers=WORKERS, connect=lambda: pg_connect(dsn)))
    assert first.became_unused == (n // 10) * 3 + max(0, n % 10 - 6), first  # ids 1..n with id % 10 in 7..9
    out["unused"], out["mark_ranges"] = first.became_unused, first.ranges
    vacuum(conn, "scale.asset", MARKS)  # as autovacuum would have, before the next mark
    conn.execute("CHECKPOINT")  # at rest: the first pass's writes flushed before the steady passes are timed
    out["mark_steady_all_s"] = [steady_mark(size) for _ in range(STEADY_REPEAT)]
    out["mark_steady_s"] = min(out["mark_steady_all_s"])  # the machine is shared: the best, each one listed
    out["mark_bytes"] = relation_bytes(conn, MARKS)
    return out, size


def measure_sweep(out: dict, size: dict, drain_sample: int) -> dict:
    """Plan, execute and drain, on the database `measure_mark` left."""
    dsn, conn, bound, refs, n = size["dsn"], size["conn"], size["bound"], size["refs"], size["n"]
    # past the grace: found unused 3 days ago (created a month ago)
    conn.execute(f"UPDATE {MARKS} SET unused_since = now() - interval '3 days'")
    vacuum(conn, MARKS)
    run = ensure_run(conn, RunRef("blobgc_sweep", f"bench-scale-{uuid.uuid4().hex[:8]}"))
    cutoff = datetime.now(UTC) - GRACE

    def plan_all() -> list:
        fix_plan(conn, run, None, PLAN_MAX_AGE_HOURS)
        shards = split_key_space(conn, WORKERS, bound.id_column)

        def plan(key_range) -> object:
            with pg_connect(dsn) as wconn:
                return plan_collection(wconn, run, bound, refs, cutoff=cutoff, batch_size=BATCH, key_range=key_range)

        return in_parallel(plan, shards)

    out["plan_s"], planned = timed(plan_all)
    out["planned_rows"] = sum(p.rows_deleted for p in planned)
    assert out["planned_rows"] == out["unused"], (out["planned_rows"], out["unused"])
    out["plan_item_bytes"] = relation_bytes(conn, "blobgc.plan_item")

    def gate_and_execute() -> list:
        judgement = judge(conn, run, GateSettings())  # a plan past the threshold is approved, as a person would
        decision = APPROVED if judgement.needs_approval else PASSED
        record_judgement(conn, run, judgement, decision, "bench" if decision == APPROVED else None)
        require_go(conn, run)

        def execute(part: dict) -> object:
            with pg_connect(dsn) as wconn:
                return execute_plan_part(wconn, run, bound, refs, cutoff=cutoff, part=part["part"])

        return in_parallel(execute, plan_parts(conn, run))

    out["execute_s"], executed = timed(gate_and_execute)
    out["rows_deleted"] = sum(e.rows_deleted for e in executed)
    out["keys_owed"] = sum(e.objects_owed for e in executed)
    assert out["rows_deleted"] == out["unused"] == out["keys_owed"], out
    assert sum(e.skipped_rereferenced for e in executed) == 0, executed
    left = conn.execute("SELECT count(*) FROM scale.asset").fetchone()[0]
    assert left == n - out["unused"], (left, n, out["unused"])
    out["log_bytes"] = relation_bytes(conn, "blobgc.deletion_log", "blobgc.outbox")
    out["plan_outcome_bytes"] = relation_bytes(conn, "blobgc.plan_outcome")
    out["db_bytes_swept"] = database_bytes(conn)

    out.update(drain(conn, dsn, run, min(drain_sample, out["keys_owed"])))
    conn.close()
    return out


def bulk_put(bucket: str, keys: list[str]) -> None:
    """Load objects of OBJECT_SIZE bytes through the local S3 server's fixture loader (no S3 API call)."""
    endpoint = require_env("BLOBGC_S3_ENDPOINT").rstrip("/")
    for i in range(0, len(keys), BULK_PUT_CHUNK):
        body = "".join(f"{k}\t{OBJECT_SIZE}\n" for k in keys[i : i + BULK_PUT_CHUNK]).encode()
        request = urllib.request.Request(f"{endpoint}/_blobgc/bulk-put?bucket={bucket}", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=600) as answer:
            stored = int(answer.read())
        assert stored == len(keys[i : i + BULK_PUT_CHUNK]), stored


def drain(conn, dsn: str, sweep_run: RunRef, sample: int) -> dict:
    """Drain `sample` of the sweep's owed keys, as objects that exist, from a run of their own."""
    keys = [row[0] for row in conn.execute(
        "SELECT k FROM blobgc.deletion_log l, unnest(l.keys) AS k WHERE l.dag_id = %s AND l.run_id = %s "
        "ORDER BY l.id LIMIT %s", (sweep_run.dag_id, sweep_run.run_id, sample))]
    conn.execute("TRUNCATE blobgc.outbox")  # the sweep's keys were never uploaded: only the sample is owed
    s3 = s3_client_from_env()
    bucket = f"bench-scale-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    out: dict = {"drain_sample": len(keys)}
    out["bulk_put_s"], _ = timed(lambda: bulk_put(bucket, keys))
    run = ensure_run(conn, RunRef("blobgc_sweep_scale_drain", f"bench-scale-drain-{uuid.uuid4().hex[:8]}"))
    for i in range(0, len(keys), BATCH):
        with conn.transaction():
            chunk = keys[i : i + BATCH]
            record_deletions(conn, run, source=COLLECTION.name, bucket=bucket, keys=chunk,
                             sizes=[OBJECT_SIZE] * len(chunk))
    out["drain_s"], drained = timed(lambda: delete_owed_objects(conn, s3, run, workers=WORKERS,
                                                                connect=lambda: pg_connect(dsn)))
    assert drained.objects_deleted == len(keys) and drained.owed_after == 0, drained
    assert drained.bytes_reclaimed == OBJECT_SIZE * len(keys), drained
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    s3.delete_bucket(Bucket=bucket)
    out["drain_per_s"] = len(keys) / out["drain_s"]
    return out


def pg_data_dir(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SHOW data_directory").fetchone()[0]


def drop_database() -> None:
    admin = make_conninfo(require_env("BLOBGC_PG_DSN"), dbname="postgres")
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{bench_database.BENCH_DB}" WITH (FORCE)')
    except psycopg.Error as error:
        print(f"could not drop database {bench_database.BENCH_DB}: {error}", file=sys.stderr)


def ratio(rows: list[dict], i: int, name: str) -> str:
    if i == 0:
        return ""
    a, b = rows[i - 1][name], rows[i][name]
    return f"x{b / a:.1f}" if a else ""


def report(results: dict) -> None:
    rows = results["sizes"]
    print(f"\n## database side at scale ({WORKERS} workers; 70% of rows referenced through 3 tables; "
          f"batches of {BATCH}); x = ratio to the previous size")
    columns = [("mark, first pass", "mark_first_s"), ("mark, steady pass", "mark_steady_s"), ("plan", "plan_s"),
               ("execute (gate + parts)", "execute_s"), ("drain", "drain_s"), ("build (not timed work)", "build_s")]
    print(f"{'step':<24}" + "".join(f"{r['rows']:>14,} rows     " for r in rows))
    for label, name in columns:
        print(f"{label:<24}" + "".join(f"{r[name]:>12.2f}s {ratio(rows, i, name):>7} " for i, r in enumerate(rows)))
    print(f"{'rows':<24}" + "".join(f"{r['rows']:>13,} {ratio(rows, i, 'rows'):>7} " for i, r in enumerate(rows)))
    for r in rows:
        print(f"\n{r['rows']:,} rows: {r['unused']:,} unused (mark: {r['mark_ranges']} ranges); mark first "
              f"{r['unused'] / r['mark_first_s']:,.0f} flips/s, steady {r['rows'] / r['mark_steady_s']:,.0f} rows/s; "
              f"plan {r['planned_rows'] / r['plan_s']:,.0f} rows/s; execute {r['rows_deleted']:,} rows deleted, "
              f"{r['keys_owed']:,} keys owed, {r['rows_deleted'] / r['execute_s']:,.0f} rows/s")
        print(f"  steady mark passes: {', '.join(f'{s:.2f}s' for s in r['mark_steady_all_s'])} (the best is shown); "
              f"again, the sizes alternating: {', '.join(f'{s:.2f}s' for s in r['mark_steady_interleaved_s'])}")
        print(f"  drain: {r['drain_sample']:,} objects in {r['drain_s']:.2f}s = {r['drain_per_s']:,.0f} objects/s "
              f"(bulk load {r['bulk_put_s']:.1f}s)")
        mib = 2**20
        print(f"  disk: tables {r['table_bytes'] / mib:,.0f} MiB ({r['table_bytes'] / r['rows']:.0f} B/row), database "
              f"built {r['db_bytes_built'] / mib:,.0f} MiB, after the sweep {r['db_bytes_swept'] / mib:,.0f} MiB; mark "
              f"table {r['mark_bytes'] / mib:,.0f} MiB, plan items {r['plan_item_bytes'] / mib:,.0f} MiB, plan "
              f"outcomes {r['plan_outcome_bytes'] / mib:,.0f} MiB, deletion log + outbox "
              f"{r['log_bytes'] / mib:,.0f} MiB")
    for skipped in results["skipped"]:
        print(f"skipped {skipped['rows']:,} rows: {skipped['reason']}")
    if len(rows) > 1:
        a, b = rows[0], rows[1]
        growth = b["rows"] / a["rows"]
        pairs = [y / x for x, y in zip(a["mark_steady_interleaved_s"], b["mark_steady_interleaved_s"], strict=True)]
        print(f"\nsteady mark, the sizes alternating (each round: {a['rows']:,} then {b['rows']:,} rows): "
              + "; ".join(f"{x:.2f}s / {y:.2f}s = x{y / x:.1f}" for x, y in
                          zip(a["mark_steady_interleaved_s"], b["mark_steady_interleaved_s"], strict=True)))
        median = statistics.median(pairs)
        best = min(b["mark_steady_interleaved_s"]) / min(a["mark_steady_interleaved_s"])
        verdict = "met" if median <= growth else "NOT met"
        print(f"the steady mark of {b['rows']:,} rows took x{median:.1f} the time of {a['rows']:,} (median of the "
              f"rounds; best against best x{best:.1f}; goal: at most x{growth:.0f}): {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,10000000", help="comma-separated collection row counts")
    parser.add_argument("--drain-sample", type=int, default=100_000,
                        help="objects drained from the outbox at each size, at most (1,000,000 at most)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "scale.json")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    drain_sample = min(args.drain_sample, 1_000_000)

    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    results: dict = {"when": datetime.now(UTC).isoformat(), "load_before": load, "cpus": os.cpu_count(),
                     "sizes": [], "skipped": []}
    print(f"load before: {load}", flush=True)
    bytes_per_row = 1024.0  # a first guess, until a size is measured
    kept: list[tuple[dict, dict]] = []  # each size's database stays until its sweep, for the interleaved passes
    try:
        for n in sizes:
            bench_database.BENCH_DB = f"blobgc_bench_scale_{n}"
            dsn = fresh_database()
            free = shutil.disk_usage(pg_data_dir(dsn)).free
            needed = 3 * bytes_per_row * n
            if needed > free:
                reason = (f"about {needed / 2**30:,.0f} GiB needed (3 x {bytes_per_row:,.0f} B/row, measured at the "
                          f"previous size), {free / 2**30:,.0f} GiB free")
                print(f"skipping {n:,} rows: {reason}", flush=True)
                results["skipped"].append({"rows": n, "reason": reason})
                drop_database()
                continue
            print(f"{n:,} rows: build, mark (first, {STEADY_REPEAT} steady) ... {datetime.now(UTC):%H:%M:%S}",
                  flush=True)
            r, size = measure_mark(dsn, n)
            kept.append((r, size))
            bytes_per_row = r["db_bytes_built"] * 1.4 / n  # the sweep's log, plan and marks add about 40%
            print(f"  mark {r['mark_first_s']:.1f}s / {r['mark_steady_s']:.1f}s", flush=True)
        # the sizes' steady passes again, alternating, so that each round sees the same load on the shared machine
        for round_ in range(STEADY_REPEAT):
            for r, size in kept:
                r.setdefault("mark_steady_interleaved_s", []).append(steady_mark(size))
            print(f"  interleaved steady round {round_ + 1}: " + ", ".join(
                f"{r['rows']:,}: {r['mark_steady_interleaved_s'][-1]:.2f}s" for r, _ in kept), flush=True)
        for r, size in kept:
            print(f"{r['rows']:,} rows: plan, execute, drain ({min(drain_sample, r['unused']):,} objects) ... "
                  f"{datetime.now(UTC):%H:%M:%S}", flush=True)
            measure_sweep(r, size, drain_sample)
            size["conn"].close()
            bench_database.BENCH_DB = f"blobgc_bench_scale_{r['rows']}"
            drop_database()
            r["load_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
            results["sizes"].append(r)
            print(f"  plan {r['plan_s']:.1f}s, execute {r['execute_s']:.1f}s, drain {r['drain_s']:.1f}s; "
                  f"{r['load_after']}", flush=True)
    finally:
        for n in sizes:
            bench_database.BENCH_DB = f"blobgc_bench_scale_{n}"
            drop_database()
    report(results)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"raw figures: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

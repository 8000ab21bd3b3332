#!/usr/bin/env python3
"""What planning before deleting costs (issue 20): `blobgc_sweep`'s plan-then-execute against the one-pass sweep.

A real `blobgc_sweep` run no longer deletes as it finds. It first fixes its plan (`fix_plan`), lists every row
it would delete into `blobgc.plan_item` (`plan_collection`: read-only, nothing locked), lets the gate judge
the plan (`judge`, `record_judgement`), and only then executes exactly that plan (`execute_plan_part`): each
item is claimed again with FOR UPDATE SKIP LOCKED, re-checked against every reference, deleted, logged and
owed, and its outcome recorded in `blobgc.plan_outcome`. That is a second pass over the garbage, plus
the plan's own rows. This benchmark measures that price, database side only, against the baseline
measured in the same run: the old one-pass sweep (claim, re-check, delete, log and owe, per batch of 1000),
which no DAG runs any more and which is kept, for this baseline only, in bench/one_pass_sweep.py.

Data, the same for both paths and loaded afresh for each measurement (a fresh database each time, so
neither path runs on the other's dead tuples): bench/mark_sweep.py's LOAD_APP, `N` blobs, 70% of them
referenced through two tables; the mark (untimed) flags the other 30% unused, and they are backdated to
3 days ago, so a 24-hour grace sweeps them all. Every deleted blob owes 2 keys to the outbox; nothing is
sent to S3 (the bucket name is irrelevant), so only the database work is timed.

For each scale, with 1 worker and with 2 workers over split id ranges (as the DAG's mapped tasks and
bench/mark_sweep.py's bench_sweep_db):

1. baseline: the one-pass sweep of every unused blob: seconds and rows/s;
2. planned: `plan_collection` (timed alone), the gate (`judge` + `record_judgement` + the checks the
   plan_parts task makes; timed alone, not in the total), then `execute_plan_part` (timed alone):
   seconds each, total = plan + execute, rows/s, and the ratio total / baseline;
   and the size of `blobgc.plan_item` (pg_total_relation_size) per 100k planned rows.

Each path is measured `--repeat` times (default 3), alternating, each time on freshly loaded data, and the
best of each is shown beside every measurement: on a 2-core machine shared with the Airflow stack, a
single measurement can be off by a factor of 1.5.

Correctness is checked, not assumed: both paths must delete the same number of rows, leave the same
blobs behind (an md5 of the remaining ids), owe the same number of keys (and the same keys), and the
plan's execution must skip nothing.

    make up && source .blobgc/env && python bench/plans.py                  # 100k and 300k blobs
    python bench/plans.py --scales 2000 --workers 1 --repeat 1               # a smoke test

The script uses a database of its own (`blobgc_bench_plans`), dropped at the end.
"""
from __future__ import annotations

import argparse
import json
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import bench_database
import psycopg
from bench_database import ROOT, fresh_database, timed, vacuum
from mark_sweep import LOAD_APP
from psycopg.conninfo import make_conninfo

from blobgc.collectors.mark import mark_in_columns  # noqa: E402
from blobgc.collectors.sweep import execute_plan_part, plan_collection  # noqa: E402
from blobgc.core.clients import pg_connect, require_env  # noqa: E402
from blobgc.kinds.blobs import bound_app_blob  # noqa: E402
from blobgc.core.key_space import split_key_space  # noqa: E402
from blobgc.core.gate import GateSettings, judge, record_judgement  # noqa: E402
from blobgc.core.plans import (  # noqa: E402
    APPROVED,
    PASSED,
    check_fresh,
    fix_plan,
    plan_of,
    plan_parts,
    require_go,
)
from blobgc.core.references import discover_references  # noqa: E402
from blobgc.core.runs import RunRef, ensure_run  # noqa: E402
from blobgc.core.key_space import IdColumn  # noqa: E402
from one_pass_sweep import one_pass_sweep  # noqa: E402

# A database of its own: the other benchmarks drop and recreate blobgc_bench.
bench_database.BENCH_DB = "blobgc_bench_plans"

BUCKET = "bench-plans"  # never called: the keys are only owed to the outbox
BATCH = 1000  # the DAG's default batch_size
GRACE = timedelta(hours=24)
PLAN_MAX_AGE_HOURS = 24

FINGERPRINT = """
SELECT (SELECT count(*) FROM app.blob),
       (SELECT md5(coalesce(string_agg(id, ',' ORDER BY id), '')) FROM app.blob),
       (SELECT count(*) FROM blobgc.outbox o, unnest(o.keys) k),
       (SELECT md5(coalesce(string_agg(k, ',' ORDER BY k), '')) FROM blobgc.outbox o, unnest(o.keys) k)
"""


def prepare(n: int) -> tuple[str, int]:
    """A fresh database with `n` blobs, 70% referenced, the other 30% marked unused 3 days ago; (dsn, unused)."""
    dsn = fresh_database()
    with pg_connect(dsn) as conn:
        with conn.transaction():
            for statement in LOAD_APP.split(";"):
                if statement.strip():
                    conn.execute(statement, {"n": n})
        vacuum(conn, "app.blob", "app.blob_attachment", "app.page_using_blob", "app.post")
        mark_in_columns(conn, bound_app_blob(""), discover_references(conn, "app.blob"))
        conn.execute("UPDATE app.blob SET updated_at = now() - interval '3 days', "
                     "created_at = now() - interval '3 days' WHERE unused")
        vacuum(conn, "app.blob")  # as autovacuum would, before the sweep
        unused = conn.execute("SELECT count(*) FROM app.blob WHERE unused").fetchone()[0]
    return dsn, unused


def in_parallel(fn, shards: list) -> list:
    if len(shards) == 1:
        return [fn(shards[0])]
    with ThreadPoolExecutor(len(shards)) as pool:
        return list(pool.map(fn, shards))


def fingerprint(conn: psycopg.Connection) -> dict:
    blobs_left, ids_md5, keys_owed, keys_md5 = conn.execute(FINGERPRINT).fetchone()
    return {"blobs_left": blobs_left, "ids_md5": ids_md5, "keys_owed": keys_owed, "keys_md5": keys_md5}


def bench_baseline(n: int, workers: int) -> dict:
    """The one-pass sweep (bench/one_pass_sweep.py) of every unused blob, `workers` id ranges side by side."""
    dsn, unused = prepare(n)
    conn = pg_connect(dsn)
    run = ensure_run(conn, RunRef("blobgc_sweep", f"bench-one-pass-{uuid.uuid4().hex[:8]}"))
    refs = discover_references(conn, "app.blob")
    cutoff = datetime.now(timezone.utc) - GRACE
    shards = split_key_space(conn, workers, IdColumn("app.blob"))

    def sweep(key_range) -> object:
        with pg_connect(dsn) as wconn:
            return one_pass_sweep(wconn, run, bound_app_blob(BUCKET), refs, cutoff=cutoff, batch_size=BATCH,
                                  key_range=key_range)

    seconds, results = timed(lambda: in_parallel(sweep, shards))
    rows = sum(r.rows_deleted for r in results)
    out = {"blobs": n, "unused": unused, "workers": len(shards), "seconds": seconds, "rows_deleted": rows,
           "objects_owed": sum(r.objects_owed for r in results), "rows_per_s": rows / seconds,
           "kept_referenced": sum(r.kept_referenced for r in results), **fingerprint(conn)}
    conn.close()
    return out


def bench_planned(n: int, workers: int) -> dict:
    """fix_plan, plan_collection per id range, the gate, execute_plan_part per planned part: a real run's steps."""
    dsn, unused = prepare(n)
    conn = pg_connect(dsn)
    run = ensure_run(conn, RunRef("blobgc_sweep", f"bench-planned-{uuid.uuid4().hex[:8]}"))
    bound = bound_app_blob(BUCKET)
    refs = discover_references(conn, "app.blob")
    cutoff = datetime.now(timezone.utc) - GRACE
    out: dict = {"blobs": n, "unused": unused}

    # plan_shards: the run fixes its own plan, then splits the id space
    out["fix_plan_s"], plan_run_id = timed(lambda: fix_plan(conn, run, None, PLAN_MAX_AGE_HOURS))
    assert plan_run_id == run.run_id
    shards = split_key_space(conn, workers, bound.id_column)
    out["workers"] = len(shards)

    def plan(key_range) -> object:  # plan_deletions, one mapped task per id range
        with pg_connect(dsn) as wconn:
            return plan_collection(wconn, run, bound, refs, cutoff=cutoff, batch_size=BATCH, key_range=key_range)

    out["plan_s"], planned = timed(lambda: in_parallel(plan, shards))
    out["planned_rows"] = sum(p.rows_deleted for p in planned)
    out["planned_objects"] = sum(p.objects_owed for p in planned)

    def gate() -> str:  # deletion_gate, then plan_parts' checks (the human decision itself is not timed)
        judgement = judge(conn, run, GateSettings())
        decision = APPROVED if judgement.needs_approval else PASSED
        record_judgement(conn, run, judgement, decision, "bench" if decision == APPROVED else None)
        require_go(conn, run)
        check_fresh(conn, run, plan_of(conn, run), PLAN_MAX_AGE_HOURS)
        return decision

    out["gate_s"], out["gate_decision"] = timed(gate)
    parts = plan_parts(conn, run)
    assert len(parts) == len(shards), parts
    out["plan_items"] = sum(p["items"] for p in parts)
    out["plan_item_bytes"] = conn.execute("SELECT pg_total_relation_size('blobgc.plan_item')").fetchone()[0]

    def execute(part: dict) -> object:  # delete_unused_blobs, one mapped task per planned part
        with pg_connect(dsn) as wconn:
            return execute_plan_part(wconn, run, bound, refs, cutoff=cutoff, part=part["part"])

    out["execute_s"], executed = timed(lambda: in_parallel(execute, parts))
    out["plan_outcome_bytes"] = conn.execute("SELECT pg_total_relation_size('blobgc.plan_outcome')").fetchone()[0]
    rows = sum(e.rows_deleted for e in executed)
    out.update({"rows_deleted": rows, "objects_owed": sum(e.objects_owed for e in executed),
                "skipped_rereferenced": sum(e.skipped_rereferenced for e in executed)})
    out["seconds"] = out["plan_s"] + out["execute_s"]
    out["rows_per_s"] = rows / out["seconds"]
    out["plan_item_bytes_per_100k_rows"] = out["plan_item_bytes"] * 100_000 / max(out["planned_rows"], 1)
    out.update(fingerprint(conn))
    conn.close()
    return out


def check_same(base: dict, planned: dict) -> None:
    """Both paths deleted the same rows and owe the same keys; the plan's execution skipped nothing."""
    for name in ("rows_deleted", "objects_owed", "blobs_left", "ids_md5", "keys_owed", "keys_md5"):
        assert base[name] == planned[name], (name, base[name], planned[name])
    assert base["rows_deleted"] == base["unused"] == planned["planned_rows"], (base, planned)
    assert planned["objects_owed"] == planned["planned_objects"] == 2 * planned["rows_deleted"], planned
    assert planned["skipped_rereferenced"] == 0 and base["kept_referenced"] == 0, (base, planned)


def drop_database() -> None:
    admin = make_conninfo(require_env("BLOBGC_PG_DSN"), dbname="postgres")
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{bench_database.BENCH_DB}" WITH (FORCE)')
    except psycopg.Error as error:
        print(f"could not drop database {bench_database.BENCH_DB}: {error}", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scales", default="100000,300000", help="comma-separated blob counts (30%% are garbage)")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts (id ranges side by side)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="measurements of each path, alternating, each on freshly loaded data; the best is shown")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "plans.json")
    args = parser.parse_args()
    scales = [int(s) for s in args.scales.split(",")]
    worker_counts = [int(w) for w in args.workers.split(",")]

    results: dict = {"when": datetime.now(timezone.utc).isoformat(), "batch_size": BATCH, "runs": []}
    try:
        for n in scales:
            for workers in worker_counts:
                bases, plans = [], []
                for attempt in range(1, args.repeat + 1):
                    print(f"{n:,} blobs, {workers} worker(s), {attempt}/{args.repeat}: one-pass sweep; plan, gate, "
                          "execute ...", flush=True)
                    bases.append(bench_baseline(n, workers))
                    plans.append(bench_planned(n, workers))
                    check_same(bases[-1], plans[-1])
                base = min(bases, key=lambda b: b["seconds"])
                planned = min(plans, key=lambda p: p["seconds"])
                results["runs"].append({"blobs": n, "workers": base["workers"], "baseline": base, "planned": planned,
                                        "ratio": planned["seconds"] / base["seconds"],
                                        "baseline_all_s": [b["seconds"] for b in bases],
                                        "planned_all_s": [p["seconds"] for p in plans]})
    finally:
        drop_database()

    print("\n## one-pass sweep (baseline) vs plan + execute, database side "
          f"(batches of {BATCH}; 2 keys owed per blob; best of {args.repeat}; ratio = (plan + execute) / baseline)")
    print(f"{'blobs':>9} {'wkrs':>4} {'deleted':>8} | {'baseline':>8} {'rows/s':>7} | {'plan':>6} {'execute':>7} "
          f"{'total':>6} {'rows/s':>7} {'ratio':>6} | {'gate':>6}")
    for r in results["runs"]:
        b, p = r["baseline"], r["planned"]
        print(f"{r['blobs']:>9,} {r['workers']:>4} {b['rows_deleted']:>8,} | {b['seconds']:>7.2f}s {b['rows_per_s']:>7,.0f} "
              f"| {p['plan_s']:>5.2f}s {p['execute_s']:>6.2f}s {p['seconds']:>5.2f}s {p['rows_per_s']:>7,.0f} "
              f"{r['ratio']:>5.2f}x | {p['gate_s']:>5.3f}s")
    if args.repeat > 1:
        print("every measurement (seconds; baseline vs plan + execute):")
        for r in results["runs"]:
            print(f"{r['blobs']:>9,} {r['workers']:>4}: " + ", ".join(f"{b:.2f} vs {p:.2f}" for b, p in
                                                                   zip(r["baseline_all_s"], r["planned_all_s"])))
    print("\n## the plan's size (blobgc.plan_item, pg_total_relation_size; one item per batch)")
    for r in results["runs"]:
        p = r["planned"]
        print(f"{r['blobs']:>9,} blobs, {r['workers']} worker(s): {p['planned_rows']:,} rows in {p['plan_items']:,} "
              f"items = {p['plan_item_bytes'] / 2**20:.1f} MiB, {p['plan_item_bytes_per_100k_rows'] / 2**20:.1f} MiB "
              f"per 100k planned rows (plan_outcome after execution: {p['plan_outcome_bytes'] / 2**20:.1f} MiB)")
    print("\nchecked: both paths deleted the same rows (md5 of the blobs left) and owe the same keys (md5); "
          "the execution skipped nothing")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"raw figures: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

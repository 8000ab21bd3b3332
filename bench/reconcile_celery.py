#!/usr/bin/env python3
"""Parallel listing on the Celery stack: `blobgc_reconcile` with Param `listing_ranges` 1, 2 and 4, through
the scheduler and two Celery workers, timed from the task instances' own start and end times.

The script switches the running local stack to CeleryExecutor (the scheduler restarts and two workers
start; PostgreSQL, Redis, S3 and the api-server stay up) and switches it back afterwards whatever
happens, as `tests/deploy/test_celery.py` does. The runs read the stack's own application database and
`blobgc` bucket (the scheduler's connections), where the script puts N objects of its own under one
shard of `blobs/` (the local S3 server's bulk loader), with rows for 99% of them, and removes both
afterwards. Every run is a dry run: nothing is deleted.

For each R the figure is keys listed and checked per second over the reconcile_shard tasks of the run
(first start to last end), and its ratio against R = 1 measured in the same run.

With `--inventory N` (issue 34) it times `source=inventory` instead: N `app.content` rows (seed 002) in the
stack's database and a Parquet report of their N - 1,000 objects and N/100 orphans, written in AWS's format into a
bucket of its own (Variable blobgc_inventory set for the run's bucket, and put back afterwards), then one dry run
per worker count in `--workers` (default 1,2): the stack's two Celery workers restarted with one task slot each
(`BLOBGC_CELERY_CONCURRENCY=1`), the second stopped for the one-worker run. The first task (plan_shards: download,
load, COPY, the part files written and put in the scratch location) is timed apart; the figure is the join's wall
time, the reconcile_shard tasks' first start to last end (every part: fetch its files, anti-join, check the
leftovers, record), and its ratio against one worker. Rows, report and scratch files are removed afterwards.

    make up; source .blobgc/env
    python bench/reconcile_celery.py                   # 200,000 objects, ranges 1,2,4
    python bench/reconcile_celery.py --objects 50000 --ranges 1,2
    python bench/reconcile_celery.py --inventory 100000000 --part-keys 5000000 --workers 1,2
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import uuid
from datetime import datetime, timezone
from pathlib import Path

from bench_database import ROOT
from paste_expiry import bulk_put

sys.path.insert(0, str(ROOT))
from blobgc.core.clients import pg_connect, require_env, s3_client_from_env  # noqa: E402
from tests.helpers import airflow_api  # noqa: E402

DAG = "blobgc_reconcile"
BUCKET = "blobgc"


def stack_up(executor: str, concurrency: int = 2) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "stack.py"), "up"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "BLOBGC_EXECUTOR": executor,
                                                       "BLOBGC_CELERY_CONCURRENCY": str(concurrency)})
    if done.returncode:
        raise SystemExit(f"could not switch the stack to {executor}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def trigger(run_id: str, conf: dict) -> str:
    body = {"dag_run_id": run_id, "conf": conf, "logical_date": datetime.now(timezone.utc).isoformat()}
    try:
        return airflow_api(f"/api/v2/dags/{DAG}/dagRuns", method="POST", body=body)["dag_run_id"]
    except urllib.error.HTTPError as error:
        raise SystemExit(f"could not trigger {run_id}: {error.read()[:500]!r}") from error


def wait(run_id: str, timeout: float = 1800) -> str:
    deadline = time.monotonic() + timeout
    while (state := airflow_api(f"/api/v2/dags/{DAG}/dagRuns/{run_id}")["state"]) not in ("success", "failed"):
        if time.monotonic() > deadline:
            raise SystemExit(f"{run_id} still {state} after {timeout:.0f}s")
        time.sleep(2)
    return state


def shard_tasks(run_id: str) -> list[dict]:
    tis = airflow_api(f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances?limit=500")["task_instances"]
    return [ti for ti in tis if ti["task_id"] == "reconcile_shard"]


def span(tasks: list[dict]) -> float:
    starts = [datetime.fromisoformat(t["start_date"]) for t in tasks]
    ends = [datetime.fromisoformat(t["end_date"]) for t in tasks]
    return (max(ends) - min(starts)).total_seconds()


def stop_worker(name: str) -> None:
    """Stop one Celery worker of the stack (its process group), as scripts/stack.py stops it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("blobgc_stack", ROOT / "scripts" / "stack.py")
    stack = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stack)
    pid = stack.read_pid(f"airflow-celery-{name}")
    if stack.pid_alive(pid):
        stack.stop_pid(f"airflow-celery-{name}", pid)
    (stack.PIDS / f"airflow-celery-{name}.pid").unlink(missing_ok=True)


def stop_scheduled_runs() -> None:
    """Mark failed the runs the scheduler made when the bench unpaused the DAG (its latest schedule), so that
    they neither hold the DAG's one active run nor list the stack's bucket."""
    for run in airflow_api(f"/api/v2/dags/{DAG}/dagRuns?state=queued&state=running&limit=50")["dag_runs"]:
        if run["run_type"] == "scheduled":
            airflow_api(f"/api/v2/dags/{DAG}/dagRuns/{run['dag_run_id']}", method="PATCH", body={"state": "failed"})


def set_variable(key: str, value: str | None) -> None:
    """Set (or delete, value None) an Airflow Variable through the REST API, as an operator would."""
    try:
        airflow_api(f"/api/v2/variables/{key}", method="DELETE")
    except urllib.error.HTTPError as error:
        if error.code != 404:
            raise
    except json.JSONDecodeError:
        pass  # 204: deleted, no body
    if value is not None:
        airflow_api("/api/v2/variables", method="POST", body={"key": key, "value": value})


def inventory_runs(n: int, part_keys: int, workers: list[int], part_threads: int = 0) -> list[dict]:
    from reconcile_inventory import write_inventory

    from blobgc.core.inventory_reports import Destination
    from blobgc.core.scratch import Location, delete_tree

    tag = uuid.uuid4().hex[:6]
    seed, orphans, missing = f"celery{tag}-", n // 100, 1000
    conn = pg_connect(require_env("BLOBGC_PG_DSN"), autocommit=True)
    s3 = s3_client_from_env()
    reports = f"bench-celery-{tag}"
    s3.create_bucket(Bucket=reports)
    previous = None
    try:
        previous = airflow_api("/api/v2/variables/blobgc_inventory")["value"]
    except urllib.error.HTTPError:
        pass
    results, was_empty = [], False
    try:
        started = time.monotonic()
        conn.execute("SET work_mem = '1GB'")
        # empty before (no content, no paste): the rows are removed afterwards with TRUNCATE, not one by one
        was_empty = conn.execute("SELECT NOT EXISTS (SELECT FROM app.content) AND NOT EXISTS (SELECT FROM app.paste)"
                                 ).fetchone()[0]
        # in key order: the primary key's index is then written leaf after leaf (in random order, 100M rows took
        # over 40 minutes here, each insert reading and dirtying a random leaf of a 7 GB index)
        conn.execute("INSERT INTO app.content (content_hash, ref_count, size_bytes) "
                     "SELECT h, 1, 100 FROM (SELECT encode(sha256((%s || g)::bytea), 'hex') AS h "
                     "FROM generate_series(1, %s) g) hashes ORDER BY h",
                     (seed, n))
        conn.execute("VACUUM ANALYZE app.content")
        print(f"setup: {n:,} content rows in {time.monotonic() - started:.0f}s", flush=True)
        started = time.monotonic()
        workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-celery-{tag}"
        workdir.mkdir()
        try:
            # data files of 10M rows: the writer scans the objects once per file (1M rows a file: 18 min at 100M)
            manifest, count = write_inventory(s3, BUCKET, Destination(reports, "inv/"), n, orphans, missing,
                                              "parquet", workdir, seed=seed, rows_per_file=10_000_000)
        finally:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
        print(f"setup: a Parquet report of {count:,} objects ({orphans:,} orphans) in "
              f"{time.monotonic() - started:.0f}s", flush=True)
        set_variable("blobgc_inventory", json.dumps({BUCKET: f"s3://{reports}/inv"}))
        stack_up("local")  # workers of one slot each: started afresh below
        stack_up("celery", concurrency=1)
        airflow_api(f"/api/v2/dags/{DAG}", method="PATCH", body={"is_paused": False})
        try:
            time.sleep(5)
            stop_scheduled_runs()  # unpaused, the DAG gets its latest scheduled run: not the bench's
            for count_workers in workers:
                stack_up("celery", concurrency=1)  # both workers up (a stopped one started again) ...
                if count_workers == 1:
                    stop_worker("worker-2")  # ... and the second stopped for a run on one
                run_id = trigger(f"bench_inventory_{count_workers}w_{tag}",
                                 {"dry_run": True, "min_age_hours": 1, "source": "inventory",
                                  "inventory_part_keys": part_keys, "inventory_part_threads": part_threads,
                                  "confirmations": 1})
                state = wait(run_id, timeout=6 * 3600)
                if state != "success":
                    raise SystemExit(f"{run_id} {state}")
                tis = airflow_api(f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances?limit=500")["task_instances"]
                first = [t for t in tis if t["task_id"] == "plan_shards"]
                parts = [t for t in tis if t["task_id"] == "reconcile_shard"]
                checked = conn.execute("SELECT sum(keys_checked), sum(orphans) FROM blobgc.reconcile_checkpoint "
                                       "WHERE run_id = %s", (run_id,)).fetchone()
                row = {"workers": count_workers, "parts": len(parts), "plan_shards_s": round(span(first), 1),
                       "join_s": round(span(parts), 1), "keys": int(checked[0] or 0), "orphans": int(checked[1] or 0),
                       "hosts": sorted({t["hostname"] for t in parts})}
                results.append(row)
                print(f"{count_workers} worker(s): plan_shards {row['plan_shards_s']:.0f}s; {len(parts)} parts on "
                      f"{', '.join(row['hosts'])} in {row['join_s']:.0f}s; {row['keys']:,} keys, "
                      f"{row['orphans']:,} orphans", flush=True)
        finally:
            airflow_api(f"/api/v2/dags/{DAG}", method="PATCH", body={"is_paused": True})
    finally:
        set_variable("blobgc_inventory", previous)
        # the bench's own rows, which no paste references: without the foreign key's check of app.paste per row
        if was_empty and not conn.execute("SELECT EXISTS (SELECT FROM app.paste)").fetchone()[0]:
            conn.execute("TRUNCATE app.content CASCADE")  # only the bench's rows were there (nor any paste now)
        else:
            conn.execute("SET session_replication_role = replica")
            conn.execute("DELETE FROM app.content c USING (SELECT encode(sha256((%s || g)::bytea), 'hex') AS h "
                         "FROM generate_series(1, %s) g) mine WHERE c.content_hash = mine.h", (seed, n))
            conn.execute("RESET session_replication_role")
        delete_tree(s3, Location("s3", reports, ""))
        s3.delete_bucket(Bucket=reports)
        stack_up("local")
    base = results[0]["join_s"] if results else 0
    for row in results:
        row["speedup"] = round(base / row["join_s"], 2) if row["join_s"] else None
        print(f"  {row['workers']} worker(s): join x{row['speedup']} of {results[0]['workers']}")
    assert len({row["orphans"] for row in results}) <= 1, "the runs found different orphans"
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=200_000)
    parser.add_argument("--ranges", default="1,2,4")
    parser.add_argument("--inventory", type=int, default=0, help="source=inventory over this many rows instead")
    parser.add_argument("--part-keys", type=int, default=5_000_000, help="--inventory: Param inventory_part_keys")
    parser.add_argument("--workers", default="1,2", help="--inventory: Celery workers (one slot each) to try")
    parser.add_argument("--part-threads", type=int, default=0,
                        help="--inventory: Param inventory_part_threads, DuckDB threads a part (0: one per core). 1 "
                             "makes each worker a one-core worker, as workers on machines of their own would be")
    args = parser.parse_args()
    if args.inventory:
        results = inventory_runs(args.inventory, args.part_keys, [int(w) for w in args.workers.split(",")],
                                 args.part_threads)
        print(json.dumps({"bench": "reconcile_celery", "inventory": args.inventory, "part_keys": args.part_keys,
                          "part_threads": args.part_threads, "results": results}))
        return 0
    ranges = [int(r) for r in args.ranges.split(",")]
    tag = uuid.uuid4().hex[:6]
    # one shard, blobs/z: ids z<12 hex><tag><n>, so the keys' next characters spread over 0-9a-f
    ids = [f"z{hashlib.sha1(f'{tag}{i}'.encode()).hexdigest()[:12]}{tag}" for i in range(args.objects)]
    keys = [f"blobs/{i}/raw" for i in ids]
    conn = pg_connect(require_env("BLOBGC_PG_DSN"))
    s3 = s3_client_from_env()
    stack_up("celery")
    results = []
    try:
        with conn.transaction():
            conn.execute("INSERT INTO app.blob (id, size_bytes) SELECT unnest(%s::text[]), 100",
                         ([i for n, i in enumerate(ids) if n % 100],))
        for start in range(0, len(keys), 20_000):
            bulk_put(BUCKET, [(k, 100) for k in keys[start:start + 20_000]], age_seconds=7 * 86400)
        airflow_api(f"/api/v2/dags/{DAG}", method="PATCH", body={"is_paused": False})
        try:
            for r in ranges:
                run_id = trigger(f"bench_ranges_{r}_{tag}", {"dry_run": True, "min_age_hours": 1, "prefixes": ["blobs/z"],
                                                             "listing_ranges": r})
                state = wait(run_id)
                tasks = [t for t in shard_tasks(run_id) if t["rendered_map_index"].startswith("blobs/z")]
                if state != "success":
                    raise SystemExit(f"{run_id} {state}")
                seconds = span(tasks)
                workers = sorted({t["hostname"] for t in tasks})
                checked = conn.execute("SELECT sum(keys_checked), sum(orphans) FROM blobgc.reconcile_checkpoint "
                                       "WHERE run_id = %s AND shard LIKE 'blobs/z%%'", (run_id,)).fetchone()
                results.append({"ranges": r, "tasks": len(tasks), "seconds": round(seconds, 1),
                                "keys": int(checked[0]), "orphans": int(checked[1]),
                                "keys_per_s": round(int(checked[0]) / seconds), "workers": workers})
                print(f"listing_ranges={r}: {len(tasks)} task(s) on {', '.join(workers)}: {int(checked[0]):,} keys "
                      f"in {seconds:.1f}s = {int(checked[0]) / seconds:,.0f} keys/s; {int(checked[1]):,} orphans",
                      flush=True)
        finally:
            airflow_api(f"/api/v2/dags/{DAG}", method="PATCH", body={"is_paused": True})
    finally:
        for start in range(0, len(keys), 1000):
            s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys[start:start + 1000]],
                                                     "Quiet": True})
        with conn.transaction():
            conn.execute("DELETE FROM app.blob WHERE id = ANY(%s)", (ids,))
        stack_up("local")
    base = results[0]["keys_per_s"] if results else 0
    for row in results:
        row["speedup"] = round(row["keys_per_s"] / base, 2) if base else None
        print(f"  R={row['ranges']}: x{row['speedup']} of R={results[0]['ranges']}")
    assert len({row["orphans"] for row in results}) <= 1, "the runs found different orphans"
    print(json.dumps({"bench": "reconcile_celery", "objects": args.objects, "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

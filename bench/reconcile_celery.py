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

    make up; source .blobgc/env
    python bench/reconcile_celery.py                   # 200,000 objects, ranges 1,2,4
    python bench/reconcile_celery.py --objects 50000 --ranges 1,2
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

from bench_database import ROOT
from paste_expiry import bulk_put

sys.path.insert(0, str(ROOT))
from blobgc.core.clients import pg_connect, require_env, s3_client_from_env  # noqa: E402
from tests.helpers import airflow_api  # noqa: E402

DAG = "blobgc_reconcile"
BUCKET = "blobgc"


def stack_up(executor: str) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "stack.py"), "up"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "BLOBGC_EXECUTOR": executor})
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=200_000)
    parser.add_argument("--ranges", default="1,2,4")
    args = parser.parse_args()
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

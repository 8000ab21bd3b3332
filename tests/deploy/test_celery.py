"""`make up EXECUTOR=celery`: the same stack on CeleryExecutor, with two local workers that share the work.

The test switches the running stack to Celery (the scheduler restarts and two workers start; the
databases, Redis, S3 and the api-server stay up), runs a dry-run `blobgc_reconcile` through the
scheduler, and switches back to LocalExecutor whatever happens. The run reads the stack's own
application database and `blobgc` bucket, where the test puts orphan objects of its own under
12 shards and removes them afterwards; a dry run deletes nothing.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import uuid
from datetime import datetime, timezone

import pytest

from blobgc.core.clients import s3_client_from_env
from tests.helpers import ROOT, airflow_api, dag_lock


DAG = "blobgc_reconcile"


BUCKET = "blobgc"


SHARDS = "0123456789ab"


def stack_up(executor: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "stack.py"), "up"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "BLOBGC_EXECUTOR": executor})


def trigger_dry_reconcile(tag: str, prefixes: list[str]) -> str:
    """A dry-run reconcile over `prefixes`, pinned where possible to the tick the scheduler would run next,
    so that unpausing the DAG adds no scheduled run of its own."""
    body = {"dag_run_id": f"celery_test_{tag}", "conf": {"dry_run": True, "min_age_hours": 1, "prefixes": prefixes}}
    now = datetime.now(timezone.utc)
    upcoming = airflow_api(f"/api/v2/dags/{DAG}").get("next_dagrun_logical_date")
    for logical_date in ([upcoming] if upcoming and upcoming < now.isoformat() else []) + [now.isoformat()]:
        try:
            return airflow_api(f"/api/v2/dags/{DAG}/dagRuns", method="POST",
                               body={**body, "logical_date": logical_date})["dag_run_id"]
        except urllib.error.HTTPError as error:
            if error.code != 409:  # a run at that logical date exists already: take now instead
                raise
    raise AssertionError("could not trigger the reconcile run")


@pytest.fixture(autouse=True)
def reconcile_to_this_test():
    """The DAG is unpaused for the scheduler here: no other test worker runs it meanwhile."""
    with dag_lock(DAG):
        yield


def test_celery_executor_runs_reconcile_shards_on_both_workers(stack):
    s3 = s3_client_from_env()
    tag = uuid.uuid4().hex[:8]
    keys = [f"blobs/{c}{tag}/raw" for c in SHARDS]
    switched = stack_up("celery")
    try:
        assert switched.returncode == 0, switched.stdout[-3000:] + switched.stderr[-3000:]
        assert "starting airflow celery worker-1" in switched.stdout
        assert "starting airflow celery worker-2" in switched.stdout
        for key in keys:
            s3.put_object(Bucket=BUCKET, Key=key, Body=b"orphan")
        run_id = trigger_dry_reconcile(tag, [f"blobs/{c}{tag}" for c in SHARDS])
        airflow_api(f"/api/v2/dags/{DAG}", method="PATCH", body={"is_paused": False})
        try:
            deadline = time.monotonic() + 420
            while (state := airflow_api(f"/api/v2/dags/{DAG}/dagRuns/{run_id}")["state"]) not in ("success", "failed"):
                assert time.monotonic() < deadline, f"reconcile run still {state}"
                time.sleep(3)
        finally:
            airflow_api(f"/api/v2/dags/{DAG}", method="PATCH", body={"is_paused": True})
        assert state == "success"

        tis = airflow_api(f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances?limit=200")["task_instances"]
        shards = [ti for ti in tis if ti["task_id"] == "reconcile_shard"]
        assert len(shards) == len(SHARDS), [ti["rendered_map_index"] for ti in shards]
        assert all(ti["state"] == "success" for ti in shards)
        by_worker: dict[str, int] = {}
        for ti in shards:
            by_worker[ti["hostname"]] = by_worker.get(ti["hostname"], 0) + 1
        assert set(by_worker) == {"blobgc-worker-1", "blobgc-worker-2"}, by_worker
        assert {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="blobs/").get("Contents", [])} >= set(keys)
    finally:
        s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True})
        back = stack_up("local")
        assert back.returncode == 0, back.stdout[-3000:] + back.stderr[-3000:]
        assert "switching Airflow from celery to local" in back.stdout

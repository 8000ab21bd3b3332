"""The runbook (docs/operations.md), step by step, against the running stack's scheduler.

Runs the scheduler executes read the stack's own application database and the `blobgc` bucket (the
scheduler's connections cannot point at the tests' database), so this test works there with data of
its own: pastes with unique short codes that expired before two hours of 2026 (after the DAG's start_date, or
its runs would have no tasks, and long past), on which its two failing runs are due. The hours are the first
two after every run the stack already has in that window: fixed on a fresh stack, new on a kept one. The S3
outage is the local S3 server's drill: the `blobgc` bucket answers 503 for the outage's length, as S3 does
when it is down.
"""
from __future__ import annotations

import json
import urllib.parse
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from blobgc.core.clients import s3_client_from_env
from blobgc.kinds.pastes.layouts import content_key
from demo_app.pastes import create_paste
from tests.helpers import airflow, airflow_api, cached_keys, dag_lock, ended_runs, run_dag, s3_outage


DAG = "blobgc_paste_expiry"


BUCKET = "blobgc"
# the window the test's runs are dated in: after the DAG's start_date (2026-01-01), and months in the past
WINDOW = (datetime(2026, 1, 2, tzinfo=timezone.utc), datetime(2026, 10, 1, tzinfo=timezone.utc))


def next_free_hour(app_conn) -> datetime:
    """The first hour of the window after every run of the DAG dated in it, in Airflow or in blobgc.run (runs of
    this test's earlier sessions on a kept stack): the same hour on a fresh stack, and never a run's date twice."""
    query = urllib.parse.urlencode({"logical_date_gte": WINDOW[0].isoformat(), "logical_date_lte": WINDOW[1].isoformat(),
                                    "order_by": "-logical_date", "limit": 1})
    runs = airflow_api(f"/api/v2/dags/{DAG}/dagRuns?{query}")["dag_runs"]
    dated = [datetime.fromisoformat(runs[0]["logical_date"])] if runs else []
    dated += [r[0] for r in app_conn.execute("SELECT max(reference_time) FROM blobgc.run WHERE dag_id = %s "
                                             "AND reference_time BETWEEN %s AND %s", (DAG, *WINDOW)) if r[0]]
    latest = max(dated, default=None)
    hour = WINDOW[0] if latest is None else latest.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    assert hour + timedelta(hours=1) < WINDOW[1], f"the window's hours are used up by earlier runs (up to {latest})"
    return hour


def wait_for_runs(run_ids: list[str], timeout: float = 420) -> dict[str, str]:
    """The final states of these runs of the paste expiry DAG, as the scheduler leaves them."""
    return {run_id: state for (_, run_id), state in ended_runs([(DAG, r) for r in run_ids], timeout).items()}


def tries(run_id: str) -> dict[str, int]:
    tis = airflow_api(f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances?limit=100")["task_instances"]
    return {f"{ti['task_id']}[{ti['map_index']}]": ti["try_number"] for ti in tis}


def paused(state: bool) -> bool:
    """Pause or unpause the DAG as the UI's toggle does; whether it is paused now."""
    return airflow_api(f"/api/v2/dags/{DAG}", method="PATCH", body={"is_paused": state})["is_paused"]


@pytest.fixture(autouse=True)
def paste_expiry_to_this_test():
    """The DAG is unpaused for the scheduler here: no other test worker runs it meanwhile."""
    with dag_lock(DAG):
        yield


@pytest.fixture
def app_conn(stack):
    with psycopg.connect(stack["BLOBGC_PG_DSN"], autocommit=True) as conn:
        yield conn


def test_failed_paste_expiry_runs_are_cleaned_by_task_rerun_and_backfill(stack, app_conn, redis):
    s3 = s3_client_from_env()
    first = next_free_hour(app_conn)
    second = first + timedelta(hours=1)  # two hourly runs of the DAG's cron
    tag = f"op{uuid.uuid4().hex[:6]}"  # short codes of this test's own (a failed earlier session leaves its pastes)
    pastes = [create_paste(app_conn, s3, redis, bucket=BUCKET, content=f"{tag} early {i}".encode(),
                           expires_at=first - timedelta(days=1), short_code=f"{tag}e{i}") for i in range(6)]
    pastes += [create_paste(app_conn, s3, redis, bucket=BUCKET, content=f"{tag} late {i}".encode(),
                            expires_at=first + timedelta(minutes=30), short_code=f"{tag}l{i}") for i in range(4)]
    keys = {content_key(p.content_hash) for p in pastes}
    # one retry, 1 s later: the runs give up on S3 quickly (the scheduler's re-runs keep the stack's settings)
    env = {"AIRFLOW_CONN_BLOBGC_POSTGRES": stack["AIRFLOW_CONN_BLOBGC_POSTGRES"], "BLOBGC_RETRY_DELAY_SECONDS": "1",
           "BLOBGC_TASK_RETRIES": "1"}

    # S3 is down while both hourly runs happen: each expires its pastes in the database, then fails on S3.
    s3_outage(BUCKET, True)
    try:
        # one after the other (as `airflow dags test DAG <date>` makes them, in this process: run_dag): run at once,
        # the second run's drain would skip the rows the first one holds (SKIP LOCKED) and end green with nothing tried
        failed = [run_dag(DAG, logical_date=when, env_extra=env) for when in (first, second)]
    finally:
        s3_outage(BUCKET, False)
    for result in failed:
        assert result.returncode != 0 and "ServiceUnavailable" in result.output, result.output[-3000:]
    assert app_conn.execute("SELECT count(*) FROM app.paste WHERE short_code LIKE %s", (f"{tag}%",)).fetchone()[0] == 0
    owed = {r[0] for r in app_conn.execute("SELECT key FROM blobgc.deleted_object WHERE owed AND key = ANY(%s)",
                                           (sorted(keys),))}
    assert owed == keys  # nothing forgotten: every object is still owed
    run_ids = [r[0] for r in app_conn.execute(
        "SELECT run_id FROM blobgc.run WHERE dag_id = %s AND reference_time = ANY(%s) ORDER BY reference_time",
        (DAG, [first, second]))]
    assert len(run_ids) == 2, run_ids
    assert wait_for_runs(run_ids, timeout=0) == {r: "failed" for r in run_ids}
    before = tries(run_ids[0])

    assert paused(False) is False
    try:
        # Runbook step 1: re-run the failed task of the first run, and only it (its downstream purge and report follow).
        cleared = airflow("tasks", "clear", DAG, "--task-regex", "delete_owed_objects", "--downstream",
                          "--only-failed", "--start-date", first.isoformat(), "--end-date", first.isoformat(), "--yes")
        assert cleared.returncode == 0, cleared.stdout[-2000:] + cleared.stderr[-2000:]
        assert wait_for_runs(run_ids[:1])[run_ids[0]] == "success"
        after = tries(run_ids[0])
        rerun = {task for task, n in after.items() if n != before[task]}
        assert rerun == {"delete_owed_objects[-1]", "purge_quarantine[-1]", "report[-1]"}, (before, after)

        # Runbook step 2: backfill the range, reprocessing only the runs that failed.
        backfill = airflow("backfill", "create", "--dag-id", DAG, "--from-date", first.isoformat(),
                           "--to-date", second.isoformat(), "--reprocess-behavior", "failed")
        assert backfill.returncode == 0, backfill.stdout[-2000:] + backfill.stderr[-2000:]
        assert wait_for_runs(run_ids) == {r: "success" for r in run_ids}
    finally:
        paused(True)

    assert tries(run_ids[0]) == after  # the backfill left the run that had succeeded alone
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="pastes/").get("Contents", [])}
    assert not keys & listed
    assert not {k for k in cached_keys(redis, tag)}
    still_owed = app_conn.execute("SELECT count(*) FROM blobgc.deleted_object WHERE owed AND key = ANY(%s)",
                                  (sorted(keys),)).fetchone()[0]
    assert still_owed == 0
    finished = app_conn.execute("SELECT count(*) FROM blobgc.run WHERE dag_id = %s AND run_id = ANY(%s) "
                                "AND finished_at IS NOT NULL", (DAG, run_ids)).fetchone()[0]
    assert finished == 2
    assert json.dumps(run_ids)

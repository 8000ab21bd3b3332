"""`make up EXECUTOR=celery`: the same stack on CeleryExecutor, with two local workers that share the work.

The module switches the running stack to Celery once (the scheduler restarts and two workers start; the databases,
Redis, S3 and the api-server stay up), runs its DAG runs through the scheduler, and switches back to LocalExecutor
whatever happens. The workers get, through their environment, what the test needs: one task slot each (two tasks
running at once are on both workers), Variable blobgc_rate_limits capping the stack's `blobgc` bucket, and a
Variable blobgc_gate that asks a person about any run past a handful of objects. The runs read the stack's own
application database and `blobgc` bucket, where the test puts rows and objects of its own (under prefixes of its
own, and rows no run with a default grace would ever choose) and removes whatever is left of them afterwards; the
runs' own records (their receipts, figures and gate decisions) stay, as any run's do.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import psycopg
import pytest

from blobgc.core.clients import redis_from_env, s3_client_from_env
from blobgc.core.rate import REDIS_PREFIX
from blobgc.core.settings import DEFAULT_IMAGE_SIZES
from blobgc.kinds.images.layouts import image_keys
from tests.helpers import ROOT, airflow_api, bulk_put, ended_runs, locks_at_once


RECONCILE, IMAGES = "blobgc_reconcile", "blobgc_image_cleanup"


BUCKET = "blobgc"


SHARDS = "0123456789ab"


RATE = 150  # deletes a second on bucket blobgc for the Celery workers' drains, all together


CELERY_ENV = {
    "BLOBGC_CELERY_CONCURRENCY": "1",  # a task slot each: two drains running at once run on both workers
    "AIRFLOW_VAR_BLOBGC_RATE_LIMITS": json.dumps({BUCKET: RATE}),
    # any run past 5 objects waits for a person, whatever the stack's history: the test lets both through at once
    "AIRFLOW_VAR_BLOBGC_GATE": json.dumps({"ratio": 0.001, "min_objects": 5, "min_bytes": 10**12, "history": 1}),
    "AIRFLOW_VAR_BLOBGC_IMAGE_SIZES": json.dumps(DEFAULT_IMAGE_SIZES),  # the files the test writes for each photo
}


def stack_up(executor: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "stack.py"), "up"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "BLOBGC_EXECUTOR": executor, **extra})


@pytest.fixture(scope="module")
def celery(stack) -> Iterator[None]:
    switched = stack_up("celery", **CELERY_ENV)
    try:
        assert switched.returncode == 0, switched.stdout[-3000:] + switched.stderr[-3000:]
        assert "starting airflow celery worker-1" in switched.stdout
        assert "starting airflow celery worker-2" in switched.stdout
        yield
    finally:
        back = stack_up("local")
        assert back.returncode == 0, back.stdout[-3000:] + back.stderr[-3000:]
        assert "switching Airflow from celery to local" in back.stdout


def upcoming_tick(dag_id: str) -> datetime | None:
    """The past tick the scheduler would run next, if any: a run pinned to it adds no scheduled run of its own
    when the DAG is unpaused, and its reference time (cut-offs, ages) is that tick."""
    upcoming = airflow_api(f"/api/v2/dags/{dag_id}").get("next_dagrun_logical_date")
    tick = datetime.fromisoformat(upcoming) if upcoming else None
    return tick if tick is not None and tick < datetime.now(timezone.utc) else None


def trigger(dag_id: str, run_id: str, conf: dict) -> str:
    """A run of `dag_id`, pinned where possible to its `upcoming_tick`, else now."""
    body = {"dag_run_id": run_id, "conf": conf}
    tick = upcoming_tick(dag_id)
    for logical_date in ([tick] if tick else []) + [datetime.now(timezone.utc)]:
        try:
            return airflow_api(f"/api/v2/dags/{dag_id}/dagRuns", method="POST",
                               body={**body, "logical_date": logical_date.isoformat()})["dag_run_id"]
        except urllib.error.HTTPError as error:
            if error.code != 409:  # a run at that logical date exists already: take now instead
                raise
    raise AssertionError(f"could not trigger a run of {dag_id}")


@contextlib.contextmanager
def unpaused(*dag_ids: str) -> Iterator[None]:
    """The DAGs unpaused for the scheduler (their runs triggered first), paused again whatever happens. Asset
    events queued for a DAG earlier would start a run of their own: dropped first."""
    try:
        for dag_id in dag_ids:
            with contextlib.suppress(urllib.error.HTTPError):  # 404: none queued
                airflow_api(f"/api/v2/dags/{dag_id}/assets/queuedEvents", method="DELETE")
            airflow_api(f"/api/v2/dags/{dag_id}", method="PATCH", body={"is_paused": False})
        yield
    finally:
        errors = []
        for dag_id in dag_ids:  # each, whatever befell the others
            try:
                airflow_api(f"/api/v2/dags/{dag_id}", method="PATCH", body={"is_paused": True})
            except Exception as error:  # noqa: BLE001 - raised once every DAG was tried
                errors.append(error)
        if errors:
            raise errors[0]


def run_state(dag_id: str, run_id: str) -> str:
    return airflow_api(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]


def task_instances(dag_id: str, run_id: str) -> list[dict]:
    return airflow_api(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=200")["task_instances"]


def gates_waiting(runs: dict[str, str], seconds: float) -> None:
    """Wait until the gate of each run asks a person (its Human-in-the-loop detail exists)."""
    deadline = time.monotonic() + seconds
    while True:
        asking = set()
        for dag_id, run_id in runs.items():
            with contextlib.suppress(urllib.error.HTTPError):  # 404: not asked yet
                airflow_api(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/gate/-1/hitlDetails")
                asking.add(dag_id)
        if asking == set(runs):
            return
        states = {dag_id: run_state(dag_id, run_id) for dag_id, run_id in runs.items()}
        ended = {dag_id for dag_id, state in states.items() if state in ("success", "failed")}
        assert not ended and time.monotonic() < deadline, f"runs ended or still going without asking: {states}"
        time.sleep(2)


def approve(dag_id: str, run_id: str) -> None:
    airflow_api(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/gate/-1/hitlDetails", method="PATCH",
                body={"chosen_options": ["Approve"]})


def task_running(dag_id: str, run_id: str, task_id: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while (state := airflow_api(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")["state"]) \
            != "running":
        assert state in (None, "scheduled", "queued") and time.monotonic() < deadline, f"{task_id} is {state}"
        time.sleep(0.5)


class Counting(threading.Thread):
    """What is left under each group of prefixes of the bucket (each prefix listed side by side), every `every`
    seconds until stopped: (time, counts), the time the middle of the listing's."""

    def __init__(self, groups: list[list[str]], every: float = 0.25):
        super().__init__(daemon=True)
        self.groups, self.every = groups, every
        self.seen: list[tuple[float, tuple[int, ...]]] = []
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            s3 = s3_client_from_env()
            pages = s3.get_paginator("list_objects_v2")

            def count(prefix: str) -> int:
                return sum(page.get("KeyCount", 0) for page in pages.paginate(Bucket=BUCKET, Prefix=prefix))

            with ThreadPoolExecutor(8) as pool:
                while not self.stopping.is_set():
                    asked = time.monotonic()
                    counts = tuple(sum(pool.map(count, prefixes)) for prefixes in self.groups)
                    self.seen.append(((asked + time.monotonic()) / 2, counts))
                    self.stopping.wait(self.every)
        except BaseException as error:  # noqa: BLE001 - raised again by `stop`
            self.error = error

    def stop(self) -> list[tuple[float, tuple[int, ...]]]:
        self.stopping.set()
        self.join()
        if self.error is not None:
            raise self.error
        return self.seen


def draining(seen: list[tuple[float, tuple[int, ...]]], which: int) -> tuple[float, float]:
    """When group `which` was seen going down: from the last count before its first drop to its first count at
    its lowest."""
    counts = [c[which] for _, c in seen]
    first = next(i for i, n in enumerate(counts) if n < counts[0])
    last = counts.index(min(counts))
    return seen[first - 1][0], seen[last][0]


def slope(points: list[tuple[float, float]]) -> float:
    """The least-squares slope of (time, count) points: objects a second, whatever the calls' grain."""
    n = len(points)
    mean_t, mean_c = sum(t for t, _ in points) / n, sum(c for _, c in points) / n
    return (sum((t - mean_t) * (c - mean_c) for t, c in points)
            / sum((t - mean_t) ** 2 for t, _ in points))


def test_celery_workers_share_a_reconciles_shards_and_hold_a_buckets_delete_rate_cap_across_two_drains(
        celery, stack):
    """A reconcile of 12 shards and an image cleanup, through the scheduler on CeleryExecutor: the shards run on
    both workers, every shard succeeds, and the two runs' drains, one on each worker and each in its own process,
    delete from the same bucket side by side. Under Variable blobgc_rate_limits {"blobgc": 150} the bucket sees at
    most 150 deletes a second (+10%) while both drain, measured from outside by listing what is left every quarter
    second: the slope of what is left, over at least 6 s in which each drain deleted its share (uncapped, one
    drain alone deletes thousands a second on this server: docs/benchmarks.md)."""
    s3 = s3_client_from_env()
    tag = uuid.uuid4().hex[:8]
    # the cleanup's: photos bound to no offer, untouched for 400 years, 4 files each (the default sizes)
    photos = [f"zz{tag}{i:04d}" for i in range(1000)]
    # the reconcile's, 100 under each of 12 shards: no row forms them, 2 hours older than the run's reference time
    # (its logical date: the DAG's last weekly tick, where `trigger` pins it)
    shards = [f"blobs/{c}o{tag}" for c in SHARDS]
    orphans = [f"{shard}{i:03d}/raw" for shard in shards for i in range(100)]
    files = [key for image_id in photos for key in image_keys(image_id, ("orig", "big", "medium", "thumb"))]
    dsn = stack["BLOBGC_PG_DSN"]  # the stack's application database, which the workers' runs read (not the tests')
    counting = Counting([[f"images/zz/zz{tag}"], shards])
    reference = upcoming_tick(RECONCILE) or datetime.now(timezone.utc)
    orphans_age = int((datetime.now(timezone.utc) - reference).total_seconds()) + 7200
    try:
        bulk_put(BUCKET, [(key, 100) for key in files] + [(key, 100) for key in orphans], age_seconds=orphans_age)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO app.image (image_id, last_update) "
                         "SELECT id, now() - interval '400 years' FROM unnest(%s::text[]) id", (photos,))
        redis = redis_from_env()
        redis.delete(REDIS_PREFIX + BUCKET)  # the cap's state, made afresh by the drains
        with locks_at_once([IMAGES, RECONCILE]):  # no other worker runs them while they are unpaused here
            runs = {
                # a grace of 329 years: of the stack's photos, only this test's are that long untouched
                IMAGES: trigger(IMAGES, f"celery_test_{tag}", {"grace_days": 120_000}),
                RECONCILE: trigger(RECONCILE, f"celery_test_{tag}", {
                    "min_age_hours": 1, "confirmations": 1, "prefixes": shards}),
            }
            try:
                with unpaused(IMAGES, RECONCILE):
                    gates_waiting(runs, 300)
                    counting.start()
                    # a person lets the cleanup through, and the reconcile once the cleanup's drain has begun: the
                    # cleanup deletes its rows before it drains, the reconcile only hands its plan to the outbox, so
                    # let through together the reconcile's drain would start first, and end before the other's began
                    approve(IMAGES, runs[IMAGES])
                    task_running(IMAGES, runs[IMAGES], "delete_owed_objects", 180)
                    approve(RECONCILE, runs[RECONCILE])
                    states = {dag_id: state for (dag_id, _), state in ended_runs(list(runs.items()), 300, 2).items()}
            finally:
                for dag_id, run_id in runs.items():  # a run left going would hold the DAG's next runs back
                    if run_state(dag_id, run_id) not in ("success", "failed"):
                        airflow_api(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", method="PATCH",
                                    body={"state": "failed"})
        seen = counting.stop()
        assert states == {IMAGES: "success", RECONCILE: "success"}, states
        assert seen[-1][1] == (0, 0)  # every object owed was deleted
        assert redis.exists(REDIS_PREFIX + BUCKET)  # the drains took their tokens from the cap shared in Redis

        listed = [ti for ti in task_instances(RECONCILE, runs[RECONCILE]) if ti["task_id"] == "reconcile_shard"]
        assert len(listed) == len(SHARDS), [ti["rendered_map_index"] for ti in listed]
        assert all(ti["state"] == "success" for ti in listed)
        assert {ti["hostname"] for ti in listed} == {"blobgc-worker-1", "blobgc-worker-2"}, listed

        drains = {dag_id: next(ti for ti in task_instances(dag_id, run_id) if ti["task_id"] == "delete_owed_objects")
                  for dag_id, run_id in runs.items()}
        assert {ti["hostname"] for ti in drains.values()} == {"blobgc-worker-1", "blobgc-worker-2"}, drains
        # what the bucket saw: both groups going down at once, for several seconds, each by a fair share
        (i_from, i_to), (o_from, o_to) = draining(seen, 0), draining(seen, 1)
        start, end = max(i_from, o_from), min(i_to, o_to)
        assert end - start >= 6, (i_from, i_to, o_from, o_to)
        window = [(t, c) for t, c in seen if start <= t <= end]
        for which in (0, 1):
            lost = window[0][1][which] - window[-1][1][which]
            assert lost >= RATE * (end - start) * 0.2, (which, lost, end - start)
        rate = -slope([(t, sum(c)) for t, c in window])
        print(f"both drained for {end - start:.1f} s at {rate:.1f} deletes a second, capped at {RATE}")
        assert rate <= RATE * 1.1, f"{rate:.1f} deletes a second while both drained, capped at {RATE}"
        # the cap is what held them back: the whole drain went at about the cap
        whole = [(t, sum(c)) for t, c in seen if min(i_from, o_from) <= t <= max(i_to, o_to)]
        assert -slope(whole) >= RATE * 0.5, -slope(whole)
    finally:
        counting.stopping.set()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM app.image WHERE image_id = ANY(%s)", (photos,))
        for first in range(0, len(files) + len(orphans), 1000):
            chunk = (files + orphans)[first:first + 1000]
            s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True})

"""Issue 31: no task of any destructive DAG deletes without the gate's go decision, whoever runs it.

Each DAG plans a little more than the gate's floor (`SMALL_GATE`: 5 objects or rows, no history), a person
rejects it, and then every task after the gate is run again by hand (`airflow tasks test`, past its skipped
upstream tasks), a mapped one handed a part of the refused plan: the tasks that execute the plan fail on the
recorded decision (`blobgc.core.plans.GateClosed`), the drains find nothing owed, and nothing is deleted.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from blobgc.kinds.media.layouts import rev_month
from blobgc.core.plans import plan_parts
from blobgc.core.runs import RunRef
from demo_app.images import ImageSettings, pre_upload
from demo_app.pastes import create_paste
from tests.helpers import ROOT, backdate_objects, cached_keys, make_blobs, object_keys, run_dag, set_unused_since
from tests.photo_server import jpeg as photo
from tests.support.by_hand import run_task_by_hand
from tests.support.gate import SMALL_GATE, Answer, env
from tests.support.generations import old_generation_with
from tests.support.images import SIZES, age_rows
from tests.support.media import DAY, USER, jpeg, uploaded
from tests.support.pastes import PAST
from tests.support.reconcile import age, put

PAST_FLOOR = 6  # objects (and rows) each DAG plans: one past SMALL_GATE's floor of 5, with no history
# what a task after the gate does: executes the plan (or a part of it, mapped), or drains what is owed
EXECUTES, EXECUTES_PART, DRAINS = "executes", "executes a part", "drains"


@dataclass(frozen=True)
class Seeded:
    """What a DAG's seed made: the run's environment, the buckets it may delete from, the Redis prefix it purges."""

    env: dict[str, str]
    buckets: list[str]
    redis_prefix: str | None = None


def seed_sweep(request: pytest.FixtureRequest, conn, s3) -> Seeded:
    bucket = request.getfixturevalue("bucket")
    ids = make_blobs(conn, s3, bucket, PAST_FLOOR // 2)  # a raw object and a thumbnail each
    set_unused_since(conn, ids, "3 days")
    return Seeded(env(bucket), [bucket])


def seed_pastes(request: pytest.FixtureRequest, conn, s3) -> Seeded:
    bucket, redis, prefix = (request.getfixturevalue(f) for f in ("bucket", "redis", "redis_prefix"))
    for i in range(PAST_FLOOR):
        create_paste(conn, s3, redis, bucket=bucket, content=f"gate {i}".encode(), expires_at=PAST,
                     redis_prefix=prefix)
    return Seeded(env(bucket, AIRFLOW_VAR_BLOBGC_PASTE_REDIS_PREFIX=prefix), [bucket], prefix)


def seed_images(request: pytest.FixtureRequest, conn, s3) -> Seeded:
    bucket = request.getfixturevalue("bucket")
    settings = ImageSettings(bucket=bucket, sizes=SIZES)
    for i in range(-(-PAST_FLOOR // len(SIZES))):  # a file per size each
        pre_upload(conn, s3, settings, photo(90 + i, (160, 120)))
    age_rows(conn, 20)
    return Seeded(env(bucket), [bucket])


def seed_generation(request: pytest.FixtureRequest, conn, s3) -> Seeded:
    bucket = request.getfixturevalue("bucket")
    old_generation_with(conn, s3, bucket, referenced=0, garbage=PAST_FLOOR)
    return Seeded(env(bucket), [bucket])


def seed_orphans(request: pytest.FixtureRequest, conn, s3) -> Seeded:
    bucket = request.getfixturevalue("bucket")
    put(s3, bucket, *(f"blobs/orphan{i}/raw" for i in range(PAST_FLOOR)))
    age(s3, bucket)
    return Seeded(env(bucket), [bucket])


def seed_staging(request: pytest.FixtureRequest, conn, s3) -> Seeded:
    media = request.getfixturevalue("media")
    for _ in range(PAST_FLOOR):
        uploaded(s3, media, jpeg(16, 16))
    backdate_objects(s3, media.images_bucket, 2 * 3600, "staging/")
    return Seeded({"AIRFLOW_VAR_BLOBGC_MEDIA_BUCKET_PREFIX": media.bucket_prefix},
                  [media.images_bucket, media.profiles_bucket])


def seed_thumbnails(request: pytest.FixtureRequest, conn, s3) -> Seeded:
    media = request.getfixturevalue("media")
    for i in range(PAST_FLOOR):  # thumbnails whose master is gone
        key = f"{USER}/thumbs/{rev_month(202611)}/{f'{i:02x}' * 8}_240x240.webp"
        s3.put_object(Bucket=media.images_bucket, Key=key, Body=b"RIFF")
    backdate_objects(s3, media.images_bucket, 2 * DAY)
    return Seeded({"AIRFLOW_VAR_BLOBGC_MEDIA_BUCKET_PREFIX": media.bucket_prefix},
                  [media.images_bucket, media.profiles_bucket])


@dataclass(frozen=True)
class Case:
    """A DAG: how to seed it past the floor, the conf of its run, and every task after its gate (but report)."""

    seed: Callable[[pytest.FixtureRequest, Any, Any], Seeded]
    after_gate: tuple[tuple[str, str], ...]
    conf: dict[str, Any] = field(default_factory=dict)


DRAIN_STEPS = (("delete_owed_objects", DRAINS), ("purge_quarantine", DRAINS))
# in the order the cases run (first on their worker, tests/conftest.py): the Celery test holds blobgc_reconcile and
# blobgc_image_cleanup a few minutes in, by when their cases are done
CASES = {
    "blobgc_sweep": Case(seed_sweep, (("plan_parts", EXECUTES), ("retry_owed_objects", DRAINS),
                                      ("delete_unused_blobs", EXECUTES_PART), *DRAIN_STEPS)),
    "blobgc_image_cleanup": Case(seed_images, (("delete_unbound_images", EXECUTES), *DRAIN_STEPS)),
    "blobgc_generations": Case(seed_generation, (("plan_parts", EXECUTES), ("delete_planned_blobs", EXECUTES_PART),
                                                 *DRAIN_STEPS),
                               conf={"false_positive_rate": 0.000001}),  # no garbage blob kept by the filter
    "blobgc_reconcile": Case(seed_orphans, (("owe_planned_objects", EXECUTES), *DRAIN_STEPS),
                             conf={"confirmations": 1}),  # planned on first sight
    "blobgc_media_staging": Case(seed_staging, (("owe_planned_objects", EXECUTES), *DRAIN_STEPS)),
    "blobgc_media_thumbnails": Case(seed_thumbnails, (("owe_planned_objects", EXECUTES), *DRAIN_STEPS)),
    # last: the runbook's test (tests/dags/test_operations.py) holds this DAG for a minute and a half at the start
    "blobgc_paste_expiry": Case(seed_pastes, (("plan_parts", EXECUTES), ("expire_pastes", EXECUTES_PART),
                                              *DRAIN_STEPS, ("purge_cache_keys", DRAINS)),
                                conf={"expiry_workers": 1}),
}


def tasks_after_gate(dag_id: str) -> set[str]:
    """Every task downstream of the DAG's gate, but its report (which deletes nothing)."""
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(ROOT / "dags" / f"{dag_id}.py")).dags[dag_id]
    return set(dag.get_task("gate").get_flat_relative_ids(upstream=False)) - {"report"}


def snapshot(conn, s3, redis, seeded: Seeded) -> dict[str, Any]:
    """What a deletion would change: the objects of the buckets, the rows of the tables the DAGs delete from, the
    cached pastes."""
    rows = conn.execute("SELECT (SELECT count(*) FROM app.blob), (SELECT count(*) FROM app.paste), "
                        "(SELECT count(*) FROM app.content), (SELECT count(*) FROM app.image), "
                        "(SELECT count(*) FROM gen.blob), (SELECT count(*) FROM gen.reference), "
                        "(SELECT count(*) FROM gen.deletion)").fetchone()
    return {"objects": {b: object_keys(s3, b) for b in seeded.buckets}, "rows": rows,
            "cached": cached_keys(redis, seeded.redis_prefix) if seeded.redis_prefix else set()}


@pytest.mark.parametrize("dag_id", list(CASES))
def test_every_delete_task_run_again_after_reject_deletes_nothing(request, conn, test_dsn, s3, redis, dag_id):
    case = CASES[dag_id]
    assert {task for task, _ in case.after_gate} == tasks_after_gate(dag_id)  # none left out
    seeded = case.seed(request, conn, s3)
    run_env = {**seeded.env, "AIRFLOW_VAR_BLOBGC_GATE": SMALL_GATE}
    person = Answer(dag_id, "Reject", test_dsn)
    person.start()
    result = run_dag(dag_id, conf=case.conf, env_extra=run_env)
    person.join(30)
    assert person.error is None and person.detail is not None, person.error  # the gate waited, and was rejected
    assert result.returncode == 0, result.output[-3000:]
    assert conn.execute("SELECT decision, decided_by FROM blobgc.gate_decision WHERE dag_id = %s AND run_id = %s",
                        (dag_id, result.run_id)).fetchone() == ("rejected", "admin")
    parts = plan_parts(conn, RunRef(dag_id, result.run_id))  # the refused plan is on record
    assert sum(p["items"] for p in parts) >= 1, parts
    before = snapshot(conn, s3, redis, seeded)
    assert sum(len(keys) for keys in before["objects"].values()) >= PAST_FLOOR  # all there to delete
    closed = (f"GateClosed: the gate has not let run {result.run_id} of {dag_id} through (rejected by admin): "
              "nothing is deleted")

    for task_id, kind in case.after_gate:
        if kind == EXECUTES_PART:
            part = {"part": {"collection": parts[0]["collection"], "part": parts[0]["part"]}}
            by_hand = run_task_by_hand(dag_id, task_id, result.run_id, map_index=0, mapped_input=part,
                                       env_extra=run_env)
        else:
            by_hand = run_task_by_hand(dag_id, task_id, result.run_id, env_extra=run_env)
        if kind == DRAINS:  # nothing is owed: whatever it ends in, it deletes nothing
            assert by_hand.state in ("success", "failed"), (task_id, by_hand.state, by_hand.output[-3000:])
        else:
            assert by_hand.state == "failed", (task_id, by_hand.output[-3000:])
            assert closed in by_hand.output, (task_id, by_hand.output[-3000:])
        assert snapshot(conn, s3, redis, seeded) == before, task_id

    assert conn.execute("SELECT count(*) FROM blobgc.deletion_log WHERE dag_id = %s AND run_id = %s AND NOT dry_run",
                        (dag_id, result.run_id)).fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0  # nothing owed, by any run
    assert conn.execute("SELECT count(*) FROM blobgc.plan_outcome WHERE dag_id = %s AND run_id = %s",
                        (dag_id, result.run_id)).fetchone()[0] == 0

"""Issue 20 under Airflow: a dry run's plan becomes the real run, and the gate stops unusual deletions for a person.

The runs go through Airflow's own task runner (`run_dag`, as `airflow dags test`). A gate that waits parks its
task in Airflow's *awaiting input* state; a person's answer comes through the running api-server's REST API,
as the UI's Required Actions page sends it (PATCH .../taskInstances/gate/-1/hitlDetails).
"""
from __future__ import annotations

import urllib.error
import urllib.parse

import pytest

from blobgc.kinds.blobs.layouts import blob_keys
from blobgc.core.plans import plan_parts
from blobgc.core.runs import RunRef
from tests.helpers import airflow_api, backdate_object, make_blobs, object_keys, run_dag, set_unused_since
from tests.support.by_hand import run_task_by_hand
from tests.support.gate import SMALL_GATE, Answer, asked, env

SWEEP = "blobgc_sweep"
RECONCILE = "blobgc_reconcile"


def run_ids(conn, dag_id: str) -> list[tuple[str, bool]]:
    return conn.execute("SELECT run_id, dry_run FROM blobgc.run WHERE dag_id = %s ORDER BY started_at",
                        (dag_id,)).fetchall()


def report_of(conn, dag_id: str, run_id: str) -> dict:
    return conn.execute("SELECT details FROM blobgc.run WHERE dag_id = %s AND run_id = %s",
                        (dag_id, run_id)).fetchone()[0]


def dry_plan(conn, s3, bucket: str, n: int = 4) -> tuple[list[str], str]:
    """`n` blobs unused for 3 days, and a finished dry run of the sweep that plans them."""
    ids = make_blobs(conn, s3, bucket, n)
    set_unused_since(conn, ids, "3 days")
    dry = run_dag(SWEEP, conf={"dry_run": True}, env_extra=env(bucket))
    assert dry.returncode == 0, dry.output[-3000:]
    return ids, dry.run_id


def test_a_dry_runs_plan_executed_deletes_exactly_the_plan_and_skips_what_was_referenced_again(conn, s3, bucket):
    ids, plan = dry_plan(conn, s3, bucket)
    planned = conn.execute("SELECT sum(cardinality(row_ids)), sum(cardinality(keys)), sum(bytes) FROM blobgc.plan_item "
                           "WHERE dag_id = %s AND run_id = %s", (SWEEP, plan)).fetchone()
    assert planned == (4, 8, 400)
    assert conn.execute("SELECT count(*) FROM app.blob").fetchone()[0] == 4  # the dry run deleted nothing
    # After the plan: one planned blob is referenced again, and a new blob becomes as deletable as the others.
    rereferenced = ids[0]
    with conn.transaction():
        conn.execute("INSERT INTO app.post (id) VALUES ('p1')")
        conn.execute("INSERT INTO app.blob_attachment (post_id, blob_id) VALUES ('p1', %s)", (rereferenced,))
    (newcomer,) = make_blobs(conn, s3, bucket, 1, prefix="new")
    set_unused_since(conn, [newcomer], "3 days")

    real = run_dag(SWEEP, conf={"from_plan": plan}, env_extra=env(bucket))
    assert real.returncode == 0, real.output[-3000:]
    assert real.task_states["plan_deletions"] == "skipped"  # nothing planned anew
    assert {r[0] for r in conn.execute("SELECT id FROM app.blob")} == {rereferenced, newcomer}
    assert object_keys(s3, bucket) == set(blob_keys(rereferenced)) | set(blob_keys(newcomer))
    report = report_of(conn, SWEEP, real.run_id)["plan"]
    assert report["plan"] == plan
    assert (report["planned_rows"], report["planned_objects"], report["planned_bytes"]) == (4, 8, 400)
    assert report["skipped_rereferenced_rows"] == 1 and report["failed_objects"] == 0
    assert report["gate"]["decision"] == "passed"
    row = conn.execute("SELECT dry_run, rows_deleted, objects_deleted, bytes_reclaimed, plan_run_id FROM blobgc.run "
                       "WHERE run_id = %s", (real.run_id,)).fetchone()
    assert row == (False, 3, 6, 300 + 30, plan)
    skipped = conn.execute("SELECT skipped_ids FROM blobgc.plan_outcome WHERE run_id = %s AND skipped_ids <> '{}'",
                           (real.run_id,)).fetchall()
    assert skipped == [([rereferenced],)]

    again = run_dag(SWEEP, conf={"from_plan": plan}, env_extra=env(bucket))  # a plan is executed once
    assert again.returncode != 0
    assert f"was already executed by run '{real.run_id}'" in again.output
    assert conn.execute("SELECT count(*) FROM app.blob").fetchone()[0] == 2


def test_an_expired_plan_refuses_to_run(conn, s3, bucket):
    ids, plan = dry_plan(conn, s3, bucket, 2)
    with conn.transaction():
        conn.execute("UPDATE blobgc.plan_item SET planned_at = now() - interval '25 hours' WHERE run_id = %s", (plan,))
    real = run_dag(SWEEP, conf={"from_plan": plan}, env_extra=env(bucket))
    assert real.returncode != 0
    assert "plans expire after plan_max_age_hours = 24 h" in real.output, real.output[-3000:]
    assert real.task_states["plan_shards"] == "failed"
    assert conn.execute("SELECT count(*) FROM app.blob").fetchone()[0] == 2
    assert len(object_keys(s3, bucket)) == 4
    longer = run_dag(SWEEP, conf={"from_plan": plan, "plan_max_age_hours": 48}, env_extra=env(bucket))
    assert longer.returncode == 0, longer.output[-3000:]
    assert conn.execute("SELECT count(*) FROM app.blob").fetchone()[0] == 0
    assert ids


def test_a_plan_must_be_a_finished_dry_run_of_the_same_dag(conn, s3, bucket):
    for conf, message in (({"from_plan": "nope"}, "no run 'nope' of blobgc_sweep"),
                          ({"from_plan": "x", "dry_run": True}, "cannot be combined with dry_run")):
        result = run_dag(SWEEP, conf=conf, env_extra=env(bucket))
        assert result.returncode != 0 and message in result.output, result.output[-3000:]
    real = run_dag(SWEEP, env_extra=env(bucket))
    assert real.returncode == 0, real.output[-3000:]
    result = run_dag(SWEEP, conf={"from_plan": real.run_id}, env_extra=env(bucket))
    assert result.returncode != 0 and "was a real run, not a dry run" in result.output


def test_reconcile_executes_a_dry_runs_plan_and_keeps_what_a_row_or_a_rewrite_claimed_since(conn, s3, bucket):
    orphans = [f"blobs/orphan{i}/raw" for i in range(4)]
    for key in orphans:
        s3.put_object(Bucket=bucket, Key=key, Body=b"o" * 50)
        backdate_object(bucket, key, 3 * 86400)
    dry = run_dag(RECONCILE, conf={"dry_run": True, "confirmations": 1}, env_extra=env(bucket))
    assert dry.returncode == 0, dry.output[-3000:]
    planned = {k for (k,) in conn.execute("SELECT unnest(keys) FROM blobgc.plan_item WHERE run_id = %s",
                                          (dry.run_id,))}
    assert planned == set(orphans)
    claimed, rewritten = "orphan0", orphans[1]
    with conn.transaction():  # a row now accounts for one orphan; another object is written again
        conn.execute("INSERT INTO app.blob (id, filename, size_bytes) VALUES (%s, 'c', 50)", (claimed,))
    s3.put_object(Bucket=bucket, Key=rewritten, Body=b"n" * 50)
    late = "blobs/late/raw"  # an orphan found after the plan: not in it
    s3.put_object(Bucket=bucket, Key=late, Body=b"l")
    backdate_object(bucket, late, 3 * 86400)

    real = run_dag(RECONCILE, conf={"from_plan": dry.run_id}, env_extra=env(bucket))
    assert real.returncode == 0, real.output[-3000:]
    assert object_keys(s3, bucket) == {orphans[0], rewritten, late}
    report = report_of(conn, RECONCILE, real.run_id)["plan"]
    assert report["planned_objects"] == 4 and report["skipped_rereferenced_objects"] == 2
    assert report["failed_objects"] == 0


# ------------------------------------------------------------------------------------------------ the gate
def history(conn, dag_id: str, objects: list[int]) -> None:
    """Earlier real runs of `dag_id` that deleted `objects` objects each."""
    with conn.transaction():
        for i, n in enumerate(objects):
            conn.execute("INSERT INTO blobgc.run (dag_id, run_id, dry_run, started_at, finished_at, objects_deleted, "
                         "bytes_reclaimed, rows_deleted) VALUES (%s, %s, false, now() - %s * interval '1 day', "
                         "now() - %s * interval '1 day', %s, %s, %s)",
                         (dag_id, f"scheduled__history_{i}", i + 1, i + 1, n, n * 100, n // 2))


def gated(conn, s3, bucket) -> list[str]:
    """A history with a median of 2 objects, and 10 unused blobs (20 objects: 10x the median) to sweep."""
    history(conn, SWEEP, [2, 2, 3, 1, 2])
    ids = make_blobs(conn, s3, bucket, 10)
    set_unused_since(conn, ids, "3 days")
    return ids


@pytest.mark.parametrize("option", ["Approve", "Reject"])
def test_a_run_at_ten_times_the_median_waits_for_a_person(conn, test_dsn, s3, bucket, option):
    ids = gated(conn, s3, bucket)
    answer = Answer(SWEEP, option, test_dsn)
    answer.start()
    result = run_dag(SWEEP, env_extra=env(bucket, AIRFLOW_VAR_BLOBGC_GATE=SMALL_GATE))
    answer.join(30)
    assert answer.error is None, answer.error
    assert result.returncode == 0, result.output[-3000:]
    # the waiting task showed the plan's summary and a link to its receipt
    assert answer.detail["subject"] == "Approve blobgc_sweep deleting 20 objects (1000 B) and 10 rows?"
    assert f"/blobgc/runs/blobgc_sweep/{urllib.parse.quote(result.run_id, safe='')}" in answer.detail["body"]
    assert "the median of the last 5 real runs is 2 objects" in answer.detail["body"]
    decision = conn.execute("SELECT decision, decided_by, planned_objects FROM blobgc.gate_decision WHERE run_id = %s",
                            (result.run_id,)).fetchone()
    if option == "Approve":
        assert decision == ("approved", "admin", 20)
        assert conn.execute("SELECT count(*) FROM app.blob").fetchone()[0] == 0
        assert object_keys(s3, bucket) == set()
    else:
        assert decision == ("rejected", "admin", 20)
        assert conn.execute("SELECT count(*) FROM app.blob").fetchone()[0] == len(ids)
        assert len(object_keys(s3, bucket)) == 2 * len(ids)
        assert result.task_states["delete_unused_blobs"] == "skipped"
        assert result.task_states["report"] == "success"
        report = report_of(conn, SWEEP, result.run_id)
        assert report["plan"]["gate"]["decision"] == "rejected" and report["plan"]["gate"]["decided_by"] == "admin"
        assert conn.execute("SELECT rows_deleted, objects_deleted, finished_at IS NOT NULL FROM blobgc.run "
                            "WHERE run_id = %s", (result.run_id,)).fetchone() == (0, 0, True)


def test_a_gate_nobody_answers_times_out_and_deletes_nothing(conn, s3, bucket):
    ids = gated(conn, s3, bucket)
    result = run_dag(SWEEP, conf={"approval_timeout_hours": 0.003},  # about 11 s
                     env_extra=env(bucket, AIRFLOW_VAR_BLOBGC_GATE=SMALL_GATE))
    assert result.returncode == 0, result.output[-3000:]
    asking = asked(SWEEP, result.run_id)  # the gate asked a person, and nobody answered: its default stood
    assert asking["subject"].startswith("Approve blobgc_sweep deleting 20 objects")
    assert asking["responded_by_user"] is None and asking["chosen_options"] == ["Reject"]
    assert conn.execute("SELECT decision, decided_by FROM blobgc.gate_decision WHERE run_id = %s",
                        (result.run_id,)).fetchone() == ("timed_out", None)
    assert conn.execute("SELECT count(*) FROM app.blob").fetchone()[0] == len(ids)
    assert result.task_states["delete_unused_blobs"] == "skipped"


def test_delete_tasks_run_again_by_hand_after_the_gate_refused_fail_and_delete_nothing(conn, s3, bucket):
    """A person runs the delete path of a run again by hand (`airflow tasks test`, past its skipped upstream tasks)
    after its gate refused the plan by timing out: plan_parts, and the delete task itself even when handed a part
    of the plan, fail on the gate's recorded decision (GateClosed); no row is deleted, nothing owed. (After a
    Reject, every delete task of every DAG: tests/dags/test_gate_enforced.py.)"""
    ids = gated(conn, s3, bucket)
    run_env = env(bucket, AIRFLOW_VAR_BLOBGC_GATE=SMALL_GATE)
    result = run_dag(SWEEP, conf={"approval_timeout_hours": 0.003}, env_extra=run_env)  # about 11 s
    assert result.returncode == 0, result.output[-3000:]
    assert asked(SWEEP, result.run_id)["responded_by_user"] is None  # the gate asked, and nobody answered
    assert result.task_states["delete_unused_blobs"] == "skipped"
    assert conn.execute("SELECT decision, decided_by FROM blobgc.gate_decision WHERE run_id = %s",
                        (result.run_id,)).fetchone() == ("timed_out", None)
    parts = plan_parts(conn, RunRef(SWEEP, result.run_id))  # the refused plan is on record
    assert sum(p["items"] for p in parts) >= 1
    closed = f"the gate has not let run {result.run_id} of {SWEEP} through (timed_out): nothing is deleted"

    listed = run_task_by_hand(SWEEP, "plan_parts", result.run_id, env_extra=run_env)
    assert listed.state == "failed", listed.output[-3000:]
    assert f"GateClosed: {closed}" in listed.output, listed.output[-3000:]
    deleting = run_task_by_hand(SWEEP, "delete_unused_blobs", result.run_id, map_index=0, env_extra=run_env,
                                mapped_input={"part": {"collection": parts[0]["collection"], "part": parts[0]["part"]}})
    assert deleting.state == "failed", deleting.output[-3000:]
    assert f"GateClosed: {closed}" in deleting.output, deleting.output[-3000:]

    assert conn.execute("SELECT count(*) FROM app.blob").fetchone()[0] == len(ids)
    assert len(object_keys(s3, bucket)) == 2 * len(ids)
    assert conn.execute("SELECT count(*) FROM blobgc.deletion_log WHERE run_id = %s", (result.run_id,)
                        ).fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0  # nothing owed
    assert conn.execute("SELECT count(*) FROM blobgc.plan_outcome WHERE run_id = %s", (result.run_id,)
                        ).fetchone()[0] == 0


def test_a_first_run_with_no_history_waits_only_past_the_floor(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 2)  # 4 objects: under a floor of 5
    set_unused_since(conn, ids, "3 days")
    result = run_dag(SWEEP, env_extra=env(bucket, AIRFLOW_VAR_BLOBGC_GATE=SMALL_GATE))
    assert result.returncode == 0, result.output[-3000:]
    judgement = conn.execute("SELECT decision, judgement FROM blobgc.gate_decision WHERE run_id = %s",
                             (result.run_id,)).fetchone()
    assert judgement[0] == "passed"
    whole = judgement[1]["scopes"][0]
    assert (whole["history_runs"], whole["threshold_objects"], whole["exceeds"]) == (0, 5, False)
    assert conn.execute("SELECT count(*) FROM app.blob").fetchone()[0] == 0


def test_a_dry_run_never_waits(conn, s3, bucket):
    gated(conn, s3, bucket)
    result = run_dag(SWEEP, conf={"dry_run": True}, env_extra=env(bucket, AIRFLOW_VAR_BLOBGC_GATE=SMALL_GATE))
    assert result.returncode == 0, result.output[-3000:]
    decision, judgement = conn.execute("SELECT decision, judgement FROM blobgc.gate_decision WHERE run_id = %s",
                                       (result.run_id,)).fetchone()
    assert decision == "passed" and judgement["needs_approval"] is True


def test_a_malformed_gate_variable_fails_the_gate_naming_the_field(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 1)
    set_unused_since(conn, ids, "3 days")
    result = run_dag(SWEEP, env_extra=env(bucket, AIRFLOW_VAR_BLOBGC_GATE='{"ratio": "five"}'))
    assert result.returncode != 0
    assert "Variable blobgc_gate: ratio must be a number" in result.output
    assert conn.execute("SELECT count(*) FROM app.blob").fetchone()[0] == 1


def test_the_hitl_answer_is_refused_to_a_viewer(stack):
    from tests.helpers import airflow_token

    with pytest.raises(urllib.error.HTTPError) as refused:
        airflow_api(f"/api/v2/dags/{SWEEP}/dagRuns/none/taskInstances/gate/-1/hitlDetails", method="PATCH",
                    body={"chosen_options": ["Approve"]}, token=airflow_token("viewer", "viewer"))
    assert refused.value.code == 403

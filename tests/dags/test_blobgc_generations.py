"""blobgc_generations under Airflow: plan, gate, execute exactly the plan."""
from __future__ import annotations


from demo_app.mail import add_reference, delete_reference
from tests.helpers import assert_param_refused, run_dag
from tests.support.generations import DAG, blobs, mail_keys, old_generation_with


def report_of(conn, run_id: str) -> dict:
    return conn.execute("SELECT details FROM blobgc.run WHERE dag_id = %s AND run_id = %s", (DAG, run_id)).fetchone()[0]


def test_airflow_runs_the_generations_dag(conn, s3, bucket):
    referenced, garbage = old_generation_with(conn, s3, bucket, referenced=4, garbage=6)
    env = {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket}

    dry = run_dag(DAG, conf={"dry_run": True}, env_extra=env)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    assert len(blobs(conn)) == 10 and conn.execute("SELECT max(id) FROM gen.generation").fetchone()[0] == 3
    assert conn.execute("SELECT sum(cardinality(row_ids)), sum(cardinality(keys)) FROM blobgc.plan_item "
                        "WHERE dag_id = %s AND run_id = %s", (DAG, dry.run_id)).fetchone() == (6, 6)

    # After the plan: a planned blob is referenced again (a copied mail), and a referenced one becomes garbage.
    rereferenced, newcomer = sorted(garbage)[0], sorted(referenced)[0]
    add_reference(conn, owner_id="copy", blob_id=rereferenced)
    (owner,) = conn.execute("SELECT owner_id FROM gen.reference WHERE blob_id = %s", (newcomer,)).fetchone()
    delete_reference(conn, owner_id=owner, blob_id=newcomer)

    # the dry run's plan, executed: it opens generation 4, plans nothing, and deletes exactly the plan
    executed = run_dag(DAG, conf={"from_plan": dry.run_id, "false_positive_rate": 0.000001}, env_extra=env)
    assert executed.returncode == 0, executed.stdout[-3000:] + executed.stderr[-3000:]
    assert executed.task_states["collect"] == "skipped" and executed.task_states["gate"] == "success"
    assert conn.execute("SELECT max(id) FROM gen.generation").fetchone()[0] == 4
    assert set(blobs(conn)) == referenced | {rereferenced}  # the newcomer was not in the plan
    assert mail_keys(s3, bucket) == {f"mail/{b}" for b in referenced | {rereferenced}}
    plan = report_of(conn, executed.run_id)["plan"]
    assert (plan["plan"], plan["planned_rows"], plan["planned_objects"]) == (dry.run_id, 6, 6)
    skipped = (plan["skipped_rereferenced_rows"], plan["skipped_rereferenced_objects"], plan["failed_objects"])
    assert skipped == (1, 1, 0)
    assert plan["gate"]["decision"] == "passed"

    # a real run plans itself (generation 1: the newcomer), passes the gate and collects as before
    real = run_dag(DAG, conf={"false_positive_rate": 0.000001}, env_extra=env)
    assert real.returncode == 0, real.stdout[-3000:] + real.stderr[-3000:]
    assert real.task_states["gate"] == "success"
    assert conn.execute("SELECT max(id) FROM gen.generation").fetchone()[0] == 5
    assert set(blobs(conn)) == (referenced - {newcomer}) | {rereferenced}
    assert mail_keys(s3, bucket) == {f"mail/{b}" for b in (referenced - {newcomer}) | {rereferenced}}
    plan = report_of(conn, real.run_id)["plan"]
    assert (plan["plan"], plan["planned_rows"], plan["skipped_rereferenced_rows"]) == (real.run_id, 1, 0)
    runs = conn.execute("SELECT dry_run, rows_deleted, objects_deleted, bytes_reclaimed > 0, finished_at IS NOT NULL "
                        "FROM blobgc.run WHERE dag_id = %s AND run_id NOT LIKE 'setup-%%' ORDER BY started_at",
                        (DAG,)).fetchall()
    assert runs == [(True, 6, 6, True, True), (False, 5, 5, True, True), (False, 1, 1, True, True)]
    figures = conn.execute("SELECT run_id, generation, blobs_deleted, deletions_cleared, blobs_kept, "
                           "finished_at IS NOT NULL FROM blobgc.generation_collection WHERE NOT dry_run "
                           "ORDER BY started_at").fetchall()
    # the plan's run skipped the re-referenced blob; the real run's filter kept it
    assert figures == [(executed.run_id, 1, 5, 5, 1, True), (real.run_id, 1, 1, 1, 1, True)]

    # a malformed rate is refused before anything runs
    bad = run_dag(DAG, conf={"false_positive_rate": 2}, env_extra=env)
    assert_param_refused(bad, "Invalid input for param false_positive_rate: 2 is greater than the maximum of 0.5")
    assert conn.execute("SELECT max(id) FROM gen.generation").fetchone()[0] == 5

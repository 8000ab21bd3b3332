"""blobgc_generations under Airflow."""
from __future__ import annotations


from tests.helpers import run_dag
from tests.support.generations import DAG, blobs, mail_keys, old_generation_with


def test_airflow_runs_the_generations_dag(conn, s3, bucket):
    referenced, garbage = old_generation_with(conn, s3, bucket, referenced=4, garbage=6)
    env = {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket}

    dry = run_dag(DAG, conf={"dry_run": True}, env_extra=env)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    assert len(blobs(conn)) == 10 and conn.execute("SELECT max(id) FROM gen.generation").fetchone()[0] == 3

    # the real run opens generation 4 and collects generations up to 2 (here: generation 1)
    real = run_dag(DAG, conf={"false_positive_rate": 0.000001}, env_extra=env)
    assert real.returncode == 0, real.stdout[-3000:] + real.stderr[-3000:]
    assert conn.execute("SELECT max(id) FROM gen.generation").fetchone()[0] == 4
    assert set(blobs(conn)) == referenced
    assert mail_keys(s3, bucket) == {f"mail/{b}" for b in referenced}
    runs = conn.execute("SELECT dry_run, rows_deleted, objects_deleted, bytes_reclaimed > 0, finished_at IS NOT NULL "
                        "FROM blobgc.run WHERE dag_id = %s AND run_id NOT LIKE 'setup-%%' ORDER BY started_at",
                        (DAG,)).fetchall()
    assert runs == [(True, 6, 6, True, True), (False, 6, 6, True, True)]
    row = conn.execute("SELECT generation, blobs_deleted, deletions_cleared, blobs_kept, finished_at IS NOT NULL "
                       "FROM blobgc.generation_collection WHERE NOT dry_run").fetchone()
    assert row == (1, 6, 6, 0, True)

    # a malformed rate is refused before anything runs
    bad = run_dag(DAG, conf={"false_positive_rate": 2}, env_extra=env)
    assert bad.returncode != 0 and "false_positive_rate" in bad.stdout + bad.stderr
    assert conn.execute("SELECT max(id) FROM gen.generation").fetchone()[0] == 4

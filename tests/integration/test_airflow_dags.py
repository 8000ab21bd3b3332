"""Whole DAGs under Airflow itself (`airflow dags test`), against the local stack."""
from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from blobgc.migrate import apply_migrations
from blobgc.sweep import blob_object_keys

from .conftest import ROOT, airflow, make_blobs, object_keys


def test_airflow_dags_test_mark_then_sweep_reclaims_garbage(conn, s3, bucket):
    kept, garbage = make_blobs(conn, s3, bucket, 2)
    with conn.transaction():
        conn.execute("INSERT INTO app.post (id) VALUES ('p1')")
        conn.execute("INSERT INTO app.blob_attachment (post_id, blob_id) VALUES ('p1', %s)", (kept,))
    env = {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket}

    # exactly the CONTRACT's command (the whole dags folder parsed); other tests pass -f to start faster
    mark = airflow("dags", "test", "blobgc_mark", env_extra=env, whole_dags_folder=True)
    assert mark.returncode == 0, mark.stdout[-3000:] + mark.stderr[-3000:]
    assert conn.execute("SELECT unused FROM app.blob WHERE id = %s", (garbage,)).fetchone()[0] is True

    # grace 0: the blob marked unused a moment ago is old enough
    sweep = airflow("dags", "test", "blobgc_sweep", "-c", json.dumps({"grace_hours": 0}), env_extra=env)
    assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
    assert {r[0] for r in conn.execute("SELECT id FROM app.blob")} == {kept}
    assert object_keys(s3, bucket) == set(blob_object_keys(kept))
    runs = conn.execute("SELECT dag_id, dry_run, rows_deleted, objects_deleted, finished_at IS NOT NULL "
                        "FROM blobgc.run ORDER BY started_at").fetchall()
    assert runs == [("blobgc_mark", False, 0, 0, True), ("blobgc_sweep", False, 1, 2, True)]


def test_airflow_dags_test_dry_run_sweep_deletes_nothing(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 3)
    with conn.transaction():
        conn.execute("UPDATE app.blob SET unused = true, updated_at = now() - interval '3 days'")
    result = airflow("dags", "test", "blobgc_sweep", "-c", json.dumps({"dry_run": True}),
                     env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket})
    assert result.returncode == 0, result.stdout[-3000:]
    assert conn.execute("SELECT count(*) FROM app.blob").fetchone()[0] == 3
    assert len(object_keys(s3, bucket)) == 6
    row = conn.execute("SELECT dry_run, rows_deleted, objects_deleted FROM blobgc.run").fetchone()
    assert row == (True, 3, 6)
    assert ids


def test_malformed_conf_is_refused_before_anything_runs(conn):
    result = airflow("dags", "test", "blobgc_sweep", "-c", json.dumps({"batch_size": 5000}))
    assert result.returncode != 0
    assert "batch_size" in (result.stdout + result.stderr)
    assert conn.execute("SELECT count(*) FROM blobgc.run").fetchone()[0] == 0


def test_every_dag_can_be_backfilled():
    # backfill reads the serialized DAGs; make sure the current files are serialized, whatever ran first
    reserialized = airflow("dags", "reserialize")
    assert reserialized.returncode == 0, reserialized.stderr[-2000:]
    # a day each DAG's schedule runs on between 2026-11-01 and 2026-11-03 (blobgc_reconcile is weekly, on Sundays)
    cases = (("blobgc_mark", "2026-11-02"), ("blobgc_sweep", "2026-11-02"), ("blobgc_paste_expiry", "2026-11-02"),
             ("blobgc_crawler", "2026-11-02"), ("blobgc_image_cleanup", "2026-11-02"), ("blobgc_reconcile", "2026-11-01"),
             ("blobgc_generations", "2026-11-02"), ("blobgc_media_staging", "2026-11-02"),
             ("blobgc_media_thumbnails", "2026-11-02"))

    def backfill_dry_run(case: tuple[str, str]):
        return airflow("backfill", "create", "--dag-id", case[0], "--from-date", "2026-11-01", "--to-date", "2026-11-03",
                       "--dry-run")

    with ThreadPoolExecutor(3) as pool:  # each CLI call is mostly Airflow's import time
        results = list(pool.map(backfill_dry_run, cases))
    for (dag_id, day), result in zip(cases, results, strict=True):
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        assert day in result.stdout, (dag_id, result.stdout[-2000:])


def test_migrations_are_idempotent(conn):
    assert apply_migrations(conn) == []
    versions = [r[0] for r in conn.execute("SELECT version FROM blobgc.schema_migration ORDER BY version")]
    assert versions[:7] == ["0001_app_schema", "0002_blobgc_schema", "0003_paste_expiry", "0004_image_crawler",
                           "0005_reconcile", "0006_generations", "0007_audit_restore"]


def test_make_up_is_idempotent_when_the_stack_is_running():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "stack.py"), "up"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    for service in ("postgres", "redis", "S3", "airflow"):
        assert f"{service} already running" in result.stdout

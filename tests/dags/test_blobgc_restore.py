"""blobgc_restore under Airflow."""
from __future__ import annotations


import pytest

from blobgc.collectors.restore import RestoreRefused, plan_restore
from blobgc.kinds.blobs.layouts import blob_keys
from blobgc.core.runs import RunRef, ensure_run
from tests.helpers import NOW, object_keys, run_dag
from tests.support.restore import swept_run
from tests.support.shared_object import shared_object_swept_twice


def test_blobgc_restore_undoes_a_sweep_on_a_versioned_bucket(conn, s3, versioned_bucket):
    run, kept, garbage = swept_run(conn, s3, versioned_bucket, "manual__sweep_to_undo", n=4)
    assert object_keys(s3, versioned_bucket) == {k for b in kept for k in blob_keys(b)}
    assert not conn.execute("SELECT 1 FROM app.blob WHERE id = ANY(%s)", (garbage,)).fetchall()

    result = run_dag("blobgc_restore", conf={"run_id": run.run_id})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    every = {k for b in kept + garbage for k in blob_keys(b)}
    assert object_keys(s3, versioned_bucket) == every
    assert s3.get_object(Bucket=versioned_bucket, Key=blob_keys(garbage[0])[0])["Body"].read() == b"r" * 100
    restored = conn.execute("SELECT id, filename, size_bytes, unused, updated_at > now() - interval '5 minutes' "
                            "FROM app.blob WHERE id = ANY(%s) ORDER BY id", (garbage,)).fetchall()
    assert restored == [(g, f"{g}.bin", 100, False, True) for g in sorted(garbage)]  # back, and used
    outcomes = dict(conn.execute("SELECT kind || ' ' || outcome, count(*) FROM blobgc.restore_item "
                                 "GROUP BY 1").fetchall())
    assert outcomes == {"object restored": 6, "row restored": 3}


def test_blobgc_restore_refuses_an_unversioned_bucket(conn, s3, bucket):
    run, _, garbage = swept_run(conn, s3, bucket, "manual__unversioned")
    result = run_dag("blobgc_restore", conf={"run_id": run.run_id})
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"blobgc_restore refuses: bucket '{bucket}' is not versioned" in output, output[-3000:]
    assert conn.execute("SELECT count(*) FROM blobgc.restore_item").fetchone()[0] == 0
    assert not conn.execute("SELECT 1 FROM app.blob WHERE id = ANY(%s)", (garbage,)).fetchall()

    with pytest.raises(RestoreRefused, match="no blobgc run has run_id 'nope'"):
        plan_restore(conn, s3, "nope")
    dry = RunRef("blobgc_sweep", "dry", True)
    ensure_run(conn, dry, NOW)
    with pytest.raises(RestoreRefused, match="was a dry run"):
        plan_restore(conn, s3, "dry")


def test_blobgc_restore_shared_object_names_the_run_to_undo_first(conn, s3, versioned_bucket, tmp_path, monkeypatch):
    """Issue 29, finding 4 (restore-shared-object), as the DAG runs it: undoing the first of two sweeps does not put
    back a row whose shared object the second deleted, and records the second run as the one to undo first; undoing
    the second run, then the first, brings both rows back with the object."""
    runs = shared_object_swept_twice(conn, s3, versioned_bucket, tmp_path, monkeypatch)
    table = f"{runs.schema}.upload"
    conf = {"run_id": runs.first.run_id, "source_dag_id": "blobgc_sweep"}
    first = run_dag("blobgc_restore", conf=conf)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert not conn.execute(f"SELECT id FROM {table}").fetchall()
    rows = conn.execute("SELECT item, outcome, detail FROM blobgc.restore_item WHERE restore_run_id = %s AND "
                        "kind = 'row'", (first.run_id,)).fetchall()
    assert rows == [(f"{table} 1", "failed", f"its object {runs.shared} was deleted by blobgc_sweep run "
                     f"{runs.second.run_id!r}, whose undo is not part of this restore, so the row was not put back: "
                     "restore that run first, then this one again")]

    for source in (runs.second, runs.first):
        result = run_dag("blobgc_restore", conf={"run_id": source.run_id, "source_dag_id": "blobgc_sweep"})
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert {r[0] for r in conn.execute(f"SELECT id FROM {table}")} == {1, 2}
    assert object_keys(s3, versioned_bucket) == {runs.shared, runs.a["thumb"], runs.b["thumb"]}

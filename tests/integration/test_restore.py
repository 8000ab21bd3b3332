"""Audit and restore: version ids in the deletion log, and blobgc_restore on versioned and unversioned buckets."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from blobgc.outbox import delete_owed_objects
from blobgc.pastes import content_key, create_paste, expire_pastes
from blobgc.references import discover_references
from blobgc.restore import (
    RestoreRefused,
    cancel_owed_deletions,
    plan_restore,
    restore_objects,
    restore_rows,
)
from blobgc.runs import RunRef, ensure_run
from blobgc.sweep import blob_object_keys, sweep_unused_blobs

from .conftest import airflow, make_blobs, object_keys, set_unused_since

NOW = datetime.now(timezone.utc)


def swept_run(conn, s3, bucket: str, run_id: str, n: int = 3, keep: int = 1) -> tuple[RunRef, list[str], list[str]]:
    """`n` blobs, the first `keep` referenced, the rest unused for 2 days; a sweep and its drain."""
    ids = make_blobs(conn, s3, bucket, n, prefix=f"{run_id}-")
    kept, garbage = ids[:keep], ids[keep:]
    with conn.transaction():
        conn.execute("INSERT INTO app.post (id) VALUES (%s)", (f"post-{run_id}",))
        for blob_id in kept:
            conn.execute("INSERT INTO app.blob_attachment (post_id, blob_id) VALUES (%s, %s)", (f"post-{run_id}", blob_id))
    set_unused_since(conn, garbage, "2 days")
    run = RunRef("blobgc_sweep", run_id, False)
    ensure_run(conn, run, NOW)
    sweep_unused_blobs(conn, run, discover_references(conn), cutoff=NOW - timedelta(hours=24), bucket=bucket)
    delete_owed_objects(conn, s3, run)
    return run, kept, garbage


def test_deletion_log_records_delete_marker_version_ids_on_a_versioned_bucket(conn, s3, versioned_bucket, bucket):
    _, _, garbage = swept_run(conn, s3, versioned_bucket, "v1")
    rows = conn.execute("SELECT bucket, key, version_id FROM blobgc.deleted_object WHERE run_id = 'v1' "
                        "ORDER BY key").fetchall()
    assert {k for _, k, _ in rows} == {k for g in garbage for k in blob_object_keys(g)}
    markers = {m["Key"]: m["VersionId"]
               for m in s3.list_object_versions(Bucket=versioned_bucket).get("DeleteMarkers", [])}
    assert {k: v for _, k, v in rows} == markers  # each logged key names the delete marker S3 made

    swept_run(conn, s3, bucket, "u1")  # an unversioned bucket: quiet deletes, no version ids
    assert conn.execute("SELECT count(*), count(version_id) FROM blobgc.deleted_object WHERE run_id = 'u1'"
                        ).fetchone() == (4, 0)


def test_blobgc_restore_undoes_a_sweep_on_a_versioned_bucket(conn, s3, versioned_bucket):
    run, kept, garbage = swept_run(conn, s3, versioned_bucket, "manual__sweep_to_undo", n=4)
    assert object_keys(s3, versioned_bucket) == {k for b in kept for k in blob_object_keys(b)}
    assert not conn.execute("SELECT 1 FROM app.blob WHERE id = ANY(%s)", (garbage,)).fetchall()

    result = airflow("dags", "test", "blobgc_restore", "-c", json.dumps({"run_id": run.run_id}))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    every = {k for b in kept + garbage for k in blob_object_keys(b)}
    assert object_keys(s3, versioned_bucket) == every
    assert s3.get_object(Bucket=versioned_bucket, Key=blob_object_keys(garbage[0])[0])["Body"].read() == b"r" * 100
    restored = conn.execute("SELECT id, filename, size_bytes, unused, updated_at > now() - interval '5 minutes' "
                            "FROM app.blob WHERE id = ANY(%s) ORDER BY id", (garbage,)).fetchall()
    assert restored == [(g, f"{g}.bin", 100, False, True) for g in sorted(garbage)]  # back, and used
    outcomes = dict(conn.execute("SELECT kind || ' ' || outcome, count(*) FROM blobgc.restore_item "
                                 "GROUP BY 1").fetchall())
    assert outcomes == {"object restored": 6, "row restored": 3}


def test_blobgc_restore_refuses_an_unversioned_bucket(conn, s3, bucket):
    run, _, garbage = swept_run(conn, s3, bucket, "manual__unversioned")
    result = airflow("dags", "test", "blobgc_restore", "-c", json.dumps({"run_id": run.run_id}))
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


class RefusingOneKey:
    """A real S3 client whose DeleteObjects refuses one key (AccessDenied), so that key stays owed."""

    def __init__(self, inner, refused: str):
        self.inner, self.refused = inner, refused

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def delete_objects(self, Bucket, Delete):
        allowed = [o for o in Delete["Objects"] if o["Key"] != self.refused]
        response = self.inner.delete_objects(Bucket=Bucket, Delete={**Delete, "Objects": allowed}) if allowed else {}
        refused = [{"Key": self.refused, "Code": "AccessDenied", "Message": "Access Denied"}
                   for o in Delete["Objects"] if o["Key"] == self.refused]
        return {**response, "Errors": response.get("Errors", []) + refused}


def test_restore_says_which_rows_it_cannot_bring_back_and_a_retry_repeats_nothing(conn, s3, versioned_bucket):
    pastes = [create_paste(conn, s3, None, bucket=versioned_bucket, content=f"paste {i}".encode(),
                           expires_at=NOW - timedelta(days=1)) for i in range(3)]
    keys = [content_key(p.content_hash) for p in pastes]
    run = RunRef("blobgc_paste_expiry", "expiry-1", False)
    ensure_run(conn, run, NOW)
    expire_pastes(conn, run, expired_before=NOW, bucket=versioned_bucket)
    delete_owed_objects(conn, RefusingOneKey(s3, keys[2]), run)  # two deleted, one still owed
    assert object_keys(s3, versioned_bucket) == {keys[2]}

    restore = RunRef("blobgc_restore", "restore-1", False)
    plan = plan_restore(conn, s3, "expiry-1")
    assert (plan.source_dag_id, plan.objects_deleted, plan.objects_owed) == ("blobgc_paste_expiry", 2, 1)
    owed = cancel_owed_deletions(conn, restore, plan)
    objects = restore_objects(conn, s3, restore, plan)
    rows = restore_rows(conn, restore, plan)
    assert (owed.cancelled, objects.restored, rows.restored, rows.not_restored) == (1, 2, 0, 1)
    assert object_keys(s3, versioned_bucket) == set(keys)
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0  # the owed key now stays
    (reason,) = rows.reasons
    assert reason.startswith("app.content rows: the expired app.paste rows that referenced them are not in the log")

    again = (cancel_owed_deletions(conn, restore, plan), restore_objects(conn, s3, restore, plan),
             restore_rows(conn, restore, plan))  # a retry of each step repeats nothing
    assert (again[0].cancelled, again[1].restored, again[2].restored) == (0, 0, 0)
    recorded = dict(conn.execute("SELECT kind || ' ' || outcome, count(*) FROM blobgc.restore_item GROUP BY 1"))
    assert recorded == {"owed cancelled": 1, "object restored": 2, "row not_restored": 1}


def test_objects_deleted_before_versioning_are_reported_not_restored(conn, s3, bucket):
    run, _, garbage = swept_run(conn, s3, bucket, "before-versioning")
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    try:
        restore = RunRef("blobgc_restore", "restore-2", False)
        plan = plan_restore(conn, s3, run.run_id)
        objects = restore_objects(conn, s3, restore, plan)
        assert (objects.restored, objects.not_restored) == (0, 4)
        (reason,) = objects.reasons
        assert reason.startswith("no delete marker recorded for this key")
        rows = restore_rows(conn, restore, plan)  # the rows are in the log, but their objects are gone for good
        assert (rows.restored, rows.failed) == (0, 2)
        assert set(rows.reasons) == {"its object is still missing after the restore, so the row was not put back"}
        assert conn.execute("SELECT count(*) FROM app.blob WHERE id = ANY(%s)", (garbage,)).fetchone()[0] == 0
    finally:
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
            versions = [{"Key": v["Key"], "VersionId": v["VersionId"]}
                        for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
            if versions:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": versions, "Quiet": True})


# ---------------------------------------------------------------- issue 15: a restore that verifies
def test_stacked_delete_markers_are_all_removed_and_the_object_verified(conn, s3, versioned_bucket):
    """Finding 8 (stacked delete markers): an at-least-once delete left a second marker over an object; restore
    removes every marker above its newest version, checks it with HEAD, and only then puts the row back."""
    run, _, garbage = swept_run(conn, s3, versioned_bucket, "stacked", n=2)
    raw = blob_object_keys(garbage[0])[0]
    s3.delete_object(Bucket=versioned_bucket, Key=raw)  # a retried DeleteObjects: a second delete marker
    markers = [m for m in s3.list_object_versions(Bucket=versioned_bucket, Prefix=raw).get("DeleteMarkers", [])
               if m["Key"] == raw]
    assert len(markers) == 2
    restore = RunRef("blobgc_restore", "restore-stacked", False)
    plan = plan_restore(conn, s3, run.run_id)
    objects = restore_objects(conn, s3, restore, plan)
    assert (objects.restored, objects.failed) == (2, 0)
    assert s3.get_object(Bucket=versioned_bucket, Key=raw)["Body"].read() == b"r" * 100
    rows = restore_rows(conn, restore, plan)
    assert rows.restored == 1
    assert conn.execute("SELECT count(*) FROM app.blob WHERE id = %s", (garbage[0],)).fetchone()[0] == 1


def test_object_that_cannot_come_back_is_reported_failed_and_its_row_not_reinserted(conn, s3, versioned_bucket):
    """Finding 8: when no version is left under the markers (removed for good meanwhile), the restore says failed,
    and the row whose object is still missing is not put back."""
    run, _, garbage = swept_run(conn, s3, versioned_bucket, "lost", n=3)
    lost_raw = blob_object_keys(garbage[0])[0]
    versions = s3.list_object_versions(Bucket=versioned_bucket, Prefix=lost_raw)
    for v in versions.get("Versions", []):
        if v["Key"] == lost_raw:
            s3.delete_object(Bucket=versioned_bucket, Key=lost_raw, VersionId=v["VersionId"])  # gone for good
    restore = RunRef("blobgc_restore", "restore-lost", False)
    plan = plan_restore(conn, s3, run.run_id)
    objects = restore_objects(conn, s3, restore, plan)
    assert (objects.restored, objects.failed) == (3, 1)
    assert any("no version of this object is left" in reason for reason in objects.reasons)
    rows = restore_rows(conn, restore, plan)
    assert (rows.restored, rows.failed) == (1, 1)
    back = {r[0] for r in conn.execute("SELECT id FROM app.blob WHERE id = ANY(%s)", (garbage,))}
    assert back == {garbage[1]}
    recorded = dict(conn.execute("SELECT kind || ' ' || outcome, count(*) FROM blobgc.restore_item GROUP BY 1"))
    assert recorded == {"object restored": 3, "object failed": 1, "row restored": 1, "row failed": 1}


def test_suspended_versioning_is_refused_with_the_reason(conn, s3, versioned_bucket):
    """Finding 9 (suspended versioning): a bucket whose versioning is Suspended is refused, with why, changing nothing."""
    run, _, garbage = swept_run(conn, s3, versioned_bucket, "suspended")
    s3.put_bucket_versioning(Bucket=versioned_bucket, VersioningConfiguration={"Status": "Suspended"})
    try:
        with pytest.raises(RestoreRefused, match="versioning is Suspended on bucket") as refused:
            plan_restore(conn, s3, run.run_id)
    finally:  # the fixture empties the bucket version by version
        s3.put_bucket_versioning(Bucket=versioned_bucket, VersioningConfiguration={"Status": "Enabled"})
    assert "null version" in str(refused.value) and "Nothing was changed" in str(refused.value)
    assert conn.execute("SELECT count(*) FROM blobgc.restore_item").fetchone()[0] == 0
    assert not conn.execute("SELECT 1 FROM app.blob WHERE id = ANY(%s)", (garbage,)).fetchall()

"""blobgc.collectors.restore: undoing a run on a versioned bucket, verified object by object."""
from __future__ import annotations

from datetime import timedelta

import pytest

from tests.support.gated import expire_due_pastes
from blobgc.collectors.restore import (
    RestoreRefused,
    RestoreResult,
    cancel_owed_deletions,
    plan_restore,
    restore_collection_rows,
    restore_objects,
    restore_rows,
)
from blobgc.kinds.blobs.layouts import blob_keys
from blobgc.kinds.pastes.layouts import content_key
from blobgc.core.outbox import delete_owed_objects
from blobgc.core.runs import RunRef, ensure_run
from demo_app.pastes import create_paste
from tests.helpers import NOW, object_keys
from tests.support.restore import swept_run
from tests.support.shared_object import shared_object_swept_twice


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


def test_deletion_log_records_delete_marker_version_ids_on_a_versioned_bucket(conn, s3, versioned_bucket, bucket):
    _, _, garbage = swept_run(conn, s3, versioned_bucket, "v1")
    rows = conn.execute("SELECT bucket, key, version_id FROM blobgc.deleted_object WHERE run_id = 'v1' "
                        "ORDER BY key").fetchall()
    assert {k for _, k, _ in rows} == {k for g in garbage for k in blob_keys(g)}
    markers = {m["Key"]: m["VersionId"]
               for m in s3.list_object_versions(Bucket=versioned_bucket).get("DeleteMarkers", [])}
    assert {k: v for _, k, v in rows} == markers  # each logged key names the delete marker S3 made

    swept_run(conn, s3, bucket, "u1")  # an unversioned bucket: quiet deletes, no version ids
    assert conn.execute("SELECT count(*), count(version_id) FROM blobgc.deleted_object WHERE run_id = 'u1'"
                        ).fetchone() == (4, 0)


def test_restore_says_which_rows_it_cannot_bring_back_and_a_retry_repeats_nothing(conn, s3, versioned_bucket):
    pastes = [create_paste(conn, s3, None, bucket=versioned_bucket, content=f"paste {i}".encode(),
                           expires_at=NOW - timedelta(days=1)) for i in range(3)]
    keys = [content_key(p.content_hash) for p in pastes]
    run = RunRef("blobgc_paste_expiry", "expiry-1", False)
    ensure_run(conn, run, NOW)
    expire_due_pastes(conn, run, approved_by="tests", expired_before=NOW, bucket=versioned_bucket)
    delete_owed_objects(conn, RefusingOneKey(s3, keys[2]), run)  # two deleted, one still owed
    assert object_keys(s3, versioned_bucket) == {keys[2]}

    restore = RunRef("blobgc_restore", "restore-1", False)
    plan = plan_restore(conn, s3, "expiry-1")
    assert (plan.source_dag_id, plan.objects_deleted, plan.objects_owed) == ("blobgc_paste_expiry", 2, 1)
    owed = cancel_owed_deletions(conn, restore, plan)
    objects = restore_objects(conn, s3, restore, plan)
    rows = restore_rows(conn, s3, restore, plan)
    assert (owed.cancelled, objects.restored, rows.restored, rows.not_restored) == (1, 2, 0, 1)
    assert object_keys(s3, versioned_bucket) == set(keys)
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0  # the owed key now stays
    (reason,) = rows.reasons
    assert reason.startswith("app.content rows: the expired app.paste rows that referenced them are not in the log")

    again = (cancel_owed_deletions(conn, restore, plan), restore_objects(conn, s3, restore, plan),
             restore_rows(conn, s3, restore, plan))  # a retry of each step repeats nothing
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
        rows = restore_rows(conn, s3, restore, plan)  # the rows are in the log, but their objects are gone for good
        assert (rows.restored, rows.failed) == (0, 2)
        assert set(rows.reasons) == {"its object is still missing after the restore, so the row was not put back"}
        assert conn.execute("SELECT count(*) FROM app.blob WHERE id = ANY(%s)", (garbage,)).fetchone()[0] == 0
    finally:
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
            versions = [{"Key": v["Key"], "VersionId": v["VersionId"]}
                        for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
            if versions:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": versions, "Quiet": True})


def test_stacked_delete_markers_are_all_removed_and_the_object_verified(conn, s3, versioned_bucket):
    """Finding 8 (stacked delete markers): an at-least-once delete left a second marker over an object; restore
    removes every marker above its newest version, checks it with HEAD, and only then puts the row back."""
    run, _, garbage = swept_run(conn, s3, versioned_bucket, "stacked", n=2)
    raw = blob_keys(garbage[0])[0]
    s3.delete_object(Bucket=versioned_bucket, Key=raw)  # a retried DeleteObjects: a second delete marker
    markers = [m for m in s3.list_object_versions(Bucket=versioned_bucket, Prefix=raw).get("DeleteMarkers", [])
               if m["Key"] == raw]
    assert len(markers) == 2
    restore = RunRef("blobgc_restore", "restore-stacked", False)
    plan = plan_restore(conn, s3, run.run_id)
    objects = restore_objects(conn, s3, restore, plan)
    assert (objects.restored, objects.failed) == (2, 0)
    assert s3.get_object(Bucket=versioned_bucket, Key=raw)["Body"].read() == b"r" * 100
    rows = restore_rows(conn, s3, restore, plan)
    assert rows.restored == 1
    assert conn.execute("SELECT count(*) FROM app.blob WHERE id = %s", (garbage[0],)).fetchone()[0] == 1


def test_object_that_cannot_come_back_is_reported_failed_and_its_row_not_reinserted(conn, s3, versioned_bucket):
    """Finding 8: when no version is left under the markers (removed for good meanwhile), the restore says failed,
    and the row whose object is still missing is not put back."""
    run, _, garbage = swept_run(conn, s3, versioned_bucket, "lost", n=3)
    lost_raw = blob_keys(garbage[0])[0]
    versions = s3.list_object_versions(Bucket=versioned_bucket, Prefix=lost_raw)
    for v in versions.get("Versions", []):
        if v["Key"] == lost_raw:
            s3.delete_object(Bucket=versioned_bucket, Key=lost_raw, VersionId=v["VersionId"])  # gone for good
    restore = RunRef("blobgc_restore", "restore-lost", False)
    plan = plan_restore(conn, s3, run.run_id)
    objects = restore_objects(conn, s3, restore, plan)
    assert (objects.restored, objects.failed) == (3, 1)
    assert any("no version of this object is left" in reason for reason in objects.reasons)
    rows = restore_rows(conn, s3, restore, plan)
    assert (rows.restored, rows.failed) == (1, 1)
    back = {r[0] for r in conn.execute("SELECT id FROM app.blob WHERE id = ANY(%s)", (garbage,))}
    assert back == {garbage[1]}
    recorded = dict(conn.execute("SELECT kind || ' ' || outcome, count(*) FROM blobgc.restore_item GROUP BY 1"))
    assert recorded == {"object restored": 3, "object failed": 1, "row restored": 1, "row failed": 1}


def test_restore_shared_object_a_run_undone_before_its_drain_puts_back_a_row_whose_object_was_never_made(
        conn, s3, versioned_bucket):
    """Undone before its drain: the owed deletions are cancelled and nothing was deleted. A row whose thumbnail was
    never made (missing before the run, and no run deleted it) is put back as it was, not refused."""
    run, _, garbage = swept_run(conn, s3, versioned_bucket, "undrained", n=3, drain=False)
    never_made = blob_keys(garbage[0])[1]
    s3.delete_object(Bucket=versioned_bucket, Key=never_made)
    for v in s3.list_object_versions(Bucket=versioned_bucket, Prefix=never_made).get("Versions", []):
        s3.delete_object(Bucket=versioned_bucket, Key=never_made, VersionId=v["VersionId"])
    restore = RunRef("blobgc_restore", "restore-undrained", False)
    plan = plan_restore(conn, s3, run.run_id)
    cancel_owed_deletions(conn, restore, plan)
    restore_objects(conn, s3, restore, plan)
    rows = restore_rows(conn, s3, restore, plan)
    assert (rows.restored, rows.failed) == (2, 0)
    assert {r[0] for r in conn.execute("SELECT id FROM app.blob WHERE id = ANY(%s)", (garbage,))} == set(garbage)


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


def undo(conn, s3, bound, source: RunRef, restore_run_id: str, dry_run: bool = False) -> RestoreResult:
    """blobgc_restore's steps for one collection: plan, cancel owed deletions, the objects back, then the rows."""
    restore = RunRef("blobgc_restore", restore_run_id, dry_run)
    plan = plan_restore(conn, s3, source.run_id, source.dag_id)
    assert plan.collections == [bound.name]
    cancel_owed_deletions(conn, restore, plan)
    restore_objects(conn, s3, restore, plan)
    return restore_collection_rows(conn, s3, restore, plan, bound)


def test_restore_shared_object_a_row_whose_shared_object_a_later_run_deleted_is_not_put_back(
        conn, s3, versioned_bucket, tmp_path, monkeypatch):
    """Issue 29, finding 4 (restore-shared-object): A and B share K; the first sweep deletes A and keeps K, the second
    deletes B and K. Undoing the first run alone does not put A back (its object K cannot come back) and names the
    second run; undoing the second run, then the first, brings both rows back with K."""
    runs = shared_object_swept_twice(conn, s3, versioned_bucket, tmp_path, monkeypatch)
    table, bound = f"{runs.schema}.upload", runs.bound

    dry = undo(conn, s3, bound, runs.first, "undo-first-dry", dry_run=True)  # a dry run foresees it
    assert (dry.restored, dry.failed) == (0, 1)
    rows = undo(conn, s3, bound, runs.first, "undo-first")
    assert (rows.restored, rows.failed) == (0, 1)
    (reason,) = rows.reasons
    assert reason == (f"its object {runs.shared} was deleted by blobgc_sweep run {runs.second.run_id!r}, whose undo "
                      "is not part of this restore, so the row was not put back: restore that run first, then this "
                      "one again")
    assert not conn.execute(f"SELECT id FROM {table}").fetchall()  # no row without its object
    assert conn.execute("SELECT item, outcome, detail FROM blobgc.restore_item WHERE restore_run_id = 'undo-first' "
                        "AND kind = 'row'").fetchall() == [(f"{table} 1", "failed", reason)]

    second = undo(conn, s3, bound, runs.second, "undo-second")  # B and K back
    assert (second.restored, second.failed) == (1, 0)
    first = undo(conn, s3, bound, runs.first, "undo-first-again")  # now A too: its object K is there
    assert (first.restored, first.failed) == (1, 0)
    assert {r[0] for r in conn.execute(f"SELECT id FROM {table}")} == {1, 2}
    assert object_keys(s3, versioned_bucket) == {runs.shared, runs.a["thumb"], runs.b["thumb"]}
    assert s3.get_object(Bucket=versioned_bucket, Key=runs.shared)["Body"].read() == b"the same bytes"

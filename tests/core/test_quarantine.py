"""Quarantine (issue 32): owed objects moved aside, verified, purged after their window, and undone from there on an
unversioned bucket; honest figures (bytes deleted are not bytes reclaimed until the copy is purged)."""
from __future__ import annotations

from datetime import timedelta

import pytest

from blobgc.collectors.restore import cancel_owed_deletions, plan_restore, restore_objects, restore_rows
from blobgc.core.quarantine import QuarantinePolicy, parse_days, purge_quarantine, quarantine_key
from blobgc.core.runs import RunRef, ensure_run
from blobgc.core.settings import ConfigurationError
from blobgc.kinds.blobs.layouts import blob_keys
from blobgc.reclaim.receipts import collect_receipt
from tests.helpers import NOW, backdate_object, object_keys
from tests.support.restore import swept_run

DAYS = 7


def quarantined(conn, run_id: str) -> list[tuple]:
    return conn.execute(
        "SELECT key, quarantine_key, size_bytes, days, purged_at IS NOT NULL, restored_at IS NOT NULL "
        "FROM blobgc.quarantine WHERE run_id = %s ORDER BY key", (run_id,)).fetchall()


def figures(conn, dag_id: str, run_id: str) -> tuple:
    return conn.execute("SELECT objects_deleted, bytes_deleted, bytes_reclaimed FROM blobgc.run "
                        "WHERE dag_id = %s AND run_id = %s", (dag_id, run_id)).fetchone()


def reclaimed_today(conn, dag_id: str) -> int:
    row = conn.execute("SELECT bytes_reclaimed FROM blobgc.reclaim_daily WHERE dag_id = %s AND NOT dry_run "
                       "AND day = (now() AT TIME ZONE 'UTC')::date", (dag_id,)).fetchone()
    return int(row[0]) if row else 0


def undo(conn, s3, source: RunRef, restore_run_id: str, dry_run: bool = False):
    restore = RunRef("blobgc_restore", restore_run_id, dry_run)
    plan = plan_restore(conn, s3, source.run_id, source.dag_id)
    cancel_owed_deletions(conn, restore, plan)
    objects = restore_objects(conn, s3, restore, plan)
    rows = restore_rows(conn, s3, restore, plan)
    return objects, rows


def test_quarantine_moves_owed_objects_aside_and_counts_nothing_reclaimed(conn, s3, bucket):
    run, kept, garbage = swept_run(conn, s3, bucket, "manual__q_move", quarantine=QuarantinePolicy({bucket: DAYS}))
    keys = sorted(k for g in garbage for k in blob_keys(g))
    copies = {k: quarantine_key("blobgc_sweep", run.run_id, k) for k in keys}
    assert copies[keys[0]] == f".blobgc-quarantine/blobgc_sweep/manual__q_move/{keys[0]}"
    assert object_keys(s3, bucket) == {k for b in kept for k in blob_keys(b)} | set(copies.values())
    for key, copy in copies.items():  # byte for byte
        assert s3.get_object(Bucket=bucket, Key=copy)["Body"].read() == (b"r" * 100 if key.endswith("raw") else b"t" * 10)
    sizes = {k: 100 if k.endswith("raw") else 10 for k in keys}
    assert quarantined(conn, run.run_id) == [(k, copies[k], sizes[k], DAYS, False, False) for k in keys]
    # the objects left the bucket's view, but nothing left storage yet
    assert figures(conn, "blobgc_sweep", run.run_id) == (len(keys), sum(sizes.values()), 0)
    assert reclaimed_today(conn, "blobgc_sweep") == 0
    # the receipt: where the bytes are, and what quarantine costs (copies at $0.005 per 1,000; storage for 7 days)
    storage = collect_receipt(conn, "blobgc_sweep", run.run_id)["storage"]
    assert (storage["bytes_deleted"], storage["bytes_reclaimed"]) == (sum(sizes.values()), 0)
    held = storage["quarantine"]
    assert (held["objects"], held["held"], held["bytes_held"], held["purged"], held["days"]) == (
        len(keys), len(keys), sum(sizes.values()), 0, DAYS)
    assert storage["usd_copy_requests"] == round(len(keys) / 1000 * 0.005, 6)
    assert storage["usd_quarantine_storage"] == round(sum(sizes.values()) / 2**30 * 0.023 * DAYS / 30, 6)


def test_purge_deletes_copies_past_their_window_and_only_then_counts_them_reclaimed(conn, s3, bucket):
    run, _, garbage = swept_run(conn, s3, bucket, "manual__q_purge", quarantine=QuarantinePolicy({bucket: DAYS}))
    keys = sorted(k for g in garbage for k in blob_keys(g))
    copies = [quarantine_key("blobgc_sweep", run.run_id, k) for k in keys]
    later = ensure_run(conn, RunRef("blobgc_sweep", "manual__q_purge_later", False), NOW)

    early = purge_quarantine(conn, s3, later)  # inside the window: nothing goes
    assert (early.purged, early.held, early.bytes_reclaimed) == (0, len(keys), 0)
    assert set(copies) <= object_keys(s3, bucket)

    for copy in copies[:2]:  # two copies age past the window (by their own LastModified)
        backdate_object(bucket, copy, (DAYS + 1) * 86400)
    dry = purge_quarantine(conn, s3, RunRef("blobgc_sweep", "manual__q_purge_dry", True, later.reference_time))
    assert (dry.purged, dry.bytes_purged) == (2, sum(100 if k.endswith("raw") else 10 for k in keys[:2]))
    assert set(copies) <= object_keys(s3, bucket)  # a dry run deletes nothing

    done = purge_quarantine(conn, s3, later)
    purged_bytes = sum(100 if k.endswith("raw") else 10 for k in keys[:2])
    assert (done.purged, done.held, done.bytes_reclaimed) == (2, len(keys) - 2, purged_bytes)
    assert not set(copies[:2]) & object_keys(s3, bucket)
    assert set(copies[2:]) <= object_keys(s3, bucket)
    assert [r[4] for r in quarantined(conn, run.run_id)] == [True, True] + [False] * (len(keys) - 2)
    # reclaimed by the purging run, on the day the bytes left storage
    assert figures(conn, "blobgc_sweep", later.run_id) == (0, 0, purged_bytes)
    assert reclaimed_today(conn, "blobgc_sweep") == purged_bytes
    again = purge_quarantine(conn, s3, later)  # a retried purge counts nothing twice
    assert (again.purged, again.bytes_reclaimed) == (0, 0)
    assert figures(conn, "blobgc_sweep", later.run_id) == (0, 0, purged_bytes)


def test_undo_from_quarantine_on_an_unversioned_bucket_brings_back_rows_and_objects(conn, s3, bucket):
    run, _, garbage = swept_run(conn, s3, bucket, "manual__q_undo", quarantine=QuarantinePolicy({bucket: DAYS}))
    keys = sorted(k for g in garbage for k in blob_keys(g))
    rewritten = keys[0]  # written again meanwhile by the application: it must be left as it is
    s3.put_object(Bucket=bucket, Key=rewritten, Body=b"new bytes")

    dry_objects, _ = undo(conn, s3, run, "undo__q_dry", dry_run=True)
    assert dry_objects.restored == len(keys)  # a dry run counts what the quarantine holds, touching nothing
    assert not set(keys[1:]) & object_keys(s3, bucket)

    objects, rows = undo(conn, s3, run, "undo__q")
    assert objects.restored == len(keys) - 1
    assert objects.not_restored == 1
    [(detail, n)] = objects.reasons.items()
    assert n == 1 and detail.startswith(f"{rewritten} was written again since it was deleted")
    assert s3.get_object(Bucket=bucket, Key=rewritten)["Body"].read() == b"new bytes"
    for key in keys[1:]:  # byte for byte
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == (b"r" * 100 if key.endswith("raw") else b"t" * 10)
    items = dict(conn.execute("SELECT item, outcome FROM blobgc.restore_item WHERE restore_run_id = 'undo__q' "
                              "AND kind = 'object'").fetchall())
    assert items == {k: ("not_restored" if k == rewritten else "restored") for k in keys}
    assert [r[5] for r in quarantined(conn, run.run_id)] == [k != rewritten for k in keys]
    # every row whose objects are all there comes back (the rewritten key's object exists too)
    back = {r[0] for r in conn.execute("SELECT id FROM app.blob WHERE id = ANY(%s)", (garbage,))}
    assert back == set(garbage) and rows.restored == len(garbage)


def test_undo_after_the_window_says_which_objects_were_purged(conn, s3, bucket):
    run, _, garbage = swept_run(conn, s3, bucket, "manual__q_gone", n=2, quarantine=QuarantinePolicy({bucket: 1}))
    keys = sorted(k for g in garbage for k in blob_keys(g))
    for key in keys:
        backdate_object(bucket, quarantine_key("blobgc_sweep", run.run_id, key), 2 * 86400)
    purge_quarantine(conn, s3, ensure_run(conn, RunRef("blobgc_sweep", "manual__q_gone_purge", False), NOW))

    objects, _ = undo(conn, s3, run, "undo__q_gone")
    assert (objects.restored, objects.not_restored) == (0, len(keys))
    [(detail, n)] = objects.reasons.items()
    assert n == len(keys) and detail.startswith("purged from quarantine at ") and "after its 1-day window" in detail
    assert not set(keys) & object_keys(s3, bucket)


def test_a_copy_left_unrecorded_by_a_failed_drain_is_recorded_by_the_next(conn, s3, bucket):
    """The drain copied and deleted, then failed before it committed: the key is still owed, its original gone. The
    next drain finds the copy and records it, so no copy in quarantine is ever unknown to blobgc."""
    run, _, garbage = swept_run(conn, s3, bucket, "manual__q_crash", n=2, drain=False)
    keys = sorted(blob_keys(garbage[0]))
    for key in keys:  # what the failed drain did in S3
        copy = quarantine_key("blobgc_sweep", run.run_id, key)
        s3.copy_object(Bucket=bucket, Key=copy, CopySource={"Bucket": bucket, "Key": key})
        s3.delete_object(Bucket=bucket, Key=key)
    from blobgc.core.outbox import delete_owed_objects

    result = delete_owed_objects(conn, s3, run, quarantine=QuarantinePolicy({bucket: DAYS}))
    assert result.absent == 0 and result.quarantined == len(keys)
    assert [r[0] for r in quarantined(conn, run.run_id)] == keys


def test_quarantine_days_come_from_the_collection_the_kind_and_the_bucket():
    policy = QuarantinePolicy({"pastes": 3, "blobs": 2, "media-bucket": 9}, {"studio_assets": 5, "app_blob": 4})
    assert policy.days("app.content", "blobgc") == 3  # seed 002's content objects: kind pastes
    assert policy.days("app.image", "blobgc") == 0
    assert policy.days("app.blob", "blobgc") == 4  # kind blobs (2) and its collection app_blob (4): the longest
    assert policy.days("collection:studio_assets", "other") == 5
    assert policy.days("collection:studio_assets", "media-bucket") == 9  # the longest that applies
    assert policy.days("collection:nope", "blobgc") == 0
    assert parse_days('{"pastes": 7, "b": 0}') == {"pastes": 7, "b": 0}
    assert parse_days("") == {}
    for bad, why in (("[1]", "JSON object"), ('{"x": -1}', "'x' must be a whole number"),
                     ('{"x": 1.5}', "'x' must be a whole number"), ("{", "not JSON")):
        with pytest.raises(ConfigurationError, match=why):
            parse_days(bad)


def test_a_versioned_bucket_without_a_noncurrent_rule_is_flagged_and_reclaims_nothing(conn, s3, versioned_bucket):
    run, _, garbage = swept_run(conn, s3, versioned_bucket, "manual__v_norule")
    deleted = sum(100 + 10 for _ in garbage)
    assert figures(conn, "blobgc_sweep", run.run_id) == (2 * len(garbage), deleted, 0)
    assert conn.execute("SELECT versioning, noncurrent_days, bytes_noncurrent FROM blobgc.run_bucket "
                        "WHERE run_id = %s", (run.run_id,)).fetchall() == [("Enabled", None, deleted)]
    day = conn.execute("SELECT bytes_deleted, bytes_reclaimed, bytes_noncurrent, noncurrent_freed_by "
                       "FROM blobgc.reclaim_daily WHERE dag_id = 'blobgc_sweep' AND NOT dry_run").fetchone()
    assert day == (deleted, 0, deleted, None)
    storage = collect_receipt(conn, "blobgc_sweep", run.run_id)["storage"]
    assert (storage["bytes_deleted"], storage["bytes_reclaimed"]) == (deleted, 0)
    assert storage["keeps_every_version"] == [versioned_bucket]
    [b] = storage["buckets"]
    assert b["warning"] == ("this bucket keeps every deleted version; nothing is reclaimed until a lifecycle rule "
                            "expires noncurrent versions")
    assert "NoncurrentVersionExpiration" in b["suggested_rule"]


def test_a_versioned_bucket_with_a_noncurrent_rule_says_when_the_bytes_are_freed(conn, s3, versioned_bucket):
    s3.put_bucket_lifecycle_configuration(Bucket=versioned_bucket, LifecycleConfiguration={"Rules": [
        {"ID": "expire-noncurrent", "Status": "Enabled", "Filter": {"Prefix": ""},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 30}}]})
    run, _, garbage = swept_run(conn, s3, versioned_bucket, "manual__v_rule")
    deleted = sum(100 + 10 for _ in garbage)
    assert figures(conn, "blobgc_sweep", run.run_id) == (2 * len(garbage), deleted, 0)
    started = conn.execute("SELECT started_at FROM blobgc.run WHERE run_id = %s", (run.run_id,)).fetchone()[0]
    storage = collect_receipt(conn, "blobgc_sweep", run.run_id)["storage"]
    assert storage["keeps_every_version"] == []
    [b] = storage["buckets"]
    assert (b["noncurrent_days"], b["bytes_noncurrent"], b["warning"]) == (30, deleted, None)
    freed = started + timedelta(days=31)
    assert b["freed_by"] == freed.isoformat()
    day = conn.execute("SELECT bytes_reclaimed, noncurrent_freed_by FROM blobgc.reclaim_daily "
                       "WHERE dag_id = 'blobgc_sweep' AND NOT dry_run").fetchone()
    assert day == (0, freed)  # S3 expires a version within a day of its NoncurrentDays


def test_the_delete_markers_a_versioned_bucket_keeps_are_counted_as_a_cleanup_item(conn, s3, versioned_bucket):
    run, _, garbage = swept_run(conn, s3, versioned_bucket, "manual__v_markers")
    [b] = collect_receipt(conn, "blobgc_sweep", run.run_id)["storage"]["buckets"]
    assert (b["delete_markers"], b["expired_markers"]) == (2 * len(garbage), False)  # no rule removes them
    s3.put_bucket_lifecycle_configuration(Bucket=versioned_bucket, LifecycleConfiguration={"Rules": [
        {"ID": "expire", "Status": "Enabled", "Filter": {"Prefix": ""},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 7}, "Expiration": {"ExpiredObjectDeleteMarker": True}}]})
    later, _, more = swept_run(conn, s3, versioned_bucket, "manual__v_markers_2")
    [b] = collect_receipt(conn, "blobgc_sweep", later.run_id)["storage"]["buckets"]
    assert (b["delete_markers"], b["expired_markers"], b["noncurrent_days"]) == (2 * len(more), True, 7)


class WritesDuringCopy:
    """A real S3 client under which the application writes `key` again just after blobgc copied it."""

    def __init__(self, inner, key: str):
        self.inner, self.key, self.done = inner, key, False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def copy_object(self, **kwargs):
        answer = self.inner.copy_object(**kwargs)
        if kwargs["CopySource"]["Key"] == self.key and not self.done:
            self.done = True
            self.inner.put_object(Bucket=kwargs["Bucket"], Key=self.key, Body=b"written during the copy")
        return answer


def test_an_object_written_again_while_it_was_copied_is_not_deleted_until_copied_again(conn, s3, bucket):
    from blobgc.core.outbox import delete_owed_objects

    run, _, garbage = swept_run(conn, s3, bucket, "manual__q_race", n=2, drain=False)
    raw, thumb = blob_keys(garbage[0])
    policy = QuarantinePolicy({bucket: DAYS})
    first = delete_owed_objects(conn, WritesDuringCopy(s3, raw), run, quarantine=policy)
    assert (first.quarantined, first.failed) == (1, 1)
    assert s3.get_object(Bucket=bucket, Key=raw)["Body"].read() == b"written during the copy"  # not deleted
    copy = quarantine_key("blobgc_sweep", run.run_id, raw)
    assert copy not in object_keys(s3, bucket)  # the stale copy is not left behind, unrecorded
    assert [r[0] for r in quarantined(conn, run.run_id)] == [thumb]

    second = delete_owed_objects(conn, s3, run, quarantine=policy)  # the next drain copies the new bytes, then deletes
    assert (second.quarantined, second.failed) == (1, 0)
    assert s3.get_object(Bucket=bucket, Key=copy)["Body"].read() == b"written during the copy"
    assert raw not in object_keys(s3, bucket)


def test_with_the_collections_file_unreadable_a_collections_owed_objects_stay_owed():
    from blobgc.core.quarantine import QuarantineUnknown

    policy = QuarantinePolicy({"pastes": 3}, {}, collections_unknown="the file is not YAML")
    assert policy.days("app.content", "blobgc") == 3  # a kind's own source: known
    with pytest.raises(QuarantineUnknown, match="collection 'studio_assets': its quarantine_days are unknown"):
        policy.days("collection:studio_assets", "blobgc")

"""blobgc.core.outbox: owed deletions are drained per bucket, retried with backoff, parked, and never forgotten."""
from __future__ import annotations

from datetime import timedelta

import pytest
from botocore.exceptions import ClientError

from blobgc.core.outbox import (
    DEFAULT_POLICY,
    PARK_AFTER,
    DrainPolicy,
    delete_owed_objects,
    owed_summary,
    record_deletions,
    unpark_owed_deletions,
)
from blobgc.core.runs import RunRef, ensure_run
from blobgc.reclaim.report import collect_report
from blobgc.kinds.blobs.layouts import blob_keys
from tests.helpers import NOW, object_keys, s3_outage


DAG = "blobgc_outbox_test"


FAST = DrainPolicy(park_after=3, backoff_base=timedelta(0))


def new_run(conn, run_id: str) -> RunRef:
    return ensure_run(conn, RunRef(DAG, run_id), NOW)


def owe(conn, run: RunRef, bucket: str, keys: list[str], sizes: list[int | None] | None = None) -> None:
    with conn.transaction():
        record_deletions(conn, run, source="test.objects", bucket=bucket, keys=keys,
                         sizes=sizes if sizes is not None else [None] * len(keys))


def put(s3, bucket: str, *keys: str, body: bytes = b"x" * 7) -> None:
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=body)


def outbox_rows(conn) -> list[tuple]:
    return conn.execute("SELECT bucket, attempts, failures, next_attempt_at IS NOT NULL, parked_at IS NOT NULL "
                        "FROM blobgc.outbox ORDER BY log_id").fetchall()


class VersioningDenied:
    """A real S3 client whose GetBucketVersioning on one bucket answers AccessDenied (a policy that forbids it)."""

    def __init__(self, inner, bucket: str):
        self.inner, self.bucket = inner, bucket

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def get_bucket_versioning(self, Bucket):
        if Bucket == self.bucket:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"},
                               "ResponseMetadata": {"HTTPStatusCode": 403}}, "GetBucketVersioning")
        return self.inner.get_bucket_versioning(Bucket=Bucket)


def test_poisoned_row_no_such_bucket_does_not_block_the_rest(conn, s3, bucket):
    """Finding 10 (poisoned row): a row owed in a bucket that does not exist fails alone; the others drain."""
    run = new_run(conn, "poison")
    put(s3, bucket, "good/a", "good/b")
    owe(conn, run, "blobgc-no-such-bucket-test", ["gone/a"])
    owe(conn, run, bucket, ["good/a", "good/b"])
    drained = delete_owed_objects(conn, s3, run, policy=FAST)
    assert (drained.objects_deleted, drained.failed, drained.parked) == (2, 1, 0)
    assert object_keys(s3, bucket) == set()
    assert outbox_rows(conn) == [("blobgc-no-such-bucket-test", 1, 1, False, False)]
    errors = conn.execute("SELECT last_errors ->> 'gone/a' FROM blobgc.outbox").fetchone()[0]
    assert errors.startswith("NoSuchBucket")


def test_poisoned_row_access_denied_on_versioning_is_parked_after_n_attempts(conn, s3, bucket):
    """Finding 10: AccessDenied on GetBucketVersioning fails that bucket's row, which is parked after 3 failures in a
    row; it stays owed, shows in the report, and unparking puts it back in line."""
    other = f"{bucket}-other"
    s3.create_bucket(Bucket=other)
    try:
        denied = VersioningDenied(s3, other)
        run = new_run(conn, "denied")
        put(s3, other, "kept/x")
        owe(conn, run, other, ["kept/x"], [7])
        for attempt in range(1, 4):
            put(s3, bucket, f"fine/{attempt}")
            owe(conn, run, bucket, [f"fine/{attempt}"])
            drained = delete_owed_objects(conn, denied, new_run(conn, f"denied-{attempt}"), policy=FAST)
            assert drained.objects_deleted == 1  # the healthy bucket drains every time
        assert drained.parked == 1 and drained.owed_after == 1
        assert outbox_rows(conn) == [(other, 3, 3, False, True)]
        assert owed_summary(conn, DAG)[3] == 1
        (owed,) = [o for o in collect_report(conn)["owed"] if o["bucket"] == other]
        assert owed["parked"] == 1 and "AccessDenied" in owed["last_errors"]

        skipped = delete_owed_objects(conn, s3, new_run(conn, "while-parked"), policy=FAST)
        assert (skipped.objects_deleted, skipped.failed, skipped.parked) == (0, 0, 1)  # parked: not tried
        assert object_keys(s3, other) == {"kept/x"}

        assert unpark_owed_deletions(conn, DAG) == 1
        after = delete_owed_objects(conn, s3, new_run(conn, "unparked"), policy=FAST)
        assert (after.objects_deleted, after.parked, after.owed_after) == (1, 0, 0)
        assert object_keys(s3, other) == set()
    finally:
        s3.delete_bucket(Bucket=other)


def test_failing_row_backs_off_between_attempts(conn, s3, bucket):
    """Finding 10 (backoff): after its second failure in a row a row waits; once the wait is over (backdated here,
    as time is never faked forward) it is tried again."""
    run = new_run(conn, "backoff")
    owe(conn, run, "blobgc-no-such-bucket-test", ["gone/a"])
    policy = DrainPolicy(park_after=5, backoff_base=timedelta(hours=1))
    delete_owed_objects(conn, s3, run, policy=policy)
    delete_owed_objects(conn, s3, run, policy=policy)
    assert outbox_rows(conn) == [("blobgc-no-such-bucket-test", 2, 2, True, False)]
    waiting = delete_owed_objects(conn, s3, run, policy=policy)
    assert waiting.failed == 0 and outbox_rows(conn)[0][1] == 2  # not due: not tried
    with conn.transaction():
        conn.execute("UPDATE blobgc.outbox SET next_attempt_at = now() - interval '1 second'")
    delete_owed_objects(conn, s3, run, policy=policy)
    assert outbox_rows(conn)[0][1:3] == (3, 3)


def test_a_key_no_retry_can_delete_is_parked_after_the_documented_five_failures(conn, s3, bucket):
    """The default policy, as the module documents it: a row whose key fails for good (NoSuchBucket) is tried again
    with a growing backoff and parked on its fifth failure in a row; parked, it stays owed and is not tried again.
    Each backoff is ended in SQL, as if the wait had passed (time is never faked forward)."""
    assert PARK_AFTER == 5 and DEFAULT_POLICY.park_after == PARK_AFTER
    owe(conn, new_run(conn, "refused-for-good"), "blobgc-no-such-bucket-test", ["gone/a"])
    healthy = ["fine/0", "fine/1", "fine/2", "fine/3", "fine/4"]

    def row() -> tuple:
        return conn.execute("SELECT attempts, failures, parked_at IS NOT NULL, "
                            "extract(epoch FROM next_attempt_at - now()) FROM blobgc.outbox WHERE bucket <> %s",
                            (bucket,)).fetchone()

    for failure in range(1, PARK_AFTER + 1):
        put(s3, bucket, healthy[failure - 1])
        owe(conn, new_run(conn, f"healthy-{failure}"), bucket, [healthy[failure - 1]])
        drained = delete_owed_objects(conn, s3, new_run(conn, f"drain-{failure}"))  # the default policy
        assert (drained.objects_deleted, drained.failed) == (1, 1)  # the healthy row drains every time
        attempts, failures, parked, wait_s = row()
        assert (attempts, failures, parked) == (failure, failure, failure == PARK_AFTER)
        assert drained.parked == (1 if failure == PARK_AFTER else 0) and drained.owed_after == 1
        if failure == PARK_AFTER:
            break
        backoff = DEFAULT_POLICY.backoff(failure).total_seconds()
        if not backoff:  # after the first failure: due again at once
            assert wait_s is None
            continue
        assert backoff - 60 < wait_s <= backoff  # due again only once the backoff is over
        waiting = delete_owed_objects(conn, s3, new_run(conn, f"too-early-{failure}"))
        assert waiting.failed == 0 and row()[0] == failure  # not due: not tried
        with conn.transaction():
            conn.execute("UPDATE blobgc.outbox SET next_attempt_at = now() - interval '1 second' WHERE bucket <> %s",
                         (bucket,))
    assert [DEFAULT_POLICY.backoff(f).total_seconds() for f in range(1, PARK_AFTER)] == [0, 60, 240, 960]

    with conn.transaction():  # even due, a parked row is not tried again
        conn.execute("UPDATE blobgc.outbox SET next_attempt_at = now() - interval '1 second'")
    later = delete_owed_objects(conn, s3, new_run(conn, "while-parked"))
    assert (later.failed, later.parked, later.owed_after) == (0, 1, 1)
    assert row()[:3] == (PARK_AFTER, PARK_AFTER, True)
    errors = conn.execute("SELECT last_errors ->> 'gone/a' FROM blobgc.outbox").fetchone()[0]
    assert errors.startswith("NoSuchBucket")
    assert owed_summary(conn, DAG)[3] == 1
    assert object_keys(s3, bucket) == set()


def test_transient_outage_of_one_bucket_drains_the_others_then_fails(conn, s3, bucket):
    """Finding 10: S3 down for one bucket keeps its keys owed (not parked) and fails the drain after the rest drained."""
    other = f"{bucket}-down"
    s3.create_bucket(Bucket=other)
    try:
        run = new_run(conn, "outage")
        put(s3, other, "later/a")
        put(s3, bucket, "now/a", "now/b")
        owe(conn, run, other, ["later/a"])
        owe(conn, run, bucket, ["now/a", "now/b"])
        s3_outage(other, True)
        try:
            with pytest.raises(ClientError, match="ServiceUnavailable"):
                delete_owed_objects(conn, s3, run, policy=FAST)
        finally:
            s3_outage(other, False)
        assert object_keys(s3, bucket) == set()
        assert outbox_rows(conn) == [(other, 1, 0, False, False)]
        again = delete_owed_objects(conn, s3, run, policy=FAST)
        assert (again.objects_deleted, again.owed_after) == (1, 0)
    finally:
        s3.delete_bucket(Bucket=other)


def test_drain_counts_store_reported_sizes_and_settles_absent_keys(conn, s3, bucket):
    """Finding 13: a key of unknown size is asked of the store (its real size, or absent: not counted); a size
    recorded when the object was written is used as it is."""
    run = new_run(conn, "sizes")
    put(s3, bucket, "sz/a", body=b"a" * 11)
    put(s3, bucket, "sz/b", body=b"b" * 13)
    owe(conn, run, bucket, ["sz/a", "sz/b", "sz/never-written"], [None, 13, None])
    drained = delete_owed_objects(conn, s3, run)
    assert (drained.objects_deleted, drained.bytes_reclaimed, drained.absent) == (2, 24, 1)
    rows = conn.execute("SELECT outcome, keys, sizes FROM blobgc.deletion_settlement ORDER BY outcome").fetchall()
    assert rows == [("absent", ["sz/never-written"], None), ("deleted", ["sz/a", "sz/b"], [11, 13])]


def test_a_bucket_of_unknown_store_keeps_its_owed_objects_owed_while_the_others_drain(conn, s3, bucket,
                                                                                     versioned_bucket):
    """Issue 33: with the collections file unusable, the store of a collection's bucket is unknown (StoreUnknown):
    its owed objects stay owed, untouched, with the reason; the owed objects of a bucket whose store is known drain."""
    from blobgc.core.objects import StoreUnknown
    from tests.support.restore import swept_run

    class Routed:
        """As dag_kit's StoreByBucket routes with the file unusable: `bucket` known, any other bucket refused."""

        def __getattr__(self, name):
            def call(**kwargs):
                if kwargs.get("Bucket") not in (None, bucket):
                    raise StoreUnknown(kwargs["Bucket"], "the collections file is unusable (test)")
                return getattr(s3, name)(**kwargs)
            return call

        def get_paginator(self, name):
            return s3.get_paginator(name)

    known, _, known_garbage = swept_run(conn, s3, bucket, "manual__known", drain=False)
    other, _, other_garbage = swept_run(conn, s3, versioned_bucket, "manual__other", drain=False)
    drain = delete_owed_objects(conn, Routed(), ensure_run(conn, RunRef("blobgc_sweep", "manual__drain"), NOW))
    owed = {(b, k) for b, k in conn.execute("SELECT bucket, key FROM blobgc.deleted_object WHERE owed")}
    assert owed == {(versioned_bucket, k) for g in other_garbage for k in blob_keys(g)}
    assert not {k for g in known_garbage for k in blob_keys(g)} & object_keys(s3, bucket)
    assert {k for g in other_garbage for k in blob_keys(g)} <= object_keys(s3, versioned_bucket)
    errors = {e for (e,) in conn.execute("SELECT DISTINCT value FROM blobgc.outbox, jsonb_each_text(last_errors)")}
    assert errors == {f"bucket '{versioned_bucket}': its store is unknown, because the collections file is unusable "
                      "(test); its objects are left alone"}
    assert drain.objects_deleted == 2 * len(known_garbage)

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
from tests.helpers import NOW, bulk_put, object_keys, s3_outage
from tests.support.stores import StoreCalls


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

        def client_for(self, name):
            if name != bucket:
                raise StoreUnknown(name, "the collections file is unusable (test)")
            return s3

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


# ------------------------------------------------------- sizes and existence learnt in bulk (issue 34)
def size_of(i: int) -> int:
    return 1 + (i * 53) % 700


def test_owed_keys_of_unknown_size_are_listed_ahead_and_counted_exactly(conn, s3, bucket):
    """3,003 owed keys of unknown size over 4 log rows (across the 1000-key boundary), scattered among 6,000 objects
    (one key in two is owed, in shuffled log order): the drain lists them ahead, with no HEAD; objects and bytes are
    exactly those of the objects that existed; the 63 never written are settled absent, never counted."""
    import random

    bulk_put(bucket, [(f"u/{i:05d}", size_of(i)) for i in range(6000) if i % 47])
    owed = [i for i in range(0, 6006, 2)]
    random.Random(34).shuffle(owed)
    run = new_run(conn, "bulk-sizes")
    for start in range(0, len(owed), 1000):
        owe(conn, run, bucket, [f"u/{i:05d}" for i in owed[start:start + 1000]])
    asked = StoreCalls(s3)
    drained = delete_owed_objects(conn, asked, run)
    existed = [i for i in owed if i % 47 and i < 6000]
    assert (drained.objects_deleted, drained.bytes_reclaimed) == (len(existed), sum(size_of(i) for i in existed))
    assert drained.absent == len(owed) - len(existed) and drained.owed_after == 0
    assert asked.heads == 0 and asked.listed <= 2 * 6000, (asked.pages, asked.listed)
    assert object_keys(s3, bucket) == {f"u/{i:05d}" for i in range(1, 6000, 2) if i % 47}
    settled = dict(conn.execute("SELECT outcome, sum(cardinality(keys)) FROM blobgc.deletion_settlement "
                                "GROUP BY outcome").fetchall())
    assert settled == {"deleted": len(existed), "absent": len(owed) - len(existed)}


def test_sparse_owed_keys_are_headed_and_counted_exactly(conn, s3, bucket):
    """Owed keys one in 400 of the bucket's objects: a listing page would settle too few, so they are HEADed; the
    figures are as exact."""
    bulk_put(bucket, [(f"s/{i:05d}", size_of(i)) for i in range(8000)])
    owed = [f"s/{i:05d}" for i in range(0, 8000, 400)] + ["s/never-1", "s/never-2"]
    run = new_run(conn, "sparse-sizes")
    owe(conn, run, bucket, owed)
    asked = StoreCalls(s3)
    drained = delete_owed_objects(conn, asked, run)
    assert (drained.objects_deleted, drained.bytes_reclaimed, drained.absent) == (
        20, sum(size_of(i) for i in range(0, 8000, 400)), 2)
    assert asked.heads >= 6 and asked.listed < 8000, (asked.pages, asked.heads)


def test_a_key_judged_by_its_age_is_asked_just_before_its_delete_and_kept_when_written_since(conn, s3, bucket):
    """Keys logged with `modified_before` are never answered by the listing ahead: each is asked just before its
    own claim is deleted, and an object written at or after the moment stays; the keys of unknown size beside it are
    listed ahead as usual."""
    from datetime import datetime, timezone

    from tests.helpers import backdate_object

    bulk_put(bucket, [(f"m/{i:04d}", size_of(i)) for i in range(1200)])
    for i in range(0, 1200, 2):
        backdate_object(bucket, f"m/{i:04d}", 7200)  # the even ones were written two hours ago
    cutoff = datetime.now(timezone.utc) - timedelta(hours=1)
    run = new_run(conn, "judged-by-age")
    with conn.transaction():
        record_deletions(conn, run, source="test.objects", bucket=bucket, keys=[f"m/{i:04d}" for i in range(1001)],
                         sizes=[size_of(i) for i in range(1001)], modified_before=cutoff)
    owe(conn, run, bucket, [f"m/{i:04d}" for i in range(1001, 1200)])
    drained = delete_owed_objects(conn, s3, run)
    judged_old = [i for i in range(1001) if i % 2 == 0]
    assert drained.objects_deleted == len(judged_old) + 199
    assert drained.bytes_reclaimed == sum(size_of(i) for i in judged_old + list(range(1001, 1200)))
    assert object_keys(s3, bucket) == {f"m/{i:04d}" for i in range(1, 1001, 2)}
    kept = conn.execute("SELECT sum(cardinality(keys)) FROM blobgc.deletion_settlement WHERE outcome = 'kept'")
    assert kept.fetchone()[0] == 500


def test_an_answer_listed_ahead_is_used_only_while_fresh(conn, s3, bucket):
    """A claim whose rows the last listing covers takes its answer while it is younger than `max_age`; an older one
    is asked again (the listing is redone), so an object is never judged by a stale listing."""
    from blobgc.core.outbox import ListedAhead

    bulk_put(bucket, [(f"f/{i:04d}", size_of(i)) for i in range(300)])
    run = new_run(conn, "fresh")
    for start in range(0, 300, 100):
        owe(conn, run, bucket, [f"f/{i:04d}" for i in range(start, start + 100)])
    now = [0.0]
    ahead = ListedAhead(DAG, max_age=30.0, clock=lambda: now[0])
    rows = conn.execute("SELECT o.log_id, o.bucket, l.source, l.keys, l.sizes, o.failures, l.modified_before, "
                        "l.run_id FROM blobgc.outbox o JOIN blobgc.deletion_log l ON l.id = o.log_id "
                        "WHERE o.dag_id = %s ORDER BY o.log_id", (DAG,)).fetchall()
    first = ahead.for_rows(conn, s3, rows[:1])
    assert ahead.listings == 1 and len(first[bucket]) == 100
    assert ahead.window is not None and len(ahead.window.listed[bucket]) == 300  # the rows after it are listed too
    s3.delete_object(Bucket=bucket, Key="f/0150")
    now[0] = 29.0
    assert ahead.for_rows(conn, s3, rows[1:2])[bucket]["f/0150"] is not None and ahead.listings == 1
    now[0] = 31.0
    assert ahead.for_rows(conn, s3, rows[1:2])[bucket]["f/0150"] is None and ahead.listings == 2


def test_a_window_that_lists_slowly_is_halved_so_its_answers_are_used_while_fresh(conn, s3, bucket):
    """Where listing a window takes more than a third of max_age (sparse keys HEADed, a throttled store), the next
    windows list half as many keys, down to READ_AHEAD_MIN_KEYS: a window is not stale before its claims come."""
    from blobgc.core.outbox import READ_AHEAD_MIN_KEYS, ListedAhead

    bulk_put(bucket, [(f"s/{i:04d}", size_of(i)) for i in range(50)])
    run = new_run(conn, "slow")
    owe(conn, run, bucket, [f"s/{i:04d}" for i in range(50)])
    rows = conn.execute("SELECT o.log_id, o.bucket, l.source, l.keys, l.sizes, o.failures, l.modified_before, "
                        "l.run_id FROM blobgc.outbox o JOIN blobgc.deletion_log l ON l.id = o.log_id "
                        "WHERE o.dag_id = %s ORDER BY o.log_id", (DAG,)).fetchall()
    ticks = iter([0.0, 11.0] + [100.0] * 10)  # asked at 0, listed at 11 s: more than 30 / 3
    ahead = ListedAhead(DAG, keys=4 * READ_AHEAD_MIN_KEYS, max_age=30.0, clock=lambda: next(ticks))
    ahead.list_window(s3, ahead.owed_from(conn, rows[0][0], rows[0][0]))
    assert ahead.keys == 2 * READ_AHEAD_MIN_KEYS


def test_the_next_window_is_listed_in_the_background_once_the_claims_are_halfway(conn, s3, bucket):
    """Windows of 100 keys over 3 log rows of 100: the first claim lists its window and starts the next one in the
    background; the next claim takes that one (no listing of its own), and the answers are exact."""
    from blobgc.core.outbox import ListedAhead

    bulk_put(bucket, [(f"w/{i:04d}", size_of(i)) for i in range(300) if i % 7])
    run = new_run(conn, "background")
    for start in range(0, 300, 100):
        owe(conn, run, bucket, [f"w/{i:04d}" for i in range(start, start + 100)])
    rows = conn.execute("SELECT o.log_id, o.bucket, l.source, l.keys, l.sizes, o.failures, l.modified_before, "
                        "l.run_id FROM blobgc.outbox o JOIN blobgc.deletion_log l ON l.id = o.log_id "
                        "WHERE o.dag_id = %s ORDER BY o.log_id", (DAG,)).fetchall()
    with ListedAhead(DAG, keys=100) as ahead:
        first = ahead.for_rows(conn, s3, rows[:1])[bucket]
        assert set(first) == {f"w/{i:04d}" for i in range(100)} and ahead.pending is not None
        second = ahead.for_rows(conn, s3, rows[1:2])[bucket]
        assert ahead.listings == 2 and ahead.pending is not None  # the third window is under way already
        third = ahead.for_rows(conn, s3, rows[2:3])[bucket]
        assert ahead.listings == 3
    answers = {**first, **second, **third}
    assert {k: s.size for k, s in answers.items() if s is not None} == {
        f"w/{i:04d}": size_of(i) for i in range(300) if i % 7}
    assert {k for k, s in answers.items() if s is None} == {f"w/{i:04d}" for i in range(0, 300, 7)}


def test_a_key_owed_twice_is_counted_once_though_both_claims_took_one_listing(conn, s3, bucket):
    """Content shared by two rows owes its object twice, in two claims whose other answers come from one listing
    ahead: the key owed twice is left out of it and asked by each claim itself, just before it deletes (two drains
    side by side must not both count it from one answer); the first claim deletes and counts it, the second
    settles it absent and never counts it."""
    bulk_put(bucket, [(f"t/{i:02d}", size_of(i)) for i in range(20)])
    run = new_run(conn, "owed-twice")
    owe(conn, run, bucket, [f"t/{i:02d}" for i in range(10)])
    owe(conn, run, bucket, [f"t/{i:02d}" for i in range(9, 20)])  # t/09 again
    asked = StoreCalls(s3)
    drained = delete_owed_objects(conn, asked, run, batch_size=10, concurrency=1)
    assert (drained.objects_deleted, drained.bytes_reclaimed, drained.absent) == (
        20, sum(size_of(i) for i in range(20)), 1)
    assert asked.heads == 2 and object_keys(s3, bucket) == set()  # t/09, by each of its two claims

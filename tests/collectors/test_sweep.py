"""blobgc.collectors.sweep: seed 000's sweep after the grace, with the re-check that no reference appeared."""
from __future__ import annotations

import random
import threading
from datetime import timedelta

import psycopg
import pytest
from botocore.exceptions import EndpointConnectionError

from blobgc.collectors.sweep import sweep_unused_blobs
from blobgc.core.clients import s3_client
from blobgc.core.key_space import split_key_space
from blobgc.core.keys import blob_keys
from blobgc.core.outbox import delete_owed_objects
from blobgc.core.references import ReferenceSet, discover_references
from blobgc.core.runs import RunRef, ensure_run, finish_run
from tests.helpers import NOW, deny_deletes, make_blobs, object_keys, set_unused_since


CUTOFF = NOW - timedelta(hours=24)


def new_run(conn, run_id: str, dry_run: bool = False) -> RunRef:
    run = RunRef("blobgc_sweep", run_id, dry_run)
    ensure_run(conn, run, NOW)
    return run


def sweep(conn, bucket, run, *, refs=None, batch_size=1000, cutoff=CUTOFF):
    return sweep_unused_blobs(conn, run, refs or discover_references(conn), cutoff=cutoff, bucket=bucket,
                              batch_size=batch_size)


def existing(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT id FROM app.blob")}


def owed(conn) -> list[tuple[str, int, str | None]]:
    """(key, attempts, last error) of every owed object deletion."""
    return conn.execute(
        "SELECT k.key, o.attempts, o.last_errors ->> k.key FROM blobgc.outbox o "
        "JOIN blobgc.deletion_log l ON l.id = o.log_id "
        "CROSS JOIN LATERAL unnest(coalesce(o.keys, l.keys)) AS k(key) ORDER BY 1"
    ).fetchall()


def attach(conn, post_id: str, blob_id: str) -> None:
    conn.execute("INSERT INTO app.post (id) VALUES (%s) ON CONFLICT DO NOTHING", (post_id,))
    conn.execute("INSERT INTO app.blob_attachment (post_id, blob_id) VALUES (%s, %s)", (post_id, blob_id))


class RefusingClient:
    """A real S3 client whose DeleteObjects answers 200 with `Errors` for chosen keys (AccessDenied)."""

    def __init__(self, inner, refuse: set[str]):
        self.inner, self.refuse = inner, refuse

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def delete_objects(self, Bucket, Delete):
        allowed = [o for o in Delete["Objects"] if o["Key"] not in self.refuse]
        if allowed:
            self.inner.delete_objects(Bucket=Bucket, Delete={"Objects": allowed, "Quiet": True})
        return {"Errors": [{"Key": o["Key"], "Code": "AccessDenied", "Message": "Access Denied"}
                           for o in Delete["Objects"] if o["Key"] in self.refuse]}


def test_only_blobs_unused_longer_than_the_grace_are_deleted(conn, s3, bucket):
    old, recent, used = make_blobs(conn, s3, bucket, 3)
    set_unused_since(conn, [old], "3 days")
    set_unused_since(conn, [recent], "2 hours")
    run = new_run(conn, "grace")
    result = sweep(conn, bucket, run)
    drained = delete_owed_objects(conn, s3, run)
    assert result.rows_deleted == 1
    assert existing(conn) == {recent, used}
    assert drained.objects_deleted == 2 and drained.owed_after == 0
    assert object_keys(s3, bucket) == {k for b in (recent, used) for k in blob_keys(b)}


def test_blob_referenced_by_a_table_created_in_the_test_is_never_swept(conn, s3, bucket):
    covered, loose = make_blobs(conn, s3, bucket, 2)
    set_unused_since(conn, [covered, loose], "3 days")  # a mark that ran before the table existed
    with conn.transaction():
        conn.execute("CREATE SCHEMA IF NOT EXISTS sweep_test")
        conn.execute("DROP TABLE IF EXISTS sweep_test.banner")
        conn.execute("CREATE TABLE sweep_test.banner (id int PRIMARY KEY, image text REFERENCES app.blob)")
        conn.execute("INSERT INTO sweep_test.banner VALUES (1, %s)", (covered,))
    try:
        run = new_run(conn, "new-table")
        result = sweep(conn, bucket, run)
        delete_owed_objects(conn, s3, run)
        assert existing(conn) == {covered}
        assert result.kept_referenced == 1
        unused = conn.execute("SELECT unused FROM app.blob WHERE id = %s", (covered,)).fetchone()[0]
        assert unused is False                       # found referenced at delete time: used again
        assert set(blob_keys(covered)) <= object_keys(s3, bucket)
    finally:
        with conn.transaction():
            conn.execute("DROP SCHEMA sweep_test CASCADE")


def test_reference_inserted_by_a_second_connection_during_the_sweep_protects_its_blob(
        conn, other_conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 5)
    target = ids[2]
    set_unused_since(conn, ids, "3 days")
    # The application attaches `target` in a transaction that is still open while the sweep runs.
    writer = other_conn.transaction()
    writer.__enter__()
    attach(other_conn, "post-in-flight", target)
    try:
        run = new_run(conn, "race")
        result = sweep(conn, bucket, run)
    finally:
        writer.__exit__(None, None, None)          # the application commits
    delete_owed_objects(conn, s3, run)
    assert result.rows_deleted == 4
    assert existing(conn) == {target}
    assert set(blob_keys(target)) <= object_keys(s3, bucket)
    # The next sweep sees the committed reference and marks the blob used again.
    rerun = new_run(conn, "race-2")
    again = sweep(conn, bucket, rerun)
    assert again.rows_deleted == 0 and again.kept_referenced == 1
    assert conn.execute("SELECT unused FROM app.blob WHERE id = %s", (target,)).fetchone()[0] is False


def test_concurrent_writers_never_lose_a_referenced_blob(conn, test_dsn, s3, bucket):
    """Writers attach random garbage blobs while sweeps run; every committed reference keeps its objects."""
    ids = make_blobs(conn, s3, bucket, 400, thumbnails=False)
    set_unused_since(conn, ids, "3 days")
    stop = threading.Event()
    attached: list[str] = []

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        with psycopg.connect(test_dsn, autocommit=True) as wconn:
            while not stop.is_set():
                blob_id = rng.choice(ids)
                try:
                    with wconn.transaction():
                        attach(wconn, f"post-{seed}-{blob_id}", blob_id)
                    attached.append(blob_id)
                except (psycopg.errors.ForeignKeyViolation, psycopg.errors.UniqueViolation):
                    pass  # the blob was already swept (or already attached): the app sees a clear error

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(4):
            run = new_run(conn, f"stress-{i}")
            sweep(conn, bucket, run, batch_size=25)
            delete_owed_objects(conn, s3, run)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert attached, "the writers attached nothing: the race was not exercised"
    referenced = {r[0] for r in conn.execute("SELECT DISTINCT blob_id FROM app.blob_attachment")}
    keys = object_keys(s3, bucket)
    assert referenced <= existing(conn)
    missing = [b for b in referenced if blob_keys(b)[0] not in keys]
    assert missing == []


def test_last_guard_splits_a_batch_when_a_reference_was_not_checked(conn, s3, bucket):
    """ON DELETE RESTRICT catches a reference the re-check did not see; the batch is split, not abandoned."""
    ids = make_blobs(conn, s3, bucket, 9, thumbnails=False)
    set_unused_since(conn, ids, "3 days")
    with conn.transaction():
        attach(conn, "p", ids[4])
    blind = ReferenceSet(foreign_keys=())  # a re-check that knows no reference at all
    run = new_run(conn, "split")
    result = sweep(conn, bucket, run, refs=blind)
    assert result.rows_deleted == 8
    assert existing(conn) == {ids[4]}
    assert conn.execute("SELECT unused FROM app.blob WHERE id = %s", (ids[4],)).fetchone()[0] is False
    assert not any(ids[4] in key for key, _, _ in owed(conn))


def test_crash_between_db_commit_and_s3_leaves_deletions_owed_for_the_next_run(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 3)
    set_unused_since(conn, ids, "3 days")
    run = new_run(conn, "crashing")
    sweep(conn, bucket, run)
    # The worker dies before S3 answers: here the S3 endpoint is unreachable.
    dead = s3_client("http://127.0.0.1:9", aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
    with pytest.raises(EndpointConnectionError):
        delete_owed_objects(conn, dead, run)
    assert existing(conn) == set()
    assert len(owed(conn)) == 6                        # rows gone, objects owed, nothing forgotten
    assert len(object_keys(s3, bucket)) == 6

    next_run = new_run(conn, "next")
    drained = delete_owed_objects(conn, s3, next_run)
    assert drained.objects_deleted == 6 and drained.owed_after == 0
    assert object_keys(s3, bucket) == set()
    report = finish_run(conn, next_run)
    assert report["objects_deleted"] == 6 and report["bytes_reclaimed"] == 3 * (100 + 10)  # as the store reported them
    audit = conn.execute("SELECT DISTINCT run_id, deleted_by_run_id, owed FROM blobgc.deleted_object").fetchall()
    assert audit == [("crashing", "next", False)]


def test_delete_objects_errors_keep_those_keys_owed(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 3)
    set_unused_since(conn, ids, "3 days")
    refused = blob_keys(ids[1])[0]
    run = new_run(conn, "errors")
    sweep(conn, bucket, run)
    drained = delete_owed_objects(conn, RefusingClient(s3, {refused}), run)
    assert drained.objects_deleted == 5 and drained.failed == 1 and drained.owed_after == 1
    assert owed(conn) == [(refused, 1, "AccessDenied: Access Denied")]
    assert object_keys(s3, bucket) == {refused}
    retry = new_run(conn, "errors-retry")
    assert delete_owed_objects(conn, s3, retry).objects_deleted == 1
    assert owed(conn) == [] and object_keys(s3, bucket) == set()


def test_dry_run_deletes_nothing_and_reports_what_would_go(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 4, size=250)
    set_unused_since(conn, ids[:3], "3 days")
    run = new_run(conn, "dry", dry_run=True)
    result = sweep(conn, bucket, run)
    drained = delete_owed_objects(conn, s3, run)
    report = finish_run(conn, run)
    assert (result.rows_deleted, result.objects_owed, result.bytes_owed) == (3, 6, 750)
    assert drained.objects_deleted == 0
    assert existing(conn) == set(ids)
    assert len(object_keys(s3, bucket)) == 8
    assert owed(conn) == []
    logged = conn.execute("SELECT count(*), bool_and(dry_run), bool_or(owed) FROM blobgc.deleted_object").fetchone()
    assert logged == (6, True, False)
    assert (report["rows_deleted"], report["objects_deleted"], report["bytes_reclaimed"]) == (3, 6, 750)
    daily = conn.execute("SELECT runs, objects_deleted FROM blobgc.reclaim_daily "
                         "WHERE dag_id = 'blobgc_sweep' AND dry_run").fetchone()
    assert daily == (1, 6)


def test_1001_blobs_cross_the_batch_boundary(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 1001, size=10)
    set_unused_since(conn, ids, "3 days")

    class Counting:
        def __init__(self, inner):
            self.inner, self.sizes = inner, []

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def delete_objects(self, Bucket, Delete):
            self.sizes.append(len(Delete["Objects"]))
            return self.inner.delete_objects(Bucket=Bucket, Delete=Delete)

    run = new_run(conn, "big")
    result = sweep(conn, bucket, run, batch_size=1000)
    counting = Counting(s3)
    drained = delete_owed_objects(conn, counting, run, batch_size=1000)
    assert result.batches == 2 and result.rows_deleted == 1001
    assert drained.objects_deleted == 2002
    assert max(counting.sizes) == 1000 and sum(counting.sizes) == 2002 and len(counting.sizes) == 3
    assert existing(conn) == set() and object_keys(s3, bucket) == set()


def test_real_deletions_add_to_reclaim_daily(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 5, size=1000)
    set_unused_since(conn, ids, "3 days")
    run = new_run(conn, "reclaim")
    sweep(conn, bucket, run)
    delete_owed_objects(conn, s3, run)
    row = conn.execute("SELECT runs, rows_deleted, objects_deleted, bytes_reclaimed FROM blobgc.reclaim_daily "
                       "WHERE dag_id = 'blobgc_sweep' AND NOT dry_run AND day = (SELECT (started_at AT TIME ZONE 'UTC')::date "
                       "FROM blobgc.run WHERE dag_id = %s AND run_id = %s)", (run.dag_id, run.run_id)).fetchone()
    assert row == (1, 5, 10, 5 * (1000 + 10))  # raw and thumbnail bytes, as the store reported them


def test_two_sweeps_at_once_delete_each_blob_once(conn, test_dsn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 300, thumbnails=False)
    set_unused_since(conn, ids, "3 days")
    results = {}

    def worker(name: str) -> None:
        with psycopg.connect(test_dsn, autocommit=True) as wconn:
            run = new_run(wconn, name)
            results[name] = sweep(wconn, bucket, run, batch_size=20).rows_deleted

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results.values()) == 300
    logged = conn.execute("SELECT count(*), count(DISTINCT key) FROM blobgc.deleted_object").fetchone()
    assert logged == (600, 600)


@pytest.mark.parametrize("analyzed", [True, False], ids=["from-statistics", "walking-the-index"])
def test_key_range_shards_split_the_work_without_overlap(conn, s3, bucket, analyzed):
    ids = make_blobs(conn, s3, bucket, 200, thumbnails=False)
    set_unused_since(conn, ids, "3 days")
    conn.execute("ANALYZE app.blob" if analyzed else "DELETE FROM pg_statistic WHERE starelid = 'app.blob'::regclass")
    shards = split_key_space(conn, 3)
    assert len(shards) >= 2
    refs = discover_references(conn)
    dry = [sweep_unused_blobs(conn, new_run(conn, f"dry-{k}", dry_run=True), refs, cutoff=CUTOFF, bucket=bucket,
                              key_range=shard).rows_deleted for k, shard in enumerate(shards)]
    assert sum(dry) == 200 and all(n > 0 for n in dry)
    real = [sweep_unused_blobs(conn, new_run(conn, f"real-{k}"), refs, cutoff=CUTOFF, bucket=bucket,
                               key_range=shard).rows_deleted for k, shard in enumerate(shards)]
    assert real == dry
    assert existing(conn) == set()


def test_the_s3_server_refusing_keys_keeps_them_owed_until_allowed(conn, s3, bucket):
    ids = make_blobs(conn, s3, bucket, 3)
    set_unused_since(conn, ids, "3 days")
    deny_deletes(s3, bucket, f"blobs/{ids[0]}/")
    run = new_run(conn, "policy")
    sweep(conn, bucket, run)
    drained = delete_owed_objects(conn, s3, run)
    assert drained.objects_deleted == 4 and drained.failed == 2
    assert [(k, e) for k, _, e in owed(conn)] == [(k, "AccessDenied: Access Denied") for k in blob_keys(ids[0])]
    assert object_keys(s3, bucket) == set(blob_keys(ids[0]))
    s3.delete_bucket_policy(Bucket=bucket)
    again = delete_owed_objects(conn, s3, new_run(conn, "policy-lifted"))
    assert again.objects_deleted == 2 and again.owed_after == 0
    assert object_keys(s3, bucket) == set()


@pytest.mark.parametrize("action", ["CASCADE", "SET NULL"])
def test_cascade_or_set_null_reference_added_after_discovery_stops_the_delete(conn, s3, bucket, action):
    """Finding 4 (ON DELETE CASCADE / SET NULL): such a key does not make the DELETE fail, so the deleting statement
    re-checks every reference itself, and notices a key added since the references were discovered."""
    referenced, garbage = make_blobs(conn, s3, bucket, 2)
    set_unused_since(conn, [referenced, garbage], "3 days")  # marked unused before the new table existed
    refs = discover_references(conn)  # the sweep task found its references ...
    with conn.transaction():  # ... and then the application added a table that references blobs
        conn.execute("CREATE SCHEMA IF NOT EXISTS cascade_test")
        conn.execute("DROP TABLE IF EXISTS cascade_test.gallery")
        conn.execute(f"CREATE TABLE cascade_test.gallery (id int PRIMARY KEY, blob_id text "
                     f"REFERENCES app.blob ON DELETE {action})")
        conn.execute("INSERT INTO cascade_test.gallery VALUES (1, %s)", (referenced,))
    try:
        run = new_run(conn, f"cascade-{action}")
        result = sweep(conn, bucket, run, refs=refs)
        assert result.rows_deleted == 1
        assert existing(conn) == {referenced}
        assert conn.execute("SELECT blob_id FROM cascade_test.gallery").fetchall() == [(referenced,)]
        assert {k for k, _, _ in owed(conn)} == set(blob_keys(garbage))
    finally:
        with conn.transaction():
            conn.execute("DROP SCHEMA cascade_test CASCADE")


def test_cascade_reference_known_at_discovery_keeps_its_blob_and_row(conn, s3, bucket):
    """Finding 4: with the CASCADE key known, the DELETE's own NOT EXISTS keeps the blob and the referencing row."""
    referenced, garbage = make_blobs(conn, s3, bucket, 2)
    with conn.transaction():
        conn.execute("CREATE SCHEMA IF NOT EXISTS cascade_test")
        conn.execute("DROP TABLE IF EXISTS cascade_test.gallery")
        conn.execute("CREATE TABLE cascade_test.gallery (id int PRIMARY KEY, blob_id text "
                     "REFERENCES app.blob ON DELETE CASCADE)")
    try:
        set_unused_since(conn, [referenced, garbage], "3 days")
        refs = discover_references(conn)
        with conn.transaction():  # referenced after the mark: the sweep's claim must not trust the stale flag
            conn.execute("INSERT INTO cascade_test.gallery VALUES (1, %s)", (referenced,))
        run = new_run(conn, "cascade-known")
        blind_to_the_select = sweep_unused_blobs(conn, run, refs, cutoff=CUTOFF, bucket=bucket)
        assert blind_to_the_select.rows_deleted == 1
        assert existing(conn) == {referenced}
        assert conn.execute("SELECT count(*) FROM cascade_test.gallery").fetchone()[0] == 1
    finally:
        with conn.transaction():
            conn.execute("DROP SCHEMA cascade_test CASCADE")


def test_retried_dry_run_counts_once_in_reclaim_daily(conn, s3, bucket):
    """Finding 12 (dry run counted twice): a retried dry-run sweep of the same range reports its blobs once."""
    ids = make_blobs(conn, s3, bucket, 4, size=100)
    set_unused_since(conn, ids, "3 days")
    run = new_run(conn, "dry-retried", dry_run=True)
    first = sweep(conn, bucket, run)
    second = sweep(conn, bucket, run)  # the same task, retried
    assert first.rows_deleted == second.rows_deleted == 4
    daily = conn.execute("SELECT runs, rows_deleted, objects_deleted, bytes_reclaimed FROM blobgc.reclaim_daily "
                         "WHERE dag_id = 'blobgc_sweep' AND dry_run").fetchone()
    assert daily == (1, 4, 8, 400)
    logged = conn.execute("SELECT count(*), count(DISTINCT key) FROM blobgc.deleted_object WHERE dry_run").fetchone()
    assert logged == (8, 8)


def test_reclaim_counts_only_objects_that_existed_with_their_real_sizes(conn, s3, bucket):
    """Finding 13 (reclaim accounting): a blob without a thumbnail counts one object, and the thumbnail of another
    counts its real bytes; an absent key is settled as absent, not deleted."""
    with_thumb = make_blobs(conn, s3, bucket, 1, prefix="t", size=300)[0]
    without_thumb = make_blobs(conn, s3, bucket, 1, prefix="n", size=200, thumbnails=False)[0]
    set_unused_since(conn, [with_thumb, without_thumb], "3 days")
    run = new_run(conn, "exact")
    sweep(conn, bucket, run)
    drained = delete_owed_objects(conn, s3, run)
    assert (drained.objects_deleted, drained.absent) == (3, 1)
    report = finish_run(conn, run)
    assert (report["objects_deleted"], report["bytes_reclaimed"]) == (3, 300 + 10 + 200)
    absent = conn.execute("SELECT key FROM blobgc.deleted_object WHERE absent_at IS NOT NULL").fetchall()
    assert absent == [(blob_keys(without_thumb)[1],)]
    assert object_keys(s3, bucket) == set()


def test_reclaim_on_a_versioned_bucket_leaves_no_delete_marker_for_an_absent_key(conn, s3, versioned_bucket):
    """Finding 13: the key that never existed gets no delete marker (a restore would otherwise 'bring back' nothing)."""
    blob = make_blobs(conn, s3, versioned_bucket, 1, thumbnails=False)[0]
    set_unused_since(conn, [blob], "3 days")
    run = new_run(conn, "versioned-exact")
    sweep(conn, versioned_bucket, run)
    drained = delete_owed_objects(conn, s3, run)
    assert (drained.objects_deleted, drained.absent) == (1, 1)
    markers = [m["Key"] for page in s3.get_paginator("list_object_versions").paginate(Bucket=versioned_bucket)
               for m in page.get("DeleteMarkers", [])]
    assert markers == [blob_keys(blob)[0]]

"""blobgc.collectors.reconcile: seed 001's bucket-versus-database reconciliation, shard by shard."""
from __future__ import annotations


import pytest
from botocore.exceptions import EndpointConnectionError

from blobgc.collectors.reconcile.listing import reconcile_shard
from blobgc.collectors.reconcile.shards import Shard, discover_shards
from blobgc.core.clients import s3_client_from_env
from blobgc.core.outbox import delete_owed_objects
from tests.helpers import object_keys
from tests.support.reconcile import (
    age,
    contents_rows,
    execute_plan,
    floor_cutoff,
    new_run,
    owed,
    planned,
    put,
    reconcile_all,
    sha,
)


def findings(conn, kind: str) -> set[str]:
    return {r[0] for r in conn.execute("SELECT key FROM blobgc.reconcile_finding WHERE kind = %s", (kind,))}


def test_shards_are_discovered_from_the_bucket(s3, bucket):
    put(s3, bucket, f"images/3f/3f{'0' * 30}/big.jpg", f"images/a0/a0{'1' * 30}/thumb.jpg", "blobs/abc/raw",
        "blobs/Zed/raw", f"pastes/{sha('x')}", "mail/g1-abc", "tmp/leftover.bin", "loose.txt")
    shards = {(s.prefix, s.source) for s in discover_shards(s3, bucket)}
    assert shards == {("images/3f/", "app.image"), ("images/a0/", "app.image"), ("blobs/a", "app.blob"),
                      ("blobs/Z", "app.blob"), (f"pastes/{sha('x')[0]}", "app.content"), ("mail/g", "gen.blob"),
                      ("tmp/", None), ("", None)}
    limited = {s.prefix for s in discover_shards(s3, bucket, ["images/", "tmp/"])}
    assert limited == {"images/3f/", "images/a0/", "tmp/"}


def test_an_orphan_older_than_the_floor_is_deleted(conn, s3, bucket):
    kept, orphan = sha("kept"), sha("orphan")
    contents_rows(conn, kept)
    put(s3, bucket, f"pastes/{kept}", f"pastes/{orphan}")
    age(s3, bucket)
    run = new_run(conn)
    results = reconcile_all(conn, s3, bucket, run)
    assert sum(r.orphans for r in results) == 1
    assert owed(conn) == {f"pastes/{orphan}"}
    delete_owed_objects(conn, s3, run)
    assert object_keys(s3, bucket) == {f"pastes/{kept}"}


def test_an_orphan_younger_than_the_floor_is_kept(conn, s3, bucket):
    put(s3, bucket, f"pastes/{sha('young')}")
    age(s3, bucket, hours=2)  # two hours old: younger than the 24-hour floor
    run = new_run(conn)
    results = reconcile_all(conn, s3, bucket, run, cutoff=floor_cutoff(24))
    assert (sum(r.orphans for r in results), sum(r.too_young for r in results)) == (0, 1)
    assert owed(conn) == set()


def test_an_object_uploaded_after_the_listing_started_is_never_deleted(conn, s3, bucket):
    """Two-key pages: the new object lands in a page listed after the upload, and is still kept."""
    old = sorted("f" + sha(f"old{i}")[1:] for i in range(4))
    put(s3, bucket, *(f"pastes/{h}" for h in old))
    age(s3, bucket)
    late = "f" * 64  # sorts last in its shard
    listing = s3_client_from_env()
    uploaded = {"done": False}

    def upload_during_listing(**_):
        if not uploaded["done"]:
            uploaded["done"] = True
            put(s3, bucket, f"pastes/{late}")

    listing.meta.events.register("after-call.s3.ListObjectsV2", upload_during_listing)
    run = new_run(conn)
    reconcile_shard(conn, listing, run, Shard("pastes/f", "app.content"), bucket=bucket, confirmations=1,
                    cutoff=floor_cutoff(1), page_size=2)
    execute_plan(conn, run)
    assert f"pastes/{late}" not in owed(conn)  # newer than the listing: never an orphan
    assert owed(conn) == {f"pastes/{h}" for h in old}
    assert f"pastes/{late}" in object_keys(s3, bucket)


def test_an_object_whose_row_is_inserted_between_listing_and_checking_is_kept(conn, other_conn, s3, bucket):
    digest = sha("racing row")
    put(s3, bucket, f"pastes/{digest}")
    age(s3, bucket)
    listing = s3_client_from_env()

    def insert_row_after_the_listing(**_):
        contents_rows(other_conn, digest)

    listing.meta.events.register("after-call.s3.ListObjectsV2", insert_row_after_the_listing)
    run = new_run(conn)
    result = reconcile_shard(conn, listing, run, Shard(f"pastes/{digest[0]}", "app.content"), bucket=bucket,
                             confirmations=1, cutoff=floor_cutoff())
    assert result.orphans == 0 and owed(conn) == set()


def test_keys_of_no_known_layout_are_reported_and_never_deleted(conn, s3, bucket):
    unknown = {"tmp/leftover.bin", "loose.txt", "images/zz/not-an-image-id/big.jpg", "blobs/a/b/c", "blobs/x/other"}
    put(s3, bucket, *unknown)
    age(s3, bucket)
    run = new_run(conn)
    results = reconcile_all(conn, s3, bucket, run)
    assert sum(r.unknown_keys for r in results) == len(unknown)
    assert findings(conn, "unknown_key") == unknown
    delete_owed_objects(conn, s3, run)
    assert object_keys(s3, bucket) == unknown


def test_narrow_seed_layout_a_seed_key_of_any_column_value_with_no_row_is_an_orphan(conn, s3, bucket):
    """A content hash is any text (seed 002's example is `abc123`), a blob id too: such keys with no row are
    orphans, and with a row they are kept."""
    contents_rows(conn, "abc123")
    with conn.transaction():
        conn.execute("INSERT INTO app.blob (id, filename) VALUES ('a.b/c', 'x')")
    live, orphans = {"pastes/abc123", "blobs/a.b/c/raw"}, {"pastes/short", "pastes/a/b", "blobs/Upper.Case/raw"}
    put(s3, bucket, *live, *orphans)
    age(s3, bucket)
    run = new_run(conn)
    results = reconcile_all(conn, s3, bucket, run)
    assert sum(r.unknown_keys for r in results) == 0
    assert owed(conn) == orphans
    delete_owed_objects(conn, s3, run)
    assert object_keys(s3, bucket) == live


def test_a_row_whose_object_is_missing_is_recorded_and_the_row_kept(conn, s3, bucket):
    present, missing = sha("present"), sha("missing")
    contents_rows(conn, present, missing)
    with conn.transaction():
        conn.execute("INSERT INTO app.blob (id, filename) VALUES ('blobmissing', 'x')")
    put(s3, bucket, f"pastes/{present}", "blobs/blobhere0/raw")
    with conn.transaction():
        conn.execute("INSERT INTO app.blob (id, filename) VALUES ('blobhere0', 'y')")
    age(s3, bucket)
    run = new_run(conn)
    results = reconcile_all(conn, s3, bucket, run)
    assert findings(conn, "missing_object") >= {f"pastes/{missing}"}
    # blobs/ has one shard ("blobs/b"): blobmissing's raw object is missing from it
    assert "blobs/blobmissing/raw" in findings(conn, "missing_object")
    assert sum(r.missing_objects for r in results) == 2
    assert conn.execute("SELECT count(*) FROM app.content").fetchone()[0] == 2  # never "fixed" by deleting rows


def test_missing_objects_are_found_across_page_boundaries(conn, s3, bucket):
    shard_hashes = sorted("b" + sha(f"h{i}")[1:] for i in range(6))
    contents_rows(conn, *shard_hashes)
    present = shard_hashes[::2]
    put(s3, bucket, *(f"pastes/{h}" for h in present))
    age(s3, bucket)
    run = new_run(conn)
    reconcile_shard(conn, s3, run, Shard("pastes/b", "app.content"), bucket=bucket,
                    confirmations=1, cutoff=floor_cutoff(), page_size=1)
    assert findings(conn, "missing_object") == {f"pastes/{h}" for h in shard_hashes if h not in present}


def test_a_failing_listing_page_deletes_nothing_past_the_last_checked_page_and_a_retry_resumes(conn, s3, bucket):
    orphans = sorted(f"pastes/{'a' + sha(f'o{i}')[1:]}" for i in range(6))
    put(s3, bucket, *orphans)
    age(s3, bucket)
    shard = Shard("pastes/a", "app.content")
    failing = s3_client_from_env()
    calls = {"n": 0}

    def fail_on_the_second_page(**_):  # and on botocore's own retries of it
        calls["n"] += 1
        if calls["n"] >= 2:
            raise EndpointConnectionError(endpoint_url="http://s3")

    failing.meta.events.register("before-send.s3.ListObjectsV2", fail_on_the_second_page)
    run = new_run(conn)
    cutoff = floor_cutoff()
    with pytest.raises(EndpointConnectionError):
        reconcile_shard(conn, failing, run, shard, bucket=bucket, confirmations=1, cutoff=cutoff, page_size=2)
    assert planned(conn, run) == set(orphans[:2])  # the first page only
    assert owed(conn) == set()  # nothing is owed before the whole plan passed the gate
    checkpoint = conn.execute("SELECT start_after, pages, done FROM blobgc.reconcile_checkpoint").fetchone()
    assert checkpoint == (orphans[1], 1, False)

    resumed = s3_client_from_env()
    starts: list[str | None] = []
    resumed.meta.events.register("before-parameter-build.s3.ListObjectsV2",
                                 lambda params, **_: starts.append(params.get("StartAfter")))
    result = reconcile_shard(conn, resumed, run, shard, bucket=bucket, confirmations=1, cutoff=cutoff, page_size=2)
    assert starts[0] == orphans[1]  # resumed after the checkpoint, not from the start
    assert result.resumed_after == orphans[1]
    execute_plan(conn, run)
    assert owed(conn) == set(orphans)
    logged = [k for (keys,) in conn.execute("SELECT keys FROM blobgc.deletion_log") for k in keys]
    assert sorted(logged) == orphans  # each orphan logged once
    assert conn.execute("SELECT done FROM blobgc.reconcile_checkpoint").fetchone()[0] is True


def test_dry_run_reports_and_deletes_nothing(conn, s3, bucket):
    contents_rows(conn, sha("row without object"))
    put(s3, bucket, f"pastes/{sha('orphan a')}", f"pastes/{sha('orphan b')}", "tmp/x", body=b"1234567890")
    age(s3, bucket)
    run = new_run(conn, dry_run=True)
    results = reconcile_all(conn, s3, bucket, run)
    assert (sum(r.orphans for r in results), sum(r.orphan_bytes for r in results)) == (2, 20)
    assert (sum(r.unknown_keys for r in results), sum(r.missing_objects for r in results)) == (1, 1)
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0
    assert conn.execute("SELECT dry_run, objects_deleted, bytes_reclaimed FROM blobgc.run").fetchone() == (True, 2, 20)
    delete_owed_objects(conn, s3, run)
    assert len(object_keys(s3, bucket)) == 3


def test_drain_time_guard_keeps_a_blob_key_whose_row_arrived_after_the_listing(conn, s3, bucket):
    """Finding 7: reconcile owes blobs/{id}/raw when no row accounts for it; a row inserted before the drain
    (an upload whose row came late) keeps the object."""
    put(s3, bucket, "blobs/lateupload/raw", "blobs/trulygone/raw")
    age(s3, bucket)
    run = new_run(conn)
    reconcile_all(conn, s3, bucket, run)
    assert owed(conn) == {"blobs/lateupload/raw", "blobs/trulygone/raw"}
    with conn.transaction():
        conn.execute("INSERT INTO app.blob (id, filename) VALUES ('lateupload', 'late.bin')")
    drained = delete_owed_objects(conn, s3, run)
    assert drained.objects_deleted == 1
    assert object_keys(s3, bucket) == {"blobs/lateupload/raw"}
    kept = conn.execute("SELECT key FROM blobgc.deleted_object WHERE kept_at IS NOT NULL").fetchall()
    assert kept == [("blobs/lateupload/raw",)]


def test_drain_time_guard_keeps_a_mail_key_whose_blob_arrived_after_the_listing(conn, s3, bucket):
    """Finding 7: the same for seed 003's mail/{blob_id}: a gen.blob row written since the listing keeps it."""
    late, gone = f"{sha('late mail')}-g1", f"{sha('gone mail')}-g1"
    put(s3, bucket, f"mail/{late}", f"mail/{gone}")
    age(s3, bucket)
    run = new_run(conn)
    reconcile_all(conn, s3, bucket, run)
    assert owed(conn) == {f"mail/{late}", f"mail/{gone}"}
    with conn.transaction():
        conn.execute("INSERT INTO gen.blob (blob_id, generation) VALUES (%s, 1)", (late,))
    drained = delete_owed_objects(conn, s3, run)
    assert drained.objects_deleted == 1
    assert object_keys(s3, bucket) == {f"mail/{late}"}

"""blobgc.collectors.paste_expiry: seed 002's batch expiry with ref_count, shared contents and concurrent runs."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest
from botocore.exceptions import EndpointConnectionError

from blobgc.collectors.paste_expiry import check_ref_counts, expire_pastes, split_expiry_window
from blobgc.core.cache_purge import purge_owed_cache_keys
from blobgc.core.clients import pg_connect, s3_client_from_env
from blobgc.core.keys import content_key
from blobgc.core.outbox import delete_owed_objects
from blobgc.core.runs import RunRef, ensure_run
from demo_app.pastes import create_paste
from tests.helpers import NOW, cached_keys, object_keys
from tests.support.pastes import FUTURE, PAST, expire_all, new_run, ref_count


def insert_pastes(conn, rows: list[tuple[str, str, datetime]]) -> None:
    """Bulk pastes (short_code, content_hash, expires_at) with contents whose ref_count is their paste count."""
    with conn.transaction():
        conn.execute(
            "INSERT INTO app.content (content_hash, ref_count, size_bytes) "
            "SELECT h, count(*), 10 FROM unnest(%(hashes)s::text[]) h GROUP BY h",
            {"hashes": [h for _, h, _ in rows]},
        )
        conn.execute(
            "INSERT INTO app.paste (short_code, content_hash, expires_at) "
            "SELECT * FROM unnest(%(codes)s::text[], %(hashes)s::text[], %(expires)s::timestamptz[])",
            {"codes": [c for c, _, _ in rows], "hashes": [h for _, h, _ in rows], "expires": [e for _, _, e in rows]},
        )


def test_seed_002_example_shared_content_outlives_the_first_expiry(conn, s3, bucket, redis, redis_prefix):
    """Pastes A and B share content: A expires and the object stays (ref_count 1); B expires and it goes."""
    a = create_paste(conn, s3, redis, bucket=bucket, content=b"abc123", expires_at=PAST, redis_prefix=redis_prefix)
    b = create_paste(conn, s3, redis, bucket=bucket, content=b"abc123", expires_at=FUTURE, redis_prefix=redis_prefix)
    key = content_key(a.content_hash)

    expired, drained, _ = expire_all(conn, s3, redis, new_run(conn, "today"), bucket, redis_prefix)
    assert (expired.pastes_deleted, expired.contents_deleted, drained.objects_deleted) == (1, 0, 0)
    assert ref_count(conn, a.content_hash) == 1
    assert key in object_keys(s3, bucket)
    assert [r[0] for r in conn.execute("SELECT short_code FROM app.paste")] == [b.short_code]

    with conn.transaction():
        conn.execute("UPDATE app.paste SET expires_at = %s WHERE short_code = %s", (PAST, b.short_code))
    expired, drained, _ = expire_all(conn, s3, redis, new_run(conn, "next-month"), bucket, redis_prefix)
    assert (expired.pastes_deleted, expired.contents_deleted, drained.objects_deleted) == (1, 1, 1)
    assert ref_count(conn, a.content_hash) is None
    assert key not in object_keys(s3, bucket)
    assert cached_keys(redis, redis_prefix) == set()


def test_duplicates_inside_one_batch_decrement_by_their_count(conn, s3, bucket, redis, redis_prefix):
    pastes = [create_paste(conn, s3, redis, bucket=bucket, content=b"dup", expires_at=PAST, redis_prefix=redis_prefix)
              for _ in range(3)]
    survivor = create_paste(conn, s3, redis, bucket=bucket, content=b"dup", expires_at=FUTURE,
                            redis_prefix=redis_prefix)
    assert ref_count(conn, survivor.content_hash) == 4

    expired, _, _ = expire_all(conn, s3, redis, new_run(conn), bucket, redis_prefix)
    assert (expired.pastes_deleted, expired.batches) == (3, 1)
    assert ref_count(conn, survivor.content_hash) == 1  # 4 - 3, not 4 - 1
    assert content_key(survivor.content_hash) in object_keys(s3, bucket)
    assert {p.short_code for p in pastes}.isdisjoint({r[0] for r in conn.execute("SELECT short_code FROM app.paste")})

    with conn.transaction():
        conn.execute("UPDATE app.paste SET expires_at = %s", (PAST,))
    more = [create_paste(conn, s3, redis, bucket=bucket, content=b"dup", expires_at=PAST, redis_prefix=redis_prefix)
            for _ in range(2)]
    expired, drained, _ = expire_all(conn, s3, redis, new_run(conn, "r2"), bucket, redis_prefix)
    assert (expired.pastes_deleted, expired.contents_deleted, expired.objects_owed) == (1 + len(more), 1, 1)
    assert drained.objects_deleted == 1
    assert object_keys(s3, bucket) == set()
    logged = conn.execute("SELECT keys FROM blobgc.deletion_log WHERE run_id = 'r2'").fetchall()
    assert logged == [([content_key(survivor.content_hash)],)]  # owed once, not once per paste


def test_batches_cross_1000_with_one_s3_call_and_one_redis_round_trip_each(conn, s3, bucket, redis, redis_prefix):
    n = 1001
    with ThreadPoolExecutor(4) as pool:
        def make(i: int):
            with pg_connect(os.environ["BLOBGC_PG_DSN"]) as own:
                return create_paste(own, s3, redis, bucket=bucket, content=f"paste {i}".encode(),
                                    expires_at=PAST, redis_prefix=redis_prefix)
        made = list(pool.map(make, range(n)))
    assert len(object_keys(s3, bucket)) == n and len(cached_keys(redis, redis_prefix)) == n

    counting = s3_client_from_env()
    calls: list[int] = []
    counting.meta.events.register("before-parameter-build.s3.DeleteObjects",
                                  lambda params, **_: calls.append(len(params["Delete"]["Objects"])))
    run = new_run(conn)
    expired = expire_pastes(conn, run, expired_before=NOW, bucket=bucket, redis_prefix=redis_prefix)
    assert (expired.pastes_deleted, expired.contents_deleted, expired.batches) == (n, n, 2)
    drained = delete_owed_objects(conn, counting, run)
    purged = purge_owed_cache_keys(conn, redis, run, rows_per_round_trip=1)
    assert drained.objects_deleted == n and sorted(calls) == [1, 1000]
    assert (purged.keys_purged, purged.keys_found, purged.round_trips) == (n, n, 2)
    assert object_keys(s3, bucket) == set()
    assert cached_keys(redis, redis_prefix) == set()
    assert conn.execute("SELECT count(*) FROM app.paste").fetchone()[0] == 0
    assert made


def test_s3_down_mid_run_then_a_retry_completes(conn, s3, bucket, redis, redis_prefix):
    for i in range(30):
        create_paste(conn, s3, redis, bucket=bucket, content=f"s3-down {i}".encode(), expires_at=PAST,
                     redis_prefix=redis_prefix)
    run = new_run(conn)
    expired = expire_pastes(conn, run, expired_before=NOW, bucket=bucket, batch_size=5, redis_prefix=redis_prefix)
    assert expired.objects_owed == 30

    failing = s3_client_from_env()
    calls = {"n": 0}

    def go_down_after_two_calls(**_):
        calls["n"] += 1
        if calls["n"] > 2:
            raise EndpointConnectionError(endpoint_url=os.environ["BLOBGC_S3_ENDPOINT"])

    failing.meta.events.register("before-send.s3.DeleteObjects", go_down_after_two_calls)
    with pytest.raises(EndpointConnectionError):
        delete_owed_objects(conn, failing, run, batch_size=5, concurrency=1)
    assert len(object_keys(s3, bucket)) == 20  # two calls of 5 keys went through
    owed = conn.execute("SELECT count(*) FROM blobgc.deleted_object WHERE owed").fetchone()[0]
    assert owed == 20
    assert conn.execute("SELECT objects_deleted FROM blobgc.run").fetchone()[0] == 10

    retried = delete_owed_objects(conn, s3, run, batch_size=5)
    assert (retried.objects_deleted, retried.owed_after) == (20, 0)
    assert object_keys(s3, bucket) == set()
    assert conn.execute("SELECT objects_deleted FROM blobgc.run").fetchone()[0] == 30


def test_concurrent_expiry_runs_never_double_decrement(conn, test_dsn):
    """Four runs at once over shared contents: every paste counted once, every ref_count exact."""
    rows = []
    for c in range(300):
        digest = f"content-{c:04d}"
        for p in range(4):
            expired = (c * 4 + p) % 7 < 4 or c % 10 == 0  # some contents lose every paste
            rows.append((f"s{c:04d}-{p}", digest, PAST if expired else FUTURE))
    insert_pastes(conn, rows)
    n_expired = sum(1 for r in rows if r[2] == PAST)
    doomed = {h for h in {r[1] for r in rows} if all(r[2] == PAST for r in rows if r[1] == h)}

    def one_run(i: int):
        with pg_connect(test_dsn) as own:
            run = RunRef("blobgc_paste_expiry", f"concurrent-{i}")
            ensure_run(own, run)
            return expire_pastes(own, run, expired_before=NOW, bucket="unused-bucket", batch_size=50)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one_run, range(4)))
    assert sum(r.pastes_deleted for r in results) == n_expired
    assert sum(r.contents_deleted for r in results) == len(doomed)
    drift = conn.execute(
        "SELECT count(*) FROM app.content c WHERE ref_count <> "
        "(SELECT count(*) FROM app.paste p WHERE p.content_hash = c.content_hash)").fetchone()[0]
    assert drift == 0
    logged = [k for (keys,) in conn.execute("SELECT keys FROM blobgc.deletion_log") for k in keys]
    assert sorted(logged) == sorted(content_key(h) for h in doomed)  # each owed exactly once
    assert conn.execute("SELECT count(*) FROM app.content").fetchone()[0] == 300 - len(doomed)


def test_expiry_split_into_ranges_expires_every_due_paste_once(conn, test_dsn):
    """What the mapped expire_pastes tasks do: disjoint ranges of expires_at, one connection each."""
    rows = [(f"r{i:04d}", f"content-{i % 150:03d}", NOW - timedelta(minutes=i) if i % 3 else NOW + timedelta(days=1))
            for i in range(600)]
    insert_pastes(conn, rows)
    due = [r for r in rows if r[2] < NOW]
    ranges = split_expiry_window(conn, NOW, 3)
    assert len(ranges) == 3 and ranges[0][0] is None and ranges[-1][1] is None

    def one_range(window):
        with pg_connect(test_dsn) as own:
            run = RunRef("blobgc_paste_expiry", "split")
            ensure_run(own, run)
            return expire_pastes(own, run, expired_before=NOW, bucket="unused-bucket", batch_size=40,
                                 expires_range=window)

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(one_range, ranges))
    assert all(r.pastes_deleted > 0 for r in results)
    assert sum(r.pastes_deleted for r in results) == len(due)
    assert conn.execute("SELECT count(*) FROM app.paste").fetchone()[0] == len(rows) - len(due)
    drift = conn.execute(
        "SELECT count(*) FROM app.content c WHERE ref_count <> "
        "(SELECT count(*) FROM app.paste p WHERE p.content_hash = c.content_hash)").fetchone()[0]
    assert drift == 0


def test_a_second_run_over_the_same_pastes_finds_nothing_to_decrement(conn, s3, bucket, redis, redis_prefix):
    """A retried or zombie run after the first committed: nothing is decremented twice."""
    create_paste(conn, s3, redis, bucket=bucket, content=b"z", expires_at=PAST, redis_prefix=redis_prefix)
    keep = create_paste(conn, s3, redis, bucket=bucket, content=b"z", expires_at=FUTURE, redis_prefix=redis_prefix)
    run = new_run(conn)
    first = expire_pastes(conn, run, expired_before=NOW, bucket=bucket, redis_prefix=redis_prefix)
    again = expire_pastes(conn, run, expired_before=NOW, bucket=bucket, redis_prefix=redis_prefix)
    assert (first.pastes_deleted, again.pastes_deleted) == (1, 0)
    assert ref_count(conn, keep.content_hash) == 1


def test_check_ref_counts_reports_and_repairs_drift(conn, s3, bucket, redis, redis_prefix):
    high = create_paste(conn, s3, redis, bucket=bucket, content=b"high", expires_at=FUTURE, redis_prefix=redis_prefix)
    low = create_paste(conn, s3, redis, bucket=bucket, content=b"low", expires_at=FUTURE, redis_prefix=redis_prefix)
    create_paste(conn, s3, redis, bucket=bucket, content=b"low", expires_at=FUTURE, redis_prefix=redis_prefix)
    fine = create_paste(conn, s3, redis, bucket=bucket, content=b"fine", expires_at=FUTURE, redis_prefix=redis_prefix)
    orphan = create_paste(conn, s3, redis, bucket=bucket, content=b"orphan", expires_at=FUTURE,
                          redis_prefix=redis_prefix)
    with conn.transaction():
        conn.execute("UPDATE app.content SET ref_count = 5 WHERE content_hash = %s", (high.content_hash,))
        conn.execute("UPDATE app.content SET ref_count = 1 WHERE content_hash = %s", (low.content_hash,))
        # a paste removed behind the collector's back: its content leaks unless the count is repaired
        conn.execute("DELETE FROM app.paste WHERE short_code = %s", (orphan.short_code,))

    dry = check_ref_counts(conn, new_run(conn, "dry", dry_run=True), bucket=bucket)
    assert (dry.drifted, dry.total_drift, dry.repaired, dry.contents_deleted) == (3, 4 + 1 + 1, 0, 1)
    assert ref_count(conn, high.content_hash) == 5  # a dry run repairs nothing

    run = new_run(conn, "real")
    report = check_ref_counts(conn, run, bucket=bucket)
    assert (report.drifted, report.repaired, report.contents_deleted) == (3, 3, 1)
    assert {s["content_hash"] for s in report.sample} == {high.content_hash, low.content_hash, orphan.content_hash}
    assert (ref_count(conn, high.content_hash), ref_count(conn, low.content_hash)) == (1, 2)
    assert ref_count(conn, fine.content_hash) == 1 and ref_count(conn, orphan.content_hash) is None
    delete_owed_objects(conn, s3, run)
    assert object_keys(s3, bucket) == {content_key(p.content_hash) for p in (high, low, fine)}
    assert check_ref_counts(conn, new_run(conn, "after"), bucket=bucket).drifted == 0


def test_dry_run_reports_what_would_go_and_changes_nothing(conn, s3, bucket, redis, redis_prefix):
    for i in range(3):
        create_paste(conn, s3, redis, bucket=bucket, content=f"gone {i}".encode(), expires_at=PAST,
                     redis_prefix=redis_prefix)
    create_paste(conn, s3, redis, bucket=bucket, content=b"shared", expires_at=PAST, redis_prefix=redis_prefix)
    create_paste(conn, s3, redis, bucket=bucket, content=b"shared", expires_at=FUTURE, redis_prefix=redis_prefix)
    before = (object_keys(s3, bucket), cached_keys(redis, redis_prefix),
              conn.execute("SELECT * FROM app.content ORDER BY 1").fetchall())
    run = new_run(conn, "dry", dry_run=True)
    for _attempt in range(2):  # a retried dry run reports the same, once
        expired, drained, purged = expire_all(conn, s3, redis, run, bucket, redis_prefix)
    assert (expired.pastes_deleted, expired.contents_deleted, expired.objects_owed) == (4, 3, 3)
    assert expired.bytes_owed == sum(len(f"gone {i}") for i in range(3))
    assert (drained.objects_deleted, purged.keys_purged) == (0, 0)
    after = (object_keys(s3, bucket), cached_keys(redis, redis_prefix),
             conn.execute("SELECT * FROM app.content ORDER BY 1").fetchall())
    assert after == before
    assert conn.execute("SELECT count(*) FROM app.paste").fetchone()[0] == 5
    assert conn.execute("SELECT dry_run, rows_deleted, objects_deleted, bytes_reclaimed FROM blobgc.run").fetchone() \
        == (True, 7, 3, expired.bytes_owed)
    assert conn.execute("SELECT count(*) FROM blobgc.deleted_object WHERE dry_run").fetchone()[0] == 3
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0

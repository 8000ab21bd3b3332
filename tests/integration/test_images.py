"""Seed 001 against the real stack: the crawler's three branches, pre-upload, attach, and the rotten-photo cleaner.

Photos come from a real HTTP server on loopback (tests/integration/photo_server.py) that counts requests.
The crawler refuses loopback addresses unless told otherwise, so the crawls here open 127.0.0.0/8
explicitly (`FAST.allowed_networks`), as the local stack's Variable blobgc_crawler_allowed_networks does.
"""
from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import pytest
import requests
from botocore.exceptions import EndpointConnectionError

import blobgc.downloads
from blobgc.clients import pg_connect, s3_client_from_env
from blobgc.crawler import CrawlRequest, batch_items, outcome_counts, record_outcomes, stage_items
from blobgc.downloads import DownloadPolicy
from blobgc.image_processing import ImageRejected
from blobgc.images import (
    CLEANUP_DAG,
    URL_LOCK_CLASS,
    CrawlItem,
    ImageSettings,
    UnknownImage,
    attach_images,
    crawl,
    delete_unbound_images,
    hold_unreferenced_images,
    image_keys,
    lock_stripes,
    md5_hex,
    pre_upload,
)
from blobgc.outbox import delete_owed_objects
from blobgc.runs import RunRef, ensure_run

from .conftest import airflow, backend_waiting_on_lock, object_keys, wait_until
from .photo_server import PhotoServer, jpeg

NOW = datetime.now(timezone.utc)
SIZES = {"orig": 0, "big": 1280, "medium": 640, "thumb": 160}
LOOPBACK = ["127.0.0.0/8"]  # the photo server's network, opened explicitly
FAST = DownloadPolicy(connect_timeout=2, read_timeout=0.5, max_bytes=1024 * 1024, attempts=3, backoff=0.05,
                      allowed_networks=LOOPBACK)
STRICT = DownloadPolicy(connect_timeout=2, read_timeout=0.5, max_bytes=1024 * 1024, attempts=1)  # no allow-list


@pytest.fixture
def photos():
    with PhotoServer() as server:
        yield server


@pytest.fixture
def settings(bucket) -> ImageSettings:
    return ImageSettings(bucket=bucket, sizes=SIZES)


@pytest.fixture
def offers(conn):
    with conn.transaction():
        conn.execute("INSERT INTO app.offer (id, title) SELECT g, 'offer ' || g FROM generate_series(1, 5) g")
    return [1, 2, 3, 4, 5]


def run_crawl(conn, s3, settings, items, *, cache_days: int = 14, policy: DownloadPolicy = FAST):
    with requests.Session() as session:
        return crawl(conn, s3, session, settings, items, seen_since=NOW - timedelta(days=cache_days), policy=policy)


def image_rows(conn):
    return conn.execute("SELECT image_id, offer_id, num FROM app.image ORDER BY id").fetchall()


def drain(conn, s3):
    run = RunRef(CLEANUP_DAG, f"drain-{os.urandom(4).hex()}")
    ensure_run(conn, run)
    return delete_owed_objects(conn, s3, run)


def cleanup(conn, settings, *, grace_days: int = 14, dry_run: bool = False, name: str = "cleanup"):
    run = RunRef(CLEANUP_DAG, name, dry_run)
    ensure_run(conn, run)
    return run, delete_unbound_images(conn, run, cutoff=NOW - timedelta(days=grace_days), settings=settings)


def age_rows(conn, days: int) -> None:
    with conn.transaction():
        conn.execute("UPDATE app.image SET last_update = now() - %s * interval '1 day'", (days,))


# ------------------------------------------------------------------------------------------ the three branches
def test_branch_1_new_url_is_downloaded_cut_uploaded_and_bound(conn, s3, settings, photos, offers):
    url = photos.url("/photo/1.jpg")
    outcomes = run_crawl(conn, s3, settings, [CrawlItem(0, 1, url, 1)])
    assert outcomes[0].outcome == "new"
    image_id = outcomes[0].image_id
    assert image_rows(conn) == [(image_id, 1, 1)]
    row = conn.execute("SELECT url_hash, body_hash FROM app.image").fetchone()
    assert row == (md5_hex(url), md5_hex(jpeg(1)))
    assert object_keys(s3, settings.bucket) == set(image_keys(image_id, SIZES))
    assert photos.hits["/photo/1.jpg"] == 1
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0  # the upload intent is gone


def test_branch_2_url_bound_to_another_offer_gets_a_row_with_the_same_image_id_and_no_download(
        conn, s3, settings, photos, offers):
    url = photos.url("/photo/2.jpg")
    first = run_crawl(conn, s3, settings, [CrawlItem(0, 1, url, 1)])[0]
    second = run_crawl(conn, s3, settings, [CrawlItem(0, 2, url, 3)])[0]
    assert (second.outcome, second.image_id) == ("linked", first.image_id)
    assert image_rows(conn) == [(first.image_id, 1, 1), (first.image_id, 2, 3)]
    assert photos.hits["/photo/2.jpg"] == 1
    assert len(object_keys(s3, settings.bucket)) == len(SIZES)


def test_branch_3_unbound_row_is_rebound_with_num_and_last_update(conn, s3, settings, photos, offers):
    url = photos.url("/photo/3.jpg")
    first = run_crawl(conn, s3, settings, [CrawlItem(0, 1, url, 1)])[0]
    with conn.transaction():
        conn.execute("DELETE FROM app.offer WHERE id = 1")  # ON DELETE SET NULL unbinds the photo
        conn.execute("UPDATE app.image SET last_update = now() - interval '2 days'")
    again = run_crawl(conn, s3, settings, [CrawlItem(0, 2, url, 4)])[0]
    assert (again.outcome, again.image_id) == ("rebound", first.image_id)
    assert image_rows(conn) == [(first.image_id, 2, 4)]
    touched = conn.execute("SELECT last_update > now() - interval '1 minute' FROM app.image").fetchone()[0]
    assert touched and photos.hits["/photo/3.jpg"] == 1


def test_a_second_crawl_of_the_same_urls_downloads_nothing_and_adds_no_rows(conn, s3, settings, photos, offers):
    items = [CrawlItem(i, 1 + i % 2, photos.url(f"/photo/{10 + i}.jpg"), i + 1) for i in range(4)]
    run_crawl(conn, s3, settings, items)
    rows, hits = image_rows(conn), sum(photos.hits.values())
    outcomes = run_crawl(conn, s3, settings, items)
    assert {o.outcome for o in outcomes.values()} == {"unchanged"}
    assert image_rows(conn) == rows
    assert sum(photos.hits.values()) == hits == 4


def test_cache_window_a_url_seen_long_ago_is_downloaded_again(conn, s3, settings, photos, offers):
    url = photos.url("/photo/4.jpg")
    first = run_crawl(conn, s3, settings, [CrawlItem(0, 1, url, 1)])[0]
    age_rows(conn, 30)
    later = run_crawl(conn, s3, settings, [CrawlItem(0, 2, url, 1)], cache_days=14)[0]
    assert later.outcome == "new" and later.image_id != first.image_id
    assert photos.hits["/photo/4.jpg"] == 2
    # within the window, whether or not it was used, it is not fetched again
    run_crawl(conn, s3, settings, [CrawlItem(0, 3, url, 1)], cache_days=14)
    assert photos.hits["/photo/4.jpg"] == 2


def test_same_url_for_several_offers_in_one_batch_is_downloaded_once(conn, s3, settings, photos, offers):
    url = photos.url("/photo/5.jpg")
    outcomes = run_crawl(conn, s3, settings, [CrawlItem(i, i + 1, url, 1) for i in range(3)])
    assert sorted(o.outcome for o in outcomes.values()) == ["linked", "linked", "new"]
    assert len({o.image_id for o in outcomes.values()}) == 1
    assert photos.hits["/photo/5.jpg"] == 1


# ------------------------------------------------------------------------------------------ bad input
def test_every_kind_of_bad_url_is_recorded_and_leaves_nothing_behind(conn, s3, settings, photos, offers):
    bad = {"/missing.jpg": "http_404", "/slow.jpg": "timeout", "/text.jpg": "not_an_image",
           "/bomb.png": "bomb", "/huge.jpg": "oversize", "/huge-stream.jpg": "oversize", "/error.jpg": "http_500"}
    items = [CrawlItem(i, 1, photos.url(path), i + 1) for i, path in enumerate(bad)]
    items.append(CrawlItem(len(items), 1, photos.url("/photo/6.jpg"), 99))
    outcomes = run_crawl(conn, s3, settings, items)
    for item, (path, kind) in zip(items, bad.items(), strict=False):
        assert outcomes[item.item_no].outcome == "failed", path
        assert outcomes[item.item_no].error.startswith(kind), (path, outcomes[item.item_no].error)
    good = outcomes[items[-1].item_no]
    assert good.outcome == "new"
    assert image_rows(conn) == [(good.image_id, 1, 99)]  # no row for a bad URL
    assert object_keys(s3, settings.bucket) == set(image_keys(good.image_id, SIZES))  # no file either
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0
    assert photos.hits["/error.jpg"] == 3  # 5xx is retried (3 attempts), 404 is not
    assert photos.hits["/missing.jpg"] == 1


def test_a_url_for_an_offer_deleted_before_the_crawl_is_recorded_as_failed(conn, s3, settings, photos, offers):
    with conn.transaction():
        conn.execute("DELETE FROM app.offer WHERE id = 5")
    outcomes = run_crawl(conn, s3, settings, [CrawlItem(0, 5, photos.url("/photo/8.jpg"), 1),
                                              CrawlItem(1, 4, photos.url("/photo/8.jpg"), 1)])
    assert outcomes[0].outcome == "failed" and outcomes[0].error.startswith("offer_gone")
    assert outcomes[1].outcome == "new"
    assert image_rows(conn) == [(outcomes[1].image_id, 4, 1)]


def test_a_flaky_server_is_retried_with_backoff(conn, s3, settings, photos, offers):
    outcome = run_crawl(conn, s3, settings, [CrawlItem(0, 1, photos.url("/flaky.jpg"), 1)])[0]
    assert outcome.outcome == "new" and photos.hits["/flaky.jpg"] == 3


def test_an_upload_that_dies_midway_leaves_its_files_owed_and_the_cleaner_deletes_them(
        conn, s3, settings, photos, offers):
    failing = s3_client_from_env()
    calls = {"n": 0}

    def fail_from_the_third_call(**_):
        calls["n"] += 1
        if calls["n"] > 2:
            raise EndpointConnectionError(endpoint_url=os.environ["BLOBGC_S3_ENDPOINT"])

    failing.meta.events.register("before-send.s3.*", fail_from_the_third_call)
    with pytest.raises(EndpointConnectionError):
        run_crawl(conn, failing, settings, [CrawlItem(0, 1, photos.url("/photo/7.jpg"), 1)])
    assert image_rows(conn) == []  # no row without all its files
    assert len(object_keys(s3, settings.bucket)) == 2  # two files made it before S3 went away ...
    owed = conn.execute("SELECT dag_id, count(*) FROM blobgc.deleted_object WHERE owed GROUP BY dag_id").fetchall()
    assert owed == [(CLEANUP_DAG, len(SIZES))]  # ... and all of them are owed
    drained = drain(conn, s3)
    assert drained.owed_after == 0
    assert object_keys(s3, settings.bucket) == set()  # no files without a row


# ------------------------------------------------------------------------------------------ pre-upload and attach
def test_pre_upload_of_the_same_bytes_twice_gives_one_images_files(conn, s3, settings):
    body = jpeg(21, (1600, 1200))
    first = pre_upload(conn, s3, settings, body)
    second = pre_upload(conn, s3, settings, body)
    assert first == second
    assert image_rows(conn) == [(first, None, 0)]  # the unbound row is reused
    assert object_keys(s3, settings.bucket) == set(image_keys(first, SIZES))


def test_pre_upload_of_bytes_that_are_not_an_image_is_refused_and_stores_nothing(conn, s3, settings):
    with pytest.raises(ImageRejected, match="not a JPEG"):
        pre_upload(conn, s3, settings, b"GIF? no: plain text pretending to be a photo")
    assert image_rows(conn) == [] and object_keys(s3, settings.bucket) == set()


def test_pre_upload_of_an_oversize_file_or_a_bomb_is_refused_and_stores_nothing(conn, s3, bucket):
    from .photo_server import png_bomb

    small_limit = ImageSettings(bucket=bucket, sizes=SIZES, max_upload_bytes=10_000)
    with pytest.raises(ImageRejected, match="over the upload limit"):
        pre_upload(conn, s3, small_limit, jpeg(22, (1600, 1200)) + b"\0" * 10_000)
    with pytest.raises(ImageRejected) as bomb:
        pre_upload(conn, s3, ImageSettings(bucket=bucket, sizes=SIZES), png_bomb())
    assert bomb.value.kind == "bomb"
    assert image_rows(conn) == [] and object_keys(s3, bucket) == set()
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0


def test_attach_binds_in_order_adds_rows_for_images_bound_elsewhere_and_unbinds_the_rest(conn, s3, settings, offers):
    a, b, c = (pre_upload(conn, s3, settings, jpeg(30 + i)) for i in range(3))
    attach_images(conn, 1, [a, b])
    attach_images(conn, 2, [b, c])  # b is bound to offer 1: offer 2 gets a row of its own
    attach_images(conn, 1, [b])  # a is dropped from offer 1: unbound, its grace starts
    rows = conn.execute("SELECT image_id, offer_id, num FROM app.image ORDER BY offer_id NULLS FIRST, num").fetchall()
    assert rows == [(a, None, 1), (b, 1, 1), (b, 2, 1), (c, 2, 2)]
    with pytest.raises(UnknownImage):
        attach_images(conn, 3, [c, "0" * 32])
    assert conn.execute("SELECT count(*) FROM app.image WHERE offer_id = 3").fetchone()[0] == 0


# ------------------------------------------------------------------------------------------ the cleaner
def test_cleanup_deletes_unbound_rows_after_the_grace_then_their_files(conn, s3, settings):
    old = pre_upload(conn, s3, settings, jpeg(40))
    age_rows(conn, 20)
    fresh = pre_upload(conn, s3, settings, jpeg(41))
    stored = conn.execute("SELECT sum(s) FROM blobgc.image_file, unnest(sizes) s WHERE image_id = %s",
                          (old,)).fetchone()[0]
    _, result = cleanup(conn, settings)
    assert (result.rows_deleted, result.images_deleted, result.objects_owed) == (1, 1, len(SIZES))
    assert result.bytes_owed == stored > 0  # the files' real sizes, recorded when they were stored
    assert image_rows(conn) == [(fresh, None, 0)]
    drain(conn, s3)
    assert object_keys(s3, settings.bucket) == set(image_keys(fresh, SIZES))
    assert old


def test_a_duplicate_image_id_bound_elsewhere_keeps_its_files(conn, s3, settings, offers):
    image_id = pre_upload(conn, s3, settings, jpeg(42))
    attach_images(conn, 1, [image_id])
    with conn.transaction():  # a second, unbound row of the same image, gone stale
        conn.execute("INSERT INTO app.image (image_id, offer_id, last_update) "
                     "VALUES (%s, NULL, now() - interval '30 days')", (image_id,))
    _, result = cleanup(conn, settings)
    assert (result.rows_deleted, result.images_deleted, result.kept_in_use) == (1, 0, 1)
    drain(conn, s3)
    assert object_keys(s3, settings.bucket) == set(image_keys(image_id, SIZES))


def test_offer_deletion_unbinds_its_photos_and_the_cleanup_removes_them_after_the_grace(conn, s3, settings, offers):
    image_id = pre_upload(conn, s3, settings, jpeg(43))
    attach_images(conn, 2, [image_id])
    with conn.transaction():
        conn.execute("DELETE FROM app.offer WHERE id = 2")
    assert image_rows(conn) == [(image_id, None, 1)]
    _, within_grace = cleanup(conn, settings, name="day-1")
    assert within_grace.rows_deleted == 0
    age_rows(conn, 15)
    _, after_grace = cleanup(conn, settings, name="day-15")
    assert after_grace.rows_deleted == 1
    drain(conn, s3)
    assert image_rows(conn) == [] and object_keys(s3, settings.bucket) == set()


def test_offer_deleted_photos_keep_their_grace_from_the_deletion(conn, s3, settings, offers):
    """Issue 15 #3: ON DELETE SET NULL unbinds a photo attached long ago; its grace starts at the deletion."""
    image_id = pre_upload(conn, s3, settings, jpeg(44))
    attach_images(conn, 2, [image_id])
    age_rows(conn, 30)  # attached a month ago and untouched since
    with conn.transaction():
        conn.execute("DELETE FROM app.offer WHERE id = 2")  # the seed's offer deletion: nothing else
    assert image_rows(conn) == [(image_id, None, 1)]
    _, same_day = cleanup(conn, settings, grace_days=14, name="same-day")
    assert (same_day.rows_deleted, same_day.objects_owed) == (0, 0)
    assert conn.execute("SELECT last_update > now() - interval '1 minute' FROM app.image").fetchone()[0]
    drain(conn, s3)
    assert image_rows(conn) == [(image_id, None, 1)]
    assert object_keys(s3, settings.bucket) == set(image_keys(image_id, SIZES))
    age_rows(conn, 15)  # the grace has passed since the offer was deleted
    _, later = cleanup(conn, settings, grace_days=14, name="day-15")
    assert (later.rows_deleted, later.images_deleted) == (1, 1)
    drain(conn, s3)
    assert image_rows(conn) == [] and object_keys(s3, settings.bucket) == set()


def test_cleanup_dry_run_reports_and_changes_nothing(conn, s3, settings):
    for i in range(3):
        pre_upload(conn, s3, settings, jpeg(50 + i))
    age_rows(conn, 20)
    run, result = cleanup(conn, settings, dry_run=True)
    assert (result.rows_deleted, result.images_deleted, result.objects_owed) == (3, 3, 3 * len(SIZES))
    assert len(image_rows(conn)) == 3 and len(object_keys(s3, settings.bucket)) == 3 * len(SIZES)
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM blobgc.deleted_object WHERE dry_run").fetchone()[0] == 3 * len(SIZES)
    assert run.dry_run


def test_an_image_id_that_gets_a_row_again_before_the_drain_keeps_its_files(conn, s3, settings):
    """A writer that reused the image id before the cleanup committed wins: the drain re-checks and keeps."""
    image_id = pre_upload(conn, s3, settings, jpeg(60))
    age_rows(conn, 20)
    cleanup(conn, settings)  # the last row is gone, the files are owed
    with conn.transaction():
        conn.execute("INSERT INTO app.image (image_id, offer_id) VALUES (%s, NULL)", (image_id,))
    drained = drain(conn, s3)
    assert (drained.objects_deleted, drained.owed_after) == (0, 0)
    assert object_keys(s3, settings.bucket) == set(image_keys(image_id, SIZES))


def test_a_writer_reusing_an_image_id_waits_for_the_drain_and_then_finds_it_gone(
        conn, other_conn, s3, settings, offers):
    image_id = pre_upload(conn, s3, settings, jpeg(61))
    age_rows(conn, 20)
    cleanup(conn, settings)
    deleting, writer_waits = threading.Event(), threading.Event()
    slow = s3_client_from_env()

    def pause(**_):
        deleting.set()
        assert writer_waits.wait(20)

    slow.meta.events.register("before-call.s3.DeleteObjects", pause)
    run = RunRef(CLEANUP_DAG, "drain-race")
    ensure_run(conn, run)
    with ThreadPoolExecutor(2) as pool:
        drained = pool.submit(lambda: delete_owed_objects(conn, slow, run))
        assert deleting.wait(20)
        attach = pool.submit(lambda: attach_images(other_conn, 1, [image_id]))
        with pg_connect(os.environ["BLOBGC_PG_DSN"]) as watcher:
            wait_until(lambda: backend_waiting_on_lock(watcher, "pg_advisory_xact_lock_shared"))
        writer_waits.set()
        assert drained.result(30).objects_deleted == len(SIZES)
        with pytest.raises(UnknownImage):
            attach.result(30)
    assert image_rows(conn) == [] and object_keys(s3, settings.bucket) == set()


# ------------------------------------------------------------------------------------------ deadlocks
def backend_waits_on_a_lock(watcher, pid: int) -> bool:
    return watcher.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                           (pid,)).fetchone()[0] is True


def test_crawler_deadlock_with_the_drain_guard_is_retried_and_the_item_linked(
        conn, other_conn, test_dsn, s3, settings, photos, offers):
    """Issue 15 #15: a real deadlock. The drain guard holds the image id's stripe alone; the crawler (branch 2)
    holds the URL stripe shared and waits for the image stripe; the guard's side then asks for the URL stripe
    alone. PostgreSQL fails the crawler (the lower deadlock_timeout), which retries and links the item."""
    url = photos.url("/photo/90.jpg")
    image_id = run_crawl(conn, s3, settings, [CrawlItem(0, 1, url, 1)])[0].image_id  # bound to offer 1
    stage_items(conn, "deadlock", [CrawlRequest(2, (url,))], 50)
    items = batch_items(conn, "deadlock", 0)
    crawler = pg_connect(test_dsn)
    crawler.execute("SET deadlock_timeout = '500ms'")  # the crawler checks first: it is the victim
    other_conn.execute("SET deadlock_timeout = '30s'")
    pool = ThreadPoolExecutor(1)
    try:
        with pg_connect(test_dsn) as watcher, other_conn.transaction():
            with hold_unreferenced_images(other_conn, image_keys(image_id, SIZES)) as needed:
                assert needed == set(image_keys(image_id, SIZES))  # the guard keeps them: the image id has a row
                crawling = pool.submit(run_crawl, crawler, s3, settings, items)
                wait_until(lambda: backend_waits_on_a_lock(watcher, crawler.info.backend_pid))
                # the cycle: returns once PostgreSQL has failed the crawler's transaction (its URL stripe is free)
                lock_stripes(other_conn, URL_LOCK_CLASS, [md5_hex(url)], exclusive=True)
        outcomes = crawling.result(60)
    finally:
        pool.shutdown(wait=True)
        crawler.close()
    assert (outcomes[items[0].item_no].outcome, outcomes[items[0].item_no].image_id) == ("linked", image_id)
    assert outcomes.retries == 1 and outcome_counts(outcomes) == {"linked": 1, "retries": 1}
    record_outcomes(conn, "deadlock", outcomes)
    assert conn.execute("SELECT outcome, image_id FROM blobgc.crawl_item WHERE run_id = 'deadlock'").fetchall() == [
        ("linked", image_id)]
    assert image_rows(conn) == [(image_id, 1, 1), (image_id, 2, 1)]
    assert photos.hits["/photo/90.jpg"] == 1


# ------------------------------------------------------------------------------------------ addresses the crawler refuses
def crawl_one(conn, s3, settings, url: str, policy: DownloadPolicy):
    return run_crawl(conn, s3, settings, [CrawlItem(0, 1, url, 1)], policy=policy)[0]


def assert_refused(conn, s3, settings, outcome, kind: str) -> None:
    assert outcome.outcome == "failed" and outcome.error.startswith(f"{kind}: "), outcome
    assert image_rows(conn) == [] and object_keys(s3, settings.bucket) == set()
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0


def test_crawler_refuses_private_addresses_without_the_allow_list(conn, s3, settings, photos, offers):
    port = photos.httpd.server_address[1]
    for url in (photos.url("/photo/91.jpg"), f"http://localhost:{port}/photo/91.jpg",  # a name for loopback
                f"http://[::1]:{port}/photo/91.jpg", "http://169.254.169.254/latest/meta-data/",
                "http://10.0.0.1/photo.jpg", "http://0.0.0.0/photo.jpg", "http://2130706433/photo.jpg"):
        outcome = crawl_one(conn, s3, settings, url, STRICT)
        assert_refused(conn, s3, settings, outcome, "refused_address")
        assert "blobgc_crawler_allowed_networks" in outcome.error
    assert photos.hits["/photo/91.jpg"] == 0  # refused before connecting


def test_crawler_refuses_private_addresses_outside_the_allow_list_that_opens_others(conn, s3, settings, photos, offers):
    only_10 = DownloadPolicy(attempts=1, allowed_networks=["10.0.0.0/8"])
    assert_refused(conn, s3, settings, crawl_one(conn, s3, settings, photos.url("/photo/92.jpg"), only_10),
                   "refused_address")
    assert photos.hits["/photo/92.jpg"] == 0


def test_crawler_allows_private_addresses_in_the_allow_list(conn, s3, settings, photos, offers):
    port = photos.httpd.server_address[1]
    first = crawl_one(conn, s3, settings, photos.url("/photo/93.jpg"), FAST)
    by_name = run_crawl(conn, s3, settings, [CrawlItem(0, 2, f"http://localhost:{port}/photo/94.jpg", 1)],
                        policy=DownloadPolicy(attempts=1, allowed_networks=["127.0.0.0/8", "::1/128"]))[0]
    assert (first.outcome, by_name.outcome) == ("new", "new")
    assert photos.hits["/photo/93.jpg"] == photos.hits["/photo/94.jpg"] == 1


def test_crawler_refuses_private_addresses_on_a_redirect_hop(conn, s3, settings, photos, offers):
    """Redirects are followed one hop at a time, each hop's scheme and addresses checked before connecting."""
    port = photos.httpd.server_address[1]
    just_the_server = DownloadPolicy(attempts=1, allowed_networks=["127.0.0.1/32"])
    refusals = {
        photos.redirect_url("http://169.254.169.254/latest/meta-data/iam/"): "refused_address",
        photos.redirect_url(f"http://127.0.0.2:{port}/photo/95.jpg"): "refused_address",  # loopback, not allowed
        photos.redirect_url(f"http://[::1]:{port}/photo/95.jpg"): "refused_address",
        photos.redirect_url("file:///etc/passwd"): "refused_scheme",
        photos.redirect_url("gopher://127.0.0.1:6379/_FLUSHALL"): "refused_scheme",
        photos.url("/redirect-loop"): "too_many_redirects",
    }
    for url, kind in refusals.items():
        outcome = crawl_one(conn, s3, settings, url, just_the_server)
        assert_refused(conn, s3, settings, outcome, kind)
        if kind.startswith("refused"):
            assert "redirects (hop 1)" in outcome.error, outcome.error
    assert photos.hits["/redirect-loop"] == 6  # the first request and 5 redirects, then it gives up
    assert photos.hits["/photo/95.jpg"] == 0
    followed = crawl_one(conn, s3, settings, photos.redirect_url(photos.url("/photo/96.jpg")), just_the_server)
    assert followed.outcome == "new" and photos.hits["/photo/96.jpg"] == 1


def test_crawler_refuses_schemes_other_than_http_and_https(conn, s3, settings, offers):
    for url in ("file:///etc/passwd", "ftp://127.0.0.1/photo.jpg", "gopher://127.0.0.1:70/", "data:,hello"):
        assert_refused(conn, s3, settings, crawl_one(conn, s3, settings, url, FAST), "refused_scheme")


def test_crawler_refuses_private_addresses_after_dns_rebinding(conn, s3, settings, photos, offers, monkeypatch):
    """A name that resolves to a public address for the check and to loopback for the connection is refused
    at the connected socket's peer address."""
    monkeypatch.setattr(blobgc.downloads, "resolve_addresses", lambda host, port: ["93.184.216.34"], raising=False)
    outcome = crawl_one(conn, s3, settings, photos.url("/photo/97.jpg"), STRICT)
    assert_refused(conn, s3, settings, outcome, "refused_address")
    assert "connected to 127.0.0.1" in outcome.error
    assert photos.hits["/photo/97.jpg"] == 0  # the socket was closed before any request was sent


# ------------------------------------------------------------------------------------------ the DAGs under Airflow
def test_airflow_crawler_dag_with_conf_then_pending_requests(conn, s3, bucket, photos, offers):
    env = {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket}
    conf = {"requests": [{"offer_id": 1, "urls": [photos.url("/photo/70.jpg"), photos.url("/missing.jpg")]},
                         {"offer_id": 2, "urls": [photos.url("/photo/70.jpg")]},
                         {"offer_id": 999, "urls": [photos.url("/photo/71.jpg")]}]}
    result = airflow("dags", "test", "blobgc_crawler", "-c", json.dumps(conf), env_extra=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    outcomes = dict(conn.execute("SELECT url || ' offer ' || offer_id, outcome FROM blobgc.crawl_item").fetchall())
    assert outcomes == {f"{photos.url('/photo/70.jpg')} offer 1": "new",
                        f"{photos.url('/missing.jpg')} offer 1": "failed",
                        f"{photos.url('/photo/70.jpg')} offer 2": "linked",
                        f"{photos.url('/photo/71.jpg')} offer 999": "failed"}
    assert photos.hits["/photo/70.jpg"] == 1 and photos.hits["/photo/71.jpg"] == 0

    with conn.transaction():
        conn.execute("INSERT INTO app.crawl_request (offer_id, urls) VALUES (3, %s)",
                     ([photos.url("/photo/70.jpg"), photos.url("/photo/72.jpg")],))
    pending = airflow("dags", "test", "blobgc_crawler", env_extra=env)
    assert pending.returncode == 0, pending.stdout[-3000:]
    assert conn.execute("SELECT status FROM app.crawl_request").fetchone()[0] == "done"
    assert conn.execute("SELECT count(*) FROM app.image WHERE offer_id = 3").fetchone()[0] == 2
    assert photos.hits["/photo/70.jpg"] == 1 and photos.hits["/photo/72.jpg"] == 1


def test_airflow_crawler_refuses_malformed_requests_before_staging_anything(conn):
    result = airflow("dags", "test", "blobgc_crawler", "-c", json.dumps({"requests": [{"offer_id": "x", "urls": []}]}),
                     env_extra={"BLOBGC_TASK_RETRIES": "0"})
    assert result.returncode != 0
    assert "offer_id must be a positive integer" in result.stdout + result.stderr
    assert conn.execute("SELECT count(*) FROM blobgc.crawl_item").fetchone()[0] == 0


def test_airflow_image_cleanup_dag_removes_stale_unbound_photos(conn, s3, bucket, settings):
    kept = pre_upload(conn, s3, settings, jpeg(80))
    age_rows(conn, 20)
    with conn.transaction():
        conn.execute("UPDATE app.image SET last_update = now() WHERE image_id = %s", (kept,))
    gone = pre_upload(conn, s3, settings, jpeg(81))
    age_rows_sql = "UPDATE app.image SET last_update = now() - interval '20 days' WHERE image_id = %s"
    with conn.transaction():
        conn.execute(age_rows_sql, (gone,))
    result = airflow("dags", "test", "blobgc_image_cleanup", env_extra={"AIRFLOW_VAR_BLOBGC_BUCKET": bucket})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert image_rows(conn) == [(kept, None, 0)]
    assert object_keys(s3, bucket) == set(image_keys(kept, SIZES))
    row = conn.execute("SELECT rows_deleted, objects_deleted, bytes_reclaimed > 0 FROM blobgc.reclaim_daily "
                       "WHERE dag_id = 'blobgc_image_cleanup' AND NOT dry_run").fetchone()
    assert row == (1, len(SIZES), True)


def test_airflow_crawler_refuses_private_addresses_without_the_allow_list(conn, bucket, photos, offers):
    """The DAG takes the allow-list from Variable blobgc_crawler_allowed_networks; empty, loopback is refused,
    and so is a pending request's file:// URL; each is recorded with its reason and the run succeeds."""
    with conn.transaction():
        conn.execute("INSERT INTO app.crawl_request (offer_id, urls) VALUES (1, %s)",
                     ([photos.url("/photo/75.jpg"), "file:///etc/passwd"],))
    result = airflow("dags", "test", "blobgc_crawler", env_extra={
        "AIRFLOW_VAR_BLOBGC_BUCKET": bucket, "AIRFLOW_VAR_BLOBGC_CRAWLER_ALLOWED_NETWORKS": "[]"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    items = dict(conn.execute("SELECT url, outcome || ' ' || split_part(error, ':', 1) FROM blobgc.crawl_item"))
    assert items == {photos.url("/photo/75.jpg"): "failed refused_address", "file:///etc/passwd": "failed refused_scheme"}
    assert photos.hits["/photo/75.jpg"] == 0 and image_rows(conn) == []


ODD_SIZES = {"orig": 0, "größe": 640}  # a non-ASCII size name: its files would never parse, so never be deleted


def test_image_size_names_that_are_not_ascii_fail_the_cleanup_first_task_and_delete_nothing(
        conn, s3, bucket, settings):
    image_id = pre_upload(conn, s3, settings, jpeg(82))
    age_rows(conn, 20)
    result = airflow("dags", "test", "blobgc_image_cleanup", env_extra={
        "AIRFLOW_VAR_BLOBGC_BUCKET": bucket, "AIRFLOW_VAR_BLOBGC_IMAGE_SIZES": json.dumps(ODD_SIZES),
        "BLOBGC_TASK_RETRIES": "0"})
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "Variable blobgc_image_sizes: size name 'größe' is not allowed" in output, output[-3000:]
    assert "delete_unbound_images" in output
    assert image_rows(conn) == [(image_id, None, 0)]
    assert object_keys(s3, bucket) == set(image_keys(image_id, SIZES))
    assert conn.execute("SELECT count(*) FROM blobgc.deletion_log").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM blobgc.run WHERE dag_id = 'blobgc_image_cleanup'").fetchone()[0] == 0


def test_image_size_names_that_are_not_ascii_fail_the_crawler_before_staging(conn, s3, bucket, photos, offers):
    conf = {"requests": [{"offer_id": 1, "urls": [photos.url("/photo/76.jpg")]}]}
    result = airflow("dags", "test", "blobgc_crawler", "-c", json.dumps(conf), env_extra={
        "AIRFLOW_VAR_BLOBGC_BUCKET": bucket, "AIRFLOW_VAR_BLOBGC_IMAGE_SIZES": json.dumps({"orig": 0, "миниатюра": 160}),
        "BLOBGC_TASK_RETRIES": "0"})
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "Variable blobgc_image_sizes: size name 'миниатюра' is not allowed" in output, output[-3000:]
    assert conn.execute("SELECT count(*) FROM blobgc.crawl_item").fetchone()[0] == 0
    assert photos.hits["/photo/76.jpg"] == 0 and image_rows(conn) == [] and object_keys(s3, bucket) == set()

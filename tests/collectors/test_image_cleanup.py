"""blobgc.collectors.image_cleanup: seed 001's rotten-image cleaner, its grace and its drain-time guard."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from botocore.exceptions import EndpointConnectionError

from blobgc.collectors.crawler import CrawlItem
from blobgc.collectors.image_cleanup import delete_unbound_images
from blobgc.core.clients import pg_connect, s3_client_from_env
from blobgc.core.keys import image_keys
from blobgc.core.outbox import delete_owed_objects
from blobgc.core.runs import RunRef, ensure_run
from demo_app.images import CLEANUP_DAG, UnknownImage, attach_images, pre_upload
from tests.helpers import NOW, backend_waiting_on_lock, object_keys, wait_until
from tests.photo_server import jpeg
from tests.support.images import SIZES, age_rows, drain, image_rows, run_crawl


def cleanup(conn, settings, *, grace_days: int = 14, dry_run: bool = False, name: str = "cleanup"):
    run = RunRef(CLEANUP_DAG, name, dry_run)
    ensure_run(conn, run)
    return run, delete_unbound_images(conn, run, cutoff=NOW - timedelta(days=grace_days), bucket=settings.bucket,
                                      size_names=settings.sizes)


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

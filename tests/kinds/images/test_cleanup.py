"""blobgc.kinds.images.cleanup: seed 001's rotten-image cleaner, its grace, its plan and its drain-time guard."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from botocore.exceptions import EndpointConnectionError

from blobgc.kinds.images.crawler import CrawlItem
from blobgc.kinds.images.cleanup import PART, execute_image_plan, plan_unbound_images
from blobgc.core.clients import pg_connect, s3_client_from_env
from blobgc.kinds.images.layouts import IMAGE_FILES, image_keys
from blobgc.core.locks import IMAGE_LOCK_CLASS, session_stripe
from blobgc.core.outbox import cancel_upload_intent, delete_owed_objects, owe_upload_intent
from blobgc.core.plans import execution_report, fix_plan
from blobgc.core.runs import RunRef, ensure_run, finish_run
from blobgc.core.gate import let_through
from demo_app.images import CLEANUP_DAG, UnknownImage, attach_images, pre_upload
from tests.helpers import NOW, backend_waiting_on_lock, object_keys, wait_until
from tests.photo_server import jpeg
from tests.support.images import SIZES, age_rows, drain, image_rows, run_crawl


def plan(conn, settings, *, grace_days: int = 14, dry_run: bool = False, name: str = "cleanup",
         from_plan: str | None = None, batch_size: int = 1000):
    """A run that fixes its plan (its own, or `from_plan`'s) and, making its own, plans, as the DAG's first task."""
    run = ensure_run(conn, RunRef(CLEANUP_DAG, name, dry_run))
    if fix_plan(conn, run, from_plan, 24) != run.run_id:
        return run, None
    return run, plan_unbound_images(conn, run, cutoff=NOW - timedelta(days=grace_days), bucket=settings.bucket,
                                    size_names=settings.sizes, batch_size=batch_size)


def execute(conn, run, *, grace_days: int = 14):
    """The gate lets the plan through (approved by "tests" past the threshold), then the delete task executes it."""
    let_through(conn, run, approved_by="tests")
    return execute_image_plan(conn, run, cutoff=NOW - timedelta(days=grace_days))


def cleanup(conn, settings, *, grace_days: int = 14, dry_run: bool = False, name: str = "cleanup"):
    """A whole run as the DAG makes it (a gate that lets the plan through): plan, then execute; a dry run plans."""
    run, planned = plan(conn, settings, grace_days=grace_days, dry_run=dry_run, name=name)
    return run, planned if dry_run else execute(conn, run, grace_days=grace_days)


def plan_items(conn, run_id: str) -> list[tuple]:
    return conn.execute("SELECT row_ids, keys FROM blobgc.plan_item WHERE run_id = %s ORDER BY id",
                        (run_id,)).fetchall()


def row_id(conn, image_id: str) -> str:
    return str(conn.execute("SELECT id FROM app.image WHERE image_id = %s", (image_id,)).fetchone()[0])


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
    assert drain(conn, s3).owed_after == len(SIZES)  # not before the hold: the writer might still be uploading
    assert len(object_keys(s3, settings.bucket)) == 2
    due_now(conn)  # the hold has passed (backdated, never faked forward)
    drained = drain(conn, s3)
    assert drained.owed_after == 0
    assert object_keys(s3, settings.bucket) == set()  # no files without a row


def due_now(conn) -> None:
    """As if the upload intents had been owed longer ago than their hold."""
    with conn.transaction():
        conn.execute("UPDATE blobgc.outbox SET next_attempt_at = now() WHERE log_id IN "
                     "(SELECT id FROM blobgc.deletion_log WHERE run_id LIKE 'intent:%')")


def test_a_drain_during_an_upload_leaves_its_intent_and_never_waits_for_the_writer(conn, s3, settings, test_dsn,
                                                                                   other_conn):
    """A writer holds its image id's stripe (shared) from its intent to its row. A drain that claimed the intent
    would wait for that stripe while the writer waits to cancel the intent, and PostgreSQL would fail one of them
    (the upload, usually). The intent is not due while the writer can still be uploading, so the drain passes it."""
    image_id, writer = "a" * 32, other_conn
    keys = image_keys(image_id, SIZES)

    def drain_alone():
        with pg_connect(test_dsn) as own:
            return drain(own, s3)

    pool = ThreadPoolExecutor(1)
    try:
        with session_stripe(writer, IMAGE_LOCK_CLASS, image_id, exclusive=False):
            log_id = owe_upload_intent(writer, dag_id=CLEANUP_DAG, run_id="intent:upload", source=IMAGE_FILES.source,
                                       bucket=settings.bucket, keys=keys, sizes=[1] * len(keys))
            for key in keys[:2]:
                s3.put_object(Bucket=settings.bucket, Key=key, Body=b"x")
            drained = pool.submit(drain_alone)
            wait_until(drained.done, timeout=20)  # it never waits for the writer's stripe
            assert drained.result().objects_deleted == 0
            assert object_keys(s3, settings.bucket) == set(keys[:2])
            for key in keys[2:]:
                s3.put_object(Bucket=settings.bucket, Key=key, Body=b"x")
            with writer.transaction():  # the writer accounts for its files and cancels its intent, unhindered
                writer.execute("INSERT INTO app.image (image_id, offer_id) VALUES (%s, NULL)", (image_id,))
                cancel_upload_intent(writer, log_id)
    finally:
        pool.shutdown(wait=True)  # after the stripe is released, so a drain that did wait can finish
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0
    assert object_keys(s3, settings.bucket) == set(keys)


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


# ------------------------------------------------------------------------------------------------ the plan
def test_a_dry_runs_plan_executed_deletes_exactly_the_planned_rows_and_files(conn, s3, settings, offers):
    planned = [pre_upload(conn, s3, settings, jpeg(70 + i)) for i in range(3)]
    age_rows(conn, 20)
    dry, preview = plan(conn, settings, dry_run=True, name="dry")
    finish_run(conn, dry)
    assert (preview.rows_deleted, preview.images_deleted, preview.objects_owed) == (3, 3, 3 * len(SIZES))
    assert sorted(k for _, keys in plan_items(conn, dry.run_id) for k in keys) == sorted(
        k for i in planned for k in image_keys(i, SIZES))
    assert conn.execute("SELECT count(*) FROM blobgc.deleted_object WHERE run_id = %s AND dry_run",
                        (dry.run_id,)).fetchone()[0] == 3 * len(SIZES)  # the dry run's report, as before plans
    # After the plan: one planned row is bound to an offer, one is touched, and a new row goes stale, unplanned.
    gone, bound, touched = planned
    bound_row, touched_row = row_id(conn, bound), row_id(conn, touched)
    attach_images(conn, 1, [bound])
    with conn.transaction():
        conn.execute("UPDATE app.image SET last_update = now() WHERE image_id = %s", (touched,))
    newcomer = pre_upload(conn, s3, settings, jpeg(79))
    with conn.transaction():
        conn.execute("UPDATE app.image SET last_update = now() - interval '20 days' WHERE image_id = %s", (newcomer,))

    real, nothing = plan(conn, settings, name="real", from_plan=dry.run_id)
    assert nothing is None and plan_items(conn, real.run_id) == []  # it plans nothing itself
    result = execute(conn, real)
    assert (result.items, result.rows_deleted, result.objects_owed) == (1, 1, len(SIZES))
    assert (result.skipped_rows, result.skipped_objects) == (2, 2 * len(SIZES))
    assert {r[0] for r in image_rows(conn)} == {bound, touched, newcomer}
    outcome = conn.execute("SELECT rows_deleted, objects_owed, skipped_ids, skipped_keys FROM blobgc.plan_outcome "
                           "WHERE run_id = %s", (real.run_id,)).fetchone()
    assert outcome[:3] == (1, len(SIZES), sorted([bound_row, touched_row], key=int))
    assert sorted(outcome[3]) == sorted(image_keys(bound, SIZES) + image_keys(touched, SIZES))
    owed = {k for (k,) in conn.execute("SELECT key FROM blobgc.deleted_object WHERE run_id = %s", (real.run_id,))}
    assert owed == set(image_keys(gone, SIZES))  # never a key outside the plan
    drain(conn, s3)
    assert object_keys(s3, settings.bucket) == {k for i in (bound, touched, newcomer) for k in image_keys(i, SIZES)}
    report = execution_report(conn, real)
    assert (report["plan"], report["planned_rows"], report["planned_objects"]) == (dry.run_id, 3, 3 * len(SIZES))
    assert (report["skipped_rereferenced_rows"], report["skipped_rereferenced_objects"]) == (2, 2 * len(SIZES))
    assert report["failed_objects"] == 0



def test_a_plan_executed_after_another_run_freed_its_images_owes_none_of_their_files_again(conn, s3, settings):
    """A dry run's plan executed after the scheduled run deleted the same rows: the files were owed once, by the run
    that freed them; the second run skips them (it took no file record and deleted no row of theirs)."""
    images = [pre_upload(conn, s3, settings, jpeg(100 + i)) for i in range(2)]
    age_rows(conn, 20)
    dry, _ = plan(conn, settings, dry_run=True, name="dry-overlap")
    finish_run(conn, dry)
    scheduled, freed = cleanup(conn, settings, name="scheduled")
    assert (freed.rows_deleted, freed.images_deleted, freed.objects_owed) == (2, 2, 2 * len(SIZES))
    late, _ = plan(conn, settings, name="late", from_plan=dry.run_id)
    result = execute(conn, late)
    assert (result.rows_deleted, result.images_deleted, result.objects_owed) == (0, 0, 0)
    assert (result.skipped_rows, result.skipped_objects) == (2, 2 * len(SIZES))
    owed_by = conn.execute("SELECT run_id, count(*) FROM blobgc.deleted_object WHERE NOT dry_run GROUP BY run_id"
                           ).fetchall()
    assert owed_by == [(scheduled.run_id, 2 * len(SIZES))]
    assert {k for (k,) in conn.execute("SELECT key FROM blobgc.deleted_object WHERE NOT dry_run")} == {
        k for i in images for k in image_keys(i, SIZES)}
    drain(conn, s3)
    assert object_keys(s3, settings.bucket) == set()


def test_a_row_touched_since_the_plan_is_skipped_by_a_run_with_a_shorter_grace(conn, s3, settings):
    """A run executing a dry run's plan re-checks each row against the plan's cut-off too: a row touched after the
    plan (still unbound) is skipped even by a run whose own grace (0 days) would let it go."""
    stale, touched = (pre_upload(conn, s3, settings, jpeg(110 + i)) for i in range(2))
    age_rows(conn, 20)
    dry, _ = plan(conn, settings, dry_run=True, name="dry-14-days")
    finish_run(conn, dry)
    with conn.transaction():
        conn.execute("UPDATE app.image SET last_update = now() WHERE image_id = %s", (touched,))
    real, _ = plan(conn, settings, name="grace-0", from_plan=dry.run_id)
    now = conn.execute("SELECT now()").fetchone()[0]  # grace_days 0: the run's own cut-off is the present
    let_through(conn, real, approved_by="tests")
    result = execute_image_plan(conn, real, cutoff=now)
    assert (result.rows_deleted, result.skipped_rows, result.objects_owed) == (1, 1, len(SIZES))
    assert [r[0] for r in image_rows(conn)] == [touched]
    drain(conn, s3)
    assert object_keys(s3, settings.bucket) == set(image_keys(touched, SIZES))
def test_planned_files_are_kept_when_their_image_id_has_a_row_again_at_delete_time(conn, s3, settings):
    image_id = pre_upload(conn, s3, settings, jpeg(90))
    age_rows(conn, 20)
    run, planned = plan(conn, settings)
    assert planned.objects_owed == len(SIZES)
    with conn.transaction():  # a writer gives the image id a new row after the plan (the planned row stays stale)
        conn.execute("INSERT INTO app.image (image_id, offer_id) VALUES (%s, NULL)", (image_id,))
    result = execute(conn, run)
    assert (result.rows_deleted, result.objects_owed, result.skipped_objects) == (1, 0, len(SIZES))
    assert conn.execute("SELECT count(*) FROM blobgc.outbox").fetchone()[0] == 0
    drain(conn, s3)
    assert object_keys(s3, settings.bucket) == set(image_keys(image_id, SIZES))


def test_an_image_ids_files_are_planned_once_in_the_item_of_its_last_stale_row(conn, s3, settings):
    image_id = pre_upload(conn, s3, settings, jpeg(91))
    with conn.transaction():
        conn.execute("INSERT INTO app.image (image_id, offer_id) VALUES (%s, NULL)", (image_id,))
    other = pre_upload(conn, s3, settings, jpeg(92))
    age_rows(conn, 20)
    run, planned = plan(conn, settings, batch_size=1)
    assert (planned.batches, planned.rows_deleted, planned.objects_owed) == (3, 3, 2 * len(SIZES))
    assert [len(keys) for _, keys in plan_items(conn, run.run_id)] == [0, len(SIZES), len(SIZES)]
    result = execute(conn, run)
    assert (result.items, result.rows_deleted, result.objects_owed, result.skipped_objects) == (
        3, 3, 2 * len(SIZES), 0)
    drain(conn, s3)
    assert image_rows(conn) == [] and object_keys(s3, settings.bucket) == set()
    assert other


def test_a_retried_planning_task_plans_and_reports_each_row_once(conn, s3, settings):
    for i in range(3):
        pre_upload(conn, s3, settings, jpeg(93 + i))
    age_rows(conn, 20)
    plan(conn, settings, dry_run=True, name="retried", batch_size=2)
    run, again = plan(conn, settings, dry_run=True, name="retried", batch_size=2)  # the task's second attempt
    assert [len(row_ids) for row_ids, _ in plan_items(conn, run.run_id)] == [2, 1]
    assert conn.execute("SELECT count(*) FROM blobgc.deleted_object WHERE run_id = %s AND dry_run",
                        (run.run_id,)).fetchone()[0] == 3 * len(SIZES)
    totals = conn.execute("SELECT rows_deleted, objects_deleted FROM blobgc.run WHERE run_id = %s",
                          (run.run_id,)).fetchone()
    assert totals == (3, 3 * len(SIZES)) == (again.rows_deleted, again.objects_owed)
    assert len(image_rows(conn)) == 3 and len(object_keys(s3, settings.bucket)) == 3 * len(SIZES)

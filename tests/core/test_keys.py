"""blobgc.core.keys: the one registry of key layouts, and the guards that decide at drain time whether a key is
still accounted for."""
from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import pytest

from tests.support.gated import expire_due_pastes
from blobgc.core.clients import pg_connect, s3_client_from_env
from blobgc.core.keys import KeyLayoutError
from blobgc.kinds.blobs.layouts import BLOB_OBJECTS, blob_keys
from blobgc.kinds.generations.layouts import MAIL_BLOBS, generation_of, mail_blob_id as blob_id_for, mail_key
from blobgc.kinds.images.layouts import IMAGE_FILES, image_keys
from blobgc.kinds.media.layouts import PROFILE_STAGING, STAGING, master_key, master_prefix_of_thumb, rev_month, staging_layout, thumb_key, thumb_prefix, time8
from blobgc.kinds.pastes.layouts import PASTE_CONTENTS, content_key
from blobgc.core.outbox import delete_owed_objects, record_deletions
from demo_app.pastes import create_paste
from tests.helpers import NOW, backend_waiting_on_lock, object_keys, wait_until
from tests.support.media import USER
from tests.support.pastes import FUTURE, PAST, new_run, ref_count


def test_rev_month_and_time8():
    assert rev_month(202510) == "797489" and rev_month(202601) == "797398"
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    assert time8(start) == "ffffffff"
    assert time8(datetime(2026, 11, 1, 0, 0, 1, tzinfo=timezone.utc)) == f"{0xFFFFFFFF - 1000:08x}"
    with pytest.raises(KeyLayoutError):
        rev_month(202613)


def test_master_thumb_and_prefix_keys():
    when = datetime(2026, 11, 21, 12, tzinfo=timezone.utc)
    master = master_key(USER, when, "jpg", "0badc0de")
    assert master == f"{USER}/masters/797388/{time8(when)}0badc0de.jpg"
    thumb = thumb_key(master, 640, 640)
    assert thumb == f"{USER}/thumbs/797388/{time8(when)}0badc0de_640x640.webp"
    assert thumb.startswith(thumb_prefix(master))
    assert master_prefix_of_thumb(thumb) == master[:-3]
    assert thumb_key(f"{USER}/masters/avatar.png", 64, 64) == f"{USER}/thumbs/avatar_64x64.webp"
    assert master_prefix_of_thumb(f"{USER}/thumbs/avatar_64x64.webp") == f"{USER}/masters/avatar."


def test_staging_layout_is_exact():
    assert staging_layout("staging/0") is STAGING and staging_layout("profiles-staging/a") is PROFILE_STAGING
    assert STAGING.fullmatch(f"staging/{USER}/0f8fad5b-d9cb-469f-a165-70867728950e.jpg")
    assert not STAGING.fullmatch("staging/masters/797388/0123456789abcdef.jpg")  # a master of a user `staging`
    assert not PROFILE_STAGING.fullmatch("profiles-staging/masters/avatar.jpg")
    with pytest.raises(KeyLayoutError):
        staging_layout("masters/")


@pytest.mark.parametrize("value", ["abc123", "a" * 64, "A.b-c_d", "x/y", "2024/05/cat.jpg", "a", "ab", "é ü+%",
                                   "raw/raw", "line\nbreak"])
def test_narrow_seed_layout_every_seed_layout_reads_back_exactly_the_value_its_key_was_formed_from(value):
    """One placeholder between fixed literals: a key has one reading, the value it was formed from, whatever the
    column held (docs/reference.md §3's columns are text)."""
    assert BLOB_OBJECTS.identity(blob_keys(value)[0]) == BLOB_OBJECTS.identity(blob_keys(value)[1]) == value
    assert PASTE_CONTENTS.identity(content_key(value)) == value
    assert MAIL_BLOBS.identity(mail_key(value)) == value
    assert all(IMAGE_FILES.identity(key) == value for key in image_keys(value, ["orig", "thumb"]))


def test_blob_ids_embed_the_generation_and_the_content_hash():
    digest = hashlib.sha256(b"mail body").hexdigest()
    assert blob_id_for(digest, 7) == f"{digest}-g7"
    assert blob_id_for(digest, 7) != blob_id_for(digest, 8)
    assert generation_of(blob_id_for(digest, 12)) == 12
    for foreign in ("b1", f"{digest}-gx", f"{digest[:10]}-g3", "abc-g-1"):
        assert generation_of(foreign) is None


def test_two_drains_side_by_side_delete_every_owed_object_once(conn, s3, bucket, test_dsn):
    keys = [f"pastes/{i:064x}" for i in range(3000)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: s3.put_object(Bucket=bucket, Key=k, Body=b"x"), keys))
    run = new_run(conn)
    with conn.transaction():
        for start in range(0, len(keys), 100):
            record_deletions(conn, run, source="app.content", bucket=bucket, keys=keys[start:start + 100],
                             sizes=[1] * 100)
    result = delete_owed_objects(conn, s3, run, batch_size=100, concurrency=2, workers=2,
                                 connect=lambda: pg_connect(test_dsn))
    assert (result.objects_deleted, result.failed, result.owed_after) == (3000, 0, 0)
    assert object_keys(s3, bucket) == set()
    settled = [k for (ks,) in conn.execute("SELECT keys FROM blobgc.deletion_settlement") for k in ks]
    assert sorted(settled) == sorted(keys)  # each key settled by exactly one drain
    assert conn.execute("SELECT objects_deleted FROM blobgc.run").fetchone()[0] == 3000


def test_reupload_before_the_owed_deletion_keeps_the_object(conn, s3, bucket, redis, redis_prefix):
    old = create_paste(conn, s3, redis, bucket=bucket, content=b"again", expires_at=PAST, redis_prefix=redis_prefix)
    run = new_run(conn)
    expire_due_pastes(conn, run, approved_by="tests", expired_before=NOW, bucket=bucket, redis_prefix=redis_prefix)
    assert ref_count(conn, old.content_hash) is None  # deleted; its object is owed

    new = create_paste(conn, s3, redis, bucket=bucket, content=b"again", expires_at=FUTURE, redis_prefix=redis_prefix)
    assert new.content_is_new
    drained = delete_owed_objects(conn, s3, run)
    assert (drained.objects_deleted, drained.owed_after) == (0, 0)
    assert content_key(new.content_hash) in object_keys(s3, bucket)
    assert s3.get_object(Bucket=bucket, Key=content_key(new.content_hash))["Body"].read() == b"again"
    kept = conn.execute("SELECT deleted_at, kept_at IS NOT NULL FROM blobgc.deleted_object").fetchall()
    assert kept == [(None, True)]


def test_reupload_while_the_owed_deletion_runs_ends_with_the_object(conn, other_conn, s3, bucket, redis,
                                                                     redis_prefix):
    """The writer arrives while DeleteObjects is in flight: it waits, then uploads again."""
    old = create_paste(conn, s3, redis, bucket=bucket, content=b"racy", expires_at=PAST, redis_prefix=redis_prefix)
    run = new_run(conn)
    expire_due_pastes(conn, run, approved_by="tests", expired_before=NOW, bucket=bucket, redis_prefix=redis_prefix)

    deleting, writer_waits = threading.Event(), threading.Event()
    slow = s3_client_from_env()

    def pause_inside_delete(**_):
        deleting.set()
        assert writer_waits.wait(20), "the writer never blocked"

    slow.meta.events.register("before-call.s3.DeleteObjects", pause_inside_delete)
    with ThreadPoolExecutor(2) as pool:
        drain = pool.submit(lambda: delete_owed_objects(conn, slow, run))
        assert deleting.wait(20)
        write = pool.submit(lambda: create_paste(other_conn, s3, redis, bucket=bucket, content=b"racy",
                                                 expires_at=FUTURE, redis_prefix=redis_prefix))
        with pg_connect(os.environ["BLOBGC_PG_DSN"]) as watcher:
            wait_until(lambda: backend_waiting_on_lock(watcher, "INSERT INTO app.content AS c"))
        writer_waits.set()
        drained, new = drain.result(30), write.result(30)
    assert drained.objects_deleted == 1  # the old object went ...
    assert new.content_is_new  # ... and the writer, having waited, created the content anew
    assert content_key(old.content_hash) in object_keys(s3, bucket)
    assert ref_count(conn, old.content_hash) == 1


def test_writer_in_flight_when_the_deletion_starts_keeps_the_object(conn, other_conn, s3, bucket, redis,
                                                                     redis_prefix):
    """The writer has upserted the content but not committed: the deletion waits, then keeps the key."""
    old = create_paste(conn, s3, redis, bucket=bucket, content=b"inflight", expires_at=PAST,
                       redis_prefix=redis_prefix)
    run = new_run(conn)
    expire_due_pastes(conn, run, approved_by="tests", expired_before=NOW, bucket=bucket, redis_prefix=redis_prefix)

    with ThreadPoolExecutor(1) as pool:
        with other_conn.transaction():
            other_conn.execute("INSERT INTO app.content AS c (content_hash, ref_count, size_bytes) "
                               "VALUES (%s, 1, 8)", (old.content_hash,))
            drain = pool.submit(lambda: delete_owed_objects(conn, s3, run))
            with pg_connect(os.environ["BLOBGC_PG_DSN"]) as watcher:
                wait_until(lambda: backend_waiting_on_lock(watcher, "INSERT INTO app.content (content_hash"))
            s3.put_object(Bucket=bucket, Key=content_key(old.content_hash), Body=b"inflight")
            other_conn.execute("INSERT INTO app.paste (short_code, content_hash, expires_at) VALUES ('w1', %s, %s)",
                               (old.content_hash, FUTURE))
        drained = drain.result(30)
    assert drained.objects_deleted == 0
    assert content_key(old.content_hash) in object_keys(s3, bucket)
    assert conn.execute("SELECT outcome FROM blobgc.deletion_settlement").fetchall() == [("kept",)]

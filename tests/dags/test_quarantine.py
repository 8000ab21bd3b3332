"""Quarantine under Airflow (issue 32): Variable blobgc_quarantine, the drain moving objects aside, the DAG's
purge_quarantine task, and a reconcile during the window that never treats the quarantine prefix as orphans or
unknown keys."""
from __future__ import annotations

import json

from blobgc.core.inventory_reports import Destination
from blobgc.inventory import report_of_bucket
from blobgc.kinds.blobs.layouts import blob_keys
from tests.helpers import backdate_object, backdate_objects, make_blobs, object_keys, run_dag, set_unused_since

DAYS = 7


def test_a_sweep_quarantines_a_reconcile_meanwhile_ignores_the_copies_and_the_purge_reclaims_them(
        conn, s3, bucket, reports):
    kept, garbage = make_blobs(conn, s3, bucket, 2)
    with conn.transaction():
        conn.execute("INSERT INTO app.post (id) VALUES ('p1')")
        conn.execute("INSERT INTO app.blob_attachment (post_id, blob_id) VALUES ('p1', %s)", (kept,))
    set_unused_since(conn, [garbage], "2 days")
    env = {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket, "AIRFLOW_VAR_BLOBGC_QUARANTINE": json.dumps({"blobs": DAYS})}

    sweep = run_dag("blobgc_sweep", env_extra=env)
    assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
    assert sweep.task_states["purge_quarantine"] == "success"
    copies = {f".blobgc-quarantine/blobgc_sweep/{sweep.run_id}/{k}" for k in blob_keys(garbage)}
    assert object_keys(s3, bucket) == set(blob_keys(kept)) | copies
    assert conn.execute("SELECT objects_deleted, bytes_deleted, bytes_reclaimed FROM blobgc.run "
                        "WHERE run_id = %s", (sweep.run_id,)).fetchone() == (2, 110, 0)

    # two days later (the copies and everything else old enough to be orphans, were they listed): a reconcile by
    # listing, and one from an inventory report that lists the copies, find nothing to delete or report
    backdate_objects(s3, bucket, 2 * 86400)
    listing = run_dag("blobgc_reconcile", conf={"min_age_hours": 1, "confirmations": 1}, env_extra=env)
    assert listing.returncode == 0, listing.stdout[-3000:] + listing.stderr[-3000:]
    report_of_bucket(s3, bucket, Destination(reports, "inventories/"), file_format="csv")
    inventory_env = {**env, "AIRFLOW_VAR_BLOBGC_INVENTORY": json.dumps({bucket: f"s3://{reports}/inventories"})}
    inventory = run_dag("blobgc_reconcile", conf={"min_age_hours": 1, "confirmations": 1, "source": "inventory"},
                        env_extra=inventory_env)
    assert inventory.returncode == 0, inventory.stdout[-3000:] + inventory.stderr[-3000:]
    assert object_keys(s3, bucket) == set(blob_keys(kept)) | copies
    for run in (listing, inventory):
        assert conn.execute("SELECT key FROM blobgc.reconcile_finding WHERE run_id = %s AND key LIKE '.blobgc%%'",
                            (run.run_id,)).fetchall() == []
        assert conn.execute("SELECT shard FROM blobgc.reconcile_checkpoint WHERE shard LIKE '.blobgc%%'"
                            ).fetchall() == []
    assert conn.execute("SELECT count(*) FROM blobgc.deletion_log WHERE dag_id = 'blobgc_reconcile'"
                        ).fetchone()[0] == 0

    # past the window, the next sweep's purge_quarantine deletes the copies, and only now are their bytes reclaimed
    for copy in copies:
        backdate_object(bucket, copy, (DAYS + 1) * 86400)
    later = run_dag("blobgc_sweep", env_extra=env)
    assert later.returncode == 0, later.stdout[-3000:] + later.stderr[-3000:]
    assert object_keys(s3, bucket) == set(blob_keys(kept))
    assert conn.execute("SELECT bytes_reclaimed FROM blobgc.run WHERE run_id = %s", (later.run_id,)).fetchone() == (110,)
    assert conn.execute("SELECT sum(bytes_reclaimed), sum(bytes_deleted) FROM blobgc.reclaim_daily "
                        "WHERE dag_id = 'blobgc_sweep' AND NOT dry_run").fetchone() == (110, 110)
    assert conn.execute("SELECT details -> 'quarantine' ->> 'purged' FROM blobgc.run WHERE run_id = %s",
                        (later.run_id,)).fetchone() == ("2",)


def test_a_bad_quarantine_variable_fails_the_first_task_naming_it(conn, s3, bucket):
    _, garbage = make_blobs(conn, s3, bucket, 2)
    set_unused_since(conn, [garbage], "2 days")
    env = {"AIRFLOW_VAR_BLOBGC_BUCKET": bucket, "AIRFLOW_VAR_BLOBGC_QUARANTINE": '{"blobs": "a week"}'}
    sweep = run_dag("blobgc_sweep", env_extra=env)
    assert sweep.returncode != 0
    assert sweep.task_states["plan_shards"] == "failed"
    assert "Variable blobgc_quarantine: 'blobs' must be a whole number of days" in sweep.stdout + sweep.stderr
    assert set(blob_keys(garbage)) <= object_keys(s3, bucket)  # nothing planned, nothing deleted
    assert conn.execute("SELECT count(*) FROM app.blob").fetchone()[0] == 2


def test_media_thumbnails_quarantine_by_kind_and_the_next_check_leaves_the_copies_alone(conn, s3, redis, media):
    from blobgc.kinds.media.layouts import rev_month
    from blobgc.kinds.media.thumbnail_jobs import QUEUE
    from tests.support.media import DAY, USER, keys

    orphan = f"{USER}/thumbs/{rev_month(202611)}/{'ab' * 8}_240x240.webp"  # a thumbnail whose master is gone
    s3.put_object(Bucket=media.images_bucket, Key=orphan, Body=b"RIFF-orphan")
    backdate_objects(s3, media.images_bucket, 2 * DAY)
    env = {"AIRFLOW_VAR_BLOBGC_MEDIA_BUCKET_PREFIX": media.bucket_prefix,
           "AIRFLOW_VAR_BLOBGC_QUARANTINE": json.dumps({"media": DAYS})}
    first = run_dag("blobgc_media_thumbnails", conf={"min_age_hours": 24}, env_extra=env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    copy = f".blobgc-quarantine/blobgc_media_thumbnails/{first.run_id}/{orphan}"
    assert keys(s3, media.images_bucket, "") == [copy]
    assert s3.get_object(Bucket=media.images_bucket, Key=copy)["Body"].read() == b"RIFF-orphan"

    backdate_objects(s3, media.images_bucket, 2 * DAY)  # the copy is old, but inside its window
    again = run_dag("blobgc_media_thumbnails", conf={"min_age_hours": 24}, env_extra=env)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert keys(s3, media.images_bucket, "") == [copy]  # neither an orphan thumbnail nor a master lacking one
    assert conn.execute("SELECT objects_deleted FROM blobgc.run WHERE run_id = %s", (again.run_id,)).fetchone() == (0,)
    assert redis.llen(QUEUE) == 0  # nor taken for a master lacking its thumbnails: no job was queued for it

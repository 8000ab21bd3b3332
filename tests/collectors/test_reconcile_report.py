"""blobgc.collectors.reconcile: the buckets a run lists (only those something points at, each checked first) and its
report of what it considered and did not plan (`not_planned`), from a listing and from an inventory."""
from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

import pytest

from blobgc.collectors.reconcile.from_inventory import locate, reconcile_from_inventory, scope_of
from blobgc.collectors.reconcile.listing import reconcile_shard
from blobgc.collectors.reconcile.report import not_planned
from blobgc.collectors.reconcile.shards import Shard, collection_shards, discover_shards, plan_listing
from blobgc.core.inventory_reports import Destination
from blobgc.core.refusals import MissingBucket
from blobgc.core.runs import ensure_run
from blobgc.inventory import report_of_bucket
from tests.support.collections import add_upload, bound_shop, create_shop, new_schema, shop_yaml, write_collections
from tests.support.reconcile import age, contents_rows, new_run, put, sha


def listed_modified(s3, bucket: str, key: str) -> datetime:
    """The LastModified a listing reports for `key`."""
    (item,) = s3.list_objects_v2(Bucket=bucket, Prefix=key)["Contents"]
    return item["LastModified"]


def test_not_planned_counts_a_collections_objects_by_why_they_were_not_planned(conn, s3, bucket, caplog):
    schema = new_schema()
    create_shop(conn, schema)
    add_upload(conn, s3, schema, bucket, 1, b"live")  # two keys a row forms: its content and its thumbnail
    put(s3, bucket, f"uploads/{sha('no row')}.png", "upload-thumbs/999.jpg")  # orphans, once old
    put(s3, bucket, "uploads/no-extension")  # fits no template: reported, never planned
    age(s3, bucket)
    put(s3, bucket, f"uploads/{sha('young')}.png")  # no row, but younger than the floor
    young = listed_modified(s3, bucket, f"uploads/{sha('young')}.png")
    bound = bound_shop(conn, schema, bucket)
    run = ensure_run(conn, new_run(conn))
    for shard in collection_shards([bound]):
        reconcile_shard(conn, s3, run, shard, bucket=bucket, confirmations=1,
                        cutoff=run.reference_time - timedelta(hours=24), collection=bound)
    with caplog.at_level(logging.INFO, logger="blobgc.collectors.reconcile"):
        report = not_planned(conn, run)
    eligible = young + timedelta(hours=24)
    assert report == {"shop_uploads": {"considered": 6, "accounted": 2, "too_young": 1,
                                       "first_eligible_at": eligible.isoformat(), "planned": 2, "unknown": 1,
                                       "waiting": 0}}
    assert (f"shop_uploads: 6 objects listed, 2 accounted for by rows, 1 younger than the floor (the first becomes "
            f"eligible {eligible:%Y-%m-%d %H:%M} UTC), 1 of no known layout (reported, never deleted), 2 orphans "
            "planned") in caplog.messages


def test_not_planned_from_an_inventory_counts_what_a_listing_counts(conn, s3, bucket, reports):
    """A listing counts a seed layout's keys under its collection (app_blob) or the bucket; an inventory counts the
    bucket's: the same objects, for the same reasons."""
    contents_rows(conn, sha("live"))
    with conn.transaction():
        conn.execute("INSERT INTO app.blob (id, size_bytes) VALUES ('abc', 5)")
    put(s3, bucket, f"pastes/{sha('live')}", f"pastes/{sha('dead')}", "blobs/abc/raw", "blobs/orphan/raw", "tmp/x")
    age(s3, bucket)
    put(s3, bucket, f"pastes/{sha('young')}")
    eligible = (listed_modified(s3, bucket, f"pastes/{sha('young')}") + timedelta(hours=24)).isoformat()
    report_of_bucket(s3, bucket, Destination(reports, "inv/"))
    listed = ensure_run(conn, new_run(conn, "listed", dry_run=True))
    for shard in discover_shards(s3, bucket, conn=conn):
        reconcile_shard(conn, s3, listed, shard, bucket=bucket, confirmations=1,
                        cutoff=listed.reference_time - timedelta(hours=24))
    read = ensure_run(conn, new_run(conn, "read", dry_run=True))
    report = locate(s3, {bucket: f"s3://{reports}/inv"}, bucket, read.reference_time, 48)
    reconcile_from_inventory(conn, s3, s3, read, scope_of(conn, bucket, [], bucket, seeds=True, prefixes=None),
                             report.location, confirmations=1, cutoff=read.reference_time - timedelta(hours=24),
                             max_age_hours=48)
    assert not_planned(conn, listed) == {
        "app_blob": {"considered": 2, "accounted": 1, "too_young": 0, "first_eligible_at": None, "planned": 1,
                     "unknown": 0, "waiting": 0},
        bucket: {"considered": 4, "accounted": 1, "too_young": 1, "first_eligible_at": eligible, "planned": 1,
                 "unknown": 1, "waiting": 0}}
    assert not_planned(conn, read) == {
        bucket: {"considered": 6, "accounted": 2, "too_young": 1, "first_eligible_at": eligible, "planned": 2,
                 "unknown": 1, "waiting": 0}}


def test_a_listing_run_fails_at_once_naming_a_missing_bucket_and_the_variable_that_points_at_it(conn, s3):
    missing = f"absent-{uuid.uuid4().hex[:12]}"
    with pytest.raises(MissingBucket) as refused:
        plan_listing(conn, s3, missing, [], seeds=True)
    assert str(refused.value).startswith(
        f"bucket '{missing}' (Variable blobgc_bucket, for the seed tables app.blob, app.content, app.image, gen.blob) "
        "does not exist (the store answered NoSuchBucket to ListObjectsV2): create it, or set Variable "
        "blobgc_bucket to the bucket that holds the objects."), str(refused.value)


def test_a_listing_run_fails_at_once_naming_a_missing_bucket_and_the_collection_that_points_at_it(
        conn, s3, bucket, tmp_path, monkeypatch):
    missing, schema = f"absent-{uuid.uuid4().hex[:12]}", new_schema()
    create_shop(conn, schema)
    path = write_collections(tmp_path, shop_yaml(schema, missing))
    monkeypatch.setenv("BLOBGC_COLLECTIONS", str(path))
    bound = bound_shop(conn, schema, missing)
    with pytest.raises(MissingBucket) as refused:
        plan_listing(conn, s3, bucket, [bound], seeds=True)
    assert str(refused.value).startswith(
        f"bucket '{missing}' (collection 'shop_uploads', collections file {path}) does not exist"), str(refused.value)
    # a bucket gone between the plan and a shard's listing is named too
    run = ensure_run(conn, new_run(conn))
    with pytest.raises(MissingBucket, match=f"bucket '{missing}' \\(collection 'shop_uploads', collections file "):
        reconcile_shard(conn, s3, run, Shard("uploads/", None, "shop_uploads", missing), bucket=bucket,
                        confirmations=1, cutoff=run.reference_time - timedelta(hours=24), collection=bound)

"""Reconcile from S3 Inventory reports (written by blobgc.inventory, in AWS's format) and by parallel ranges."""
from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timedelta, timezone

import pytest

from blobgc.collectors.reconcile.from_inventory import locate, reconcile_from_inventory, scope_of, scopes
from blobgc.collectors.reconcile.listing import reconcile_shard
from blobgc.collectors.reconcile.shards import collection_shards, discover_shards, split_shard
from blobgc.core.inventory_reports import Destination, InventoryError
from blobgc.core.outbox import delete_owed_objects
from blobgc.core.runs import ensure_run
from blobgc.inventory import report_of_bucket
from tests.helpers import object_keys
from tests.support.collections import add_upload, bound_shop, create_shop, new_schema
from tests.support.reconcile import age, contents_rows, execute_plan, floor_cutoff, new_run, owed, planned, put, sha

IMAGE = "3f" + "a" * 30


def a_bucket_of_every_kind(conn, s3, bucket: str) -> None:
    """Orphans, accounted-for keys, unknown keys and missing objects of every seed layout, all old but one."""
    contents_rows(conn, sha("live"), sha("lost"))
    with conn.transaction():
        conn.execute("INSERT INTO app.blob (id, size_bytes) VALUES ('abc', 5), ('abd', 5), ('gone', 5)")
        conn.execute("INSERT INTO app.image (image_id, num) VALUES (%s, 1)", (IMAGE,))
        conn.execute("INSERT INTO blobgc.image_file (image_id, keys, sizes) VALUES (%s, %s, '{5,5}')",
                     (IMAGE, [f"images/3f/{IMAGE}/big.jpg", f"images/3f/{IMAGE}/thumb.jpg"]))
    put(s3, bucket, f"pastes/{sha('live')}", f"pastes/{sha('dead')}", "blobs/abc/raw", "blobs/abc/thumbnail",
        "blobs/abd/raw", "blobs/orphan/raw", f"images/3f/{IMAGE}/big.jpg", f"images/3f/{IMAGE}/medium.jpg",
        f"images/3f/3f{'b' * 30}/big.jpg", "images/3f/not-an-image", "tmp/leftover.bin", "loose.txt",
        "mail/g1-x", "odd name+plus%.txt")
    age(s3, bucket)
    put(s3, bucket, f"pastes/{sha('young')}")  # not yet past the age floor


def logged(conn, run) -> set[tuple[str, str]]:
    """The keys a run logged for deletion, or a dry run's plan (its report): as `blobgc.deleted_object` shows them."""
    return {(r[0], r[1]) for r in conn.execute(
        "SELECT source, key FROM blobgc.deleted_object WHERE run_id = %s", (run.run_id,))}


def findings(conn, run) -> set[tuple[str, str]]:
    return {(r[0], r[1]) for r in conn.execute(
        "SELECT kind, key FROM blobgc.reconcile_finding WHERE run_id = %s", (run.run_id,))}


def listing_run(conn, s3, bucket, run, **kwargs):
    """Every shard listed and planned, then the plan owed (as a run the gate let through)."""
    results = [reconcile_shard(conn, s3, run, shard, bucket=bucket, confirmations=1, cutoff=floor_cutoff(), **kwargs)
               for shard in discover_shards(s3, bucket, conn=conn)]
    execute_plan(conn, run)
    return results


def inventory_run(conn, s3, bucket, run, reports, *, max_age_hours=48, prefixes=None, **kwargs):
    """The bucket reconciled from its report and planned, then the plan owed (as a run the gate let through)."""
    report = locate(s3, {bucket: f"s3://{reports}/inv"}, bucket, run.reference_time, max_age_hours)
    scope = scope_of(conn, bucket, [], bucket, seeds=True, prefixes=prefixes)
    result = reconcile_from_inventory(conn, s3, s3, run, scope, report.location, confirmations=1, cutoff=floor_cutoff(),
                                      max_age_hours=max_age_hours, **kwargs)
    execute_plan(conn, run)
    return result


@pytest.mark.parametrize("file_format", ["csv", "parquet"])
def test_an_inventory_run_finds_what_a_listing_run_finds(conn, s3, bucket, reports, file_format):
    a_bucket_of_every_kind(conn, s3, bucket)
    report_of_bucket(s3, bucket, Destination(reports, "inv/"), file_format=file_format, rows_per_file=5)
    listed, from_inventory = new_run(conn, "listed", dry_run=True), new_run(conn, "inventory", dry_run=True)
    listing = listing_run(conn, s3, bucket, listed, page_size=3)
    result = inventory_run(conn, s3, bucket, from_inventory, reports, part_rows=4)
    assert result.pages == 4  # 15 keys in parts of at most 4, each joined alone
    assert logged(conn, from_inventory) == logged(conn, listed) == {
        ("app.content", f"pastes/{sha('dead')}"), ("app.blob", "blobs/orphan/raw"),
        ("app.image", f"images/3f/3f{'b' * 30}/big.jpg"), ("gen.blob", "mail/g1-x")}
    assert findings(conn, from_inventory) == findings(conn, listed) == {
        ("unknown_key", "tmp/leftover.bin"), ("unknown_key", "loose.txt"), ("unknown_key", "odd name+plus%.txt"),
        ("unknown_key", "images/3f/not-an-image"), ("missing_object", f"pastes/{sha('lost')}"),
        ("missing_object", "blobs/gone/raw"), ("missing_object", f"images/3f/{IMAGE}/thumb.jpg")}
    assert (result.too_young, result.keys_checked) == (sum(r.too_young for r in listing), 15)
    assert owed(conn) == set()  # dry runs owe nothing


def test_a_stale_report_keeps_keys_claimed_or_written_since_and_skips_objects_gone_since(conn, s3, bucket, reports):
    put(s3, bucket, f"pastes/{sha('claimed later')}", f"pastes/{sha('deleted later')}", f"pastes/{sha('dead')}",
        f"pastes/{sha('written again')}")
    age(s3, bucket)
    report_of_bucket(s3, bucket, Destination(reports, "inv/"))
    # after the report: a row claims one key, an object is deleted, one is written again (its row on its way),
    # and a new row's object is written
    contents_rows(conn, sha("claimed later"), sha("new"))
    s3.delete_object(Bucket=bucket, Key=f"pastes/{sha('deleted later')}")
    put(s3, bucket, f"pastes/{sha('written again')}", f"pastes/{sha('new')}")
    run = new_run(conn)
    result = inventory_run(conn, s3, bucket, run, reports)
    assert result.orphans == 3  # by the report: the drain asks the store about each
    assert owed(conn) == {f"pastes/{sha('dead')}", f"pastes/{sha('deleted later')}", f"pastes/{sha('written again')}"}
    assert findings(conn, run) == set()  # the new object is no missing one: the store was asked
    drained = delete_owed_objects(conn, s3, run)
    # the object gone since is absent (not counted, no error); the one written again since is kept
    assert (drained.objects_deleted, drained.absent, drained.failed) == (1, 1, 0)
    assert object_keys(s3, bucket) == {f"pastes/{sha('claimed later')}", f"pastes/{sha('new')}",
                                       f"pastes/{sha('written again')}"}
    assert owed(conn) == set()


def test_a_part_that_fails_midway_resumes_after_its_last_recorded_batch(conn, s3, bucket, reports, monkeypatch):
    from blobgc.collectors.reconcile import from_inventory

    orphans = [f"pastes/{sha(f'dead {i}')}" for i in range(7)]
    put(s3, bucket, *orphans)
    age(s3, bucket)
    report_of_bucket(s3, bucket, Destination(reports, "inv/"))
    monkeypatch.setattr(from_inventory, "BATCH", 2)
    calls, real = [], from_inventory.classify

    def failing_third_time(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise ConnectionError("the database went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(from_inventory, "classify", failing_third_time)
    run = new_run(conn)
    with pytest.raises(ConnectionError):
        inventory_run(conn, s3, bucket, run, reports)
    assert len(planned(conn, run)) == 4 and owed(conn) == set()  # two batches planned before the failure
    result = inventory_run(conn, s3, bucket, run, reports)  # the retry
    assert result.orphans == 3 and owed(conn) == set(orphans)
    assert conn.execute("SELECT count(*) FROM (SELECT unnest(keys) FROM blobgc.deletion_log WHERE run_id = %s) k",
                        (run.run_id,)).fetchone()[0] == 7  # each owed once
    assert conn.execute("SELECT orphans, done FROM blobgc.reconcile_checkpoint WHERE run_id = %s",
                        (run.run_id,)).fetchone() == (7, True)


def test_a_report_older_than_the_limit_fails_the_run(conn, s3, bucket, reports):
    put(s3, bucket, f"pastes/{sha('dead')}")
    age(s3, bucket, hours=100)
    taken = datetime.now(timezone.utc) - timedelta(hours=72)
    report_of_bucket(s3, bucket, Destination(reports, "inv/"), taken=taken)
    run = ensure_run(conn, new_run(conn))
    with pytest.raises(InventoryError, match=r"older than max_inventory_age_hours=48"):
        inventory_run(conn, s3, bucket, run, reports)
    assert owed(conn) == set() and logged(conn, run) == set()
    assert inventory_run(conn, s3, bucket, run, reports, max_age_hours=96).orphans == 1


def test_the_newest_report_of_a_configuration_with_the_needed_fields_is_used(conn, s3, bucket, reports):
    put(s3, bucket, f"pastes/{sha('dead')}")
    age(s3, bucket)
    now = datetime.now(timezone.utc)
    older = report_of_bucket(s3, bucket, Destination(reports, "inv/"), configuration="daily", taken=now - timedelta(hours=30))
    newest = report_of_bucket(s3, bucket, Destination(reports, "inv/"), configuration="daily", taken=now - timedelta(hours=2))
    lacking = report_of_bucket(s3, bucket, Destination(reports, "inv/"), configuration="keys-only", taken=now)
    rewrite_manifest(s3, reports, lacking, fileSchema="Bucket, Key, ETag, StorageClass")
    s3.put_object(Bucket=reports, Key=f"inv/{bucket}/daily/{(now + timedelta(minutes=1)):%Y-%m-%dT%H-%MZ}/x", Body=b"")
    report = locate(s3, {bucket: f"s3://{reports}/inv"}, bucket, now, 48)
    assert report.manifest_key == newest != older  # a folder without a manifest is a report still being written


def rewrite_manifest(s3, reports: str, manifest_key: str, *, checksum: bool = True, **changes) -> None:
    manifest = json.loads(s3.get_object(Bucket=reports, Key=manifest_key)["Body"].read())
    manifest.update(changes)
    body = json.dumps(manifest).encode()
    s3.put_object(Bucket=reports, Key=manifest_key, Body=body)
    if checksum:
        s3.put_object(Bucket=reports, Key=manifest_key.replace("manifest.json", "manifest.checksum"),
                      Body=hashlib.md5(body).hexdigest().encode())


def csv_schema_swapped(s3, reports, manifest_key):
    rewrite_manifest(s3, reports, manifest_key, fileSchema="Bucket, Key, LastModifiedDate, Size, ETag, StorageClass")


def csv_schema_short(s3, reports, manifest_key):
    rewrite_manifest(s3, reports, manifest_key, fileSchema="Bucket, Key, Size, LastModifiedDate")


def checksum_wrong(s3, reports, manifest_key):
    rewrite_manifest(s3, reports, manifest_key, checksum=False, creationTimestamp="1")


def data_file_missing(s3, reports, manifest_key):
    manifest = json.loads(s3.get_object(Bucket=reports, Key=manifest_key)["Body"].read())
    s3.delete_object(Bucket=reports, Key=manifest["files"][0]["key"])


def data_file_altered(s3, reports, manifest_key):
    manifest = json.loads(s3.get_object(Bucket=reports, Key=manifest_key)["Body"].read())
    s3.put_object(Bucket=reports, Key=manifest["files"][0]["key"], Body=b"not what the manifest says")


@pytest.mark.parametrize(("damage", "file_format", "message"), [
    (checksum_wrong, "csv", "does not match its manifest.checksum"),
    (data_file_missing, "csv", r"data file s3://\S+ listed by \S+, is missing"),
    (data_file_altered, "parquet", r"is \d+ bytes with MD5 \w+; \S+ says"),
    (csv_schema_swapped, "csv", "do not match the manifest's fileSchema"),
    (csv_schema_short, "csv", "do not read as CSV with the fileSchema's 4 fields|do not match the manifest's"),
    (lambda s3, r, k: rewrite_manifest(s3, r, k, fileSchema="message s3.inventory { required binary bucket; "
                                       "required binary key; optional int64 size; optional int64 last_modified; }"),
     "parquet", "lacks LastModifiedDate|lacks the column"),
    (lambda s3, r, k: rewrite_manifest(s3, r, k, fileFormat="ORC"), "csv", "'ORC' is not supported"),
])
def test_a_malformed_report_fails_with_a_clear_message_and_deletes_nothing(conn, s3, bucket, reports, damage,
                                                                           file_format, message):
    put(s3, bucket, f"pastes/{sha('dead')}", "blobs/orphan/raw")
    age(s3, bucket)
    manifest_key = report_of_bucket(s3, bucket, Destination(reports, "inv/"), file_format=file_format)
    damage(s3, reports, manifest_key)
    run = new_run(conn)
    with pytest.raises(InventoryError, match=message):
        inventory_run(conn, s3, bucket, run, reports)
    assert owed(conn) == set() and logged(conn, run) == set()
    assert len(object_keys(s3, bucket)) == 2


def two_orphans_and_their_report(conn, s3, bucket: str, reports: str) -> str:
    """Two old orphans in `bucket` and a genuine report that lists them; returns its manifest's key."""
    put(s3, bucket, f"pastes/{sha('dead')}", "blobs/orphan/raw")
    age(s3, bucket)
    return report_of_bucket(s3, bucket, Destination(reports, "inv/"))


def test_a_manifest_of_another_bucket_is_refused_and_nothing_is_deleted(conn, s3, bucket, reports):
    manifest_key = two_orphans_and_their_report(conn, s3, bucket, reports)
    rewrite_manifest(s3, reports, manifest_key, sourceBucket="another-bucket")  # checksum rewritten to match
    run = new_run(conn)
    refusal = re.escape(f"s3://{reports}/{manifest_key} lists bucket 'another-bucket', not '{bucket}'")
    with pytest.raises(InventoryError, match=refusal):
        inventory_run(conn, s3, bucket, run, reports)
    scope = scope_of(conn, bucket, [], bucket, seeds=True, prefixes=None)
    with pytest.raises(InventoryError, match=refusal):  # the reconcile task re-checks the location it is handed
        reconcile_from_inventory(conn, s3, s3, run, scope, f"s3://{reports}/{manifest_key}", confirmations=1,
                                 cutoff=floor_cutoff(), max_age_hours=48)
    assert owed(conn) == set() and logged(conn, run) == set() and planned(conn, run) == set()
    assert delete_owed_objects(conn, s3, run).objects_deleted == 0
    assert object_keys(s3, bucket) == {f"pastes/{sha('dead')}", "blobs/orphan/raw"}


def test_a_manifest_without_its_checksum_is_refused_and_nothing_is_deleted(conn, s3, bucket, reports):
    manifest_key = two_orphans_and_their_report(conn, s3, bucket, reports)
    s3.delete_object(Bucket=reports, Key=manifest_key.replace("manifest.json", "manifest.checksum"))
    run = new_run(conn)
    refusal = re.escape(f"s3://{reports}/{manifest_key} has no manifest.checksum beside it: the report is incomplete")
    with pytest.raises(InventoryError, match=refusal):
        inventory_run(conn, s3, bucket, run, reports)
    scope = scope_of(conn, bucket, [], bucket, seeds=True, prefixes=None)
    with pytest.raises(InventoryError, match=refusal):
        reconcile_from_inventory(conn, s3, s3, run, scope, f"s3://{reports}/{manifest_key}", confirmations=1,
                                 cutoff=floor_cutoff(), max_age_hours=48)
    assert owed(conn) == set() and logged(conn, run) == set() and planned(conn, run) == set()
    assert delete_owed_objects(conn, s3, run).objects_deleted == 0
    assert object_keys(s3, bucket) == {f"pastes/{sha('dead')}", "blobs/orphan/raw"}


def test_a_parallel_listing_over_ranges_finds_what_one_listing_finds(conn, s3, bucket):
    plain = [f"{c}{d}{i}" for c in "ab" for d in "0123456789xyz" for i in range(3)]
    ids = plain + ["a", "a-", "a5", "a5-c"]
    with conn.transaction():  # ids that end at, or hold, a character sorting before "/" ("a", "a5-c") have rows too
        conn.execute("INSERT INTO app.blob (id, size_bytes) SELECT unnest(%s::text[]), 5",
                     (plain[::2] + ["a", "a5", "a5-c", "a5gone"],))
    put(s3, bucket, *(f"blobs/{i}/raw" for i in ids))
    age(s3, bucket)
    whole, ranged = new_run(conn, "whole", dry_run=True), new_run(conn, "ranged", dry_run=True)
    listing_run(conn, s3, bucket, whole, page_size=7)
    shards = discover_shards(s3, bucket, conn=conn)
    ranges = [r for shard in shards for r in split_shard(s3, bucket, shard, 4)]
    assert len(ranges) == 8 and all(r.ranged for r in ranges)
    for part in ranges:
        reconcile_shard(conn, s3, ranged, part, bucket=bucket, confirmations=1, cutoff=floor_cutoff(), page_size=7)
    assert logged(conn, ranged) == logged(conn, whole)
    assert len(logged(conn, whole)) == len(plain) // 2 + 1  # "a-" is an orphan too
    assert findings(conn, ranged) == findings(conn, whole) == {("missing_object", "blobs/a5gone/raw")}
    covered = [r[0] for r in conn.execute("SELECT keys_checked FROM blobgc.reconcile_checkpoint WHERE run_id = %s",
                                          (ranged.run_id,))]
    assert sum(covered) == len(ids) and min(covered) > 0


def test_a_collection_in_a_bucket_of_its_own_is_reconciled_from_its_report_as_by_listing(conn, s3, bucket,
                                                                                        versioned_bucket, reports):
    shop_bucket, schema = versioned_bucket, new_schema()
    create_shop(conn, schema)
    uploads = [add_upload(conn, s3, schema, shop_bucket, i, f"content-{i}".encode()) for i in (1, 2)]
    put(s3, shop_bucket, f"uploads/{sha('no row')}.png", "upload-thumbs/77.jpg", "uploads/not-a-template",
        "elsewhere/x")
    age(s3, shop_bucket)
    bound = bound_shop(conn, schema, shop_bucket)
    listed, from_inventory = new_run(conn, "listed", dry_run=True), new_run(conn, "inventory", dry_run=True)
    for shard in collection_shards([bound]):
        reconcile_shard(conn, s3, listed, shard, bucket=bucket, confirmations=1, cutoff=floor_cutoff(),
                        collection=bound)
    planned = scopes(conn, bucket, [bound], seeds=True, prefixes=None)
    assert [(s.bucket, s.unknown) for s in planned] == [(bucket, True), (shop_bucket, False)]
    assert [s.bucket for s in scopes(conn, bucket, [bound], seeds=True, prefixes=["pastes/"])] == [bucket]
    report_of_bucket(s3, shop_bucket, Destination(reports, "inv/"), file_format="parquet")
    report = locate(s3, {shop_bucket: f"s3://{reports}/inv"}, shop_bucket, None, 48)
    reconcile_from_inventory(conn, s3, s3, from_inventory, planned[1], report.location, confirmations=1,
                             cutoff=floor_cutoff(), max_age_hours=48)
    source = f"collection:{bound.name}"
    assert logged(conn, from_inventory) == logged(conn, listed) == {
        (source, f"uploads/{sha('no row')}.png"), (source, "upload-thumbs/77.jpg")}
    assert findings(conn, from_inventory) == findings(conn, listed) == {("unknown_key", "uploads/not-a-template")}
    assert {u["key"] for u in uploads} <= object_keys(s3, shop_bucket)
    assert conn.execute("SELECT sum(objects_deleted) FROM blobgc.run_part WHERE run_id = %s AND collection = %s",
                        (from_inventory.run_id, bound.name)).fetchone()[0] == 2  # the dry run's figures, by collection


# ---------------------------------------------------------------- parts as mapped tasks (issue 34)


def prepared_parts(conn, s3, bucket, run, reports, scratch, part_rows):
    """A DAG's first step for the bucket: its report and formed keys written into part files in `scratch`."""
    from blobgc.collectors.reconcile.from_inventory import prepare_parts

    report = locate(s3, {bucket: f"s3://{reports}/inv"}, bucket, run.reference_time, 48)
    scope = scope_of(conn, bucket, [], bucket, seeds=True, prefixes=None)
    return scope, prepare_parts(conn, s3, run, scope, report.location, scratch=scratch, max_age_hours=48,
                                part_rows=part_rows)


def part_task(conn, s3, run, scope, shard):
    """One mapped task of the DAG: one part, from its files in the scratch location."""
    from blobgc.collectors.reconcile.from_inventory import reconcile_inventory_part

    return reconcile_inventory_part(conn, s3, s3, run, scope, shard, cutoff=floor_cutoff(), confirmations=1)


def test_parts_reconciled_one_by_one_from_the_scratch_bucket_find_what_one_process_finds(conn, s3, bucket, reports):
    from blobgc.core.scratch import Location, keys_below, run_folder

    a_bucket_of_every_kind(conn, s3, bucket)
    report_of_bucket(s3, bucket, Destination(reports, "inv/"), file_format="parquet", rows_per_file=5)
    whole, by_parts = new_run(conn, "whole", dry_run=True), new_run(conn, "parts", dry_run=True)
    inventory_run(conn, s3, bucket, whole, reports, part_rows=4)

    scratch = Location("s3", reports, ".blobgc-scratch/")
    scope, shards = prepared_parts(conn, s3, bucket, by_parts, reports, scratch, part_rows=4)
    folder = run_folder(scratch, by_parts.dag_id, by_parts.run_id).below(bucket)
    assert [(s.part, s.parts) for s in shards] == [(p, 4) for p in range(4)]
    assert sum(s.keys for s in shards) == 15 and all(s.scratch == str(folder) for s in shards)
    written = set(keys_below(s3, folder))
    assert {k.split("/")[-3] for k in written} == {"inventory", "accounted"}  # .../<side>/part=P/<file>
    assert {k.split("/")[-2] for k in written} <= {f"part={p}" for p in range(4)}

    results = [part_task(conn, s3, by_parts, scope, shard) for shard in reversed(shards)]  # any order, any worker
    assert logged(conn, by_parts) == logged(conn, whole) and findings(conn, by_parts) == findings(conn, whole)
    assert sum(r.keys_checked for r in results) == 15
    assert list(keys_below(s3, folder)) == []  # each part deleted its files once done


def test_a_failed_part_is_retried_alone_from_its_files_and_a_done_part_is_not_redone(conn, s3, bucket, reports,
                                                                                     monkeypatch):
    from blobgc.collectors.reconcile import from_inventory
    from blobgc.core.scratch import Location, keys_below

    orphans = [f"pastes/{sha(f'dead {i}')}" for i in range(12)]
    put(s3, bucket, *orphans)
    age(s3, bucket)
    report_of_bucket(s3, bucket, Destination(reports, "inv/"))
    run = new_run(conn)
    scope, shards = prepared_parts(conn, s3, bucket, run, reports, Location("s3", reports, "scratch/"), part_rows=5)
    assert len(shards) == 3
    failing = max(shards, key=lambda s: s.keys)  # at least 4 of the 12 keys: more than one batch of 2
    others = [s for s in shards if s is not failing]
    monkeypatch.setattr(from_inventory, "BATCH", 2)
    calls, real = [], from_inventory.classify

    def failing_on_the_second_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise ConnectionError("the database went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(from_inventory, "classify", failing_on_the_second_batch)
    with pytest.raises(ConnectionError):
        part_task(conn, s3, run, scope, failing)
    monkeypatch.setattr(from_inventory, "classify", real)
    for shard in others:
        part_task(conn, s3, run, scope, shard)
    assert list(keys_below(s3, Location.parse(failing.scratch)))  # the failed part's files wait for its retry
    retried = part_task(conn, s3, run, scope, failing)
    assert retried.orphans == failing.keys - 2  # its first batch was recorded before the failure
    again = part_task(conn, s3, run, scope, others[0])  # cleared by hand after it succeeded: nothing redone
    assert again.keys_checked == 0 and again.orphans == 0
    execute_plan(conn, run)
    assert owed(conn) == set(orphans)
    assert conn.execute("SELECT count(*) FROM (SELECT unnest(keys) FROM blobgc.deletion_log WHERE run_id = %s) k",
                        (run.run_id,)).fetchone()[0] == 12  # each owed once
    assert list(keys_below(s3, Location.parse(failing.scratch))) == []


def test_a_part_whose_files_were_changed_fails_naming_the_scratch_files_and_records_nothing(conn, s3, bucket,
                                                                                           reports):
    from blobgc.core.scratch import Location, keys_below

    put(s3, bucket, *(f"pastes/{sha(f'dead {i}')}" for i in range(4)))
    age(s3, bucket)
    report_of_bucket(s3, bucket, Destination(reports, "inv/"))
    run = new_run(conn)
    scope, [shard] = prepared_parts(conn, s3, bucket, run, reports, Location("s3", reports, "scratch/"), 10)
    inventory_files = [k for k in keys_below(s3, Location.parse(shard.scratch)) if "/inventory/" in k]
    s3.delete_objects(Bucket=reports, Delete={"Objects": [{"Key": k} for k in inventory_files]})
    with pytest.raises(InventoryError, match="scratch files were changed or partly deleted"):
        part_task(conn, s3, run, scope, shard)
    assert planned(conn, run) == set()


def test_a_listing_run_never_judges_the_scratch_folder(conn, s3, bucket):
    put(s3, bucket, ".blobgc-scratch/blobgc_reconcile/r0/b/inventory/part=0/data_0.parquet", "loose.txt")
    age(s3, bucket)
    run = new_run(conn, dry_run=True)
    listing_run(conn, s3, bucket, run)
    assert findings(conn, run) == {("unknown_key", "loose.txt")}

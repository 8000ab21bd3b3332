"""Reconcile from GCS Storage Insights and Azure Blob Inventory reports, each written here in its cloud's documented
format (https://cloud.google.com/storage/docs/insights/inventory-reports,
https://learn.microsoft.com/azure/storage/blobs/blob-inventory) and read through the store's ObjectStore calls only.

The reports live where each cloud writes them: GCS's in a bucket of the local GCS server, Azure's in a container of
the local Azure server (`report_store`); the readers only list, get and head objects through the store's
ObjectStore calls. The reader tests
write the reports by hand with csv and pyarrow (not blobgc's writer); the end-to-end tests use blobgc.inventory's.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import re
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from blobgc.collectors.reconcile.from_inventory import locate, read_located, reconcile_from_inventory, scope_of
from blobgc.core.inventory_reports import Destination, InventoryError, download, engine
from blobgc.core.outbox import delete_owed_objects
from blobgc.inventory import report_of_bucket
from tests.support.reconcile import contents_rows, execute_plan, floor_cutoff, new_run, owed, sha
from tests.support.stores import store_of

SNAPSHOT = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)
SOON = SNAPSHOT + timedelta(hours=1)  # a run's reference time an hour after the report
GCS_CONFIG = "5f0c3a0e-7b1d-4c52-9a3e-0d4f6b8e2c11"
GCS_FIELDS = ("project", "bucket", "name", "size", "updated", "storageClass")
AZURE_FIELDS = ("Name", "Creation-Time", "Last-Modified", "Content-Length", "BlobType", "AccessTier")
AZURE_VERSIONED = AZURE_FIELDS + ("VersionId", "IsCurrentVersion")
# (key, size, last modified) of the source bucket "photos": names with spaces, a plus, a percent, a comma and quotes
OBJECTS = [
    ("a/one two+three.jpg", 10, datetime(2026, 11, 1, 10, 0, 0, 123000, tzinfo=UTC)),
    ("c/✓ 100%.jpg", 3, datetime(2026, 11, 3, 10, tzinfo=UTC)),
    ('d/with,comma "quoted".bin', 5_000_000_000, datetime(2025, 1, 31, 23, 59, 59, tzinfo=UTC)),
    ("e/plain", 0, datetime(2026, 11, 21, 12, tzinfo=UTC)),
]


def ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


EXPECTED = {(key, size, ms(when)) for key, size, when in OBJECTS}


@pytest.fixture
def report_store(request, stack):
    """A bucket (container) of the test's own for the reports, in the store of the report's cloud (`store_of`):
    GCS's reports in the local GCS server, Azure's in the local Azure server, as each cloud writes them."""
    yield from store_of(request.param)


GCS = pytest.mark.parametrize("report_store", ["gcs"], indirect=True)
AZURE = pytest.mark.parametrize("report_store", ["azure"], indirect=True)


# ------------------------------------------------------------------------------------------------ GCS, by hand
def gcs_value(field: str, source: str, row: tuple) -> object:
    key, size, when = row
    return {
        "project": "123456789",
        "bucket": source,
        "name": key,
        "size": size,
        "updated": when,
        "storageClass": "STANDARD",
    }[field]


def put_gcs_report(
    store,
    rows,
    *,
    file_format="csv",
    source="photos",
    config=GCS_CONFIG,
    snapshot=SNAPSHOT,
    fields=GCS_FIELDS,
    shards=2,
    path="insights/daily",
    **changes,
) -> str:
    """A Storage Insights report of `rows` in `shards` shards beside its manifest, as GCS names and writes them;
    `changes` replace keys of the manifest. Returns the manifest's key."""
    stamp = snapshot.strftime("%Y-%m-%dT%H:%M")
    names = []
    for i in range(shards):
        part = rows[i::shards]
        if file_format == "csv":
            text = io.StringIO()
            writer = csv.writer(text, lineterminator="\n")
            writer.writerow(fields)
            for row in part:
                writer.writerow(
                    [
                        v.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z" if isinstance(v, datetime) else v
                        for v in (gcs_value(f, source, row) for f in fields)
                    ]
                )
            data = text.getvalue().encode()
        else:
            types = {"size": pa.int64(), "updated": pa.timestamp("us", tz="UTC")}
            table = pa.table(
                {f: pa.array([gcs_value(f, source, r) for r in part], types.get(f, pa.string())) for f in fields}
            )
            out = io.BytesIO()
            pq.write_table(table, out)
            data = out.getvalue()
        names.append(f"{config}_{stamp}_{i}.{file_format}")
        store.client.put_object(Bucket=store.bucket, Key=f"{path}/{names[-1]}", Body=data)
    options = (
        {"csv_options": {"record_separator": "\n", "delimiter": ",", "header_required": True}}
        if file_format == "csv"
        else {"parquet_options": {}}
    )
    manifest = {
        "report_config": {
            "name": f"projects/123456789/locations/us-west1/reportConfigs/{config}",
            "display_name": "daily inventory",
            "frequency_options": {"frequency": "DAILY"},
            **options,
            "object_metadata_report_options": {
                "metadata_fields": list(fields),
                "storage_filters": {"bucket": source},
                "storage_destination_options": {"bucket": store.bucket, "destination_path": path},
            },
        },
        "snapshot_time": snapshot.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "shard_count": shards,
        "report_shards_file_names": names,
        "records_processed": len(rows),
        **changes,
    }
    key = f"{path}/{config}_{stamp}_manifest.json"
    store.client.put_object(Bucket=store.bucket, Key=key, Body=json.dumps(manifest).encode())
    return key


def read_report(store, destination: str, tmp_path, *, reference_time=SOON, source="photos"):
    """The source's report as a reconcile run reads it: located and checked, downloaded, loaded into DuckDB."""
    report = locate(store.client, {source: destination}, source, reference_time, 48)
    with engine(tmp_path / "db") as db:
        db.load_inventory(report, download(store.client, report, tmp_path / "files"))
        return report, set(db.db.execute("SELECT key, size, modified_ms FROM inventory").fetchall())


@GCS
@pytest.mark.parametrize("file_format", ["csv", "parquet"])
def test_a_gcs_report_is_read_with_its_keys_sizes_and_times_and_another_buckets_configuration_ignored(
    report_store, tmp_path, file_format
):
    put_gcs_report(report_store, OBJECTS, file_format=file_format)
    put_gcs_report(
        report_store,
        [("x/other", 1, SNAPSHOT)],
        file_format=file_format,
        source="other-photos",
        config="9e1d2c3b-0000-4000-8000-000000000000",
        snapshot=SNAPSHOT + timedelta(hours=2),
    )
    report, rows = read_report(report_store, f"gs://{report_store.bucket}/insights/daily", tmp_path)
    assert (report.scheme, report.source_bucket, report.configuration) == ("gs", "photos", GCS_CONFIG)
    assert (report.created, report.file_format, len(report.files)) == (
        SNAPSHOT,
        {"csv": "CSV", "parquet": "Parquet"}[file_format],
        2,
    )
    assert rows == EXPECTED


@GCS
def test_the_newest_gcs_report_of_the_bucket_is_used(report_store, tmp_path):
    put_gcs_report(report_store, OBJECTS[:1], snapshot=SNAPSHOT - timedelta(days=1))
    newest = put_gcs_report(report_store, OBJECTS)
    report, rows = read_report(report_store, f"gs://{report_store.bucket}/insights/daily/", tmp_path)
    assert report.manifest_key == newest and rows == EXPECTED


def gcs_stale(store):
    put_gcs_report(store, OBJECTS)
    return SNAPSHOT + timedelta(hours=72), r"older than max_inventory_age_hours=48\. Check that the inventory"


def gcs_of_another_bucket(store):
    put_gcs_report(store, OBJECTS, source="other-photos")
    return SOON, rf"no usable GCS inventory report of bucket photos .*: {GCS_CONFIG} \(lists bucket other-photos\)"


def gcs_shards_missing_from_the_manifest(store):
    put_gcs_report(store, OBJECTS, shard_count=3)
    return SOON, "lists 2 shard files of its shard_count 3: the report is incomplete; see the configuration's"


def gcs_shard_deleted(store):
    key = put_gcs_report(store, OBJECTS)
    store.client.delete_objects(
        Bucket=store.bucket, Delete={"Objects": [{"Key": key.replace("_manifest.json", "_1.csv")}], "Quiet": True}
    )
    return SOON, r"data file gs://\S+_1\.csv, listed by \S+, is missing: the report is incomplete"


def gcs_shard_cut_short(store):
    key = put_gcs_report(store, OBJECTS)
    store.client.put_object(
        Bucket=store.bucket, Key=key.replace("_manifest.json", "_1.csv"), Body=(",".join(GCS_FIELDS) + "\n").encode()
    )
    return SOON, "hold 2 rows, fewer than the 4 objects its manifest counts: a data file was cut short or replaced"


def gcs_without_updated(store):
    put_gcs_report(store, OBJECTS, fields=("bucket", "name", "size", "storageClass"))
    return SOON, rf"{GCS_CONFIG} \(lacks updated\)\. Configure a Storage Insights inventory report of bucket photos"


def gcs_header_of_other_fields(store):
    key = put_gcs_report(store, OBJECTS)
    manifest = json.loads(store.read(key))
    manifest["report_config"]["object_metadata_report_options"]["metadata_fields"] = [
        "project",
        "bucket",
        "name",
        "updated",
        "size",
        "storageClass",
    ]
    store.client.put_object(Bucket=store.bucket, Key=key, Body=json.dumps(manifest).encode())
    return SOON, "a data file's header row names project, bucket, name, size, updated, storageClass, not the manifest"


@GCS
@pytest.mark.parametrize(
    "damage",
    [
        gcs_stale,
        gcs_of_another_bucket,
        gcs_shards_missing_from_the_manifest,
        gcs_shard_deleted,
        gcs_shard_cut_short,
        gcs_without_updated,
        gcs_header_of_other_fields,
    ],
)
def test_a_gcs_report_that_fails_a_check_is_refused_with_what_to_do(report_store, tmp_path, damage):
    reference_time, message = damage(report_store)
    with pytest.raises(InventoryError, match=message):
        read_report(report_store, f"gs://{report_store.bucket}/insights/daily", tmp_path, reference_time=reference_time)


# ---------------------------------------------------------------------------------------------- Azure, by hand
def azure_value(field: str, container: str, row: tuple, file_format: str) -> object:
    key, size, when = row[:3]
    version, current = row[3:5] if len(row) > 3 else ("", True)
    stamp = ms(when) if file_format == "parquet" else when.strftime("%Y-%m-%dT%H:%M:%S.%f") + "0Z"
    return {
        "Name": f"{container}/{key}",
        "Creation-Time": stamp,
        "Last-Modified": stamp,
        "Content-Length": size,
        "BlobType": "BlockBlob",
        "AccessTier": "Hot",
        "VersionId": version,
        "IsCurrentVersion": current if file_format == "parquet" else str(current).lower(),
    }[field]


def put_azure_report(
    store,
    rows,
    *,
    file_format="csv",
    container="photos",
    rule="daily-blobs",
    started=SNAPSHOT,
    fields=AZURE_FIELDS,
    status="Succeeded",
    filters=None,
    checksum=True,
    files=2,
    **changes,
) -> str:
    """An Azure Blob Inventory run of `rows` ((key, size, modified[, version id, current]) of `container`) in
    `files` data files, its manifest and (when `checksum`) its checksum file, base64 as Azure's Content-MD5 is;
    `changes` replace keys of the manifest. Returns the manifest's key."""
    folder = f"{started:%Y/%m/%d/%H-%M-%S}/{rule}/"
    written = []
    for i in range(files):
        part = rows[i::files]
        if file_format == "csv":
            text = io.StringIO()
            writer = csv.writer(text, lineterminator="\n")
            writer.writerow(fields)
            writer.writerows([azure_value(f, container, row, "csv") for f in fields] for row in part)
            data = text.getvalue().encode()
        else:
            types = {
                "Content-Length": pa.int64(),
                "Last-Modified": pa.int64(),
                "Creation-Time": pa.int64(),
                "IsCurrentVersion": pa.bool_(),
            }
            table = pa.table(
                {
                    f: pa.array([azure_value(f, container, r, "parquet") for r in part], types.get(f, pa.string()))
                    for f in fields
                }
            )
            out = io.BytesIO()
            pq.write_table(table, out)
            data = out.getvalue()
        key = f"{folder}{rule}_{i + 1}.{file_format}"
        store.client.put_object(Bucket=store.bucket, Key=key, Body=data)
        written.append({"blob": key, "size": len(data)})
    manifest = {
        "destinationContainer": store.bucket,
        "endpoint": "https://blobgcaccount.blob.core.windows.net",
        "files": written,
        "inventoryCompletionTime": (started + timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "inventoryStartTime": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "ruleDefinition": {
            "filters": filters if filters is not None else {"blobTypes": ["blockBlob"], "prefixMatch": [container]},
            "format": file_format,
            "objectType": "blob",
            "schedule": "daily",
            "schemaFields": list(fields),
        },
        "ruleName": rule,
        "status": status,
        "summary": {"objectCount": len(rows), "totalObjectSize": 1},
        "version": "1.0",
        **changes,
    }
    body = json.dumps(manifest, indent=2).encode()
    store.client.put_object(Bucket=store.bucket, Key=f"{folder}{rule}-manifest.json", Body=body)
    if checksum:
        store.client.put_object(
            Bucket=store.bucket,
            Key=f"{folder}{rule}-manifest.checksum",
            Body=base64.b64encode(hashlib.md5(body).digest()),
        )
    return f"{folder}{rule}-manifest.json"


@AZURE
@pytest.mark.parametrize("file_format", ["csv", "parquet"])
def test_an_azure_report_is_read_with_the_current_blobs_of_its_container_only(report_store, tmp_path, file_format):
    rows = [(*row, f"v{i}", True) for i, row in enumerate(OBJECTS)]
    rows += [("a/one two+three.jpg", 7, datetime(2026, 10, 1, tzinfo=UTC), "v0-old", False)]  # a noncurrent version
    other = [("x/elsewhere", 1, SNAPSHOT, "v9", True)]
    put_azure_report(
        report_store,
        rows,
        file_format=file_format,
        fields=AZURE_VERSIONED,
        filters={"blobTypes": ["blockBlob"], "prefixMatch": ["photos", "other"], "includeBlobVersions": True},
    )
    key = put_azure_report(
        report_store,
        other,
        file_format=file_format,
        container="other",
        rule="other-blobs",
        started=SNAPSHOT + timedelta(hours=1),
        fields=AZURE_VERSIONED,
    )
    report, found = read_report(report_store, f"az://{report_store.bucket}", tmp_path)
    assert (report.scheme, report.source_bucket, report.configuration) == ("az", "photos", "daily-blobs")
    assert (report.created, report.file_format, len(report.files)) == (
        SNAPSHOT,
        {"csv": "CSV", "parquet": "Parquet"}[file_format],
        2,
    )
    assert found == EXPECTED
    with pytest.raises(InventoryError, match="does not list all of container photos: its prefixMatch"):
        read_located(report_store.client, f"az://{report_store.bucket}/{key}", "photos")  # the task checks again


@AZURE
def test_an_azure_run_still_going_is_skipped_for_the_rules_last_completed_one(report_store, tmp_path):
    done = put_azure_report(report_store, OBJECTS)
    put_azure_report(
        report_store, OBJECTS[:1], started=SNAPSHOT + timedelta(hours=20), status="Pending", checksum=False
    )
    report, rows = read_report(
        report_store, f"az://{report_store.bucket}", tmp_path, reference_time=SNAPSHOT + timedelta(hours=21)
    )
    assert report.manifest_key == done and rows == EXPECTED


def rewrite_azure(store, key, *, checksum=True, **changes):
    manifest = json.loads(store.read(key))
    for name, value in changes.items():
        manifest[name] = value(manifest[name]) if callable(value) else value
    body = json.dumps(manifest).encode()
    store.client.put_object(Bucket=store.bucket, Key=key, Body=body)
    if checksum:
        store.client.put_object(
            Bucket=store.bucket, Key=key.replace(".json", ".checksum"), Body=hashlib.md5(body).hexdigest().encode()
        )


def azure_stale(store):
    put_azure_report(store, OBJECTS)
    return SNAPSHOT + timedelta(hours=72), r"older than max_inventory_age_hours=48\. Check that the inventory"


def azure_checksum_wrong(store):
    key = put_azure_report(store, OBJECTS)
    rewrite_azure(store, key, checksum=False, inventoryStartTime="2026-11-22T03:30:00Z")
    return SOON, "does not match its manifest checksum .*: the manifest is corrupt or was replaced; see the rule's"


def azure_of_another_container(store):
    put_azure_report(store, OBJECTS, filters={"blobTypes": ["blockBlob"], "prefixMatch": ["photos/2026"]})
    return SOON, (
        r"no usable Azure Blob Inventory report of container photos .*: daily-blobs \(.*does not cover all "
        r"of container photos\)\. Add a blob inventory rule"
    )


def azure_failed(store):
    put_azure_report(store, OBJECTS, status="Failed")
    return SOON, "status is 'Failed', not 'Succeeded': its data files may be incomplete. Wait for the rule's next"


def azure_never_completed(store):
    put_azure_report(store, OBJECTS, status="Pending", checksum=False)
    return SOON, r"container photos .*: daily-blobs \(no completed run\)\. Add a blob inventory rule"


def azure_without_last_modified(store):
    put_azure_report(store, OBJECTS, fields=("Name", "Content-Length", "BlobType"))
    return SOON, r"lacks the schema field\(s\) Last-Modified: add them to the rule's schemaFields"


def azure_data_file_replaced(store):
    key = put_azure_report(store, OBJECTS)
    rewrite_azure(store, key, files=lambda files: [{**f, "size": f["size"] + 1} for f in files])
    return SOON, r"data file az://\S+ is \d+ bytes with MD5 \w+; \S+ and the store say \d+ bytes.*cut short or replaced"


def azure_rows_missing(store):
    key = put_azure_report(store, OBJECTS)
    rewrite_azure(store, key, summary={"objectCount": 5, "totalObjectSize": 1})
    return SOON, "hold 4 rows, fewer than the 5 objects its manifest counts"


@AZURE
@pytest.mark.parametrize(
    "damage",
    [
        azure_stale,
        azure_checksum_wrong,
        azure_of_another_container,
        azure_failed,
        azure_never_completed,
        azure_without_last_modified,
        azure_data_file_replaced,
        azure_rows_missing,
    ],
)
def test_an_azure_report_that_fails_a_check_is_refused_with_what_to_do(report_store, tmp_path, damage):
    reference_time, message = damage(report_store)
    with pytest.raises(InventoryError, match=message):
        read_report(report_store, f"az://{report_store.bucket}", tmp_path, reference_time=reference_time)


# ----------------------------------------------------------------------- reconcile from blobgc's writer's reports
@pytest.fixture
def source_store(report_store):
    """The reconciled bucket, in the same store as the reports."""
    yield from store_of(report_store.kind)


@pytest.mark.parametrize("file_format", ["csv", "parquet"])
@pytest.mark.parametrize(("report_store", "scheme"), [("gcs", "gs"), ("azure", "az")], indirect=["report_store"])
def test_reconcile_from_a_report_written_here_owes_the_old_orphan_only(
    conn, report_store, source_store, scheme, file_format
):
    store, bucket = source_store.client, source_store.bucket
    contents_rows(conn, sha("live"), sha("lost"))
    for name in ("live", "dead"):
        store.put_object(Bucket=bucket, Key=f"pastes/{sha(name)}", Body=b"12345")
        source_store.backdate(f"pastes/{sha(name)}", 48 * 3600)
    store.put_object(Bucket=bucket, Key=f"pastes/{sha('young')}", Body=b"12345")
    manifest = report_of_bucket(
        store, bucket, Destination(report_store.bucket, "inv/", scheme), file_format=file_format, rows_per_file=2
    )
    destination = f"{scheme}://{report_store.bucket}/inv"
    run = new_run(conn)
    report = locate(report_store.client, {bucket: destination}, bucket, None, 48)
    assert report.location == f"{scheme}://{report_store.bucket}/{manifest}" and len(report.files) == 2
    scope = scope_of(conn, bucket, [], bucket, seeds=True, prefixes=None)
    result = reconcile_from_inventory(
        conn,
        store,
        report_store.client,
        run,
        scope,
        report.location,
        confirmations=1,
        cutoff=floor_cutoff(),
        max_age_hours=48,
    )
    execute_plan(conn, run)
    assert (result.keys_checked, result.orphans, result.too_young) == (3, 1, 1)
    assert owed(conn) == {f"pastes/{sha('dead')}"}
    assert {
        r[0]
        for r in conn.execute(
            "SELECT key FROM blobgc.reconcile_finding WHERE run_id = %s AND kind = 'missing_object'", (run.run_id,)
        )
    } == {f"pastes/{sha('lost')}"}
    assert delete_owed_objects(conn, store, run).objects_deleted == 1
    assert source_store.keys() == {f"pastes/{sha('live')}", f"pastes/{sha('young')}"}
    with pytest.raises(InventoryError, match=re.escape("lists bucket" if scheme == "gs" else "does not list all")):
        read_located(report_store.client, report.location, "another-bucket")  # the task checks the source again

"""blobgc.core.inventory_reports: reading AWS's report format, hand-written here as S3 writes it."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import uuid
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from blobgc.core.inventory_reports import Destination, InventoryError, destinations, download, engine, find_report

CSV_SCHEMA = "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag"
# The Parquet data files' schema, as AWS's manifest.json states it for a versioned inventory with these fields.
PARQUET_SCHEMA = ("message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); "
                  "optional binary version_id (UTF8); optional boolean is_latest; optional boolean is_delete_marker; "
                  "optional int64 size; optional int64 last_modified_date (TIMESTAMP_MILLIS); "
                  "optional binary e_tag (UTF8); optional binary storage_class (UTF8);}")
PARQUET_COLUMNS = pa.schema([
    pa.field("bucket", pa.string(), nullable=False), pa.field("key", pa.string(), nullable=False),
    pa.field("version_id", pa.string()), pa.field("is_latest", pa.bool_()), pa.field("is_delete_marker", pa.bool_()),
    pa.field("size", pa.int64()), pa.field("last_modified_date", pa.timestamp("ms", tz="UTC")),
    pa.field("e_tag", pa.string()), pa.field("storage_class", pa.string())])


def put_report(s3, reports: str, lines: list[str], *, schema: str = CSV_SCHEMA, folder: str = "2026-11-22T00-00Z",
               configuration: str = "versions") -> str:
    data = gzip.compress(("\n".join(lines) + "\n").encode())
    data_key = f"inv/photos/{configuration}/data/{uuid.uuid4()}.csv.gz"
    s3.put_object(Bucket=reports, Key=data_key, Body=data)
    manifest = json.dumps({
        "sourceBucket": "photos", "destinationBucket": f"arn:aws:s3:::{reports}", "version": "2016-11-30",
        "creationTimestamp": str(int(datetime(2026, 11, 22, tzinfo=timezone.utc).timestamp() * 1000)),
        "fileFormat": "CSV", "fileSchema": schema,
        "files": [{"key": data_key, "size": len(data), "MD5checksum": hashlib.md5(data).hexdigest()}]}).encode()
    key = f"inv/photos/{configuration}/{folder}/manifest.json"
    s3.put_object(Bucket=reports, Key=key, Body=manifest)
    s3.put_object(Bucket=reports, Key=key.replace(".json", ".checksum"), Body=hashlib.md5(manifest).hexdigest().encode())
    return key


def test_a_versioned_report_yields_current_objects_only_with_their_keys_decoded(s3, reports, tmp_path):
    put_report(s3, reports, [
        '"photos","a/one+two%2Bthree.jpg","v2","true","false","10","2026-11-01T10:00:00.000Z","e1"',
        '"photos","a/one+two%2Bthree.jpg","v1","false","false","9","2026-10-01T10:00:00.000Z","e0"',
        '"photos","b/deleted.jpg","v3","true","true","","2026-11-02T10:00:00.000Z",""',
        '"photos","b/deleted.jpg","v2","false","false","7","2026-10-02T10:00:00.000Z","e2"',
        '"photos","c/%E2%9C%93.jpg","null","true","false","3","2026-11-03T10:00:00.000Z","e3"',
    ])
    report = find_report(s3, Destination.parse(f"s3://{reports}/inv", source_bucket="photos"), "photos")
    assert report.fields == tuple(CSV_SCHEMA.split(", ")) and report.created == datetime(2026, 11, 22, tzinfo=timezone.utc)
    with engine(tmp_path / "db") as db:
        assert db.load_inventory(report, download(s3, report, tmp_path / "files")) == 2
        rows = set(db.db.execute("SELECT key, size, modified_ms FROM inventory").fetchall())
    assert rows == {("a/one two+three.jpg", 10, int(datetime(2026, 11, 1, 10, tzinfo=timezone.utc).timestamp() * 1000)),
                    ("c/✓.jpg", 3, int(datetime(2026, 11, 3, 10, tzinfo=timezone.utc).timestamp() * 1000))}
    assert not (tmp_path / "db").exists()  # the engine's scratch directory goes with it


def at(*fields: int) -> datetime:
    return datetime(*fields, tzinfo=timezone.utc)


def epoch_ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def put_parquet_report(s3, reports: str, parts: list[list[tuple]]) -> str:
    """A versioned report of bucket photos in Parquet, written with pyarrow (not blobgc's writer), one data file per
    part, as S3 delivers it: raw keys, sizes as int64, LastModifiedDate as UTC milliseconds."""
    files = []
    for rows in parts:
        table = pa.Table.from_pylist([dict(zip(PARQUET_COLUMNS.names, ("photos", *row), strict=True)) for row in rows],
                                     schema=PARQUET_COLUMNS)
        out = io.BytesIO()
        pq.write_table(table, out, compression="snappy")
        data = out.getvalue()
        data_key = f"inv/photos/parquet/data/{uuid.uuid4()}.parquet"
        s3.put_object(Bucket=reports, Key=data_key, Body=data)
        files.append({"key": data_key, "size": len(data), "MD5checksum": hashlib.md5(data).hexdigest()})
    manifest = json.dumps({
        "sourceBucket": "photos", "destinationBucket": f"arn:aws:s3:::{reports}", "version": "2016-11-30",
        "creationTimestamp": str(int(at(2026, 11, 22).timestamp() * 1000)), "fileFormat": "Parquet",
        "fileSchema": PARQUET_SCHEMA, "files": files}).encode()
    key = "inv/photos/parquet/2026-11-22T00-00Z/manifest.json"
    s3.put_object(Bucket=reports, Key=key, Body=manifest)
    s3.put_object(Bucket=reports, Key=key.replace(".json", ".checksum"), Body=hashlib.md5(manifest).hexdigest().encode())
    return key


def test_a_parquet_report_in_aws_schema_written_by_another_writer_is_read_with_its_keys_sizes_and_dates(
        s3, reports, tmp_path):
    put_parquet_report(s3, reports, [
        [("a/one two+three.jpg", "v2", True, False, 10, at(2026, 11, 1, 10, 0, 0, 123000), "e1", "STANDARD"),
         ("a/one two+three.jpg", "v1", False, False, 9, at(2026, 10, 1, 10), "e0", "STANDARD"),
         ("b/deleted.jpg", "v3", True, True, None, at(2026, 11, 2, 10), None, None),
         ("b/deleted.jpg", "v2", False, False, 7, at(2026, 10, 2, 10), "e2", "STANDARD")],
        [("c/✓ 100%.jpg", "null", True, False, 3, at(2026, 11, 3, 10), "e3", "GLACIER"),
         ("d/big.bin", "v9", True, False, 5_000_000_000, at(2025, 1, 31, 23, 59, 59), "e4-2", "STANDARD_IA")],
    ])
    report = find_report(s3, Destination.parse(f"s3://{reports}/inv", source_bucket="photos"), "photos")
    assert (report.file_format, report.created, len(report.files)) == ("Parquet", at(2026, 11, 22), 2)
    assert report.fields == ("Bucket", "Key", "VersionId", "IsLatest", "IsDeleteMarker", "Size", "LastModifiedDate",
                             "ETag", "StorageClass")
    with engine(tmp_path / "db") as db:
        assert db.load_inventory(report, download(s3, report, tmp_path / "files")) == 3
        rows = set(db.db.execute("SELECT key, size, modified_ms FROM inventory").fetchall())
    assert rows == {("a/one two+three.jpg", 10, epoch_ms(at(2026, 11, 1, 10, 0, 0, 123000))),  # keys as written
                    ("c/✓ 100%.jpg", 3, epoch_ms(at(2026, 11, 3, 10))),
                    ("d/big.bin", 5_000_000_000, epoch_ms(at(2025, 1, 31, 23, 59, 59)))}


def test_a_key_that_does_not_url_decode_fails_the_read(s3, reports, tmp_path):
    put_report(s3, reports, ['"photos","cut%E2%9C.jpg","v1","true","false","1","2026-11-01T10:00:00.000Z","e"'])
    report = find_report(s3, Destination.parse(f"s3://{reports}/inv", source_bucket="photos"), "photos")
    with engine(tmp_path / "db") as db, pytest.raises(InventoryError, match="1 keys that do not URL-decode"):
        db.load_inventory(report, download(s3, report, tmp_path / "files"))


def test_no_report_and_no_usable_configuration_are_named(s3, reports):
    where = Destination.parse(f"s3://{reports}/inv/", source_bucket="photos")
    with pytest.raises(InventoryError, match=r"no S3 Inventory report of bucket photos under s3://.*/inv/photos/"):
        find_report(s3, where, "photos")
    put_report(s3, reports, [], schema="Bucket, Key, ETag", configuration="keys-only")
    with pytest.raises(InventoryError, match=r"keys-only \(lacks Size, LastModifiedDate\)"):
        find_report(s3, where, "photos")


@pytest.mark.parametrize("value", [["s3://x/y"], {"photos": 3}, "s3://x"])
def test_the_variable_must_map_buckets_to_destinations(value):
    with pytest.raises(InventoryError, match="Variable blobgc_inventory must be a JSON object"):
        destinations(value)


@pytest.mark.parametrize(("text", "expected"), [("s3://inv-bucket", Destination("inv-bucket", "")),
                                                ("s3://inv-bucket/a/b/", Destination("inv-bucket", "a/b/"))])
def test_a_destination_is_a_bucket_and_a_prefix(text, expected):
    assert Destination.parse(text, source_bucket="photos") == expected


def test_a_destination_that_is_no_s3_url_is_refused():
    with pytest.raises(InventoryError, match=r"inventory destination of bucket photos is 'arn:aws:s3:::inv'"):
        Destination.parse("arn:aws:s3:::inv", source_bucket="photos")


@pytest.mark.parametrize(("memory", "parts", "rows"), [
    ("1GB", 2, 122_880),  # a Parquet row group a part: 2 parts x 2 threads of them fit in a quarter of 1 GB
    ("1GB", 20, 62_495),  # 100M keys in parts of 5M: half a row group, or 20 parts' buffers would pass a quarter
    ("1GB", 2_000, 4_096),  # the floor: never a write of a few rows at a time
    ("4GB", 20, 122_880),
    ("2TB", 20, 122_880),  # written "1.8 TiB"
    ("-1", 20, 122_880),  # no limit: written "16383.9 PiB"
])
def test_a_partitioned_write_holds_each_parts_rows_within_a_quarter_of_the_memory_limit(tmp_path, memory, parts, rows):
    """Issue 34: DuckDB's partitioned write held 524,288 rows a part and thread before writing them; 20 parts'
    buffers did not fit in the 1 GB limit at 100M keys, and the part files took 1,358 ns a key where 10M's took 773.
    `write_parts` sets the threshold from the memory limit, the parts and the threads."""
    with engine(tmp_path / "db", memory_limit=memory, threads=2) as db:
        assert db.flush_rows(parts) == rows


def test_write_parts_writes_every_key_with_the_memory_bounded_threshold(tmp_path):
    with engine(tmp_path / "db", memory_limit="1GB", threads=2) as db:
        db.db.execute("CREATE TABLE inventory AS SELECT 'k' || i AS key, i AS size, i AS modified_ms, hash('k' || i) "
                      "AS h FROM range(1000) t(i)")
        db.create_accounted()
        counts = db.write_parts(tmp_path / "parts", 20)
        threshold = db.db.execute("SELECT current_setting('partitioned_write_flush_threshold')").fetchone()[0]
    assert int(threshold) == 62_495
    assert sum(i for i, _ in counts) == 1000 and sum(a for _, a in counts) == 0

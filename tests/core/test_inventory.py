"""blobgc.core.inventory: reading AWS's report format, hand-written here as S3 writes it."""
from __future__ import annotations

import gzip
import hashlib
import json
import uuid
from datetime import datetime, timezone

import pytest

from blobgc.core.inventory import Destination, InventoryError, destinations, download, engine, find_report

CSV_SCHEMA = "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag"



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

"""Write an inventory report in a cloud's documented format (S3 Inventory, GCS Storage Insights, Azure Blob
Inventory), for a store that makes none.

S3 writes inventory reports; MinIO, the local S3 server and most S3-compatible stores do not. This
writes one from a listing of the bucket (or, for benchmarks, from any rows of key, size and
LastModified), exactly as `blobgc.core.inventory_reports` reads AWS's: gzip CSV (quoted fields, URL-encoded
keys, `2024-05-01T12:34:56.000Z` dates) or Parquet data files under `.../<configuration>/data/`, a
`manifest.json` with each file's size and MD5 under `.../<configuration>/<YYYY-MM-DDTHH-MMZ>/`, and
`manifest.checksum` beside it.

    python -m blobgc.inventory BUCKET s3://INVENTORY-BUCKET/PREFIX [--format csv|parquet] [--configuration ID]
                               [--conn-id blobgc_s3]

The destination's scheme picks the cloud's format, as Variable blobgc_inventory names it:

- `gs://BUCKET/PATH`: GCS Storage Insights (`blobgc.core.inventory_gcs`): shards
  `PATH/<config id>_<snapshot>_<n>.csv` (a header row, names as they are, RFC 3339 times) or `.parquet`, then
  `PATH/<config id>_<snapshot>_manifest.json` with report_config, snapshot_time, shard_count,
  report_shards_file_names and records_processed. `--configuration` is the report configuration's id.
- `az://CONTAINER`: Azure Blob Inventory (`blobgc.core.inventory_azure`): `YYYY/MM/DD/HH-MM-SS/<rule>/` holding
  the data files (CSV with the schema row, Name as `<container>/<blob>`, or Parquet with timestamp_millis dates),
  `<rule>-manifest.json` (status Succeeded, files with their sizes, ruleDefinition, summary) and, last,
  `<rule>-manifest.checksum` (the manifest's MD5). `--configuration` is the rule's name.

The report is as old as its listing: a run of reconcile with `source=inventory` then checks it,
and the objects and rows changed since, as it would AWS's.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import tempfile
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from blobgc.core.inventory_reports import Destination
from blobgc.core.objects import ObjectStore

FIELDS = ("Bucket", "Key", "Size", "LastModifiedDate", "ETag", "StorageClass")
PARQUET_SCHEMA = (
    "message s3.inventory { required binary bucket (STRING); required binary key (STRING); "
    "optional int64 size; optional int64 last_modified_date (TIMESTAMP(MILLIS,true)); "
    "optional binary e_tag (STRING); optional binary storage_class (STRING);}"
)
ROWS_PER_FILE = 1_000_000
GCS_FIELDS = ("bucket", "name", "size", "updated", "etag", "storageClass")
AZURE_FIELDS = ("Name", "Creation-Time", "Last-Modified", "Content-Length", "BlobType", "AccessTier")


def report_folder(taken: datetime) -> str:
    return taken.astimezone(UTC).strftime("%Y-%m-%dT%H-%MZ")


def write_report(
    s3,
    source_bucket: str,
    destination: Destination,
    db,
    objects: str,
    *,
    file_format: str = "CSV",
    configuration: str = "blobgc",
    taken: datetime | None = None,
    rows_per_file: int = ROWS_PER_FILE,
    workdir: Path | None = None,
) -> str:
    """Write the report of `objects` (a DuckDB relation of key, size, last_modified TIMESTAMP in UTC, e_tag) into
    `destination`, through the DuckDB connection `db`; returns the manifest's key."""
    taken = taken or datetime.now(UTC)
    file_format = {"csv": "CSV", "parquet": "Parquet"}.get(file_format.lower(), file_format)
    suffix = {"CSV": ".csv.gz", "Parquet": ".parquet"}[file_format]
    base = f"{destination.reports_of(source_bucket)}{configuration}/"
    count = db.execute(f"SELECT count(*) FROM ({objects})").fetchone()[0]
    n_files = max(1, -(-count // rows_per_file))
    bucket = source_bucket.replace("'", "''")
    files = []
    with tempfile.TemporaryDirectory(prefix="blobgc-inventory-write-", dir=workdir) as scratch:
        for i in range(n_files):
            path = Path(scratch) / f"{i}{suffix}"
            where = f"WHERE hash(key) % {n_files} = {i}" if n_files > 1 else ""
            if file_format == "CSV":
                db.execute(f"""COPY (SELECT '{bucket}', url_encode(key), size,
                                            strftime(last_modified, '%Y-%m-%dT%H:%M:%S.%gZ'), e_tag, 'STANDARD'
                                     FROM ({objects}) {where})
                               TO '{path}' (FORMAT csv, HEADER false, COMPRESSION gzip, FORCE_QUOTE *)""")
            else:
                db.execute(f"""COPY (SELECT '{bucket}' AS bucket, key, size::BIGINT AS size,
                                            last_modified AS last_modified_date, e_tag, 'STANDARD' AS storage_class
                                     FROM ({objects}) {where})
                               TO '{path}' (FORMAT parquet)""")
            key = f"{base}data/{uuid.uuid4()}{suffix}"
            digest = hashlib.md5()
            with path.open("rb") as data:
                for chunk in iter(lambda: data.read(1 << 20), b""):
                    digest.update(chunk)
            s3.upload_file(str(path), destination.bucket, key)
            files.append({"key": key, "size": path.stat().st_size, "MD5checksum": digest.hexdigest()})
    manifest = {
        "sourceBucket": source_bucket,
        "destinationBucket": f"arn:aws:s3:::{destination.bucket}",
        "version": "2016-11-30",
        "creationTimestamp": str(int(taken.timestamp() * 1000)),
        "fileFormat": file_format,
        "fileSchema": ", ".join(FIELDS) if file_format == "CSV" else PARQUET_SCHEMA,
        "files": files,
    }
    body = json.dumps(manifest, indent=2).encode()
    folder = f"{base}{report_folder(taken)}/"
    s3.put_object(Bucket=destination.bucket, Key=f"{folder}manifest.json", Body=body)
    s3.put_object(
        Bucket=destination.bucket, Key=f"{folder}manifest.checksum", Body=hashlib.md5(body).hexdigest().encode()
    )
    return f"{folder}manifest.json"


def data_files(db, objects: str, rows_per_file: int, copy_one, scratch: Path, suffix: str) -> list[Path]:
    """The data files of `objects` (`rows_per_file` rows each, at least one file), each written by
    `copy_one(select, path)`."""
    count = db.execute(f"SELECT count(*) FROM ({objects})").fetchone()[0]
    n_files = max(1, -(-count // rows_per_file))
    paths = []
    for i in range(n_files):
        path = scratch / f"{i}{suffix}"
        where = f"WHERE hash(key) % {n_files} = {i}" if n_files > 1 else ""
        copy_one(f"SELECT * FROM ({objects}) {where}", path)
        paths.append(path)
    return paths


def write_gcs_report(
    store: ObjectStore,
    source_bucket: str,
    destination: Destination,
    db,
    objects: str,
    *,
    file_format: str = "CSV",
    configuration: str = "blobgc",
    taken: datetime | None = None,
    rows_per_file: int = ROWS_PER_FILE,
    workdir: Path | None = None,
) -> str:
    """Write a GCS Storage Insights report of `objects` (key, size, last_modified TIMESTAMP in UTC, e_tag) into
    `destination` (gs://): shards, then the manifest naming them; returns the manifest's key."""
    taken = taken or datetime.now(UTC)
    parquet = file_format.lower() == "parquet"
    suffix = ".parquet" if parquet else ".csv"
    bucket = source_bucket.replace("'", "''")
    base = f"{destination.prefix}{configuration}_{taken.astimezone(UTC):%Y-%m-%dT%H:%M}_"

    def copy_one(select: str, path: Path) -> None:
        if parquet:
            db.execute(f"""COPY (SELECT '{bucket}' AS bucket, key AS name, size::BIGINT AS size,
                                        last_modified AS updated, e_tag AS etag, 'STANDARD' AS storageClass
                                 FROM ({select})) TO '{path}' (FORMAT parquet)""")
        else:
            db.execute(f"""COPY (SELECT '{bucket}' AS bucket, key AS name, size,
                                        strftime(last_modified, '%Y-%m-%dT%H:%M:%S.%gZ') AS updated, e_tag AS etag,
                                        'STANDARD' AS storageClass
                                 FROM ({select})) TO '{path}' (FORMAT csv, HEADER true)""")

    names, records = [], 0
    with tempfile.TemporaryDirectory(prefix="blobgc-inventory-write-", dir=workdir) as scratch:
        for i, path in enumerate(data_files(db, objects, rows_per_file, copy_one, Path(scratch), suffix)):
            names.append(f"{base}{i}{suffix}".rsplit("/", 1)[-1])
            store.put_object(Bucket=destination.bucket, Key=f"{base}{i}{suffix}", Body=path.read_bytes())
        records = db.execute(f"SELECT count(*) FROM ({objects})").fetchone()[0]
    options = (
        {"parquet_options": {}}
        if parquet
        else {"csv_options": {"record_separator": "\n", "delimiter": ",", "header_required": True}}
    )
    manifest = {
        "report_config": {
            "name": f"projects/blobgc/locations/local/reportConfigs/{configuration}",
            "display_name": f"blobgc inventory of {source_bucket}",
            "frequency_options": {"frequency": "DAILY"},
            **options,
            "object_metadata_report_options": {
                "metadata_fields": list(GCS_FIELDS),
                "storage_filters": {"bucket": source_bucket},
                "storage_destination_options": {
                    "bucket": destination.bucket,
                    "destination_path": destination.prefix.rstrip("/"),
                },
            },
        },
        "snapshot_time": taken.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "shard_count": len(names),
        "report_shards_file_names": names,
        "records_processed": records,
    }
    key = f"{base}manifest.json"
    store.put_object(Bucket=destination.bucket, Key=key, Body=json.dumps(manifest, indent=2).encode())
    return key


def write_azure_report(
    store: ObjectStore,
    source_container: str,
    destination: Destination,
    db,
    objects: str,
    *,
    file_format: str = "CSV",
    configuration: str = "blobgc",
    taken: datetime | None = None,
    rows_per_file: int = ROWS_PER_FILE,
    workdir: Path | None = None,
    endpoint: str = "",
) -> str:
    """Write an Azure Blob Inventory run of `objects` (key, size, last_modified TIMESTAMP in UTC, e_tag) into
    `destination` (az://container): data files, the manifest, then its checksum file; returns the manifest's key."""
    taken = taken or datetime.now(UTC)
    parquet = file_format.lower() == "parquet"
    suffix = ".parquet" if parquet else ".csv"
    rule = configuration
    folder = f"{destination.prefix}{taken.astimezone(UTC):%Y/%m/%d/%H-%M-%S}/{rule}/"
    container = source_container.replace("'", "''")

    def copy_one(select: str, path: Path) -> None:
        if parquet:
            db.execute(f"""COPY (SELECT '{container}/' || key AS "Name",
                                        last_modified::TIMESTAMP_MS AS "Creation-Time",
                                        last_modified::TIMESTAMP_MS AS "Last-Modified",
                                        size::BIGINT AS "Content-Length",
                                        'BlockBlob' AS "BlobType", 'Hot' AS "AccessTier"
                                 FROM ({select})) TO '{path}' (FORMAT parquet)""")
        else:
            db.execute(f"""COPY (SELECT '{container}/' || key AS "Name",
                                        strftime(last_modified, '%Y-%m-%dT%H:%M:%S.%g0000Z') AS "Creation-Time",
                                        strftime(last_modified, '%Y-%m-%dT%H:%M:%S.%g0000Z') AS "Last-Modified",
                                        size AS "Content-Length", 'BlockBlob' AS "BlobType", 'Hot' AS "AccessTier"
                                 FROM ({select})) TO '{path}' (FORMAT csv, HEADER true)""")

    files = []
    with tempfile.TemporaryDirectory(prefix="blobgc-inventory-write-", dir=workdir) as scratch:
        paths = data_files(db, objects, rows_per_file, copy_one, Path(scratch), suffix)
        for i, path in enumerate(paths):
            key = f"{folder}{rule}{suffix}" if len(paths) == 1 else f"{folder}{rule}_{i + 1}{suffix}"
            store.put_object(Bucket=destination.bucket, Key=key, Body=path.read_bytes())
            files.append({"blob": key, "size": path.stat().st_size})
        count, total = db.execute(f"SELECT count(*), coalesce(sum(size), 0) FROM ({objects})").fetchone()
    manifest = {
        "destinationContainer": destination.bucket,
        "endpoint": endpoint
        or os.environ.get("BLOBGC_AZURE_ENDPOINT", "https://devstoreaccount1.blob.core.windows.net"),
        "files": files,
        "inventoryCompletionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "inventoryStartTime": taken.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "ruleDefinition": {
            "filters": {
                "blobTypes": ["blockBlob", "appendBlob", "pageBlob"],
                "includeBlobVersions": False,
                "includeSnapshots": False,
                "prefixMatch": [source_container],
            },
            "format": "parquet" if parquet else "csv",
            "objectType": "blob",
            "schedule": "daily",
            "schemaFields": list(AZURE_FIELDS),
        },
        "ruleName": rule,
        "status": "Succeeded",
        "summary": {"objectCount": count, "totalObjectSize": int(total)},
        "version": "1.0",
    }
    body = json.dumps(manifest, indent=2).encode()
    key = f"{folder}{rule}-manifest.json"
    store.put_object(Bucket=destination.bucket, Key=key, Body=body)
    store.put_object(
        Bucket=destination.bucket, Key=f"{folder}{rule}-manifest.checksum", Body=hashlib.md5(body).hexdigest().encode()
    )
    return key


def report_of_bucket(
    s3,
    source_bucket: str,
    destination: Destination,
    *,
    file_format: str = "CSV",
    configuration: str = "blobgc",
    taken: datetime | None = None,
    rows_per_file: int = ROWS_PER_FILE,
) -> str:
    """List `source_bucket` and write its report in the format of the destination's cloud (`write_report`,
    `write_gcs_report`, `write_azure_report`); returns the manifest's key."""
    import duckdb

    taken = taken or datetime.now(UTC)  # a report is as old as the start of its listing
    with tempfile.TemporaryDirectory(prefix="blobgc-inventory-list-") as scratch:
        listing = Path(scratch) / "listing.csv"
        with listing.open("w", newline="") as out:
            writer = csv.writer(out)
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=source_bucket):
                for item in page.get("Contents") or []:
                    writer.writerow(
                        [
                            item["Key"],
                            int(item.get("Size") or 0),
                            item["LastModified"].astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f"),
                            item.get("ETag", "").strip('"'),
                        ]
                    )
        db = duckdb.connect()
        try:
            objects = (
                f"SELECT * FROM read_csv('{listing}', header = false, auto_detect = false, quote = '\"', "
                "escape = '\"', columns = {'key': 'VARCHAR', 'size': 'BIGINT', 'last_modified': 'TIMESTAMP', "
                "'e_tag': 'VARCHAR'})"
            )
            writers: dict[str, Callable[..., str]] = {
                "s3": write_report,
                "gs": write_gcs_report,
                "az": write_azure_report,
            }
            write = writers[destination.scheme]
            return write(
                s3,
                source_bucket,
                destination,
                db,
                objects,
                file_format=file_format,
                configuration=configuration,
                taken=taken,
                rows_per_file=rows_per_file,
                workdir=Path(scratch),
            )
        finally:
            db.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m blobgc.inventory", description=__doc__.split("\n\n")[0])
    parser.add_argument("bucket", help="the bucket to list")
    parser.add_argument(
        "destination",
        help="where Variable blobgc_inventory names its reports: s3://<bucket>/<prefix> (S3 Inventory), "
        "gs://<bucket>/<path> (GCS Storage Insights) or az://<container> (Azure Blob Inventory)",
    )
    parser.add_argument("--format", choices=("csv", "parquet"), default="csv")
    parser.add_argument(
        "--configuration",
        default="blobgc",
        help="the inventory configuration's id (S3, GCS) or the rule's name (Azure); default blobgc",
    )
    parser.add_argument("--rows-per-file", type=int, default=ROWS_PER_FILE)
    parser.add_argument(
        "--conn-id",
        help="the Airflow connection of the store (e.g. blobgc_s3; default: the "
        "environment's BLOBGC_S3_ENDPOINT and AWS keys)",
    )
    args = parser.parse_args(argv)
    if args.conn_id:
        from blobgc.dag_kit.connections import store_client

        os.environ.setdefault("_AIRFLOW_PROCESS_CONTEXT", "server")  # connections in the metadata database too
        s3 = store_client(args.conn_id)  # its type picks the store: aws, google_cloud_platform, wasb
    else:
        from blobgc.core.clients import s3_client_from_env

        s3 = s3_client_from_env()
    destination = Destination.parse(args.destination, source_bucket=args.bucket)
    key = report_of_bucket(
        s3,
        args.bucket,
        destination,
        file_format=args.format,
        configuration=args.configuration,
        rows_per_file=args.rows_per_file,
    )
    print(f"{destination.scheme}://{destination.bucket}/{key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

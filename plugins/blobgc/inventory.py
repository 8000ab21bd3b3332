"""Write an S3 Inventory report in AWS's documented format, for a store that makes none.

S3 writes inventory reports; MinIO, the local S3 server and most S3-compatible stores do not. This
writes one from a listing of the bucket (or, for benchmarks, from any rows of key, size and
LastModified), exactly as `blobgc.core.inventory_reports` reads AWS's: gzip CSV (quoted fields, URL-encoded
keys, `2024-05-01T12:34:56.000Z` dates) or Parquet data files under `.../<configuration>/data/`, a
`manifest.json` with each file's size and MD5 under `.../<configuration>/<YYYY-MM-DDTHH-MMZ>/`, and
`manifest.checksum` beside it.

    python -m blobgc.inventory BUCKET s3://INVENTORY-BUCKET/PREFIX [--format csv|parquet] [--configuration ID]
                               [--conn-id blobgc_s3]

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
from datetime import UTC, datetime
from pathlib import Path

from blobgc.core.inventory_reports import Destination

FIELDS = ("Bucket", "Key", "Size", "LastModifiedDate", "ETag", "StorageClass")
PARQUET_SCHEMA = (
    "message s3.inventory { required binary bucket (STRING); required binary key (STRING); "
    "optional int64 size; optional int64 last_modified_date (TIMESTAMP(MILLIS,true)); "
    "optional binary e_tag (STRING); optional binary storage_class (STRING);}"
)
ROWS_PER_FILE = 1_000_000


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
    """List `source_bucket` and write its report (see `write_report`); returns the manifest's key."""
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
            return write_report(
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
    parser.add_argument("destination", help="s3://<bucket>/<prefix> that Variable blobgc_inventory names for it")
    parser.add_argument("--format", choices=("csv", "parquet"), default="csv")
    parser.add_argument("--configuration", default="blobgc", help="the inventory configuration id (default blobgc)")
    parser.add_argument("--rows-per-file", type=int, default=ROWS_PER_FILE)
    parser.add_argument(
        "--conn-id",
        help="the Airflow connection of the store (e.g. blobgc_s3; default: the "
        "environment's BLOBGC_S3_ENDPOINT and AWS keys)",
    )
    args = parser.parse_args(argv)
    if args.conn_id:
        from blobgc.dag_kit.connections import s3_client

        os.environ.setdefault("_AIRFLOW_PROCESS_CONTEXT", "server")  # connections in the metadata database too
        s3 = s3_client(args.conn_id)
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
    print(f"s3://{destination.bucket}/{key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""S3 Inventory reports: find a bucket's newest, check it, and read it into an embedded DuckDB.

An inventory configuration on a source bucket writes, once a day (or week), a report below its
destination, in AWS's layout:

    <prefix>/<source bucket>/<configuration id>/<YYYY-MM-DDTHH-MMZ>/manifest.json
    <prefix>/<source bucket>/<configuration id>/<YYYY-MM-DDTHH-MMZ>/manifest.checksum
    <prefix>/<source bucket>/<configuration id>/data/<uuid>.csv.gz | .parquet

The manifest names the source bucket, the creation time (milliseconds), the format, the data files'
schema (`fileSchema`: comma-separated field names for CSV, a Parquet message schema for Parquet)
and each data file with its size and MD5. `manifest.checksum` holds the MD5 of `manifest.json`.

`find_report` picks, among the bucket's configurations whose schema lists Key, Size and
LastModifiedDate, the newest complete report (a folder without a manifest is one being written).
Everything is checked before anything is used: the manifest's checksum, its source bucket, its
format (CSV or Parquet; ORC is refused), its schema, and each data file's size and MD5 as it is
downloaded. A report that fails any check raises `InventoryError` and nothing is read from it.

Google Cloud Storage's Storage Insights reports (`blobgc.core.inventory_gcs`, destination `gs://bucket/path`)
and Azure Blob Inventory (`blobgc.core.inventory_azure`, destination `az://container`) are read into the same
checked `Report`, through the same `ObjectStore` calls, with the columns of their data files named in
`Report.columns`; `Engine.load_inventory` turns any of the three into the same table `inventory`, so the
anti-join after it is one for every store.

`Engine` is the embedded columnar database the anti-join runs in: DuckDB in a file of its own
under a scratch directory, its memory bounded by `memory_limit` and the rest spilled to disk. Its
statements are files beside the others (`blobgc/sql/inventory/`, loaded with `blobgc.core.queries.load`),
every value bound as a DuckDB parameter (`$name`); its settings are passed as the connection's configuration.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import re
import shutil
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from blobgc.core import queries
from blobgc.core.objects import ObjectStore, error_code, folder_url
from blobgc.core.settings import ConfigurationError

log = logging.getLogger(__name__)

REQUIRED_FIELDS = ("Key", "Size", "LastModifiedDate")
FORMATS = {"CSV": ".csv.gz", "Parquet": ".parquet"}
SUFFIXES = {"CSV": ".csv", "Parquet": ".parquet"}  # GCS's and Azure's data files, as they write them
# The CSV field names of the manifest and the Parquet columns they are written as.
PARQUET_COLUMNS = {
    "Bucket": "bucket",
    "Key": "key",
    "VersionId": "version_id",
    "IsLatest": "is_latest",
    "IsDeleteMarker": "is_delete_marker",
    "Size": "size",
    "LastModifiedDate": "last_modified_date",
    "ETag": "e_tag",
    "StorageClass": "storage_class",
    "IsMultipartUploaded": "is_multipart_uploaded",
    "ReplicationStatus": "replication_status",
    "EncryptionStatus": "encryption_status",
    "ObjectLockRetainUntilDate": "object_lock_retain_until_date",
    "ObjectLockMode": "object_lock_mode",
    "ObjectLockLegalHoldStatus": "object_lock_legal_hold_status",
    "IntelligentTieringAccessTier": "intelligent_tiering_access_tier",
    "BucketKeyStatus": "bucket_key_status",
    "ChecksumAlgorithm": "checksum_algorithm",
    "ObjectAccessControlList": "object_access_control_list",
    "ObjectOwner": "object_owner",
}
FIELD_OF_COLUMN = {column: name for name, column in PARQUET_COLUMNS.items()}
REPORT_FOLDER = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}Z")
# What a GCS or Azure report's columns hold, as `Engine.load_listing` names them: the key, its size and time, the
# bucket it lists (GCS), and the fields that tell a current base blob (Azure: versions, soft-deleted, snapshots,
# folders of a hierarchical namespace).
ROLES = ("key", "size", "modified", "bucket", "is_current", "deleted", "snapshot", "folder")
PARQUET_FIELD = re.compile(r"(?:required|optional|repeated)\s+\w+\s+(\w+)")
DOWNLOADS = 4  # data files fetched at once


class InventoryError(ConfigurationError):
    """No usable inventory report: missing, stale, or not what its manifest says. Nothing is read from it."""


@dataclass(frozen=True)
class Destination:
    """Where a source bucket's inventory reports are written: `s3://<bucket>/<prefix>` (S3 Inventory),
    `gs://<bucket>/<prefix>` (GCS Storage Insights) or `az://<container>/<prefix>` (Azure Blob Inventory)."""

    bucket: str
    prefix: str  # "" or ending in "/"
    scheme: str = "s3"  # s3 | gs | az: whose report format is written there

    @classmethod
    def parse(cls, text: str, *, source_bucket: str) -> Destination:
        parsed = folder_url(text)
        if parsed is None:
            raise InventoryError(
                f"the inventory destination of bucket {source_bucket} is {text!r}, not s3://<bucket>/<prefix> "
                "(S3 Inventory), gs://<bucket>/<prefix> (GCS Storage Insights) or az://<container>[/<prefix>] "
                "(Azure Blob Inventory)"
            )
        scheme, bucket, prefix = parsed
        return cls(bucket, prefix, scheme)

    def reports_of(self, source_bucket: str) -> str:
        """The folder holding one folder per configuration id of `source_bucket`."""
        return f"{self.prefix}{source_bucket}/"

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.prefix}"


def destinations(value: Any) -> dict[str, str]:
    """Variable blobgc_inventory: a JSON object of source bucket -> `s3://`, `gs://` or `az://<bucket>/<prefix>`."""
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InventoryError(
            "Variable blobgc_inventory must be a JSON object mapping each source bucket to its "
            'inventory destination, e.g. {"blobgc": "s3://blobgc-inventory/reports", '
            '"uploads": "gs://uploads-inventory/daily", "media": "az://inventory"}; '
            f"got {value!r}"
        )
    return value


@dataclass(frozen=True)
class DataFile:
    """A data file of a report: its key in the destination, and its size and MD5 where the manifest gives them."""

    key: str
    size: int | None
    md5: str | None


@dataclass(frozen=True)
class Report:
    """One checked manifest: which bucket it lists, when, in what format and schema, and its data files."""

    source_bucket: str
    destination_bucket: str
    configuration: str
    manifest_key: str
    created: datetime
    file_format: str  # CSV | Parquet
    fields: tuple[str, ...]  # CSV field names, in the data files' column order
    files: tuple[DataFile, ...]
    scheme: str = "s3"  # s3 | gs | az: whose format (S3 Inventory, GCS Storage Insights, Azure Blob Inventory)
    # gs and az: the fields holding each ROLES entry (key, size, modified, ...), read by `Engine.load_listing`
    columns: tuple[tuple[str, str], ...] = ()
    csv_header: bool = False  # gs and az: whether each CSV data file opens with a row of the field names
    csv_delimiter: str = ","
    records: int | None = None  # the rows the manifest says its data files hold: fewer read is refused
    name_prefix: str = ""  # az: "<container>/", which each Name of the source container starts with
    fix: str = "check that the inventory configuration still delivers"  # what to do when the report is refused

    @property
    def location(self) -> str:
        return f"{self.scheme}://{self.destination_bucket}/{self.manifest_key}"

    def age(self, now: datetime) -> timedelta:
        return now - self.created

    def check_age(self, now: datetime, max_hours: float) -> None:
        """Refuse a report older than `max_hours` at `now`: an old listing would call new objects missing and
        leave new orphans alone for days; the run fails rather than fall back to listing."""
        hours = self.age(now).total_seconds() / 3600
        if hours > max_hours:
            raise InventoryError(
                f"the newest inventory of bucket {self.source_bucket} ({self.location}) was taken "
                f"{self.created:%Y-%m-%d %H:%M} UTC, {hours:.1f} h before the run's reference time: older than "
                f"max_inventory_age_hours={max_hours:g}. Check that the inventory configuration "
                f"{self.configuration!r} still delivers ({self.fix}), or run with source=list."
            )


def schema_fields(file_format: str, file_schema: str, where: str) -> tuple[str, ...]:
    """The field names of a manifest's `fileSchema`, as CSV names (Key, Size, ...), in column order."""
    if file_format == "CSV":
        fields = tuple(f.strip() for f in file_schema.split(","))
    elif file_format == "Parquet":
        fields = tuple(FIELD_OF_COLUMN.get(c, c) for c in PARQUET_FIELD.findall(file_schema))
    else:
        raise InventoryError(
            f"{where}: fileFormat {file_format!r} is not supported; configure the inventory as CSV or Parquet"
        )
    if not fields or any(not f for f in fields) or len(set(fields)) != len(fields):
        raise InventoryError(f"{where}: fileSchema {file_schema!r} does not name each field once")
    return fields


def read_manifest(s3: ObjectStore, bucket: str, manifest_key: str, *, source_bucket: str, configuration: str) -> Report:
    """Read and check one manifest.json against its manifest.checksum and the source bucket."""
    where = f"s3://{bucket}/{manifest_key}"
    body = s3.get_object(Bucket=bucket, Key=manifest_key)["Body"].read()
    checksum_key = manifest_key.rsplit("/", 1)[0] + "/manifest.checksum"
    try:
        checksum = s3.get_object(Bucket=bucket, Key=checksum_key)["Body"].read().decode("ascii", "replace").strip()
    except ClientError as error:
        if error_code(error) in ("NoSuchKey", "404"):
            raise InventoryError(f"{where} has no manifest.checksum beside it: the report is incomplete") from error
        raise
    if hashlib.md5(body).hexdigest() != checksum.lower():
        raise InventoryError(
            f"{where} does not match its manifest.checksum (MD5 {hashlib.md5(body).hexdigest()}, "
            f"checksum file says {checksum[:64]!r}): the manifest is corrupt or was replaced"
        )
    try:
        manifest = json.loads(body)
        created = datetime.fromtimestamp(int(manifest["creationTimestamp"]) / 1000, UTC)
        file_format = manifest["fileFormat"]
        file_schema = manifest["fileSchema"]
        files = tuple(DataFile(f["key"], int(f["size"]), str(f["MD5checksum"]).lower()) for f in manifest["files"])
        listed = manifest["sourceBucket"]
    except (ValueError, KeyError, TypeError) as error:
        raise InventoryError(f"{where} is not an S3 Inventory manifest ({type(error).__name__}: {error})") from error
    if listed != source_bucket:
        raise InventoryError(f"{where} lists bucket {listed!r}, not {source_bucket!r}")
    fields = schema_fields(file_format, file_schema, where)
    return Report(source_bucket, bucket, configuration, manifest_key, created, file_format, fields, files)


def folders(s3: ObjectStore, bucket: str, prefix: str) -> list[str]:
    """The folder names (without the trailing /) directly below `prefix`."""
    found = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
        found += [p["Prefix"][len(prefix) :].rstrip("/") for p in page.get("CommonPrefixes") or []]
    return found


def newest_report(s3: ObjectStore, destination: Destination, source_bucket: str, configuration: str) -> Report | None:
    """The newest complete report of one configuration (a report folder without manifest.json is being written)."""
    base = f"{destination.reports_of(source_bucket)}{configuration}/"
    for folder in sorted(
        (f for f in folders(s3, destination.bucket, base) if REPORT_FOLDER.fullmatch(f)), reverse=True
    ):
        try:
            return read_manifest(
                s3,
                destination.bucket,
                f"{base}{folder}/manifest.json",
                source_bucket=source_bucket,
                configuration=configuration,
            )
        except ClientError as error:
            if error_code(error) not in ("NoSuchKey", "404"):
                raise
            log.info("inventory report %s%s/ has no manifest yet: skipped", base, folder)
    return None


def find_report(s3: ObjectStore, destination: Destination, source_bucket: str) -> Report:
    """The newest report, among the configurations whose schema lists Key, Size and LastModifiedDate."""
    base = destination.reports_of(source_bucket)
    configurations = folders(s3, destination.bucket, base)
    if not configurations:
        raise InventoryError(
            f"no S3 Inventory report of bucket {source_bucket} under {destination}{source_bucket}/: "
            "is an inventory configured for it, and has its first report been delivered (within "
            '48 h of configuring)? See docs/operations.md, "S3 Inventory".'
        )
    usable, lacking = [], []
    for configuration in configurations:
        report = newest_report(s3, destination, source_bucket, configuration)
        if report is None:
            lacking.append(f"{configuration} (no complete report)")
        elif missing := [f for f in REQUIRED_FIELDS if f not in report.fields]:
            lacking.append(f"{configuration} (lacks {', '.join(missing)})")
        else:
            usable.append(report)
    if not usable:
        raise InventoryError(
            f"no inventory configuration of bucket {source_bucket} under {destination} is usable: "
            f"{'; '.join(lacking)}. Reconcile needs the fields {', '.join(REQUIRED_FIELDS)}."
        )
    report = max(usable, key=lambda r: (r.created, r.manifest_key))
    log.info(
        "inventory of %s: %s, taken %s, %s, %d data files (%s)",
        source_bucket,
        report.location,
        report.created.isoformat(),
        report.file_format,
        len(report.files),
        f"ignored: {'; '.join(lacking)}" if lacking else "the only usable configuration",
    )
    return report


def stored_md5(response: dict[str, Any]) -> str | None:
    """The MD5 the store keeps of an object it answered (its ETag, when that is one), or None."""
    etag = str(response.get("ETag") or "").strip('"').lower()
    if response.get("ETagIsMD5") is False or not re.fullmatch(r"[0-9a-f]{32}", etag):
        return None  # a multipart upload's, a composite object's or a block list's ETag is no MD5 of the bytes
    return etag


def download(s3: ObjectStore, report: Report, directory: Path) -> list[Path]:
    """Fetch every data file into `directory`, checking each one's size and MD5 against the manifest.

    Where the manifest gives no MD5 of a data file (GCS and Azure reports), the bytes are checked against the MD5
    the store keeps of the object (its ETag, when that is one) and against the length it answered."""
    directory.mkdir(parents=True, exist_ok=True)
    scheme = report.scheme

    def fetch(numbered: tuple[int, DataFile]) -> Path:
        i, data = numbered
        path = directory / f"{i:06d}{FORMATS[report.file_format] if scheme == 's3' else SUFFIXES[report.file_format]}"
        digest, size = hashlib.md5(), 0
        where = f"{scheme}://{report.destination_bucket}/{data.key}"
        try:
            response = s3.get_object(Bucket=report.destination_bucket, Key=data.key)
        except ClientError as error:
            if error_code(error) in ("NoSuchKey", "404"):
                raise InventoryError(
                    f"data file {where}, listed by {report.location}, is missing: the report is incomplete or was "
                    f"partly deleted; {report.fix}"
                ) from error
            raise
        body = response["Body"]
        with path.open("wb") as out:
            for chunk in iter(lambda: body.read(1 << 20), b""):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
        expected = (
            data.size if data.size is not None else response.get("ContentLength"),
            data.md5 if data.md5 is not None else stored_md5(response),
        )
        if (expected[0] is not None and size != int(expected[0])) or (
            expected[1] is not None and digest.hexdigest() != expected[1]
        ):
            says = f"{report.location} says" if data.md5 is not None else f"{report.location} and the store say"
            raise InventoryError(
                f"data file {where} is {size} bytes with MD5 {digest.hexdigest()}; {says} "
                f"{expected[0]} bytes with MD5 {expected[1]}: it was cut short or replaced; {report.fix}"
            )
        return path

    with ThreadPoolExecutor(DOWNLOADS, thread_name_prefix="inventory") as pool:
        return list(pool.map(fetch, enumerate(report.files)))


# ------------------------------------------------------------------------------------------ the engine
# the two sides of the anti-join, each written into part files by `Engine.write_parts`, below `part_folder`
PART_SIDES = ("inventory", "accounted")
ROW_GROUP_ROWS = 122_880  # DuckDB's Parquet row group
# the units DuckDB writes a memory setting in ("953.6 MiB", "1.8 TiB", "16383.9 PiB" for no limit, "0 bytes")
SIZE_UNITS = {"BYTES": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15}
SIZE_UNITS |= {"KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "PIB": 2**50, "EIB": 2**60}


def _bytes(size: str) -> int | None:
    """DuckDB's memory setting ("1GB", "953.6 MiB", "1.8 TiB") in bytes; None if it is none of its sizes."""
    found = re.fullmatch(r"\s*([\d.]+)\s*([a-z]+)\s*", size, re.IGNORECASE)
    if found is None or found.group(2).upper() not in SIZE_UNITS:
        return None
    return int(float(found.group(1)) * SIZE_UNITS[found.group(2).upper()])


def part_folder(side: str, p: int) -> str:
    """Where part `p`'s files of `side` are, below the folder `Engine.write_parts` wrote."""
    return f"{side}/part={p}"


class Engine:
    """DuckDB in a scratch directory of its own: tables on disk, memory bounded, the rest spilled."""

    def __init__(self, directory: Path, *, memory_limit: str = "1GB", threads: int | None = None) -> None:
        import duckdb  # imported when used: DAG files parse without it

        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.duckdb = duckdb
        config: dict[str, str | bool | int | float | list[str]] = {
            "memory_limit": memory_limit,
            "temp_directory": str(directory / "spill"),
            "preserve_insertion_order": False,
        }
        if threads:
            config["threads"] = int(threads)
        self.db = duckdb.connect(str(directory / "reconcile.duckdb"), config=config)

    def close(self) -> None:
        self.db.close()

    def load_inventory(self, report: Report, paths: Sequence[Path]) -> int:
        """Table `inventory(key, size, modified_ms, h)` (h: the key's hash, which parts the anti-join) of the
        report's current objects: delete markers and noncurrent versions (a versioned inventory) left out, CSV
        keys URL-decoded. Returns its row count.

        The data files are registered as the view `inventory_files`; one statement per format reads them, told by
        parameters whether the report has the version fields (IsLatest, IsDeleteMarker). A GCS or Azure report is
        read by `load_listing` into the same table."""
        if report.scheme != "s3":
            return self.load_listing(report, paths)
        fields = report.fields
        files = [str(p) for p in paths]
        if report.file_format == "CSV":
            columns = {f: "VARCHAR" for f in fields}
            try:
                source = self.db.read_csv(
                    files,  # type: ignore[arg-type]  # DuckDB reads a list of files; its stubs name one path
                    header=False,
                    columns=columns,
                    compression="gzip",
                    sep=",",
                    quotechar='"',
                    escapechar='"',
                    auto_detect=False,
                    strict_mode=True,
                )
            except self.duckdb.Error as error:
                raise InventoryError(
                    f"{report.location}: its data files do not read as CSV with the fileSchema's "
                    f"{len(fields)} fields: {error}"
                ) from error
            statement = "inventory/create_inventory_from_csv"
        else:
            wanted = [PARQUET_COLUMNS.get(f, f) for f in fields]
            for path in files:
                names = [
                    r[0]
                    for r in self.db.execute(
                        queries.load("inventory/select_parquet_columns"), {"path": path}
                    ).fetchall()
                ]
                if missing := [c for c in wanted if c not in names]:
                    raise InventoryError(
                        f"{report.location}: a data file lacks the column(s) {', '.join(missing)} "
                        f"that the manifest's fileSchema names (it has {', '.join(names)})"
                    )
            source = self.db.read_parquet(files)
            statement = "inventory/create_inventory_from_parquet"
        self.db.register("inventory_files", source)
        try:
            self.db.execute(
                queries.load(statement),
                {"has_is_latest": "IsLatest" in fields, "has_is_delete_marker": "IsDeleteMarker" in fields},
            )
        except self.duckdb.Error as error:
            raise InventoryError(
                f"{report.location}: its data files do not match the manifest's fileSchema "
                f"({', '.join(fields)}): {error}"
            ) from error
        finally:
            self.db.unregister("inventory_files")
        bad = self.db.execute(queries.load("inventory/count_unreadable_rows")).fetchone() or (0, 0, 0)
        if any(bad):
            raise InventoryError(
                f"{report.location}: {bad[0]} keys that do not URL-decode, {bad[1]} sizes that are "
                f"not numbers and {bad[2]} LastModifiedDate values that are not timestamps: the data "
                f"files do not match the manifest's fileSchema ({', '.join(fields)})"
            )
        return self.count("inventory/count_inventory_keys")

    def load_listing(self, report: Report, paths: Sequence[Path]) -> int:
        """Table `inventory(key, size, modified_ms, h)` of a GCS or Azure report's current objects; returns its row
        count.

        The data files' columns are named by what they hold (`ROLES`, from `Report.columns`) into the view
        `inventory_files`, which one statement reads for either store and format: the rows of the source (Azure:
        under `<container>/`, cut off the key) that are current objects (no noncurrent version, soft-deleted blob,
        snapshot or folder), one row per key (Azure documents rare duplicates). Refused: data files without the
        manifest's fields, fewer rows than the manifest counts, a row without a key or of another bucket."""
        files = [str(p) for p in paths]
        roles = dict(report.columns)
        source = self.listing_csv(report, files, roles) if report.file_format == "CSV" else None
        if source is None:
            source = self.listing_parquet(report, files, roles)
        self.db.register("inventory_files", source)
        try:
            counted = self.db.execute(
                queries.load("inventory/count_listing_rows"), {"source_bucket": report.source_bucket}
            ).fetchall()  # every row fetched: the result is done before the view goes
            rows, keyless, elsewhere = (int(n) for n in counted[0])
            if report.records is not None and rows < report.records:
                raise InventoryError(
                    f"{report.location}: its data files hold {rows} rows, fewer than the {report.records} objects "
                    f"its manifest counts: a data file was cut short or replaced; {report.fix}"
                )
            if keyless or elsewhere:
                raise InventoryError(
                    f"{report.location}: {keyless} rows without an object name and {elsewhere} rows of another "
                    f"bucket than {report.source_bucket}: the data files are not this manifest's; {report.fix}"
                )
            self.db.execute(
                queries.load("inventory/create_inventory_from_listing"), {"name_prefix": report.name_prefix}
            )
        except self.duckdb.Error as error:
            raise InventoryError(
                f"{report.location}: its data files do not read as the manifest's {report.file_format} of the fields "
                f"{', '.join(report.fields)}: {error}"
            ) from error
        finally:
            self.db.unregister("inventory_files")
        bad = self.db.execute(queries.load("inventory/count_unreadable_rows")).fetchone() or (0, 0, 0)
        if any(bad):
            raise InventoryError(
                f"{report.location}: {bad[0]} keys that are empty, {bad[1]} sizes that are not numbers and {bad[2]} "
                f"modification times that are not timestamps: the data files do not match the manifest's fields "
                f"({', '.join(report.fields)})"
            )
        return self.count("inventory/count_inventory_keys")

    def listing_csv(self, report: Report, files: list[str], roles: dict[str, str]) -> Any:
        """A GCS or Azure report's CSV data files as a relation of the columns `ROLES` (text) and `modified_ms`,
        each file's header row (where the format writes one) checked against the manifest's fields first."""
        role_of = {field: role for role, field in roles.items()}
        columns = {role_of.get(field) or f"field_{i}": "VARCHAR" for i, field in enumerate(report.fields)}
        if report.csv_header:
            for path in files:
                with open(path, newline="", encoding="utf-8", errors="replace") as lines:
                    header = next(csv.reader(lines, delimiter=report.csv_delimiter), [])
                if [h.strip() for h in header] != list(report.fields):
                    raise InventoryError(
                        f"{report.location}: a data file's header row names {', '.join(header) or 'nothing'}, not "
                        f"the manifest's fields {', '.join(report.fields)}: the data files are not this manifest's"
                    )
        try:
            source = self.db.read_csv(
                files,  # type: ignore[arg-type]  # DuckDB reads a list of files; its stubs name one path
                header=report.csv_header,
                columns=columns,
                sep=report.csv_delimiter,
                quotechar='"',
                escapechar='"',
                auto_detect=False,
                strict_mode=True,
            )
        except self.duckdb.Error as error:
            raise InventoryError(
                f"{report.location}: its data files do not read as CSV with the manifest's {len(columns)} fields: "
                f"{error}"
            ) from error
        text = self.duckdb.sqltypes.VARCHAR
        return source.select(
            *(self.column(role if role in columns else None, text, role) for role in ROLES if role != "modified"),
            self.column("modified" if "modified" in columns else None, text, "modified_text"),
            self.column(None, self.duckdb.sqltypes.BIGINT, "modified_ms"),
        )

    def listing_parquet(self, report: Report, files: list[str], roles: dict[str, str]) -> Any:
        """A GCS or Azure report's Parquet data files as a relation of the columns `ROLES` (text) and `modified_ms`
        (a timestamp column's milliseconds, or an integer column's: Azure writes dates as `timestamp_millis`); each
        file checked first for the manifest's fields."""
        wanted = [f for f in roles.values() if f in report.fields]
        for path in files:
            names = [
                r[0]
                for r in self.db.execute(queries.load("inventory/select_parquet_columns"), {"path": path}).fetchall()
            ]
            if missing := [c for c in wanted if c not in names]:
                raise InventoryError(
                    f"{report.location}: a data file lacks the column(s) {', '.join(missing)} that the manifest's "
                    f"fields name (it has {', '.join(names)})"
                )
        source = self.db.read_parquet(files)
        types = {name: str(kind).upper() for name, kind in zip(source.columns, source.types, strict=True)}
        text, number = self.duckdb.sqltypes.VARCHAR, self.duckdb.sqltypes.BIGINT
        present = {role: field for role, field in roles.items() if field in types}
        modified = present.get("modified", "")
        kind = types.get(modified, "")
        if kind.startswith(("TIMESTAMP", "DATE")):
            stamp, millis = None, self.duckdb.FunctionExpression("epoch_ms", self.duckdb.ColumnExpression(modified))
        elif kind in ("BIGINT", "INTEGER", "UBIGINT", "HUGEINT", "UINTEGER"):
            stamp, millis = None, self.duckdb.ColumnExpression(modified).cast(number)
        else:  # text (or no such column: every row is then unreadable)
            stamp, millis = modified or None, self.duckdb.ConstantExpression(None).cast(number)
        return source.select(
            *(self.column(present.get(role), text, role) for role in ROLES if role != "modified"),
            self.column(stamp, text, "modified_text"),
            millis.alias("modified_ms"),
        )

    def column(self, name: str | None, kind: Any, alias: str) -> Any:
        """The expression `CAST(name AS kind) AS alias`, or a NULL of that type named alias when there is no column."""
        value = self.duckdb.ColumnExpression(name) if name else self.duckdb.ConstantExpression(None)
        return value.cast(kind).alias(alias)

    def create_accounted(self) -> None:
        """Table `accounted(key, required, h)`, empty: the keys the rows form (`load_accounted` fills it)."""
        self.db.execute(queries.load("inventory/create_accounted_keys"))

    def load_accounted(self, path: Path) -> None:
        """Append a headerless CSV file of (key, required), PostgreSQL `COPY ... (FORMAT csv)` output, to table
        `accounted(key, required, h)`."""
        self.db.execute(queries.load("inventory/insert_accounted_keys"), {"path": str(path)})

    def write_parts(self, directory: Path, parts: int) -> list[tuple[int, int]]:
        """Tables `inventory` and `accounted`, each written once into Parquet part files by the key's hash:
        `directory/inventory/part=P/` and `directory/accounted/part=P/`, P = h % parts. Returns each part's (report
        keys, keys the rows form): what its files must hold. A key's part is the same on both sides, so each part is
        anti-joined alone (`open_part`), its time linear in its size."""
        directory.mkdir(parents=True, exist_ok=True)
        self.db.execute(f"SET partitioned_write_flush_threshold = {self.flush_rows(parts)}")
        for table in PART_SIDES:
            self.db.execute(
                queries.load(f"inventory/copy_{table}_parts"), {"parts": parts, "path": str(directory / table)}
            )
        counted = self.db.execute(queries.load("inventory/count_keys_by_part"), {"parts": parts}).fetchall()
        by_part = {int(p): (int(i), int(a)) for p, i, a in counted}
        return [by_part.get(p, (0, 0)) for p in range(parts)]

    def settings(self) -> tuple[str, int]:
        """(DuckDB's memory limit as it says it, its threads)."""
        rows = self.db.execute("SELECT current_setting('memory_limit'), current_setting('threads')").fetchall()
        memory, threads = rows[0] if rows else ("1GB", 1)  # fetched to the end: DuckDB holds an unfinished result
        return str(memory), int(threads)

    def flush_rows(self, parts: int) -> int:
        """Rows a partitioned write holds per part (and thread) before it writes them: a Parquet row group (DuckDB's
        122,880), fewer when all parts' would not fit in a quarter of the memory limit. DuckDB's default, 524,288,
        held 20 parts' 2 GB against a 1 GB limit at 100M keys and spilled what it was about to write: the part files
        took 1,358 ns a key there, 773 at 10M; with this, 920 (docs/benchmarks.md, "Issue 34")."""
        memory, threads = self.settings()
        per_row = 100  # bytes a buffered row of a 50-100 character key takes, about
        held = max(1, parts) * max(1, int(threads)) * per_row
        limit = _bytes(str(memory))
        if limit is None:  # a size this does not read: DuckDB's own threshold holds no more than a row group more
            return ROW_GROUP_ROWS
        return max(4_096, min(ROW_GROUP_ROWS, limit // 4 // held))

    def open_part(self, inventory: Sequence[Path], accounted: Sequence[Path], expected: tuple[int, int]) -> None:
        """Views `inventory(key, size, modified_ms)` and `accounted(key, required)` over one part's Parquet files
        (`write_parts`; a part without keys has none), checked to hold the `expected` (report keys, formed keys), and
        table `differences` of the two, in one join: what the part's statements read."""
        for name, files in zip(PART_SIDES, (inventory, accounted), strict=True):
            if files:
                relation = self.db.read_parquet([str(f) for f in files], hive_partitioning=False)
                relation.create_view(name, replace=True)
            else:
                self.db.execute(queries.load(f"inventory/create_empty_{name}_part"))
        found = (self.count("inventory/count_inventory_keys"), self.count("inventory/count_accounted_keys"))
        if found != tuple(expected):
            raise InventoryError(
                f"a part's files hold {found[0]} report keys and {found[1]} formed keys, not the {expected[0]} and "
                f"{expected[1]} written: the run's scratch files were changed or partly deleted; run the "
                "reconcile again (its first task writes them anew)"
            )
        self.db.execute(queries.load("inventory/create_part_differences"))

    def query(self, statement: str, parameters: dict[str, Any] | None = None) -> Iterator[tuple[Any, ...]]:
        """Rows of the statement named `statement` (`blobgc/sql/inventory/`), fetched 10,000 at a time."""
        cursor = self.db.cursor()
        cursor.execute(queries.load(statement), parameters or {})
        while rows := cursor.fetchmany(10_000):
            yield from rows

    def count(self, statement: str, parameters: dict[str, Any] | None = None) -> int:
        """The one number the statement named `statement` (a count) returns."""
        row = self.db.execute(queries.load(statement), parameters or {}).fetchone()
        if row is None:
            raise LookupError(f"{statement} returned no row where a count returns one")
        return int(row[0])


@contextmanager
def engine(directory: Path, **settings: Any) -> Iterator[Engine]:
    """An `Engine` in `directory`, which is removed afterwards with everything spilled there."""
    made = Engine(directory, **settings)
    try:
        yield made
    finally:
        made.close()
        shutil.rmtree(directory, ignore_errors=True)

"""Google Cloud Storage inventory reports (Storage Insights): find a bucket's newest, check it, describe its files.

An inventory report configuration of a source bucket writes, daily or weekly, below its destination
(https://cloud.google.com/storage/docs/insights/inventory-reports; the report's resource is
https://cloud.google.com/storage/docs/json_api/v1/reportDetail):

    <destination path>/<config id>_<snapshot time>_<shard number>.csv | .parquet   (one shard per million objects)
    <destination path>/<config id>_<snapshot time>_manifest.json                    (written once every shard is)

The manifest holds `report_config` (the configuration: `object_metadata_report_options` with the
`metadata_fields` the shards' columns are, `storage_filters.bucket` the source bucket and
`storage_destination_options`; `csv_options` with `delimiter` and `header_required`, or `parquet_options`),
`snapshot_time` (when every object listed was captured), `shard_count`, `report_shards_file_names` (beside the
manifest) and `records_processed` (the objects listed). A destination is written `gs://<bucket>/<destination
path>`; several source buckets may share it, each configuration's reports named by its id.

`find_report` picks, among the configurations of the source bucket whose fields include name, size and updated,
the newest report whose manifest is there. GCS writes no checksum of a manifest or a shard, so the checks are
these: the manifest parses and names the source bucket; it lists `shard_count` shards; each shard is there and
its bytes match the MD5 and length the store keeps of it (`inventory_reports.download`); a CSV shard's header row
is the manifest's fields; the shards hold at least `records_processed` rows, each of the source bucket (when the
bucket field is reported). A report that fails any of them raises `InventoryError`; nothing is read from it.
The keys are object names as they are (GCS does not encode them).
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from blobgc.core.inventory_reports import DataFile, Destination, InventoryError, Report
from blobgc.core.objects import ObjectStore, error_code

log = logging.getLogger(__name__)

REQUIRED_FIELDS = ("name", "size", "updated")
# The metadata fields holding what the shared loader reads (`inventory_reports.ROLES`).
COLUMNS = (("key", "name"), ("size", "size"), ("modified", "updated"), ("bucket", "bucket"))
MANIFEST = re.compile(r"(?P<config>[^/_]+)_(?P<snapshot>[^/_]+)_manifest\.json")
FIX = "see the configuration's reports in the Google Cloud console (Storage Insights) or `gcloud storage insights"
FIX += " inventory-reports details list`"


def option(mapping: Any, name: str) -> Any:
    """`mapping[name]`, the manifest's snake_case key, or its camelCase spelling (the JSON API's); None if neither."""
    if not isinstance(mapping, dict):
        return None
    camel = re.sub(r"_([a-z])", lambda m: m[1].upper(), name)
    return mapping.get(name, mapping.get(camel))


def snapshot_time(text: Any, where: str) -> datetime:
    """The manifest's `snapshot_time` (RFC 3339, UTC), tz-aware."""
    match = re.fullmatch(r"(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})?", str(text))
    if not match:
        raise InventoryError(f"{where}: snapshot_time {text!r} is not an RFC 3339 time")
    fraction = (match[2] or "")[:6].ljust(6, "0")
    when = datetime.fromisoformat(f"{match[1]}.{fraction}{'+00:00' if match[3] in (None, 'Z') else match[3]}")
    return when.astimezone(UTC)


def parse_manifest(store: ObjectStore, bucket: str, key: str) -> Report:
    """Read one manifest into a `Report` of the bucket it names (not yet compared with the one reconciled)."""
    where = f"gs://{bucket}/{key}"
    body = store.get_object(Bucket=bucket, Key=key)["Body"].read()
    folder = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
    configuration = MANIFEST.fullmatch(key.rsplit("/", 1)[-1])
    try:
        manifest = json.loads(body)
        config = manifest["report_config"]
        options = option(config, "object_metadata_report_options")
        fields = tuple(str(f) for f in option(options, "metadata_fields"))
        listed = str(option(option(options, "storage_filters"), "bucket") or "")
        shards = [str(name) for name in manifest["report_shards_file_names"]]
        shard_count = int(manifest["shard_count"])
        records = int(manifest["records_processed"])
        taken = manifest["snapshot_time"]
        csv_options, parquet_options = option(config, "csv_options"), option(config, "parquet_options")
    except (ValueError, KeyError, TypeError) as error:
        raise InventoryError(
            f"{where} is not a GCS Storage Insights inventory manifest ({type(error).__name__}: {error})"
        ) from error
    if not listed:
        raise InventoryError(f"{where} names no source bucket (report_config's storage_filters.bucket)")
    if len(shards) != shard_count:
        raise InventoryError(
            f"{where} lists {len(shards)} shard files of its shard_count {shard_count}: the report is incomplete; {FIX}"
        )
    if parquet_options is not None and csv_options is None:
        file_format = "Parquet"
    elif csv_options is not None and parquet_options is None:
        file_format = "CSV"
    elif shards and all(s.endswith(".parquet") for s in shards):
        file_format = "Parquet"
    elif shards and all(s.endswith(".csv") for s in shards):
        file_format = "CSV"
    else:
        raise InventoryError(f"{where}: its report_config names neither csv_options nor parquet_options")
    if not fields or len(set(fields)) != len(fields):
        raise InventoryError(f"{where}: metadata_fields {list(fields)!r} does not name each field once")
    files = tuple(DataFile(shard_key(bucket, folder, name, where), None, None) for name in shards)
    header = option(csv_options, "header_required")
    return Report(
        listed,
        bucket,
        configuration["config"] if configuration else str(option(config, "name") or key),
        key,
        snapshot_time(taken, where),
        file_format,
        fields,
        files,
        scheme="gs",
        columns=COLUMNS,
        csv_header=bool(header) if header is not None else True,
        csv_delimiter=str(option(csv_options, "delimiter") or ","),
        records=records,
        fix=FIX,
    )


def shard_key(bucket: str, folder: str, name: str, where: str) -> str:
    """A shard's key: its name beside the manifest (`report_shards_file_names`), or a gs:// URL in this bucket."""
    if name.startswith("gs://"):
        if not name.startswith(f"gs://{bucket}/"):
            raise InventoryError(f"{where} lists a shard {name} outside its own bucket {bucket}")
        return name[len(f"gs://{bucket}/") :]
    return f"{folder}{name}"


def read_manifest(store: ObjectStore, bucket: str, key: str, *, source_bucket: str) -> Report:
    """Read and check one manifest against the source bucket."""
    report = parse_manifest(store, bucket, key)
    if report.source_bucket != source_bucket:
        raise InventoryError(
            f"gs://{bucket}/{key} lists bucket {report.source_bucket!r}, not {source_bucket!r}: Variable "
            "blobgc_inventory names the wrong destination, or the configuration's source bucket changed"
        )
    if missing := [f for f in REQUIRED_FIELDS if f not in report.fields]:
        raise InventoryError(
            f"gs://{bucket}/{key} lacks the metadata field(s) {', '.join(missing)}: add them to the inventory "
            "report configuration (reconcile needs name, size and updated)"
        )
    return report


def manifests(store: ObjectStore, destination: Destination) -> dict[str, list[str]]:
    """Each configuration id under the destination -> its manifests' keys, newest snapshot first."""
    found: dict[str, list[tuple[str, str]]] = {}
    for page in store.get_paginator("list_objects_v2").paginate(Bucket=destination.bucket, Prefix=destination.prefix):
        for item in page.get("Contents") or []:
            match = MANIFEST.fullmatch(item["Key"].rsplit("/", 1)[-1])
            if match:
                found.setdefault(match["config"], []).append((match["snapshot"], item["Key"]))
    return {config: [key for _, key in sorted(keys, reverse=True)] for config, keys in found.items()}


def find_report(store: ObjectStore, destination: Destination, source_bucket: str) -> Report:
    """The newest report of `source_bucket` under `destination`, among its configurations with name, size, updated."""
    configurations = manifests(store, destination)
    usable: list[Report] = []
    lacking: list[str] = []
    for configuration, keys in sorted(configurations.items()):
        report = parse_manifest(store, destination.bucket, keys[0])
        if report.source_bucket != source_bucket:
            lacking.append(f"{configuration} (lists bucket {report.source_bucket})")
        elif missing := [f for f in REQUIRED_FIELDS if f not in report.fields]:
            lacking.append(f"{configuration} (lacks {', '.join(missing)})")
        else:
            usable.append(report)
    if not usable:
        raise InventoryError(
            f"no usable GCS inventory report of bucket {source_bucket} under {destination}: "
            f"{'; '.join(lacking) or 'no manifest (<config id>_<snapshot time>_manifest.json) at all'}. Configure a "
            f"Storage Insights inventory report of bucket {source_bucket} with the metadata fields "
            f"{', '.join(REQUIRED_FIELDS)} and this destination, and wait for its first report "
            '(see docs/operations.md, "Inventory reports of Google Cloud Storage and Azure Blob Storage").'
        )
    report = max(usable, key=lambda r: (r.created, r.manifest_key))
    log.info(
        "GCS inventory of %s: %s, snapshot %s, %s, %d shards, %d objects%s",
        source_bucket,
        report.location,
        report.created.isoformat(),
        report.file_format,
        len(report.files),
        report.records or 0,
        f" (ignored: {'; '.join(lacking)})" if lacking else "",
    )
    return report


def read_at(store: ObjectStore, location: str, source_bucket: str) -> Report:
    """The report whose manifest is at `location` (`gs://bucket/key`, from `find_report`), checked again."""
    match = re.fullmatch(r"gs://([^/]+)/(.+)", location)
    if not match:
        raise InventoryError(f"{location!r} is not the gs:// location of a GCS inventory manifest")
    try:
        return read_manifest(store, match[1], match[2], source_bucket=source_bucket)
    except ClientError as error:
        if error_code(error) in ("NoSuchKey", "404"):
            raise InventoryError(f"the GCS inventory manifest {location} is gone; {FIX}") from error
        raise

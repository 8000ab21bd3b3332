"""Azure Blob Inventory reports: find a container's newest, check it, and describe its files for the shared loader.

An inventory policy rule of a storage account writes, daily or weekly, into the rule's destination container
(https://learn.microsoft.com/azure/storage/blobs/blob-inventory, "Inventory output"):

    <YYYY>/<MM>/<DD>/<HH-MM-SS>/<rule>/<rule>-manifest.json      (created when the run starts, status Pending)
    <YYYY>/<MM>/<DD>/<HH-MM-SS>/<rule>/<rule>-manifest.checksum  (the MD5 of the manifest: written last, when done)
    <YYYY>/<MM>/<DD>/<HH-MM-SS>/<rule>/<data files>.csv | .parquet

The folder's time is when the run started. The manifest holds `destinationContainer`, `endpoint` (the account),
`files` ([{blob, size}]: each data file's path in the destination container and its bytes; no checksum of a data
file is documented), `inventoryStartTime`, `inventoryCompletionTime`, `ruleDefinition` (`filters` with
`prefixMatch`, `excludePrefix`, `includeBlobVersions`, `includeSnapshots`, `includeDeleted`; `format` csv or
parquet; `objectType` blob or container; `schemaFields`), `ruleName`, `status` (Pending until the run ends, then
Succeeded, PartiallySucceeded or Failed), `summary` ({objectCount, totalObjectSize}) and `version`. A CSV file's
first row is the schema row; Parquet dates are `timestamp_millis`. Each `Name` is `<container>/<blob name>`.
A destination is written `az://<destination container>` (a `/<prefix>` after it, if the reports were moved under
one). The source is a container of the same account (inventory writes to the account it lists).

`find_report` picks, among the rules whose newest complete run (its checksum file written) lists the whole source
container with Name, Content-Length and Last-Modified, the newest one. Checked before use: the manifest's MD5
against the checksum file (hex or base64), status Succeeded, the destination container, a blob inventory covering
the whole container (prefixMatch, excludePrefix), the fields, each data file's size (and the MD5 the store keeps of
it), and at least `summary.objectCount` rows read. Rows of other containers are left out; noncurrent versions,
soft-deleted blobs, snapshots and folders (hierarchical namespace) are not objects here. A report that fails a
check raises `InventoryError`; nothing is read from it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from blobgc.core.inventory_reports import DataFile, Destination, InventoryError, Report
from blobgc.core.objects import ObjectStore, error_code

log = logging.getLogger(__name__)

REQUIRED_FIELDS = ("Name", "Content-Length", "Last-Modified")
# The schema fields holding what the shared loader reads (`inventory_reports.ROLES`).
COLUMNS = (
    ("key", "Name"),
    ("size", "Content-Length"),
    ("modified", "Last-Modified"),
    ("is_current", "IsCurrentVersion"),
    ("deleted", "Deleted"),
    ("snapshot", "Snapshot"),
    ("folder", "hdi_isfolder"),
)
RUN = re.compile(
    r"(?P<run>\d{4}/\d{2}/\d{2}/\d{2}-\d{2}-\d{2})/(?P<rule>[^/]+)/(?P=rule)-manifest\.(?P<kind>json|checksum)"
)
FIX = "see the rule's runs under Blob inventory in the Azure portal (or the BlobInventoryPolicyCompleted event)"
# The filters whose fields must be in the schema to tell a current base blob (the docs make them required there).
TELLING = (("includeBlobVersions", "IsCurrentVersion"), ("includeSnapshots", "Snapshot"), ("includeDeleted", "Deleted"))


class OtherSource(InventoryError):
    """A report of other blobs than the source container's (another container, part of it, or containers)."""


def utc_time(text: Any, where: str, name: str) -> datetime:
    """An ISO 8601 time of the manifest (e.g. `2021-05-26T13:25:36Z`), tz-aware."""
    match = re.fullmatch(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})?", str(text))
    if not match:
        raise InventoryError(f"{where}: {name} {text!r} is not an ISO 8601 time")
    fraction = (match[2] or "")[:6].ljust(6, "0")
    return datetime.fromisoformat(
        f"{match[1]}.{fraction}{'+00:00' if match[3] in (None, 'Z') else match[3]}"
    ).astimezone(UTC)


def matches_checksum(body: bytes, checksum: str) -> bool:
    """Whether `checksum` (the checksum file's text: the MD5 in hex, or base64 as Azure's Content-MD5) is body's."""
    digest = hashlib.md5(body).digest()
    text = checksum.strip().strip('"')
    if text.lower() == digest.hex():
        return True
    try:
        return base64.b64decode(text, validate=True) == digest
    except ValueError:
        return False


def covers(container: str, filters: Any) -> str | None:
    """Why a blob rule with these filters leaves part of `container` out, or None when it lists all of it."""
    prefixes = [str(p) for p in (filters or {}).get("prefixMatch") or [] if str(p)]
    if prefixes and not any(p.rstrip("/") == container or ("/" not in p and container.startswith(p)) for p in prefixes):
        return f"its prefixMatch {prefixes} does not cover all of container {container}"
    for p in (filters or {}).get("excludePrefix") or []:
        if str(p) and (
            str(p).startswith(f"{container}/") or str(p).rstrip("/") == container or container.startswith(str(p))
        ):
            return f"its excludePrefix {p!r} leaves part of container {container} out"
    return None


def read_manifest(store: ObjectStore, container: str, key: str, *, source_container: str) -> Report:
    """Read and check one `<rule>-manifest.json` (its checksum file, status, destination, source and fields)."""
    where = f"az://{container}/{key}"
    body = store.get_object(Bucket=container, Key=key)["Body"].read()
    checksum_key = key[: -len(".json")] + ".checksum"
    try:
        checksum = store.get_object(Bucket=container, Key=checksum_key)["Body"].read().decode("ascii", "replace")
    except ClientError as error:
        if error_code(error) in ("NoSuchKey", "404"):
            raise InventoryError(
                f"{where} has no {checksum_key.rsplit('/', 1)[-1]} beside it: the inventory run has not completed; "
                f"{FIX}"
            ) from error
        raise
    if not matches_checksum(body, checksum):
        raise InventoryError(
            f"{where} does not match its manifest checksum (MD5 {hashlib.md5(body).hexdigest()}, checksum file says "
            f"{checksum.strip()[:64]!r}): the manifest is corrupt or was replaced; {FIX}"
        )
    try:
        manifest = json.loads(body)
        rule = manifest["ruleDefinition"]
        fields = tuple(str(f) for f in rule["schemaFields"])
        files = tuple(DataFile(str(f["blob"]), int(f["size"]), None) for f in manifest["files"])
        status = str(manifest["status"])
        started = utc_time(manifest["inventoryStartTime"], where, "inventoryStartTime")
        destination = str(manifest["destinationContainer"])
        file_format = {"csv": "CSV", "parquet": "Parquet"}.get(str(rule["format"]).lower(), str(rule["format"]))
        object_type = str(rule.get("objectType", "blob")).lower()
        summary = manifest.get("summary") or {}
        records = int(summary["objectCount"]) if "objectCount" in summary else None
        name = str(manifest.get("ruleName") or key.rsplit("/", 2)[-2])
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise InventoryError(
            f"{where} is not an Azure Blob Inventory manifest ({type(error).__name__}: {error})"
        ) from error
    if object_type != "blob":
        raise OtherSource(f"{where} is an inventory of containers, not of blobs: configure the rule for blobs")
    if why := covers(source_container, rule.get("filters")):
        raise OtherSource(
            f"{where} does not list all of container {source_container}: {why}. Configure a rule of blobs whose "
            f"prefixMatch is {source_container!r} (or empty) and that excludes nothing of it"
        )
    if destination != container:
        raise InventoryError(f"{where} names destination container {destination!r}, not {container!r}: it was copied")
    if status != "Succeeded":
        raise InventoryError(
            f"{where}: the inventory run's status is {status!r}, not 'Succeeded': its data files may be incomplete. "
            f"Wait for the rule's next successful run; {FIX}"
        )
    if file_format not in ("CSV", "Parquet"):
        raise InventoryError(f"{where}: format {file_format!r} is not supported; configure the rule as csv or parquet")
    if missing := [f for f in REQUIRED_FIELDS if f not in fields] + [
        field for flag, field in TELLING if (rule.get("filters") or {}).get(flag) and field not in fields
    ]:
        raise InventoryError(
            f"{where} lacks the schema field(s) {', '.join(missing)}: add them to the rule's schemaFields "
            f"(reconcile needs {', '.join(REQUIRED_FIELDS)})"
        )
    if len(set(fields)) != len(fields):
        raise InventoryError(f"{where}: schemaFields {list(fields)!r} does not name each field once")
    return Report(
        source_container,
        container,
        name,
        key,
        started,
        file_format,
        fields,
        files,
        scheme="az",
        columns=COLUMNS,
        csv_header=True,
        records=records,
        name_prefix=f"{source_container}/",
        fix=FIX,
    )


def runs(store: ObjectStore, destination: Destination) -> dict[str, list[tuple[str, bool]]]:
    """Each rule under the destination -> its runs (folder `<prefix>YYYY/MM/DD/HH-MM-SS/`, and whether its checksum
    file is written, i.e. the run is complete), newest first."""
    found: dict[tuple[str, str], set[str]] = {}
    for page in store.get_paginator("list_objects_v2").paginate(Bucket=destination.bucket, Prefix=destination.prefix):
        for item in page.get("Contents") or []:
            match = RUN.fullmatch(item["Key"][len(destination.prefix) :])
            if match:
                found.setdefault((match["rule"], match["run"]), set()).add(match["kind"])
    rules: dict[str, list[tuple[str, bool]]] = {}
    for (rule, run), kinds in sorted(found.items(), key=lambda item: item[0][1], reverse=True):
        if "json" in kinds:
            rules.setdefault(rule, []).append((f"{destination.prefix}{run}/", "checksum" in kinds))
    return rules


def newest_complete(rule: str, folders: Sequence[tuple[str, bool]]) -> str | None:
    """The manifest key of the rule's newest run whose checksum file is written (later runs are still going)."""
    for folder, complete in folders:
        if complete:
            return f"{folder}{rule}/{rule}-manifest.json"
        log.info("inventory run %s%s/ has no checksum file yet (still running): skipped", folder, rule)
    return None


def find_report(store: ObjectStore, destination: Destination, source_container: str) -> Report:
    """The newest report listing all of `source_container`, among the rules writing into `destination`."""
    usable: list[Report] = []
    lacking: list[str] = []
    for rule, folders in sorted(runs(store, destination).items()):
        key = newest_complete(rule, folders)
        if key is None:
            lacking.append(f"{rule} (no completed run)")
            continue
        try:  # a manifest of this container that fails a check fails the run, as for S3
            usable.append(read_manifest(store, destination.bucket, key, source_container=source_container))
        except OtherSource as error:
            lacking.append(f"{rule} ({str(error).split(': ', 1)[1].split('. ', 1)[0]})")
    if not usable:
        raise InventoryError(
            f"no usable Azure Blob Inventory report of container {source_container} under {destination}: "
            f"{'; '.join(lacking) or 'no <rule>-manifest.json at all'}. Add a blob inventory rule whose destination "
            f"is this container, whose prefixMatch covers {source_container} and whose schemaFields include "
            f"{', '.join(REQUIRED_FIELDS)}, and wait for its first run (up to a day or two)."
        )
    report = max(usable, key=lambda r: (r.created, r.manifest_key))
    log.info(
        "Azure inventory of %s: %s, started %s, %s, %d data files, %s objects%s",
        source_container,
        report.location,
        report.created.isoformat(),
        report.file_format,
        len(report.files),
        report.records,
        f" (ignored: {'; '.join(lacking)})" if lacking else "",
    )
    return report


def read_at(store: ObjectStore, location: str, source_container: str) -> Report:
    """The report whose manifest is at `location` (`az://container/key`, from `find_report`), checked again."""
    match = re.fullmatch(r"az://([^/]+)/(.+-manifest\.json)", location)
    if not match:
        raise InventoryError(f"{location!r} is not the az:// location of an Azure Blob Inventory manifest")
    try:
        return read_manifest(store, match[1], match[2], source_container=source_container)
    except ClientError as error:
        if error_code(error) in ("NoSuchKey", "404"):
            raise InventoryError(f"the Azure inventory manifest {location} is gone; {FIX}") from error
        raise

"""Quarantine: deleted objects wait, copied aside in their own bucket, for N days before they are gone, so that any
run can be undone on any bucket within the window.

With N > 0 days for an owed object's source or bucket (`QuarantinePolicy`: a collection's `quarantine_days`, Variable
`blobgc_quarantine` by kind or bucket), the drain does not just delete it (`blobgc.core.outbox`):

1. it copies the object server-side to `{prefix}{dag_id}/{run_id}/{key}` (`quarantine_key`; prefix
   `.blobgc-quarantine/`, or environment variable `BLOBGC_QUARANTINE_PREFIX`), where `run_id` is the run whose
   deletion owed it, so that "undo this run" finds it;
2. it verifies the copy (`blobgc.core.objects.copy_verified`: size and ETag, multipart copy over 5 GiB);
3. it deletes the original, and records both keys, the size and the expiry in `blobgc.quarantine` in the
   transaction that settles the owed key.

A crash between the delete and the commit leaves the key owed and the original gone: the next drain finds the copy
(`held_copies`) and records it then, so no copy is ever left unrecorded by blobgc.

The DAG's `purge_quarantine` task (`purge_quarantine`) deletes each copy once it is more than N days old by its own
LastModified, and only then counts its bytes as reclaimed (on an unversioned bucket; on a versioned one, every
version of the copy is deleted, and the original's bytes stay noncurrent until the bucket's lifecycle expires them).
A lifecycle rule expiring the prefix after a few more days than the longest window is a backstop, not relied upon: a
copy it expired is recorded as purged by the next purge. Undo copies an object back (`blobgc.collectors.restore`).

Reconcile and the media DAGs never list the prefix as orphans or unknown keys (`in_quarantine`).
"""

from __future__ import annotations

import json
import logging
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from botocore.exceptions import BotoCoreError, ClientError

from blobgc.core import queries, registry
from blobgc.core.collections import collection_of_source
from blobgc.core.objects import (
    MAX_KEYS_PER_CALL,
    NOT_FOUND_CODES,
    CopiedObject,
    ObjectStore,
    StoreUnknown,
    bucket_is_versioned,
    chunked,
    copy_verified,
    error_code,
    is_transient,
    object_stats,
    unquoted,
)
from blobgc.core.results import TaskResult
from blobgc.core.runs import RunRef, add_collection_counts, add_counts
from blobgc.core.settings import ConfigurationError
from blobgc.core.sizes import human_bytes

log = logging.getLogger(__name__)

DEFAULT_PREFIX = ".blobgc-quarantine/"
QUARANTINE_PREFIX = os.environ.get("BLOBGC_QUARANTINE_PREFIX") or DEFAULT_PREFIX
COPY_CONCURRENCY = 8
VARIABLE = "blobgc_quarantine"


def quarantine_key(dag_id: str, run_id: str, key: str) -> str:
    """Where an object deleted by `dag_id` run `run_id` waits in its own bucket."""
    return f"{QUARANTINE_PREFIX}{dag_id}/{run_id}/{key}"


def in_quarantine(key: str) -> bool:
    """Whether `key` is a quarantine copy: never an orphan, never an unknown key."""
    return key.startswith(QUARANTINE_PREFIX)


def parse_days(text: str | None, *, origin: str = f"Variable {VARIABLE}") -> dict[str, int]:
    """`{"pastes": 7, "my-bucket": 30}` (kind or bucket -> days): checked, or a ConfigurationError naming the entry."""
    if not text or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ConfigurationError(f"{origin} is not JSON ({error}): give an object of kind or bucket -> days") from error
    if not isinstance(value, dict):
        raise ConfigurationError(f"{origin} must be a JSON object of kind or bucket -> days, not {text!r}")
    days: dict[str, int] = {}
    for name, n in value.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigurationError(f"{origin}: {name!r} must be a whole number of days, 0 or more, not {n!r}")
        days[str(name)] = n
    return days


@dataclass(frozen=True)
class QuarantinePolicy:
    """How many days an owed object of a source, in a bucket, waits in quarantine: the longest that applies of its
    collection's `quarantine_days`, its kind's and its bucket's entry in Variable `blobgc_quarantine` (0: none)."""

    by_name: Mapping[str, int] = field(default_factory=dict)  # kind or bucket -> days
    by_collection: Mapping[str, int] = field(default_factory=dict)  # collection -> days
    collections_unknown: str | None = None  # why the collections file could not be read: their days are unknown

    def days(self, source: str, bucket: str) -> int:
        found = [self.by_name.get(bucket, 0)]
        if (kind := registry.kind_of_source(source)) is not None:
            found.append(self.by_name.get(kind, 0))
        if (collection := collection_of_source(source)) is not None:
            if self.collections_unknown is not None and kind is None:
                raise QuarantineUnknown(
                    f"collection {collection!r}: its quarantine_days are unknown ({self.collections_unknown}); its "
                    "owed objects stay owed until the collections file loads"
                )
            found.append(self.by_collection.get(collection, 0))
        return max(found)


class QuarantineUnknown(ConfigurationError):
    """How long a source's objects wait in quarantine cannot be known now: they are not deleted."""


NO_QUARANTINE = QuarantinePolicy()


@dataclass(frozen=True)
class Quarantined:
    """An owed object now held in quarantine: its copy, and how long it waits."""

    key: str
    copy: CopiedObject
    days: int


def move_into_quarantine(
    s3: ObjectStore, bucket: str, items: Sequence[tuple[str, str, int | None]], days: int
) -> tuple[dict[str, Quarantined], dict[str, tuple[str, bool]], list[str]]:
    """Copy each (key, quarantine key, size) aside and verify the copy; the originals are not touched here.

    Returns (the keys copied and verified, {key: (error, permanent)} for those that stay owed, the keys whose object
    is not there: for these the caller looks for a copy an earlier drain made, `held_copies`). Failures are per key,
    never raised."""

    def one(item: tuple[str, str, int | None]) -> tuple[str, Quarantined | tuple[str, bool] | None]:
        key, target, size = item
        try:
            return key, Quarantined(key, copy_verified(s3, bucket, key, target, size=size), days)
        except (ClientError, BotoCoreError) as error:
            if isinstance(error, ClientError) and error_code(error) in NOT_FOUND_CODES:
                return key, None
            return key, (f"quarantine copy failed: {error_code(error)}: {error}"[:500], not is_transient(error))
        except RuntimeError as error:  # CopyNotVerified: the copy is not what was copied; the original stays
            return key, (f"quarantine copy not verified: {error}"[:500], False)

    copied: dict[str, Quarantined] = {}
    failed: dict[str, tuple[str, bool]] = {}
    missing: list[str] = []
    with ThreadPoolExecutor(max(1, min(COPY_CONCURRENCY, len(items)))) as pool:
        for key, outcome in pool.map(one, items):
            if isinstance(outcome, Quarantined):
                copied[key] = outcome
            elif outcome is None:
                missing.append(key)
            else:
                failed[key] = outcome
    if failed:
        log.warning(
            "%d objects of %s could not be moved into quarantine and stay owed: %s",
            len(failed),
            bucket,
            next(iter(failed.values()))[0],
        )
    return copied, failed, missing


def held_copies(
    conn: psycopg.Connection, s3: ObjectStore, bucket: str, targets: Mapping[str, str], days: int
) -> dict[str, Quarantined]:
    """Of keys found absent, those whose quarantine copy exists and is recorded nowhere (an earlier drain moved them
    and failed before it recorded so): {key: Quarantined}, to be recorded now. A copy already recorded (another log
    row owed the same key) is not counted again."""
    if not targets:
        return {}
    recorded = {
        r[0]
        for r in conn.execute(
            queries.load("quarantine/select_recorded_copies"), {"bucket": bucket, "targets": list(targets.values())}
        )
    }
    targets = {k: t for k, t in targets.items() if t not in recorded}
    stats = object_stats(s3, bucket, targets.values())
    return {
        key: Quarantined(key, CopiedObject(target, stats[target].size, None, None, 0), days)
        for key, target in targets.items()
        if target in stats
    }


def changed_since_copied(s3: ObjectStore, bucket: str, held: Mapping[str, Quarantined]) -> dict[str, str]:
    """Of objects just copied into quarantine, those written again since their copy's source was read: {key: why}.
    Asked (HEAD, ETag) just before the originals are deleted, so an object written during the copies is never
    deleted with an older copy as its only trace. One gone meanwhile is not changed: its copy is what it was."""

    def one(item: tuple[str, Quarantined]) -> tuple[str, str | None]:
        key, moved = item
        try:
            etag = unquoted(s3.head_object(Bucket=bucket, Key=key).get("ETag"))
        except ClientError as error:
            if error_code(error) in NOT_FOUND_CODES:
                return key, None
            return key, f"could not check it again before deleting it: {error_code(error)}"
        if moved.copy.source_etag and etag != moved.copy.source_etag:
            return key, "written again while it was copied into quarantine: copied again on the next drain"
        return key, None

    with ThreadPoolExecutor(max(1, min(COPY_CONCURRENCY, len(held)))) as pool:
        return {key: why for key, why in pool.map(one, held.items()) if why is not None}


def record_quarantined(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    log_id: int,
    owner_run_id: str,
    source: str,
    bucket: str,
    held: Sequence[Quarantined],
) -> None:
    """Record objects moved into quarantine; call in the transaction that settles their owed keys."""
    if not held:
        return
    conn.execute(
        queries.load("quarantine/insert_quarantined"),
        {
            "dag_id": run.dag_id,
            "run_id": owner_run_id,
            "log_id": log_id,
            "source": source,
            "bucket": bucket,
            "keys": [h.key for h in held],
            "targets": [h.copy.key for h in held],
            "sizes": [h.copy.size for h in held],
            "etags": [h.copy.etag for h in held],
            "days": [h.days for h in held],
        },
    )


@dataclass
class QuarantinePurge(TaskResult):
    """What a purge_quarantine pass did (on a dry run: would do)."""

    purged: int = 0
    bytes_reclaimed: int = 0
    bytes_purged: int = 0  # copies deleted, whether or not their bytes were reclaimed (versioned bucket: not)
    gone: int = 0  # copies already gone (a lifecycle rule expired them): recorded as purged
    held: int = 0  # copies still inside their window
    next_due: datetime | None = None


def purge_quarantine(conn: psycopg.Connection, s3: ObjectStore, run: RunRef) -> QuarantinePurge:
    """Delete the quarantine copies of `run.dag_id` more than their N days old by their own LastModified.

    Measured from the run's reference time (never past the present). Each bucket's due copies are claimed (rows
    locked, so an undo of the same objects waits), deleted, marked purged and counted in one transaction: bytes
    reclaimed only on an unversioned bucket (on a versioned one, every version of the copy is deleted, and the
    original's bytes remain a noncurrent version). A failed deletion keeps its row held: the next purge retries it.
    """
    result = QuarantinePurge()
    if run.reference_time is None:
        raise ValueError("purge_quarantine needs the run's reference time (ensure_run)")
    buckets = [r[0] for r in conn.execute(queries.load("quarantine/select_held_buckets"), {"dag_id": run.dag_id})]
    for bucket in buckets:
        try:
            with conn.transaction():
                rows = conn.execute(
                    queries.load("quarantine/claim_held_copies"), {"dag_id": run.dag_id, "bucket": bucket}
                ).fetchall()
                if not rows:
                    continue
                purge_bucket(conn, s3, run, bucket, rows, result)
        except StoreUnknown as unknown:  # its copies stay held (the transaction rolled back) until it is known
            log.warning("quarantine copies of %s in %s stay held: %s", run.dag_id, bucket, unknown)
    log.info(
        "%s %d quarantine copies of %s (%s reclaimed); %d were already gone; %d still inside their window%s",
        "would purge" if run.dry_run else "purged",
        result.purged,
        run.dag_id,
        human_bytes(result.bytes_reclaimed),
        result.gone,
        result.held,
        f" (the next is due {result.next_due.isoformat()})" if result.next_due else "",
    )
    return result


def purge_bucket(
    conn: psycopg.Connection,
    s3: ObjectStore,
    run: RunRef,
    bucket: str,
    rows: list[tuple[Any, ...]],
    result: QuarantinePurge,
) -> None:
    """Purge one bucket's claimed quarantine rows (id, quarantine key, size, days, source, restored) that are due.

    A copy an undo brought back to its key is deleted when due too, but its bytes were never reclaimed: the object
    is stored again under its own key."""
    assert run.reference_time is not None
    stats = object_stats(s3, bucket, [target for _, target, *_ in rows])
    due: list[tuple[int, str, int, str]] = []
    gone: list[tuple[int, str, int, str]] = []
    restored = {row_id for row_id, *_, was_restored in rows if was_restored}
    for row_id, target, size, days, source, _restored in rows:
        stat = stats.get(target)
        if stat is None:
            gone.append((row_id, target, size or 0, source))
            continue
        expiry = stat.modified + timedelta(days=days)
        if expiry <= run.reference_time:
            due.append((row_id, target, stat.size, source))
        elif row_id not in restored:
            result.held += 1
            result.next_due = expiry if result.next_due is None else min(result.next_due, expiry)
    if run.dry_run:
        result.purged += len(due)
        result.bytes_purged += sum(size for _, _, size, _ in due)
        return
    versioned = bucket_is_versioned(s3, bucket)
    # on a versioned bucket a copy no longer current (a lifecycle rule, a person) may still hold noncurrent versions
    targets = [target for _, target, _, _ in due] + ([target for _, target, _, _ in gone] if versioned else [])
    failed = delete_copies(s3, bucket, targets, versioned=versioned)
    done = [d for d in due + gone if d[1] not in failed]
    if failed:
        log.warning(
            "%d quarantine copies in %s could not be purged and stay held: %s",
            len(failed),
            bucket,
            next(iter(failed.values())),
        )
    if not done:
        return
    conn.execute(queries.load("quarantine/mark_purged"), {"ids": [d[0] for d in done], "run_id": run.run_id})
    reclaimed_by: dict[str | None, int] = defaultdict(int)
    for row_id, _, size, source in done:
        reclaimed_by[collection_of_source(source)] += 0 if versioned or row_id in restored else size
    reclaimed = sum(reclaimed_by.values())
    add_counts(conn, run, bytes_=reclaimed)
    for collection, n in reclaimed_by.items():
        if collection is not None and n:
            add_collection_counts(conn, run, collection, bytes_=n)
    result.purged += sum(d[1] not in failed for d in due)
    result.gone += sum(d[1] not in failed for d in gone)
    result.bytes_purged += sum(size for _, _, size, _ in done)
    result.bytes_reclaimed += reclaimed
    if versioned:
        log.warning(
            "bucket %s is versioned: the %d purged quarantine copies are gone with every version, but the originals' "
            "bytes stay stored as noncurrent versions until a lifecycle rule expires them",
            bucket,
            len(done),
        )


def delete_copies(s3: ObjectStore, bucket: str, targets: list[str], *, versioned: bool) -> dict[str, str]:
    """Delete quarantine copies for good (on a versioned bucket, every version and delete marker of each); returns
    {key: error} for those the store refused."""
    if not targets:
        return {}
    objects: list[dict[str, str]] = []
    if versioned:
        wanted = set(targets)
        prefix = os.path.commonprefix(targets)
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
            for entry in page.get("Versions", []) + page.get("DeleteMarkers", []):
                if entry["Key"] in wanted:
                    objects.append({"Key": entry["Key"], "VersionId": entry["VersionId"]})
    else:
        objects = [{"Key": target} for target in targets]
    failed: dict[str, str] = {}
    for chunk in chunked(objects, MAX_KEYS_PER_CALL):
        response = s3.delete_objects(Bucket=bucket, Delete={"Objects": chunk, "Quiet": True})
        for error in response.get("Errors", []):
            failed[error.get("Key", "")] = f"{error.get('Code')}: {error.get('Message', '')}".strip()
    return failed

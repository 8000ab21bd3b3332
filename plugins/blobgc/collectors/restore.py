"""Undo one run's deletions: bring back the objects it deleted, put back the rows the log holds.

An object comes back from one of two places:
- **quarantine**, on any bucket, within the window (`blobgc.core.quarantine`): its copy is copied back to its key
  and verified (size and ETag, then HEAD), and the copy's record marks it restored (the purge deletes the copy
  later, without counting it as reclaimed). A key written again since the deletion is refused, by name and with the
  reason, and left as it is; an object already purged is reported, with when it was purged;
- **a versioned bucket**: deleting a key there adds a delete marker, whose version id the outbox records
  (`blobgc.deletion_settlement.version_ids`); removing that marker makes the previous version current again.
Where a run deleted objects that no quarantine held from an unversioned bucket, the bytes are gone, and
`plan_restore` refuses before touching anything; so it does on a bucket whose versioning is *Suspended*, where a
delete removes an object's null version for good.

**A restore verifies.** An at-least-once delete can stack several delete markers over one object,
so removing the recorded one is not enough: for each object, every delete marker above its newest
version is removed, and a HEAD then checks that the object is back. One still missing is reported
as failed. A row is put back only when every object it forms (its keys, formed in SQL from its
logged image) is in the store, a key it shares with other rows included: the run may have kept a
shared object for another row, which a later run then deleted. Such a row is reported failed,
naming the run that deleted the object (restore that run first), and is not put back.

Rows come back only where the deletion log holds their image (`blobgc.deletion_log.rows`): the
collections' rows (docs/reference.md §6), whose sweep logs each deleted row. app_blob's return *used*
(`unused = false`, `updated_at = now()`); any other collection's return as they were, with no mark,
so the next mark starts their grace again. Either way no sweep takes them again before a mark has
looked at their references. For every other source the report says, per source, why its rows
cannot come back. A restore can be limited to some collections (`sources`): only their objects,
owed deletions and rows are touched.

Every object, row and cancelled owed deletion is recorded in `blobgc.restore_item`: a retried task
skips what is already there, so a restore can be re-run safely.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg
from botocore.exceptions import ClientError
from psycopg import sql

from blobgc.core import queries, registry
from blobgc.core.catalog import table_exists
from blobgc.core.collections import COLLECTION_SOURCE, BoundCollection, ColumnMode, column_modes
from blobgc.core.objects import (
    MAX_KEYS_PER_CALL,
    ObjectStore,
    chunked,
    copy_verified,
    error_code,
    object_stats,
    unquoted,
    versioning_status,
)
from blobgc.core.results import TaskResult
from blobgc.core.runs import RunRef
from blobgc.core.settings import ConfigurationError

log = logging.getLogger(__name__)

ROW_SOURCES = {"app.blob"}  # sources whose deleted rows the log holds, and restore puts back
# Why the rows of each other source cannot be put back, in the words the report uses.
RECONCILE_DAG = "blobgc_reconcile"
MISSING_AFTER_RESTORE = "its object is still missing after the restore, so the row was not put back"


class RestoreRefused(ConfigurationError):
    """The restore cannot be done (unknown run, a dry run, an unversioned bucket); nothing was changed."""


@dataclass
class RestorePlan(TaskResult):
    source_dag_id: str
    source_run_id: str
    buckets: list[str]
    objects_deleted: int
    objects_owed: int
    rows_logged: int
    sources: list[str] | None = None  # only these deletion-log sources (a restore limited to some collections)
    collections: list[str] = field(default_factory=list)  # collections (other than app_blob) with rows to put back

    def params(self, run: RunRef) -> dict:
        return {
            "restore_run_id": run.run_id,
            "dag_id": self.source_dag_id,
            "run_id": self.source_run_id,
            "sources": self.sources,
        }


@dataclass
class RestoreResult(TaskResult):
    restored: int = 0
    already_restored: int = 0
    cancelled: int = 0
    not_restored: int = 0
    failed: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def note(self, outcome: str, reason: str | None = None) -> None:
        setattr(self, outcome, getattr(self, outcome) + 1)
        if reason:
            self.reasons[reason] = self.reasons.get(reason, 0) + 1


def find_source_run(conn: psycopg.Connection, run_id: str, dag_id: str | None) -> tuple[str, str]:
    """The (dag_id, run_id) of the real run to undo; refuses an unknown, ambiguous or dry run."""
    rows = conn.execute(queries.load("restore/select_source_runs"), {"run_id": run_id, "dag_id": dag_id}).fetchall()
    real = [(d, r) for d, r, dry in rows if not dry]
    if not rows:
        raise RestoreRefused(f"no blobgc run has run_id {run_id!r}" + (f" in DAG {dag_id!r}" if dag_id else ""))
    if not real:
        raise RestoreRefused(f"run {run_id!r} was a dry run: it deleted nothing, so there is nothing to restore")
    if len(real) > 1:
        raise RestoreRefused(
            f"run_id {run_id!r} names runs of several DAGs ({', '.join(d for d, _ in real)}): "
            "set the source_dag_id Param"
        )
    return real[0]


def plan_restore(
    conn: psycopg.Connection, s3: ObjectStore, run_id: str, dag_id: str | None = None, sources: list[str] | None = None
) -> RestorePlan:
    """Check that the run can be undone (every bucket it deleted from is versioned) and size the work.

    `sources` limits the restore to those deletion-log sources (some collections'); None is all of them.
    """
    source_dag, source_run = find_source_run(conn, run_id, dag_id)
    row = queries.one_row(
        conn.execute(
            queries.load("restore/summarize_run_log"), {"dag_id": source_dag, "run_id": source_run, "sources": sources}
        )
    )
    buckets, deleted, owed, rows_logged = row[0] or [], row[1] or 0, row[2] or 0, row[3] or 0
    unversioned, suspended = [], []
    # a bucket whose every deletion went through quarantine can be undone whatever its versioning
    unheld = {
        r[0]
        for r in conn.execute(
            queries.load("restore/select_unquarantined_buckets"),
            {"dag_id": source_dag, "run_id": source_run, "sources": sources},
        )
    }
    for bucket in buckets:
        try:
            status = versioning_status(s3, bucket)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code == "NoSuchBucket":
                raise RestoreRefused(
                    f"bucket {bucket!r}, which run {source_run!r} deleted from, does not exist"
                ) from error
            raise
        if bucket not in unheld:
            continue
        if status == "Suspended":
            suspended.append(bucket)
        elif status != "Enabled":
            unversioned.append(bucket)
    if suspended:
        raise RestoreRefused(
            f"blobgc_restore refuses: versioning is Suspended on bucket{'s' if len(suspended) > 1 else ''} "
            f"{', '.join(map(repr, suspended))}. A delete there removes an object's null version (anything written "
            "while versioning was suspended) for good, and leaves a null delete marker that cannot tell which "
            "objects had an older version to come back to, so the restore could not say what it brought back. "
            "Nothing was changed. Re-enable versioning (aws s3api put-bucket-versioning --bucket NAME "
            "--versioning-configuration Status=Enabled) to make later runs undoable."
        )
    if unversioned:
        raise RestoreRefused(
            f"blobgc_restore refuses: bucket{'s' if len(unversioned) > 1 else ''} {', '.join(map(repr, unversioned))} "
            f"{'are' if len(unversioned) > 1 else 'is'} not versioned, so the objects {source_dag} run {source_run!r} "
            "deleted there are gone for good and no delete marker can be removed. Nothing was changed. To make "
            "later runs undoable, enable versioning first (aws s3api put-bucket-versioning --bucket NAME "
            "--versioning-configuration Status=Enabled) and expire noncurrent versions with a lifecycle rule, or give "
            "deleted objects days of quarantine (Variable blobgc_quarantine, or a collection's quarantine_days)."
        )
    logged = [
        r[0]
        for r in conn.execute(
            "SELECT DISTINCT source FROM blobgc.deletion_log WHERE dag_id = %s AND run_id = %s AND NOT dry_run "
            "AND rows IS NOT NULL ORDER BY source",
            (source_dag, source_run),
        )
    ]
    collections = [
        source[len(COLLECTION_SOURCE) :]
        for source in logged
        if source.startswith(COLLECTION_SOURCE) and (sources is None or source in sources)
    ]
    return RestorePlan(source_dag, source_run, buckets, deleted, owed, rows_logged, sources, collections)


def cancel_owed_deletions(conn: psycopg.Connection, run: RunRef, plan: RestorePlan) -> RestoreResult:
    """Take the run's still-owed deletions out of the outbox: those objects were never deleted and now stay."""
    result = RestoreResult()
    if run.dry_run:
        result.cancelled = plan.objects_owed
        return result
    with conn.transaction():
        cancelled = conn.execute(queries.load("restore/cancel_owed_deletions"), plan.params(run)).fetchall()
    result.cancelled = len(cancelled)
    log.info("cancelled %d owed deletions of %s", result.cancelled, plan.source_run_id)
    return result


def restore_objects(
    conn: psycopg.Connection, s3: ObjectStore, run: RunRef, plan: RestorePlan, *, concurrency: int = 8
) -> RestoreResult:
    """Bring back every object the run deleted, and check with HEAD that each one is back.

    For each object: list its versions, remove every delete marker above its newest version (the
    recorded one, and any an at-least-once delete stacked over it), 1000 per DeleteObjects call,
    then HEAD it. An object that is still missing is recorded as failed, with the reason.
    """
    result = RestoreResult()
    pending = conn.execute(queries.load("restore/select_deleted_objects"), plan.params(run)).fetchall()
    by_bucket: dict[str, list[tuple[str, str | None]]] = defaultdict(list)
    for bucket, key, version_id in pending:
        by_bucket[bucket].append((key, version_id))
    for bucket, items in by_bucket.items():
        items = restore_from_quarantine(conn, s3, run, plan, bucket, items, result, concurrency=concurrency)
        no_marker = [key for key, version in items if not version]
        marked = [key for key, version in items if version]
        reason = (
            "no delete marker recorded for this key: it was deleted before blobgc recorded version ids, "
            "or while the bucket was not versioned"
        )
        for _ in no_marker:
            result.note("not_restored", reason)
        if not run.dry_run and no_marker:
            record_items(conn, run, plan, "object", bucket, [(k, None, "not_restored", reason) for k in no_marker])
        if run.dry_run:
            result.restored += len(marked)
            continue
        recorded = dict(items)
        for chunk in chunked(marked, MAX_KEYS_PER_CALL):
            outcomes = undo_deletions(s3, bucket, chunk, recorded, concurrency=concurrency)
            record_items(conn, run, plan, "object", bucket, outcomes)
            for _, _, outcome, detail in outcomes:
                result.note(outcome, detail if outcome in ("not_restored", "failed") else None)
        log.info(
            "restored %d objects in %s; %d failed (still missing after the undo), %d without a recorded delete marker",
            result.restored,
            bucket,
            result.failed,
            len(no_marker),
        )
    if run.dry_run:
        log.info("would restore %d objects", result.restored)
    return result


def restore_from_quarantine(
    conn: psycopg.Connection,
    s3: ObjectStore,
    run: RunRef,
    plan: RestorePlan,
    bucket: str,
    items: list[tuple[str, str | None]],
    result: RestoreResult,
    *,
    concurrency: int = 8,
) -> list[tuple[str, str | None]]:
    """Bring back, from quarantine, the objects of `items` (key, delete marker) that a quarantine copy holds; returns
    the items left for the delete markers (no quarantine record, or purged where a marker can still bring it back).

    Each copy is locked while it is copied back (a purge skips it), copied to its key unless the key was written
    again meanwhile (refused, by name), verified, and marked restored, one transaction per chunk of keys."""
    left: list[tuple[str, str | None]] = []
    for chunk in chunked(items, MAX_KEYS_PER_CALL):
        markers = dict(chunk)
        with conn.transaction():
            held: dict[str, tuple[Any, ...]] = {}
            for record in conn.execute(
                queries.load("restore/claim_quarantined"),
                {"dag_id": plan.source_dag_id, "run_id": plan.source_run_id, "bucket": bucket, "keys": list(markers)},
            ):
                held.setdefault(record[0], tuple(record))
            outcomes: list[tuple[str, str | None, str, str | None]] = []
            to_copy: list[tuple[str, str, int | None, str | None]] = []
            for key, marker in chunk:
                if key not in held:
                    left.append((key, marker))
                    continue
                _, target, size, etag, days, purged_at, restored_at, _id = held[key]
                if restored_at is not None:
                    outcomes.append((key, None, "already_restored", f"brought back from quarantine at {restored_at}"))
                elif purged_at is not None:
                    if marker:
                        left.append((key, marker))  # a versioned bucket still holds it as a noncurrent version
                    else:
                        outcomes.append(
                            (
                                key,
                                None,
                                "not_restored",
                                f"purged from quarantine at {purged_at:%Y-%m-%d %H:%M} UTC, after its {days}-day "
                                "window: its bytes are gone",
                            )
                        )
                else:
                    to_copy.append((key, target, size, etag))
            if run.dry_run:
                result.restored += len(to_copy)
                for _, _, outcome, detail in outcomes:
                    result.note(outcome, detail if outcome != "already_restored" else None)
                continue
            copied = copy_back(s3, bucket, to_copy, concurrency=concurrency)
            outcomes += [(key, None, outcome, detail) for key, (outcome, detail) in copied.items()]
            done_ids = [held[key][7] for key, (outcome, _) in copied.items() if outcome == "restored"]
            if done_ids:
                conn.execute(queries.load("restore/mark_restored"), {"ids": done_ids, "restore_run_id": run.run_id})
            record_items(conn, run, plan, "object", bucket, outcomes)  # with the copies' marks, in one commit
        for _, _, outcome, detail in outcomes:
            result.note(outcome, detail if outcome in ("not_restored", "failed") else None)
    brought = len(items) - len(left)
    if brought:
        log.info(
            "dealt with %d objects of %s from quarantine; %d left to their delete markers", brought, bucket, len(left)
        )
    return left


def copy_back(
    s3: ObjectStore, bucket: str, items: list[tuple[str, str, int | None, str | None]], *, concurrency: int = 8
) -> dict[str, tuple[str, str | None]]:
    """Copy each (key, quarantine key, size, the copy's ETag) back to its key, verified: {key: (outcome, detail)}. A
    key that exists again (written since the deletion) is refused and left as it is, unless it holds exactly the
    quarantined bytes (same size and ETag): a restore that copied it back and failed before it recorded so."""

    def one(item: tuple[str, str, int | None, str | None]) -> tuple[str, tuple[str, str | None]]:
        key, target, size, etag = item
        try:
            found = s3.head_object(Bucket=bucket, Key=key)
            if etag and unquoted(found.get("ETag")) == etag and int(found["ContentLength"]) == size:
                return key, ("restored", None)  # this restore's earlier try copied it back
            return key, (
                "not_restored",
                f"{key} was written again since it was deleted: the new object was left as it is (the deleted one "
                f"is still in quarantine at {target} until its window ends)",
            )
        except ClientError as error:
            if error_code(error) not in ("404", "NoSuchKey", "NotFound"):
                return key, ("failed", f"could not check whether {key} exists: {error_code(error)}")
        try:
            copy_verified(s3, bucket, target, key, size=size)
        except (ClientError, RuntimeError) as error:
            return key, ("failed", f"could not copy it back from quarantine ({target}): {error}"[:500])
        try:
            s3.head_object(Bucket=bucket, Key=key)
        except ClientError as error:
            return key, ("failed", f"still missing after the copy back: HEAD answered {error_code(error)}")
        return key, ("restored", None)

    with ThreadPoolExecutor(max(1, min(concurrency, len(items) or 1))) as pool:
        return dict(pool.map(one, items))


def markers_above_newest_version(s3: ObjectStore, bucket: str, key: str) -> tuple[list[str], bool]:
    """(the delete markers above `key`'s newest version, whether any version of it exists)."""
    entries: list[tuple[object, bool, str]] = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=key):
        entries += [(v["LastModified"], False, v["VersionId"]) for v in page.get("Versions", []) if v["Key"] == key]
        entries += [(m["LastModified"], True, m["VersionId"]) for m in page.get("DeleteMarkers", []) if m["Key"] == key]
    # newest first; S3 lists a key's versions newest first, and a marker written in the same second as the
    # version it hides comes after it in time
    entries.sort(key=lambda e: (e[0], e[1]), reverse=True)
    markers: list[str] = []
    for _, is_marker, version in entries:
        if not is_marker:
            return markers, True
        markers.append(version)
    return markers, False


def undo_deletions(
    s3: ObjectStore, bucket: str, keys: list[str], recorded: dict[str, str | None], *, concurrency: int = 8
) -> list[tuple[str, str | None, str, str | None]]:
    """Remove the delete markers over `keys` and HEAD each: (key, recorded marker, outcome, detail) per key."""

    def inspect(key: str) -> tuple[str, list[str], bool]:
        markers, has_version = markers_above_newest_version(s3, bucket, key)
        return key, markers, has_version

    with ThreadPoolExecutor(max(1, min(concurrency, len(keys)))) as pool:
        found = list(pool.map(inspect, keys))
    removals = [(key, marker) for key, markers, has_version in found if has_version for marker in markers]
    errors: dict[str, str] = {}
    for chunk in chunked(removals, MAX_KEYS_PER_CALL):
        response = s3.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k, "VersionId": v} for k, v in chunk], "Quiet": True}
        )
        for e in response.get("Errors", []):
            if e.get("Code") != "NoSuchVersion":
                errors[e.get("Key", "")] = f"{e.get('Code')}: {e.get('Message', '')}".strip()

    def verify(item: tuple[str, list[str], bool]) -> tuple[str, str | None, str, str | None]:
        key, markers, has_version = item
        if not has_version:
            return key, recorded.get(key), "failed", "no version of this object is left to restore"
        if key in errors:
            return key, recorded.get(key), "failed", f"could not remove its delete markers: {errors[key]}"
        try:
            s3.head_object(Bucket=bucket, Key=key)
        except ClientError as error:
            return (
                key,
                recorded.get(key),
                "failed",
                (f"still missing after removing {len(markers)} delete marker(s): HEAD answered {error_code(error)}"),
            )
        if not markers:
            return key, recorded.get(key), "already_restored", "no delete marker was left over it"
        return key, recorded.get(key), "restored", None

    with ThreadPoolExecutor(max(1, min(concurrency, len(found)))) as pool:
        return list(pool.map(verify, found))


def restore_rows(conn: psycopg.Connection, s3: ObjectStore, run: RunRef, plan: RestorePlan) -> RestoreResult:
    """Put back the rows of every column-mode collection (seed 000's app.blob) the run's log holds whose objects are
    all in the store, and record why every kind's source's rows cannot come back (a collection's rows:
    `restore_collection_rows`)."""
    result = RestoreResult()
    params = plan.params(run)
    for mode in column_modes().values():
        restore_column_mode_rows(conn, s3, run, plan, mode, result)
    for source, log_rows, objects in conn.execute(queries.load("restore/select_sources_without_rows"), params):
        if source.startswith(COLLECTION_SOURCE) and plan.source_dag_id != RECONCILE_DAG:
            continue  # a collection's log rows without images: restore_collection_rows reports them
        if plan.source_dag_id == RECONCILE_DAG:
            reason = f"{source}: no rows to restore: reconcile deletes only orphan objects, which no row accounted for"
        else:
            reason = registry.not_restorable(source) or f"{source}: this source's rows are not in the log"
        result.note("not_restored", f"{reason} ({objects} objects in {log_rows} log rows)")
        if not run.dry_run:
            record_items(conn, run, plan, "row", "", [(source, None, "not_restored", reason)])
    log.info(
        "%s %d rows; %d failed; not restorable: %s",
        "would restore" if run.dry_run else "restored",
        result.restored,
        result.failed,
        result.reasons or "none",
    )
    return result


def restore_column_mode_rows(
    conn: psycopg.Connection, s3: ObjectStore, run: RunRef, plan: RestorePlan, mode: ColumnMode, result: RestoreResult
) -> None:
    """Put back a column-mode collection's logged rows whose objects are all in the store, with its kind's
    statement, noting each outcome in `result`."""
    table, name = mode.collection.table, mode.collection.name
    if plan.sources is not None and mode.source not in plan.sources:
        log.info("%s is not among the collections restored", table)
        return
    if not table_exists(conn, table):  # a database of collections only: no such row to put back
        log.info("this database has no %s: no %s rows to restore", table, name)
        return
    rows = logged_rows(conn, run, plan, mode.bound(""))
    refused = rows_missing_objects(conn, s3, run, plan, rows)
    if run.dry_run:
        result.restored += len(rows) - len(refused)
        result.failed += len(refused)
    elif rows:
        items = list(dict.fromkeys(row.item for row in rows))
        with conn.transaction():
            for _item, outcome, detail in conn.execute(
                queries.load(mode.statement("restore/insert_rows")),
                {**plan.params(run), "items": items, "reasons": [refused.get(item) for item in items]},
            ).fetchall():
                result.note(outcome, detail if outcome in ("not_restored", "failed") else None)


def restore_collection_rows(
    conn: psycopg.Connection, s3: ObjectStore, run: RunRef, plan: RestorePlan, bound: BoundCollection
) -> RestoreResult:
    """Put back one collection's rows from the images the run's log holds, as they were.

    A row is put back only when every object it forms is in the store (`rows_missing_objects`: the keys it
    shares with other rows too, which another run may have deleted since); a row whose id exists again is
    left alone. Both are recorded.
    """
    result = RestoreResult()
    c = bound.collection
    rows = logged_rows(conn, run, plan, bound)
    refused = rows_missing_objects(conn, s3, run, plan, rows)
    ready = [row for row in rows if row.item not in refused]
    if run.dry_run:
        result.restored, result.failed = len(ready), len(refused)
        return result
    insert = sql.SQL(queries.load("restore/insert_collection_rows")).format(
        table=c.table_identifier, id=sql.Identifier(c.id)
    )
    with conn.transaction():
        put_back = {r[0] for r in conn.execute(insert, {"images": json.dumps([row.image for row in ready])})}
    outcomes: list[tuple[str, str | None, str, str | None]] = [
        (
            row.item,
            None,
            "restored" if row.id in put_back else "not_restored",
            None if row.id in put_back else "a row with this id exists again; it was left as it is",
        )
        for row in ready
    ]
    outcomes += [(item, None, "failed", reason) for item, reason in refused.items()]
    record_items(conn, run, plan, "row", "", outcomes)
    for _, _, outcome, detail in outcomes:
        result.note(outcome, detail if outcome != "restored" else None)
    log.info(
        "collection %s: restored %d rows of %s; %d not restored, %d failed",
        bound.name,
        result.restored,
        c.table,
        result.not_restored,
        result.failed,
    )
    return result


@dataclass(frozen=True)
class LoggedRow:
    """A row image of the run's log to put back: where its objects are, and the keys it forms (formed in SQL)."""

    bucket: str
    item: str  # "<table> <id>", as blobgc.restore_item records it
    id: str  # the id's text form, as PostgreSQL gives it
    image: dict
    keys: list[str]


def logged_rows(conn: psycopg.Connection, run: RunRef, plan: RestorePlan, bound: BoundCollection) -> list[LoggedRow]:
    """The row images of `bound`'s source in the run's log that this restore has not dealt with yet, each with the
    keys it forms: the templates' SQL expressions over the image read back as a row of the table, never the image's
    JSON text (a number's or a timestamp's JSON text may differ from PostgreSQL's)."""
    c = bound.collection
    statement = bound.statement("restore/select_logged_rows", keys=bound.key_array("r"))
    return [
        LoggedRow(bucket, item, row_id, image, list(keys))
        for bucket, item, row_id, image, keys in conn.execute(
            statement, {**plan.params(run), "source": c.source, "table": c.table}
        )
    ]


def rows_missing_objects(
    conn: psycopg.Connection, s3: ObjectStore, run: RunRef, plan: RestorePlan, rows: list[LoggedRow]
) -> dict[str, str]:
    """Of `rows`, those forming a key whose object is not in the store now, each with why: {item: reason}.

    Every key each row forms is checked (HEAD, or a listing where the keys are dense), a key it shares with
    other rows too: the run being undone may have kept a shared object for another row, which a later run
    deleted with its last row. A row without its object is worse than no row, so such a row is not put back,
    and the reason names the run to undo first. A key the run found absent when it deleted the row does not
    count (the row had no such object before). A dry run takes the run's own deletions as coming back.
    """
    keys_by_bucket: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        keys_by_bucket[row.bucket].update(row.keys)
    why: dict[tuple[str, str], str] = {}
    for bucket, keys in keys_by_bucket.items():
        missing = sorted(keys - object_stats(s3, bucket, keys).keys())
        if missing:
            why.update({(bucket, key): reason for key, reason in why_missing(conn, run, plan, bucket, missing).items()})
    refused: dict[str, str] = {}
    for row in rows:
        reasons = [why[(row.bucket, key)] for key in row.keys if (row.bucket, key) in why]
        if reasons:
            refused[row.item] = "; ".join(dict.fromkeys(reasons))
    if refused:
        by_reason: dict[str, list[str]] = defaultdict(list)
        for item, reason in refused.items():
            by_reason[reason].append(item)
        for reason, items in by_reason.items():
            log.warning(
                "%s %d rows (%s): %s",
                "would not put back" if run.dry_run else "did not put back",
                len(items),
                ", ".join(items[:5]) + (", ..." if len(items) > 5 else ""),
                reason,
            )
    return refused


def why_missing(
    conn: psycopg.Connection, run: RunRef, plan: RestorePlan, bucket: str, keys: list[str]
) -> dict[str, str]:
    """Why each of `keys` (missing from the store) keeps its row out, from the deletion log; a key the run being
    undone found absent (or, in a dry run, deleted itself) is left out, and so is one no blobgc run deleted (its
    owed deletion cancelled by this restore, or never drained): the row had no such object before the run either,
    and is put back as it was."""
    why: dict[str, str] = {}
    for key, absent, dag_id, run_id in conn.execute(
        queries.load("restore/select_key_deletions"),
        {"bucket": bucket, "keys": keys, "dag_id": plan.source_dag_id, "run_id": plan.source_run_id},
    ):
        if absent:
            continue
        if (dag_id, run_id) == (plan.source_dag_id, plan.source_run_id):
            if not run.dry_run:
                why[key] = MISSING_AFTER_RESTORE
        elif dag_id is not None:
            why[key] = (
                f"its object {key} was deleted by {dag_id} run {run_id!r}, whose undo is not part of this "
                "restore, so the row was not put back: restore that run first, then this one again"
            )
        else:
            log.warning(
                "object %s of a row put back is missing, but no blobgc run deleted it: it was missing before "
                "%s run %s too, so the row is put back as it was",
                key,
                plan.source_dag_id,
                plan.source_run_id,
            )
    return why


def record_items(
    conn: psycopg.Connection,
    run: RunRef,
    plan: RestorePlan,
    kind: str,
    bucket: str,
    outcomes: list[tuple[str, str | None, str, str | None]],
) -> None:
    with conn.transaction():
        conn.cursor().executemany(
            queries.load("restore/insert_restore_item"),
            [
                {
                    "restore_run_id": run.run_id,
                    "source_dag_id": plan.source_dag_id,
                    "source_run_id": plan.source_run_id,
                    "kind": kind,
                    "bucket": bucket,
                    "item": item,
                    "version_id": version,
                    "outcome": outcome,
                    "detail": detail,
                }
                for item, version, outcome, detail in outcomes
            ],
        )


def summarize_restore(conn: psycopg.Connection, run: RunRef) -> dict:
    """Per kind and outcome, how many items this restore dealt with, and each distinct reason for what it did not bring
    back (not restorable, or failed: a row whose object is missing names the run that deleted it); a dry run: none."""
    if run.dry_run:
        return {}
    summary: dict[str, dict[str, int]] = defaultdict(dict)
    reasons: dict[str, dict[str, int]] = {"not_restored": {}, "failed": {}}
    for kind, outcome, detail, n in conn.execute(
        queries.load("restore/summarize_restore"), {"restore_run_id": run.run_id}
    ):
        summary[kind][outcome] = summary[kind].get(outcome, 0) + n
        if outcome in reasons and detail:
            reasons[outcome][detail] = reasons[outcome].get(detail, 0) + n
    return {
        "items": dict(summary),
        "not_restored_because": reasons["not_restored"],
        "failed_because": reasons["failed"],
    }

"""Seed 000's sweep: delete blobs unused for longer than the grace, never one referenced at delete time.

Each batch is one transaction: claim rows with FOR UPDATE SKIP LOCKED (a writer adding a reference
holds a KEY SHARE lock, so its blob is skipped), delete those that no reference points at (the
DELETE statement re-checks every foreign key and declared reference itself, so a key declared
ON DELETE CASCADE or SET NULL can never remove the referencing rows), and log their object keys and
owe their deletion in the same transaction. The objects themselves are deleted afterwards from the
outbox (`blobgc.core.outbox.delete_owed_objects`), which counts only those that existed.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg import sql

from blobgc.core import queries
from blobgc.core.key_space import KeyRange
from blobgc.core.keys import BLOB_OBJECTS, blob_keys
from blobgc.core.outbox import record_deletions
from blobgc.core.references import (
    ReferenceSet,
    ReferencesChanged,
    check_unchanged,
    discover_references,
    unreferenced_condition,
)
from blobgc.core.results import TaskResult, local
from blobgc.core.runs import RunRef, add_counts, restart_dry_run_part
from blobgc.core.sizes import human_bytes

log = logging.getLogger(__name__)

SOURCE = BLOB_OBJECTS.source
# ON DELETE RESTRICT raises restrict_violation (23001); NO ACTION raises foreign_key_violation (23503).
REFERENCE_VIOLATIONS = (psycopg.errors.RestrictViolation, psycopg.errors.ForeignKeyViolation)
SAMPLE_KEYS = 20


@dataclass
class SweepResult(TaskResult):
    """Rows deleted, objects owed and bytes, or on a dry run what would go (the sample keys stay in the log)."""

    rows_deleted: int = 0
    objects_owed: int = 0
    bytes_owed: int = 0
    kept_referenced: int = 0
    batches: int = 0
    sample_keys: list[str] = local()


def delete_unreferenced(conn: psycopg.Connection, statement: sql.Composable, ids: list[str]
                        ) -> list[tuple[str, int | None, str]]:
    """Delete the rows of `ids` that no reference points at, inside a savepoint; returns (id, size, row image).

    The statement re-checks every reference. Should a foreign key still make it fail (a reference the
    re-check did not know of), ON DELETE RESTRICT is the last guard: the batch is split, and the row
    that fails alone is kept.
    """
    try:
        with conn.transaction():
            return conn.execute(statement, {"ids": ids}).fetchall()
    except REFERENCE_VIOLATIONS:
        if len(ids) == 1:
            return []
    mid = len(ids) // 2
    return delete_unreferenced(conn, statement, ids[:mid]) + delete_unreferenced(conn, statement, ids[mid:])


def range_part(key_range: KeyRange) -> str:
    """The name of a sweep's share of a dry-run report: its id range."""
    return f"ids {key_range[0] or 'start'}..{key_range[1] or 'end'}"


def sweep_unused_blobs(
    conn: psycopg.Connection,
    run: RunRef,
    refs: ReferenceSet,
    *,
    cutoff: datetime,
    bucket: str,
    batch_size: int = 1000,
    key_range: KeyRange = (None, None),
) -> SweepResult:
    """Delete blobs unused since before `cutoff`, in batches of `batch_size`, owing their objects.

    `key_range` [lo, hi) limits the sweep to part of the id space (`blobgc.key_space.split_key_space`),
    so several workers (mapped tasks) sweep disjoint parts in parallel; a dry run's report is then
    disjoint too.
    """
    lo, hi = key_range
    part = range_part(key_range)
    restart_dry_run_part(conn, run, part)  # a retried dry run reports its range once
    locking = sql.SQL("") if run.dry_run else sql.SQL("FOR UPDATE SKIP LOCKED")
    select_batch = sql.SQL(queries.load("sweep/select_unused_blobs")).format(locking=locking)

    def statements(found: ReferenceSet) -> tuple[sql.Composable, sql.Composable]:
        unreferenced = unreferenced_condition(found, "b")
        return (sql.SQL(queries.load("sweep/delete_blobs")).format(unreferenced=unreferenced),
                sql.SQL(queries.load("sweep/select_unreferenced_blobs")).format(unreferenced=unreferenced))

    delete, preview = statements(refs)
    result = SweepResult()
    after: str | None = None
    while True:
        try:
            batch_result = sweep_batch(conn, run, refs, select_batch, delete, preview, part=part, bucket=bucket,
                                       params={"cutoff": cutoff, "after": after, "lo": lo, "hi": hi,
                                               "batch_size": batch_size})
        except ReferencesChanged:
            # a foreign key was added since the references were found: the batch rolled back; find them again
            log.warning("the foreign keys to %s changed during the sweep: discovering them again", refs.table)
            refs = discover_references(conn, refs.table, refs.extra_sql, refs.id_column)
            delete, preview = statements(refs)
            continue
        if batch_result is None:
            break
        batch, deleted, kept, keys, batch_bytes = batch_result
        after = batch[-1][0]
        result.batches += 1
        result.rows_deleted += len(deleted)
        result.objects_owed += len(keys)
        result.bytes_owed += batch_bytes
        result.kept_referenced += len(kept)
        if len(result.sample_keys) < SAMPLE_KEYS:
            result.sample_keys += keys[: SAMPLE_KEYS - len(result.sample_keys)]
        log.info("%s %d blobs (%s), %d kept as referenced, batch %d",
                 "would delete" if run.dry_run else "deleted", len(deleted), human_bytes(batch_bytes),
                 len(kept), result.batches)
        if len(batch) < batch_size:
            break
    log.info("%s %d blobs, %d objects (%s) owed; %d referenced blobs kept; sample keys: %s",
             "dry run: would delete" if run.dry_run else "deleted", result.rows_deleted, result.objects_owed,
             human_bytes(result.bytes_owed), result.kept_referenced, result.sample_keys[:5])
    return result


def sweep_batch(conn: psycopg.Connection, run: RunRef, refs: ReferenceSet, select_batch: sql.Composable,
                delete: sql.Composable, preview: sql.Composable, *, part: str, bucket: str, params: dict
                ) -> tuple[list, list, list[str], list[str], int] | None:
    """One batch in one transaction: claim, delete what no reference points at, log and owe its objects.

    Returns (claimed rows, deleted rows, kept ids, owed keys, bytes), or None when no blob is left.
    Raises ReferencesChanged (the transaction rolled back) when a foreign key appeared meanwhile.
    """
    with conn.transaction():
        batch = conn.execute(select_batch, params).fetchall()
        if not batch:
            return None
        ids = [row[0] for row in batch]
        if run.dry_run:
            deleted = conn.execute(preview, {"ids": ids}).fetchall()
        else:
            deleted = delete_unreferenced(conn, delete, ids)
            check_unchanged(conn, refs)
        gone = {row[0] for row in deleted}
        kept = [i for i in ids if i not in gone]
        if kept and not run.dry_run:
            conn.execute(queries.load("sweep/update_blobs_used"), {"ids": kept})
        keys: list[str] = []
        sizes_out: list[int | None] = []
        for blob_id, size, *_image in deleted:
            raw, thumb = blob_keys(blob_id)
            keys += [raw, thumb]
            sizes_out += [size, None]
        record_deletions(conn, run, source=SOURCE, bucket=bucket, keys=keys, sizes=sizes_out,
                         rows=[image for _, _, *images in deleted for image in images], part=part)
        batch_bytes = sum(size or 0 for _, size, *_image in deleted)
        if run.dry_run:
            add_counts(conn, run, rows=len(deleted), objects=len(keys), bytes_=batch_bytes, part=part)
        else:
            add_counts(conn, run, rows=len(deleted))
    return batch, deleted, kept, keys, batch_bytes

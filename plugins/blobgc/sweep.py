"""Seed 000's sweep: delete blobs unused for longer than the grace, never one referenced at delete time.

Each batch is one transaction: claim rows with FOR UPDATE SKIP LOCKED (a writer adding a reference
holds a KEY SHARE lock, so its blob is skipped), re-check every reference, delete the rest, and log
their object keys and owe their deletion in the same transaction. The objects themselves are
deleted afterwards from the outbox (`blobgc.outbox.delete_owed_objects`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

import psycopg
from psycopg import sql

from blobgc import queries
from blobgc.key_space import KeyRange
from blobgc.outbox import record_deletions
from blobgc.references import ReferenceSet, referenced_ids_query
from blobgc.runs import RunRef, add_counts
from blobgc.sizes import human_bytes

log = logging.getLogger(__name__)

SOURCE = "app.blob"
# ON DELETE RESTRICT raises restrict_violation (23001); NO ACTION raises foreign_key_violation (23503).
REFERENCE_VIOLATIONS = (psycopg.errors.RestrictViolation, psycopg.errors.ForeignKeyViolation)
SAMPLE_KEYS = 20


def blob_object_keys(blob_id: str) -> tuple[str, str]:
    """The objects a blob owns: its raw upload and its thumbnail (deleting an absent key is harmless)."""
    return f"blobs/{blob_id}/raw", f"blobs/{blob_id}/thumbnail"


@dataclass
class SweepResult:
    """Rows deleted, objects owed and bytes, or on a dry run what would go."""

    rows_deleted: int = 0
    objects_owed: int = 0
    bytes_owed: int = 0
    kept_referenced: int = 0
    batches: int = 0
    sample_keys: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """The counters alone, for XCom and reports (the sample keys stay in the task log)."""
        return {k: v for k, v in vars(self).items() if k != "sample_keys"}


def delete_unreferenced(conn: psycopg.Connection, ids: list[str]) -> tuple[list[tuple[str, int | None]], list[str]]:
    """Delete `ids` inside a savepoint; when a reference makes the DELETE fail, split the batch.

    Returns the deleted (id, size, row image) rows and the ids a foreign key still protects.
    """
    try:
        with conn.transaction():
            return conn.execute(queries.load("sweep/delete_blobs"), {"ids": ids}).fetchall(), []
    except REFERENCE_VIOLATIONS:
        if len(ids) == 1:
            return [], ids
    mid = len(ids) // 2
    left_rows, left_kept = delete_unreferenced(conn, ids[:mid])
    right_rows, right_kept = delete_unreferenced(conn, ids[mid:])
    return left_rows + right_rows, left_kept + right_kept


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
    locking = sql.SQL("") if run.dry_run else sql.SQL("FOR UPDATE SKIP LOCKED")
    select_batch = sql.SQL(queries.load("sweep/select_unused_blobs")).format(locking=locking)
    select_referenced = sql.SQL(queries.load("sweep/select_referenced_blobs")).format(
        referenced=referenced_ids_query(refs, "ids")
    )
    result = SweepResult()
    after: str | None = None
    while True:
        with conn.transaction():
            batch = conn.execute(
                select_batch,
                {"cutoff": cutoff, "after": after, "lo": lo, "hi": hi, "batch_size": batch_size},
            ).fetchall()
            if not batch:
                break
            after = batch[-1][0]
            ids = [row[0] for row in batch]
            referenced = {row[0] for row in conn.execute(select_referenced, {"ids": ids})}
            candidates = [i for i in ids if i not in referenced]
            if run.dry_run:
                sizes = {row[0]: row[1] for row in batch}
                deleted = [(i, sizes[i]) for i in candidates]
                protected: list[str] = []
            else:
                deleted, protected = delete_unreferenced(conn, candidates) if candidates else ([], [])
            kept = sorted(referenced) + protected
            if kept and not run.dry_run:
                conn.execute(queries.load("sweep/update_blobs_used"), {"ids": kept})
            keys: list[str] = []
            sizes_out: list[int | None] = []
            for blob_id, size, *_image in deleted:
                raw, thumb = blob_object_keys(blob_id)
                keys += [raw, thumb]
                sizes_out += [size, None]
            record_deletions(conn, run, source=SOURCE, bucket=bucket, keys=keys, sizes=sizes_out,
                             rows=[image for _, _, *images in deleted for image in images])
            batch_bytes = sum(size or 0 for _, size, *_image in deleted)
            if run.dry_run:
                add_counts(conn, run, rows=len(deleted), objects=len(keys), bytes_=batch_bytes)
            else:
                add_counts(conn, run, rows=len(deleted))
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

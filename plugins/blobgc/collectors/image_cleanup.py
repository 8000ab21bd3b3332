"""Seed 001's rotten-photo cleaner: unbound `app.image` rows past the grace go, rows first, files last.

A row with no offer (never attached, or unbound: its offer was deleted, whatever unbound it, stamps
`last_update`) is removed once untouched for the grace. The files of an image id go only when no
row with that id is left: re-checked in the deleting transaction, and again by the drain's guard
under the image id's stripe, just before DeleteObjects (`blobgc.core.keys.IMAGE_FILES`). The files
deleted are those recorded when the image was stored (`blobgc.image_file`), whatever the sizes
configured now.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import psycopg

from blobgc.core import queries
from blobgc.core.keys import IMAGE_FILES, image_keys
from blobgc.core.outbox import record_deletions, replace_run_log
from blobgc.core.results import TaskResult, local
from blobgc.core.runs import RunRef, add_counts, set_counts

log = logging.getLogger(__name__)

SOURCE = IMAGE_FILES.source
SAMPLE = 10


@dataclass
class CleanupResult(TaskResult):
    """Unbound rows deleted, image ids whose files went, objects owed; on a dry run, what would go."""

    rows_deleted: int = 0
    images_deleted: int = 0
    objects_owed: int = 0
    bytes_owed: int = 0
    kept_in_use: int = 0
    batches: int = 0
    sample_keys: list[str] = local()


def files_of(
    image_ids: list[str], stored: list[tuple[str, list[str], list[int]]], size_names: Iterable[str]
) -> tuple[list[str], list[int | None]]:
    """The keys and sizes of the image ids' files: as stored (`blobgc.image_file`), else the configured sizes."""
    known = {image_id: (keys, sizes) for image_id, keys, sizes in stored}
    keys: list[str] = []
    sizes: list[int | None] = []
    for image_id in image_ids:
        if image_id in known:
            keys += known[image_id][0]
            sizes += known[image_id][1]
        else:  # stored before blobgc recorded files: the sizes configured now, bytes unknown
            configured = image_keys(image_id, size_names)
            keys += configured
            sizes += [None] * len(configured)
    return keys, sizes


def delete_unbound_images(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    cutoff: datetime,
    bucket: str,
    size_names: Iterable[str],
    batch_size: int = 1000,
) -> CleanupResult:
    """Delete unbound rows untouched since before `cutoff` (rows first), and owe the files of image ids left with no row.

    Each batch is one transaction: claim and delete the rows (FOR UPDATE SKIP LOCKED), re-check
    which of their image ids still have a row (bound, or fresh), and owe the files of the others.
    The drain re-checks again under the image-id stripes before deleting anything.
    """
    if run.dry_run:
        return preview_cleanup(conn, run, cutoff=cutoff, bucket=bucket, size_names=size_names, batch_size=batch_size)
    result = CleanupResult()
    after = 0
    while True:
        with conn.transaction():
            rows = conn.execute(queries.load("images/delete_unbound_images"),
                                {"cutoff": cutoff, "after": after, "batch_size": batch_size}).fetchall()
            if not rows:
                break
            after = max(row_id for row_id, _ in rows)
            image_ids = sorted({image_id for _, image_id in rows})
            in_use = {r[0] for r in conn.execute(queries.load("images/select_images_in_use"), {"image_ids": image_ids})}
            doomed = [i for i in image_ids if i not in in_use]
            stored = conn.execute(queries.load("images/delete_image_files"), {"image_ids": doomed}).fetchall()
            keys, sizes = files_of(doomed, stored, size_names)
            record_deletions(conn, run, source=SOURCE, bucket=bucket, keys=keys, sizes=sizes)
            add_counts(conn, run, rows=len(rows))
        result.batches += 1
        result.rows_deleted += len(rows)
        result.images_deleted += len(doomed)
        result.objects_owed += len(keys)
        result.bytes_owed += sum(size or 0 for size in sizes)
        result.kept_in_use += len(in_use)
        result.sample_keys += keys[: max(0, SAMPLE - len(result.sample_keys))]
        log.info("batch %d: deleted %d unbound rows; files of %d image ids owed, %d image ids still in use",
                 result.batches, len(rows), len(doomed), len(in_use))
        if len(rows) < batch_size:
            break
    return result


def preview_cleanup(
    conn: psycopg.Connection, run: RunRef, *, cutoff: datetime, bucket: str, size_names: Iterable[str],
    batch_size: int
) -> CleanupResult:
    """A dry run's report: the rows and files the cleanup would remove, also logged with `dry_run = true`."""
    result = CleanupResult()
    with conn.transaction():
        groups = conn.execute(queries.load("images/select_cleanup_preview"), {"cutoff": cutoff}).fetchall()
        doomed = [image_id for image_id, _, goes in groups if goes]
        result.rows_deleted = sum(n for _, n, _ in groups)
        result.images_deleted = len(doomed)
        result.kept_in_use = len(groups) - len(doomed)
        stored = conn.execute(queries.load("images/select_image_files"), {"image_ids": doomed}).fetchall()
        keys, sizes = files_of(doomed, stored, size_names)
        result.objects_owed = len(keys)
        result.bytes_owed = sum(size or 0 for size in sizes)
        result.batches = replace_run_log(conn, run, source=SOURCE, bucket=bucket, keys=keys, sizes=sizes,
                                         batch_size=batch_size)
        set_counts(conn, run, rows=result.rows_deleted, objects=result.objects_owed, bytes_=result.bytes_owed)
    result.sample_keys = keys[:SAMPLE]
    log.info("dry run: would delete %d unbound rows and the files of %d image ids (%d objects); sample: %s",
             result.rows_deleted, result.images_deleted, result.objects_owed, result.sample_keys[:5])
    return result

"""Seed 001's rotten-photo cleaner: unbound `app.image` rows past the grace go, rows first, files last.

A row with no offer (never attached, or unbound: its offer was deleted, whatever unbound it, stamps
`last_update`) is removed once untouched for the grace. The files of an image id go only when no
row with that id is left. The deleted files are those recorded when the image was stored
(`blobgc.image_file`), whatever the sizes configured now.

The cleanup plans first, then executes exactly its plan (`blobgc.core.plans`):

- `plan_unbound_images` lists the stale unbound rows a batch at a time, locking and deleting nothing,
  and adds one plan item per batch: its row ids, and the files of the image ids that would be left
  with no row. On a dry run this is the report (also logged in `blobgc.deletion_log`, `dry_run = true`).
- `execute_image_plan` deals with each item in its own transaction. It claims the planned rows again
  (FOR UPDATE SKIP LOCKED) only while they are still unbound and untouched since before the cut-off
  (the earlier of the executing run's and the plan's), deletes them, and owes only the planned files of
  image ids that now have no row and that this run freed (it deleted one of their rows, or took their
  `blobgc.image_file` record): a run executing a plan that overlaps another's owes no file twice. Anything else
  in the item is skipped and recorded (`blobgc.plan_outcome`). The drain's guard re-checks once more
  under the image id's stripe, just before DeleteObjects (`blobgc.kinds.images.layouts.IMAGE_FILES`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import psycopg

from blobgc.core import queries
from blobgc.core.outbox import record_deletions
from blobgc.core.plans import PlanItem, add_plan_item, item_cutoff, pending_items, record_outcome, restart_planning
from blobgc.core.results import TaskResult, local
from blobgc.core.runs import RunRef, add_counts
from blobgc.core.sizes import human_bytes
from blobgc.kinds.images.layouts import IMAGE_FILES, image_keys

log = logging.getLogger(__name__)

SOURCE = IMAGE_FILES.source
PART = "images"  # the cleanup's one part of its plan (and of a dry run's report)
SAMPLE = 10


@dataclass
class CleanupResult(TaskResult):
    """Unbound rows, image ids whose files go, objects and bytes: what the plan deletes (the planning task's result),
    or what executing it deleted and owed."""

    rows_deleted: int = 0
    images_deleted: int = 0
    objects_owed: int = 0
    bytes_owed: int = 0
    kept_in_use: int = 0
    batches: int = 0
    sample_keys: list[str] = local()


@dataclass
class CleanupExecution(CleanupResult):
    """What executing the plan did: items dealt with, and the planned rows and files skipped (bound, touched or
    given a row again since the plan)."""

    items: int = 0
    skipped_rows: int = 0
    skipped_objects: int = 0


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


def plan_unbound_images(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    cutoff: datetime,
    bucket: str,
    size_names: Iterable[str],
    batch_size: int = 1000,
) -> CleanupResult:
    """Plan the cleanup: the unbound rows untouched since before `cutoff`, an item per batch of `batch_size` rows,
    with the files of the image ids that would be left with no row. Nothing is locked or deleted.

    An image id's files are planned in the item of its last stale row, and only if every row it has is stale
    and unbound. A retried task plans again from scratch. On a dry run, this is the run's report.
    """
    size_names = list(size_names)
    restart_planning(conn, run, PART)
    result = CleanupResult()
    after = 0
    while True:
        with conn.transaction():
            rows = conn.execute(
                queries.load("images/select_unbound_image_batch", "blobgc.kinds.images"),
                {"cutoff": cutoff, "after": after, "batch_size": batch_size},
            ).fetchall()
            if not rows:
                break
            after = rows[-1][0]
            going = sorted({image_id for _, image_id, files_go in rows if files_go})
            kept = {image_id for _, image_id, files_go in rows if not files_go} - set(going)
            stored = conn.execute(
                queries.load("images/select_image_files", "blobgc.kinds.images"), {"image_ids": going}
            ).fetchall()
            keys, sizes = files_of(going, stored, size_names)
            add_plan_item(
                conn,
                run,
                part=PART,
                collection=None,
                source=SOURCE,
                bucket=bucket,
                keys=keys,
                sizes=sizes,
                row_ids=[str(row_id) for row_id, _, _ in rows],
                modified_before=cutoff,
                rows=len(rows),
            )
            batch_bytes = sum(size or 0 for size in sizes)
        result.batches += 1
        result.rows_deleted += len(rows)
        result.images_deleted += len(going)
        result.objects_owed += len(keys)
        result.bytes_owed += batch_bytes
        result.kept_in_use += len(kept)
        result.sample_keys += keys[: max(0, SAMPLE - len(result.sample_keys))]
        log.info(
            "batch %d: the plan deletes %d unbound rows and the files of %d image ids (%d objects, %s); "
            "%d image ids keep their files",
            result.batches,
            len(rows),
            len(going),
            len(keys),
            human_bytes(batch_bytes),
            len(kept),
        )
        if len(rows) < batch_size:
            break
    log.info(
        "%s %d unbound rows and the files of %d image ids (%d objects, %s); sample: %s",
        "dry run: would delete" if run.dry_run else "planned:",
        result.rows_deleted,
        result.images_deleted,
        result.objects_owed,
        human_bytes(result.bytes_owed),
        result.sample_keys[:5],
    )
    return result


def execute_image_plan(conn: psycopg.Connection, run: RunRef, *, cutoff: datetime) -> CleanupExecution:
    """Delete exactly the rows of `run`'s plan and owe exactly its files, an item per transaction, re-checking each.

    A planned row is deleted only if it is still unbound and untouched since before `cutoff` (and the cut-off it was
    planned by); a planned file is owed only if its image id has no row left and this transaction freed it (see
    `execute_item`). Everything else in the item is skipped and recorded in
    `blobgc.plan_outcome`; nothing outside the plan is touched. A retry skips the items already dealt with.
    Does nothing on a dry run.
    """
    result = CleanupExecution()
    if run.dry_run:
        return result
    for item in pending_items(conn, run, part=PART, collection=None):
        with conn.transaction():
            deleted, keys, sizes, images, kept = execute_item(conn, run, item, cutoff=item_cutoff(item, cutoff))
        result.items += 1
        result.batches += 1
        result.rows_deleted += deleted
        result.images_deleted += images
        result.objects_owed += len(keys)
        result.bytes_owed += sum(size or 0 for size in sizes)
        result.kept_in_use += kept
        result.skipped_rows += len(item.row_ids or []) - deleted
        result.skipped_objects += len(item.keys) - len(keys)
        result.sample_keys += keys[: max(0, SAMPLE - len(result.sample_keys))]
    log.info(
        "%d plan items: deleted %d unbound rows, owed the files of %d image ids (%d objects, %s); skipped %d "
        "rows (bound, touched or held since the plan) and %d files (their image id has a row, or another run "
        "freed them)",
        result.items,
        result.rows_deleted,
        result.images_deleted,
        result.objects_owed,
        human_bytes(result.bytes_owed),
        result.skipped_rows,
        result.skipped_objects,
    )
    return result


def execute_item(
    conn: psycopg.Connection, run: RunRef, item: PlanItem, *, cutoff: datetime
) -> tuple[int, list[str], list[int | None], int, int]:
    """One plan item, in the caller's transaction: returns the rows deleted, the keys owed with their sizes, the
    number of image ids whose files were owed, and the number of the deleted rows' image ids that keep a row.

    A planned image id's files are owed when it has no row left and this transaction freed them: it deleted a row
    of that id, or it took the id's `blobgc.image_file` record (a DELETE, so two runs whose plans overlap take it
    once, and only one of them owes the files). Files planned by the configured sizes, for an image stored before
    blobgc recorded files (no record to take, sizes unknown), are owed whenever the id has no row left."""
    planned_ids = item.row_ids or []
    deleted = conn.execute(
        queries.load("images/delete_planned_images", "blobgc.kinds.images"),
        {"ids": [int(i) for i in planned_ids], "cutoff": cutoff},
    ).fetchall()
    gone = {str(row_id) for row_id, _ in deleted}
    freed_here = {image_id for _, image_id in deleted}
    owners = [IMAGE_FILES.identity(key) for key in item.keys]
    planned_images = {image_id for image_id in owners if image_id}
    checked = sorted(planned_images | freed_here)
    in_use = {
        r[0]
        for r in conn.execute(
            queries.load("images/select_images_in_use", "blobgc.kinds.images"), {"image_ids": checked}
        )
    }
    unused = sorted(planned_images - in_use)
    taken = {
        r[0]
        for r in conn.execute(queries.load("images/delete_image_files", "blobgc.kinds.images"), {"image_ids": unused})
    }
    unrecorded = {image_id for image_id, size in zip(owners, item.sizes, strict=True) if size is None}
    doomed = {image_id for image_id in unused if image_id in taken | unrecorded | freed_here}
    owed = [i for i, image_id in enumerate(owners) if image_id in doomed]
    keys = [item.keys[i] for i in owed]
    sizes = [item.sizes[i] for i in owed]
    kept = len(freed_here & in_use)
    record_deletions(conn, run, source=item.source, bucket=item.bucket, keys=keys, sizes=sizes, part=PART)
    add_counts(conn, run, rows=len(deleted))
    record_outcome(
        conn,
        run,
        item,
        rows_deleted=len(deleted),
        objects_owed=len(keys),
        skipped_ids=[i for i in planned_ids if i not in gone],
        skipped_keys=[item.keys[i] for i in sorted(set(range(len(item.keys))) - set(owed))],
    )
    if len(deleted) < len(planned_ids) or len(keys) < len(item.keys):
        log.info(
            "plan item %d: %d of %d planned rows skipped, %d of %d planned files kept",
            item.id,
            len(planned_ids) - len(deleted),
            len(planned_ids),
            len(item.keys) - len(keys),
            len(item.keys),
        )
    return len(deleted), keys, sizes, len(doomed), kept

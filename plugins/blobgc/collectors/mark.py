"""Seed 000's marking, set-based: flip `app.blob.unused` to match the references found, range by range,
after forgetting the page usages that were not confirmed within the page grace.

The seed tries to DELETE every blob inside a PL/pgSQL loop with one EXCEPTION block (a
subtransaction) per row, all in one transaction. Here each key range is one short transaction
with one UPDATE that touches only the rows whose flag flips, and stamps `updated_at` on a flip,
so the sweep's grace counts from the moment a blob became unused.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg import sql

from blobgc.core import queries
from blobgc.core.key_space import key_ranges
from blobgc.core.references import ReferenceSet, referenced_ids_query
from blobgc.core.results import TaskResult
from blobgc.core.runs import RunRef, add_counts, set_counts

log = logging.getLogger(__name__)

DEFAULT_RANGE_SIZE = 100_000


@dataclass
class MarkResult(TaskResult):
    """Flips made (or, on a dry run, that would be made) by one marking pass."""

    became_unused: int = 0
    became_used: int = 0
    visibility_changed: int = 0
    ranges: int = 0


def mark_unused_blobs(
    conn: psycopg.Connection,
    refs: ReferenceSet,
    *,
    range_size: int = DEFAULT_RANGE_SIZE,
    dry_run: bool = False,
    workers: int = 1,
    connect: Callable[[], psycopg.Connection] | None = None,
) -> MarkResult:
    """Set `unused` and `visibility` for every blob from the references found now, one range per transaction.

    With `workers` > 1, ranges are marked on that many connections from `connect` at once.
    """
    marks = sql.SQL(queries.load("mark/select_blob_marks")).format(referenced=referenced_ids_query(refs, "range"))
    statement = sql.SQL(queries.load("mark/count_blob_marks" if dry_run else "mark/update_blob_marks")).format(
        marks=marks
    )
    ranges = key_ranges(conn, range_size)

    def mark_range(c: psycopg.Connection, lo: str | None, hi: str | None) -> tuple[int, int, int]:
        with c.transaction():
            unused, used, visibility = c.execute(statement, {"lo": lo, "hi": hi}).fetchone()
        if unused or used or visibility:
            log.info("range [%s, %s): %d became unused, %d became used, %d visibility changes%s",
                     lo or "start", hi or "end", unused, used, visibility, " (dry run)" if dry_run else "")
        return unused, used, visibility

    if workers > 1 and len(ranges) > 1:
        if connect is None:
            raise ValueError("workers > 1 needs `connect` to open one connection per worker")
        local = threading.local()
        opened: list[psycopg.Connection] = []
        lock = threading.Lock()

        def in_worker(bounds: tuple[str | None, str | None]) -> tuple[int, int, int]:
            if not hasattr(local, "conn"):
                local.conn = connect()
                with lock:
                    opened.append(local.conn)
            return mark_range(local.conn, *bounds)

        try:
            with ThreadPoolExecutor(workers) as pool:
                counts = list(pool.map(in_worker, ranges))
        finally:
            for c in opened:
                c.close()
    else:
        counts = [mark_range(conn, lo, hi) for lo, hi in ranges]
    result = MarkResult(
        became_unused=sum(c[0] for c in counts),
        became_used=sum(c[1] for c in counts),
        visibility_changed=sum(c[2] for c in counts),
        ranges=len(ranges),
    )
    log.info("marked %d ranges: %d blobs became unused, %d became used, %d visibility changes%s",
             result.ranges, result.became_unused, result.became_used, result.visibility_changed,
             " (dry run: nothing written)" if dry_run else "")
    return result


@dataclass
class PageUsagesRemoved(TaskResult):
    """Page usages not confirmed within the page grace that were removed (on a dry run, that would be)."""

    removed: int = 0


def remove_stale_page_usages(
    conn: psycopg.Connection, run: RunRef, *, cutoff: datetime, batch_size: int = 1000
) -> int:
    """Delete page usages not confirmed since `cutoff` (seed 000's SweepPages), one batch per transaction.

    Returns how many. A dry run counts them and deletes nothing. Visibility is recomputed by the
    marking pass.
    """
    if run.dry_run:
        with conn.transaction():
            n = conn.execute(queries.load("pages/count_stale_page_usages"), {"cutoff": cutoff}).fetchone()[0]
            set_counts(conn, run, rows=n, objects=0, bytes_=0, part="page usages")  # a retry reports it once
        log.info("dry run: %d page usages not confirmed since %s would be removed", n, cutoff)
        return n
    total = 0
    while True:
        with conn.transaction():
            removed = conn.execute(
                queries.load("pages/delete_stale_page_usages"), {"cutoff": cutoff, "batch_size": batch_size}
            ).fetchall()
            add_counts(conn, run, rows=len(removed))
        total += len(removed)
        if removed:
            log.info("removed %d stale page usages (%d so far)", len(removed), total)
        if len(removed) < batch_size:
            return total

"""Seed 000's page polling: page usages not confirmed within the page grace are forgotten before the mark.

A page that stops using a blob is never told; the application confirms each usage when it polls a page
(`app.page_using_blob.updated_at`). The mark DAG removes the usages not confirmed since its cutoff, then
marks: a blob whose last usage went is unused from then on, and its `visibility` follows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

import psycopg

from blobgc.core import queries
from blobgc.core.results import TaskResult
from blobgc.core.runs import RunRef, add_counts, set_counts

log = logging.getLogger(__name__)
SQL = "blobgc.kinds.blobs"


@dataclass
class PageUsagesRemoved(TaskResult):
    """Page usages not confirmed within the page grace that were removed (on a dry run, that would be)."""

    removed: int = 0


def remove_stale_page_usages(conn: psycopg.Connection, run: RunRef, *, cutoff: datetime, batch_size: int = 1000) -> int:
    """Delete page usages not confirmed since `cutoff` (seed 000's SweepPages), one batch per transaction.

    Returns how many. A dry run counts them and deletes nothing. Visibility is recomputed by the
    marking pass.
    """
    if run.dry_run:
        with conn.transaction():
            (n,) = queries.one_row(conn.execute(queries.load("pages/count_stale_page_usages", SQL), {"cutoff": cutoff}))
            set_counts(conn, run, rows=n, objects=0, bytes_=0, part="page usages")  # a retry reports it once
        log.info("dry run: %d page usages not confirmed since %s would be removed", n, cutoff)
        return n
    total = 0
    while True:
        with conn.transaction():
            removed = conn.execute(
                queries.load("pages/delete_stale_page_usages", SQL), {"cutoff": cutoff, "batch_size": batch_size}
            ).fetchall()
            add_counts(conn, run, rows=len(removed))
        total += len(removed)
        if removed:
            log.info("removed %d stale page usages (%d so far)", len(removed), total)
        if len(removed) < batch_size:
            return total

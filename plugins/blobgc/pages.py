"""Seed 000's page-usage polling: the application confirms usages, the collector forgets stale ones."""
from __future__ import annotations

import logging
from datetime import datetime

import psycopg

from blobgc import queries
from blobgc.runs import RunRef, add_counts, set_counts

log = logging.getLogger(__name__)


def poll_page_usage(conn: psycopg.Connection, blob_id: str, url: str) -> None:
    """Record that the page at `url` uses `blob_id` now, and make the blob PUBLIC (the app's write path)."""
    with conn.transaction():
        conn.execute(queries.load("pages/upsert_page_usage"), {"blob_id": blob_id, "url": url})
        conn.execute(queries.load("pages/update_blob_public"), {"blob_id": blob_id})


def remove_stale_page_usages(
    conn: psycopg.Connection, run: RunRef, *, cutoff: datetime, batch_size: int = 1000
) -> int:
    """Delete page usages not confirmed since `cutoff`, one batch per transaction; return how many.

    A dry run counts them and deletes nothing. Visibility is recomputed by the marking pass.
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

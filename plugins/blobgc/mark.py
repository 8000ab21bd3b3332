"""Seed 000's marking, set-based: flip `app.blob.unused` to match the references found, range by range.

The seed tries to DELETE every blob inside a PL/pgSQL loop with one EXCEPTION block (a
subtransaction) per row, all in one transaction. Here each key range is one short transaction
with one UPDATE that touches only the rows whose flag flips, and stamps `updated_at` on a flip,
so the sweep's grace counts from the moment a blob became unused.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
from psycopg import sql

from blobgc import queries
from blobgc.references import ReferenceSet, referenced_ids_query

log = logging.getLogger(__name__)

DEFAULT_RANGE_SIZE = 100_000


@dataclass
class MarkResult:
    """Flips made (or, on a dry run, that would be made) by one marking pass."""

    became_unused: int = 0
    became_used: int = 0
    visibility_changed: int = 0
    ranges: int = 0


def key_ranges(conn: psycopg.Connection, range_size: int) -> Iterator[tuple[str, str | None]]:
    """Walk app.blob's primary key in ranges [lo, hi) of about `range_size` ids; hi is None for the last."""
    lo = conn.execute(queries.load("mark/select_first_blob_id")).fetchone()[0]
    while lo is not None:
        row = conn.execute(
            queries.load("mark/select_next_range_start"), {"lo": lo, "range_size": range_size}
        ).fetchone()
        hi = row[0] if row else None
        yield lo, hi
        lo = hi


def mark_unused_blobs(
    conn: psycopg.Connection,
    refs: ReferenceSet,
    *,
    range_size: int = DEFAULT_RANGE_SIZE,
    dry_run: bool = False,
) -> MarkResult:
    """Set `unused` and `visibility` for every blob from the references found now, one range per transaction."""
    referenced = referenced_ids_query(refs, "range")
    update_flags = sql.SQL(queries.load("mark/update_unused_flags")).format(referenced=referenced)
    count_flips = sql.SQL(queries.load("mark/count_unused_flips")).format(referenced=referenced)
    update_visibility = queries.load("mark/update_blob_visibility")
    result = MarkResult()
    for lo, hi in key_ranges(conn, range_size):
        bounds = {"lo": lo, "hi": hi}
        with conn.transaction():
            if dry_run:
                unused, used = conn.execute(count_flips, bounds).fetchone()
            else:
                unused, used = conn.execute(update_flags, bounds).fetchone()
                result.visibility_changed += len(conn.execute(update_visibility, bounds).fetchall())
        result.became_unused += unused
        result.became_used += used
        result.ranges += 1
        if unused or used:
            log.info("range [%s, %s): %d became unused, %d became used%s",
                     lo, hi or "end", unused, used, " (dry run)" if dry_run else "")
    log.info("marked %d ranges: %d blobs became unused, %d became used, %d visibility changes",
             result.ranges, result.became_unused, result.became_used, result.visibility_changed)
    return result

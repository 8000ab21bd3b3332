"""Cut app.blob's primary key into ranges, so marking and sweeping work range by range, in parallel."""
from __future__ import annotations

import psycopg

from blobgc.core import queries

KeyRange = tuple[str | None, str | None]  # [lo, hi); None is open-ended


def key_ranges(conn: psycopg.Connection, range_size: int) -> list[KeyRange]:
    """Ranges [lo, hi) of about `range_size` ids covering every blob; None bounds are open.

    The cuts come from the planner's histogram of ids, so no scan is needed; the first and last
    ranges are open, so rows outside stale statistics are still covered. Without statistics (a new
    or small table) the cuts are found by walking the index.
    """
    rows, bounds = conn.execute(queries.load("blobs/select_blob_id_histogram")).fetchone()
    if bounds and rows > 0:
        wanted = max(1, -(-int(rows) // range_size))
        step = max(1, len(bounds) // wanted)
        cuts = bounds[step:len(bounds) - 1:step] if wanted > 1 else []
        edges: list[str | None] = [None, *cuts, None]
        return list(zip(edges[:-1], edges[1:], strict=True))
    ranges: list[KeyRange] = []
    lo = conn.execute(queries.load("blobs/select_first_blob_id")).fetchone()[0]
    while lo is not None:
        row = conn.execute(queries.load("blobs/select_next_range_start"), {"lo": lo, "range_size": range_size}).fetchone()
        hi = row[0] if row else None
        ranges.append((None if not ranges else lo, hi))
        lo = hi
    return ranges or [(None, None)]


def split_key_space(conn: psycopg.Connection, parts: int) -> list[KeyRange]:
    """About `parts` ranges of similar size covering every blob (one per parallel worker)."""
    if parts <= 1:
        return [(None, None)]
    rows = conn.execute(queries.load("blobs/select_blob_id_histogram")).fetchone()[0]
    if rows <= 0:
        rows = conn.execute(queries.load("blobs/count_blobs")).fetchone()[0]
    return key_ranges(conn, max(1, -(-rows // parts)))

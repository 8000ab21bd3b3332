"""Cut a table's id column into ranges, so marking and sweeping work range by range, in parallel.

Works on any table with an id column of any ordered type (text ids, a collection's bigint
or uuid ids); range bounds travel as text and are cast back to the id's type in SQL.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from blobgc.core import queries

KeyRange = tuple[str | None, str | None]  # [lo, hi); None is open-ended


@dataclass(frozen=True)
class IdColumn:
    """A table's id column and its type: what ranges are cut over."""

    table: str  # schema-qualified
    column: str = "id"
    type: str = "text"

    def format(self, name: str) -> sql.Composed:
        return sql.SQL(queries.load(name)).format(
            table=sql.Identifier(*self.table.split(".", 1)), id=sql.Identifier(self.column), type=sql.SQL(self.type)
        )


def key_ranges(conn: psycopg.Connection, range_size: int, ids: IdColumn) -> list[KeyRange]:
    """Ranges [lo, hi) of about `range_size` ids covering every row; None bounds are open.

    The cuts come from the planner's histogram of ids, so no scan is needed; the first and last
    ranges are open, so rows outside stale statistics are still covered. Without statistics (a new
    or small table) the cuts are found by walking the index.
    """
    rows, bounds = queries.one_row(
        conn.execute(queries.load("key_space/select_id_histogram"), {"table": ids.table, "column": ids.column})
    )
    if bounds and rows > 0:
        wanted = max(1, -(-int(rows) // range_size))
        step = max(1, len(bounds) // wanted)
        cuts = bounds[step : len(bounds) - 1 : step] if wanted > 1 else []
        edges: list[str | None] = [None, *cuts, None]
        return list(zip(edges[:-1], edges[1:], strict=True))
    ranges: list[KeyRange] = []
    first = conn.execute(ids.format("key_space/select_first_id")).fetchone()
    lo = first[0] if first else None
    while lo is not None:
        row = conn.execute(
            ids.format("key_space/select_next_range_start"), {"lo": lo, "range_size": range_size}
        ).fetchone()
        hi = row[0] if row else None
        ranges.append((None if not ranges else lo, hi))
        lo = hi
    return ranges or [(None, None)]


def split_key_space(conn: psycopg.Connection, parts: int, ids: IdColumn) -> list[KeyRange]:
    """About `parts` ranges of similar size covering every row (one per parallel worker)."""
    if parts <= 1:
        return [(None, None)]
    rows = queries.one_row(
        conn.execute(queries.load("key_space/select_id_histogram"), {"table": ids.table, "column": ids.column})
    )[0]
    if rows <= 0:
        rows = queries.one_row(conn.execute(ids.format("key_space/count_rows")))[0]
    return key_ranges(conn, max(1, -(-rows // parts)), ids)

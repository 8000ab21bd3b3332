"""Seed 000's marking, set-based: record which rows of a collection no reference points at, range by range.

A collection in column mode (seed 000's `app_blob`, declared by the kind `blobs`) keeps its mark in its own
columns, with its kind's statements: `mark_in_columns`. Every other collection keeps it in blobgc's own table
`blobgc.mark_<name>`, which holds the ids found unused and since when: `mark_collection`. Nothing is ever
written to a user's table.

The seed tries to DELETE every blob inside a PL/pgSQL loop with one EXCEPTION block (a
subtransaction) per row, all in one transaction. Here each key range is one short transaction
with one UPDATE that touches only the rows whose flag flips, and stamps `updated_at` on a flip,
so the sweep's grace counts from the moment a blob became unused.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from blobgc.core import queries
from blobgc.core.collections import BoundCollection, ensure_mark_table
from blobgc.core.key_space import KeyRange, key_ranges
from blobgc.core.references import ReferenceSet, referenced_ids_query
from blobgc.core.replica import read_only
from blobgc.core.results import TaskResult

log = logging.getLogger(__name__)

DEFAULT_RANGE_SIZE = 100_000


@dataclass
class MarkResult(TaskResult):
    """Flips made (or, on a dry run, that would be made) by one marking pass."""

    became_unused: int = 0
    became_used: int = 0
    visibility_changed: int = 0
    ranges: int = 0


Bind = Callable[[psycopg.Connection, str | None, str | None], dict[str, Any]]


@contextmanager
def referenced_source(
    refs: ReferenceSet, read: Callable[[], psycopg.Connection] | None
) -> Iterator[tuple[sql.Composable, Bind]]:
    """Where a range's referenced ids come from, as the mark's statements' `{referenced}`, and the parameters one
    range binds (called before the range's transaction on the primary opens).

    Without `read`: a scan of every referencing table on the primary, in the mark's own statement. With `read` (the
    read replica's connections, `blobgc.core.replica`): the referencing tables are scanned on the replica, and the
    mark's statement on the primary reads those ids together with a look-up, by id, of the range's rows the replica
    found unreferenced (`referenced_ids_query` scope "unseen"): one statement, one snapshot, so a reference the
    replica has not replayed yet keeps its row used, even one committed while the range is marked. One replica
    connection per worker thread, closed at the end."""
    if read is None:
        yield referenced_ids_query(refs, "range"), lambda _conn, lo, hi: {"lo": lo, "hi": hi}
        return
    on_replica = sql.SQL(queries.load("replica/select_referenced_ids")).format(
        referenced=referenced_ids_query(refs, "range")
    )
    local = threading.local()
    opened: list[psycopg.Connection] = []
    lock = threading.Lock()

    def bind(_primary: psycopg.Connection, lo: str | None, hi: str | None) -> dict[str, Any]:
        if not hasattr(local, "conn"):
            local.conn = read()
            with lock:
                opened.append(local.conn)
            read_only(local.conn)
        seen = [row[0] for row in local.conn.execute(on_replica, {"lo": lo, "hi": hi})]
        return {"lo": lo, "hi": hi, "seen": seen}

    referenced = sql.SQL(queries.load("replica/referenced_ids_rechecked")).format(
        id=sql.Identifier(refs.id_column),
        blobs=refs.table_identifier,
        t=sql.SQL(refs.id_type),
        rechecked=referenced_ids_query(refs, "unseen"),
    )
    try:
        yield referenced, bind
    finally:
        for c in opened:
            c.close()


def mark_in_columns(
    conn: psycopg.Connection,
    bound: BoundCollection,
    refs: ReferenceSet,
    *,
    range_size: int = DEFAULT_RANGE_SIZE,
    dry_run: bool = False,
    workers: int = 1,
    connect: Callable[[], psycopg.Connection] | None = None,
    read: Callable[[], psycopg.Connection] | None = None,
) -> MarkResult:
    """Mark a column-mode collection in its own columns, from the references found now, one range per transaction,
    with its kind's statements (seed 000's app_blob: `unused`, stamped `updated_at`, and `visibility`).

    With `workers` > 1, ranges are marked on that many connections from `connect` at once. With `read`, the
    referencing tables are scanned on a read replica (`referenced_source`).
    """
    mode = bound.collection.mode
    if mode is None:
        raise ValueError(f"collection {bound.name!r} is not in column mode: mark it with mark_collection")
    with referenced_source(refs, read) as (referenced, bind):
        marks = sql.SQL(queries.load(mode.statement("mark/select_marks"))).format(referenced=referenced)
        statement = sql.SQL(
            queries.load(mode.statement("mark/count_marks" if dry_run else "mark/update_marks"))
        ).format(marks=marks)
        ranges = key_ranges(conn, range_size, bound.id_column)

        def mark_range(c: psycopg.Connection, lo: str | None, hi: str | None) -> tuple[int, int, int]:
            params = bind(c, lo, hi)  # a replica's scan, before the primary's transaction opens
            with c.transaction():
                unused, used, visibility = queries.one_row(c.execute(statement, params))
            if unused or used or visibility:
                log.info(
                    "range [%s, %s): %d became unused, %d became used, %d visibility changes%s",
                    lo or "start",
                    hi or "end",
                    unused,
                    used,
                    visibility,
                    " (dry run)" if dry_run else "",
                )
            return unused, used, visibility

        counts = in_ranges(conn, ranges, mark_range, workers=workers, connect=connect)
    result = MarkResult(
        became_unused=sum(c[0] for c in counts),
        became_used=sum(c[1] for c in counts),
        visibility_changed=sum(c[2] for c in counts),
        ranges=len(ranges),
    )
    log.info(
        "marked %d ranges: %d blobs became unused, %d became used, %d visibility changes%s",
        result.ranges,
        result.became_unused,
        result.became_used,
        result.visibility_changed,
        " (dry run: nothing written)" if dry_run else "",
    )
    return result


def in_ranges(
    conn: psycopg.Connection,
    ranges: list[KeyRange],
    mark_range: Callable[[psycopg.Connection, str | None, str | None], tuple[int, ...]],
    *,
    workers: int,
    connect: Callable[[], psycopg.Connection] | None,
) -> list[tuple[int, ...]]:
    """`mark_range` over every range: on `conn`, or with `workers` > 1 on that many connections from `connect`."""
    if workers <= 1 or len(ranges) <= 1:
        return [mark_range(conn, lo, hi) for lo, hi in ranges]
    if connect is None:
        raise ValueError("workers > 1 needs `connect` to open one connection per worker")
    local = threading.local()
    opened: list[psycopg.Connection] = []
    lock = threading.Lock()

    def in_worker(bounds: KeyRange) -> tuple[int, ...]:
        if not hasattr(local, "conn"):
            local.conn = connect()
            with lock:
                opened.append(local.conn)
        return mark_range(local.conn, *bounds)

    try:
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(in_worker, ranges))
    finally:
        for c in opened:
            c.close()


def mark_collection(
    conn: psycopg.Connection,
    bound: BoundCollection,
    refs: ReferenceSet,
    *,
    range_size: int = DEFAULT_RANGE_SIZE,
    dry_run: bool = False,
    workers: int = 1,
    connect: Callable[[], psycopg.Connection] | None = None,
    read: Callable[[], psycopg.Connection] | None = None,
) -> MarkResult:
    """Record, in `blobgc.mark_<name>`, the collection's rows that no reference points at now, one range per
    transaction; forget those referenced again or gone. The moment a row is first found unused is when its grace
    starts. A dry run counts and writes nothing (not even the mark table). With `read`, the referencing tables are
    scanned on a read replica (`referenced_source`)."""
    if not dry_run:
        ensure_mark_table(conn, bound)
    with referenced_source(refs, read) as (referenced, bind):
        if bound.mark_table_exists(conn):
            found = bound.statement("collections/select_found_marks", referenced=referenced)
            statement = bound.statement(
                "collections/count_marks" if dry_run else "collections/update_marks", found=found
            )
        else:  # a dry run before the first real mark: every unreferenced row would be recorded
            statement = bound.statement("collections/count_unreferenced_rows", referenced=referenced)
        ranges = key_ranges(conn, range_size, bound.id_column)

        def mark_range(c: psycopg.Connection, lo: str | None, hi: str | None) -> tuple[int, int]:
            params = bind(c, lo, hi)  # a replica's scan, before the primary's transaction opens
            with c.transaction():
                unused, used = queries.one_row(c.execute(statement, params))
            if unused or used:
                log.info(
                    "%s range [%s, %s): %d became unused, %d became used%s",
                    bound.name,
                    lo or "start",
                    hi or "end",
                    unused,
                    used,
                    " (dry run)" if dry_run else "",
                )
            return unused, used

        counts = in_ranges(conn, ranges, mark_range, workers=workers, connect=connect)
    result = MarkResult(
        became_unused=sum(c[0] for c in counts), became_used=sum(c[1] for c in counts), ranges=len(ranges)
    )
    log.info(
        "collection %s: marked %d ranges: %d rows became unused, %d became used%s",
        bound.name,
        result.ranges,
        result.became_unused,
        result.became_used,
        " (dry run: nothing written)" if dry_run else "",
    )
    return result


def mark_any(
    conn: psycopg.Connection,
    bound: BoundCollection,
    refs: ReferenceSet,
    *,
    dry_run: bool = False,
    workers: int = 1,
    connect: Callable[[], psycopg.Connection] | None = None,
    read: Callable[[], psycopg.Connection] | None = None,
) -> MarkResult:
    """Mark one collection: in its own columns if a kind declares it in column mode (`mark_in_columns`), any other
    in its mark table; with `read`, its referencing tables are scanned on a read replica."""
    if bound.collection.column_mode:
        return mark_in_columns(conn, bound, refs, dry_run=dry_run, workers=workers, connect=connect, read=read)
    return mark_collection(conn, bound, refs, dry_run=dry_run, workers=workers, connect=connect, read=read)

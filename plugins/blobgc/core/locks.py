"""The advisory-lock protocols that writers and the collector share, so a file is never deleted under a new row.

**Stripes** (seed 001). An image id's files can be needed again by any writer that adds a row for an
existing id (the crawler's branch 2, a pre-upload reusing bytes, an attach). Writers hold the id's
stripe *shared* while they check that a row with the id still exists and insert theirs; the drain's
guard holds it *alone* while it checks that no row is left and deletes the files. Either the writer
comes first (the guard sees its row) or the guard does (the writer finds no row and starts anew).
The crawler holds the URL hash's stripe alone while it downloads, so two runs never fetch one URL.

**Generations** (seed 003). A writer holds the generation it writes into *shared* until it
commits; the collector holds a generation *alone* from before its reference scan to its last
deletion, and so does the drain's guard of its keys. Either the writer committed first (its
reference is seen) or it waits and then finds a newer current generation.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import psycopg

from blobgc.core import queries

IMAGE_LOCK_CLASS = 0x62676331  # "bgc1": image-id stripes
URL_LOCK_CLASS = 0x62676332  # "bgc2": URL-hash stripes
GENERATION_LOCK_CLASS = 0x62676333  # "bgc3": reference generations (key: the generation)
OPENING_LOCK_CLASS = 0x62676334  # "bgc4": one open_generation at a time
STRIPES = 1024


def stripe(value: str) -> int:
    return zlib.crc32(value.encode()) % STRIPES


def lock_stripes(conn: psycopg.Connection, lock_class: int, values: Iterable[str], *, exclusive: bool) -> None:
    """Hold the stripes of `values` until the transaction ends (in stripe order, so lockers never deadlock)."""
    stripes = sorted({stripe(v) for v in values})
    if stripes:
        conn.execute(
            queries.load("locks/lock_stripes"), {"lock_class": lock_class, "stripes": stripes, "exclusive": exclusive}
        ).fetchall()


@contextmanager
def session_stripe(conn: psycopg.Connection, lock_class: int, value: str, *, exclusive: bool) -> Iterator[None]:
    """Hold one stripe across transactions (a download, an upload), released however the block ends."""
    params = {"lock_class": lock_class, "stripe": stripe(value), "exclusive": exclusive}
    conn.execute(queries.load("locks/lock_stripe_for_session"), params).fetchall()
    try:
        yield
    finally:
        if not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            conn.execute(queries.load("locks/unlock_stripe_for_session"), params).fetchall()


def hold_generation_shared(conn: psycopg.Connection, generation: int) -> None:
    """A writer's hold on a generation until its transaction ends."""
    conn.execute(
        queries.load("locks/lock_generation"),
        {"exclusive": False, "lock_class": GENERATION_LOCK_CLASS, "generation": generation},
    )


def hold_generation_alone(conn: psycopg.Connection, generation: int) -> None:
    """Hold a generation alone until the transaction ends (the drain's guard for mail objects)."""
    conn.execute(
        queries.load("locks/lock_generation_for_transaction"),
        {"lock_class": GENERATION_LOCK_CLASS, "generation": generation},
    )


@contextmanager
def collecting_generation(conn: psycopg.Connection, generation: int) -> Iterator[None]:
    """Hold `generation` alone for this session: writers of it wait, and so does any other collector."""
    conn.execute(
        queries.load("locks/lock_generation"),
        {"exclusive": True, "lock_class": GENERATION_LOCK_CLASS, "generation": generation},
    )
    try:
        yield
    finally:
        if not conn.closed:
            conn.execute(
                queries.load("locks/unlock_generation"), {"lock_class": GENERATION_LOCK_CLASS, "generation": generation}
            )


def hold_generation_opening(conn: psycopg.Connection) -> None:
    """One opener of a generation at a time, until the transaction ends."""
    conn.execute(queries.load("locks/lock_generation_opening"), {"lock_class": OPENING_LOCK_CLASS})

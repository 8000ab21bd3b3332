"""Reads from a replica: the scans that only choose candidates may read a read replica of the application database.

The optional connection `blobgc_postgres_replica` names it (docs/reference.md §2). When it is set, the mark's scans
of the referencing tables, the sweep's candidate scans and reconcile's key streams read from it; everything that
writes, and every decision that deletes, stays on the primary (`blobgc_postgres`), which re-checks in the deleting
transaction as it always has: a row is deleted only if no reference points at it on the primary, an object only if
no row on the primary forms its key. A replica that lags can only make blobgc keep more, never delete more: what it
has not seen yet is found on the primary by the re-check, and what it still shows is kept one run longer.

The replica must be a physical (streaming) standby of the whole database, blobgc's schema included: the sweep's
scans join blobgc's own mark tables. `Reads` is where one step reads, with the replica's lag as measured when the
step started; the run records it per step (`record`) for its receipt and details.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

from blobgc.core import queries
from blobgc.core.runs import RunRef

log = logging.getLogger(__name__)

PRIMARY = "blobgc_postgres"
REPLICA = "blobgc_postgres_replica"


@dataclass(frozen=True)
class Reads:
    """Where one step's candidate scans read: `connect` opens a connection to `connection` (the primary's or the
    replica's); `standby` and `lag_seconds` are the replica's state when the step started (None on the primary, and
    `lag_seconds` None on a server that is not a standby)."""

    connection: str
    connect: Callable[[], psycopg.Connection]
    standby: bool | None = None
    lag_seconds: float | None = None

    @property
    def replica(self) -> bool:
        return self.connection != PRIMARY

    def describe(self) -> str:
        if not self.replica:
            return f"connection {self.connection} (the primary; no {REPLICA} is set)"
        if not self.standby:
            return f"connection {self.connection} (not a standby: pg_is_in_recovery() is false, its lag is unknown)"
        if self.lag_seconds is None:
            return (
                f"connection {self.connection} (a standby whose lag is unknown: not streaming from its primary, or "
                "nothing replayed since it started; what it has not replayed is found on the primary)"
            )
        return f"connection {self.connection} (a standby {self.lag_seconds:.1f} s behind the primary)"

    def as_json(self) -> dict[str, object]:
        return {"connection": self.connection, "standby": self.standby, "lag_seconds": self.lag_seconds}


def measure(conn: psycopg.Connection) -> tuple[bool, float | None]:
    """Whether `conn`'s server is a standby, and how far behind its primary (seconds; None when not a standby)."""
    standby, lag = queries.one_row(conn.execute(queries.load("replica/select_lag")))
    return bool(standby), (float(lag) if lag is not None else None)


def replica_reads(connect: Callable[[], psycopg.Connection]) -> Reads:
    """The replica's `Reads`, its lag measured now on a connection of its own (a replica that cannot be reached
    fails here, before any scan)."""
    with connect() as conn:
        standby, lag = measure(conn)
    return Reads(REPLICA, connect, standby, lag)


@contextmanager
def reading(reads: Reads, primary: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """The connection a step's candidate scans read on: `primary` itself, or a connection of their own to the replica,
    read-only (`read_only`), closed afterwards."""
    if not reads.replica:
        yield primary
        return
    conn = reads.connect()
    try:
        yield read_only(conn)
    finally:
        conn.close()


def read_only(conn: psycopg.Connection) -> psycopg.Connection:
    """`conn`, its session read-only: a replica connection that points at a primary by mistake still writes nothing."""
    conn.execute("SET default_transaction_read_only = on")
    return conn


def record(conn: psycopg.Connection, run: RunRef, task_id: str, reads: Reads) -> None:
    """Note on the run which connection step `task_id` read, and (the first time) the replica's lag; and log it."""
    log.info("%s: candidate scans read %s; every deletion re-checks on %s", task_id, reads.describe(), PRIMARY)
    with conn.transaction():
        conn.execute(
            queries.load("replica/record_step_reads"),
            {
                "dag_id": run.dag_id,
                "run_id": run.run_id,
                "task_id": task_id,
                "reads": json.dumps(reads.as_json()),
                "replica": reads.replica,
                "lag_seconds": reads.lag_seconds,
            },
        )

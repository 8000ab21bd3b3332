"""Run recording: one `blobgc.run` row per DAG run, feeding the `blobgc.reclaim_daily` view.

Counters are bumped inside the transaction that does the counted work, so a retried task never
counts twice what it already committed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from blobgc import queries


@dataclass(frozen=True)
class RunRef:
    """Which DAG run the work belongs to, and whether it may change anything."""

    dag_id: str
    run_id: str
    dry_run: bool = False


def ensure_run(conn: psycopg.Connection, run: RunRef, reference_time: datetime | None = None) -> None:
    """Create the run's row if it is missing (every task calls this; retries are harmless)."""
    with conn.transaction():
        conn.execute(
            queries.load("runs/upsert_run"),
            {"dag_id": run.dag_id, "run_id": run.run_id, "dry_run": run.dry_run, "reference_time": reference_time},
        )


def add_counts(conn: psycopg.Connection, run: RunRef, *, rows: int = 0, objects: int = 0, bytes_: int = 0) -> None:
    """Add to the run's counters; call inside the transaction that did the work."""
    if rows or objects or bytes_:
        conn.execute(
            queries.load("runs/add_run_counts"),
            {"dag_id": run.dag_id, "run_id": run.run_id, "rows": rows, "objects": objects, "bytes": bytes_},
        )


def set_counts(conn: psycopg.Connection, run: RunRef, *, rows: int, objects: int, bytes_: int) -> None:
    """Set the run's counters outright: for a dry run's report, computed whole in one transaction."""
    conn.execute(
        queries.load("runs/set_run_counts"),
        {"dag_id": run.dag_id, "run_id": run.run_id, "rows": rows, "objects": objects, "bytes": bytes_},
    )


def finish_run(conn: psycopg.Connection, run: RunRef, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """Stamp the run finished, merge `details` into its report, and return its totals."""
    with conn.transaction():
        row = conn.execute(
            queries.load("runs/finish_run"),
            {"dag_id": run.dag_id, "run_id": run.run_id, "details": json.dumps(details or {}, default=str)},
        ).fetchone()
    if row is None:
        raise LookupError(f"no blobgc.run row for {run.dag_id}/{run.run_id}")
    rows_deleted, objects_deleted, bytes_reclaimed, first = row
    return {
        "first_finish": first,
        "dag_id": run.dag_id,
        "run_id": run.run_id,
        "dry_run": run.dry_run,
        "rows_deleted": rows_deleted,
        "objects_deleted": objects_deleted,
        "bytes_reclaimed": bytes_reclaimed,
    }

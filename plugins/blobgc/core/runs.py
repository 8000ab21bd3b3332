"""Run recording: one `blobgc.run` row per DAG run, feeding the `blobgc.reclaim_daily` view.

Counters are bumped inside the transaction that does the counted work, so a retried task never
counts twice what it already committed. A dry run's report is kept per part of the run (a sweep's id
range, a media shard): a retried dry-run task takes its part's report back before writing it again.

Every cut-off a run applies is measured from its *reference time*, fixed by its first task and kept in
`blobgc.run`: the run's data-interval end, but never later than the database's `now()` at that moment.
A mistyped backfill, a manual trigger or `airflow dags test dag 2030-01-01` thus never moves a grace
period's end past the present; such a run logs that it was clamped.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import psycopg

from blobgc.core import queries

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunRef:
    """Which DAG run the work belongs to, whether it may change anything, and the instant its cut-offs count from."""

    dag_id: str
    run_id: str
    dry_run: bool = False
    reference_time: datetime | None = None


def ensure_run(conn: psycopg.Connection, run: RunRef, requested_time: datetime | None = None) -> RunRef:
    """Create the run's row if it is missing and return `run` with its reference time.

    The first call fixes the reference time as the earlier of `requested_time` (the data-interval end)
    and the database's `now()`; later calls (retries, other tasks) read it back, so every task and
    retry of a run applies the same cut-offs. A requested time in the future is logged as clamped.
    """
    with conn.transaction():
        reference, now = queries.one_row(
            conn.execute(
                queries.load("runs/upsert_run"),
                {"dag_id": run.dag_id, "run_id": run.run_id, "dry_run": run.dry_run, "reference_time": requested_time},
            )
        )
    reference = reference or now
    if requested_time is not None and requested_time > reference:
        log.warning(
            "run %s of %s asks for cut-offs measured from %s, which is in the future: they are measured "
            "from %s instead (clamped to the database's now() when the run started)",
            run.run_id,
            run.dag_id,
            requested_time.isoformat(),
            reference.isoformat(),
        )
    return replace(run, reference_time=reference)


def cutoff(run: RunRef, **grace: float) -> datetime:
    """The run's reference time minus a grace (`cutoff(run, hours=24)`): the one way every DAG computes a cut-off."""
    if run.reference_time is None:
        raise ValueError(f"run {run.run_id} of {run.dag_id} has no reference time: call ensure_run first")
    return run.reference_time - timedelta(**grace)


def add_counts(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    rows: int = 0,
    objects: int = 0,
    bytes_: int = 0,
    part: str = "",
    collection: str | None = None,
    bytes_deleted: int = 0,
) -> None:
    """Add to the run's counters; call inside the transaction that did the work.

    `bytes_` are bytes reclaimed, gone from storage; `bytes_deleted` are bytes taken out of the bucket's view (gone,
    moved into quarantine, or left as noncurrent versions), which a real run counts apart (`blobgc.reclaim_daily`).
    On a dry run the figures are what would go, kept per `part` of the run (see `restart_dry_run_part`).
    With `collection`, they also count for that collection (`blobgc.reclaim_daily_by_collection`); a dry
    run's part then belongs to one collection.
    """
    if not (rows or objects or bytes_ or bytes_deleted):
        return
    params = {
        "dag_id": run.dag_id,
        "run_id": run.run_id,
        "rows": rows,
        "objects": objects,
        "bytes": bytes_,
        "collection": collection,
    }
    if run.dry_run:
        write_part_counts(conn, {**params, "part": part, "replace": False})
        return
    conn.execute(queries.load("runs/add_run_counts"), {**params, "bytes_deleted": bytes_deleted})
    if collection is not None:
        add_collection_counts(
            conn, run, collection, rows=rows, objects=objects, bytes_=bytes_, bytes_deleted=bytes_deleted
        )


def add_collection_counts(
    conn: psycopg.Connection,
    run: RunRef,
    collection: str,
    *,
    rows: int = 0,
    objects: int = 0,
    bytes_: int = 0,
    bytes_deleted: int = 0,
) -> None:
    """Count work already in the run's totals for one collection too (the drain's objects, by their log's source)."""
    if run.dry_run or not (rows or objects or bytes_ or bytes_deleted):
        return
    conn.execute(
        queries.load("runs/add_collection_counts"),
        {
            "dag_id": run.dag_id,
            "run_id": run.run_id,
            "collection": collection,
            "rows": rows,
            "objects": objects,
            "bytes": bytes_,
            "bytes_deleted": bytes_deleted,
        },
    )


def set_counts(
    conn: psycopg.Connection,
    run: RunRef,
    *,
    rows: int,
    objects: int,
    bytes_: int,
    part: str = "",
    collection: str | None = None,
) -> None:
    """Set a dry run's counters for one part outright: a report computed whole in one transaction."""
    if not run.dry_run:
        raise ValueError("set_counts is for a dry run's report; a real run adds what its work did (add_counts)")
    write_part_counts(
        conn,
        {
            "dag_id": run.dag_id,
            "run_id": run.run_id,
            "part": part,
            "rows": rows,
            "objects": objects,
            "bytes": bytes_,
            "collection": collection,
            "replace": True,
        },
    )


def write_part_counts(conn: psycopg.Connection, params: dict[str, Any]) -> None:
    """Upsert one part's counts and move the run's totals by the difference (in the caller's transaction)."""
    with conn.transaction():
        conn.execute(queries.load("runs/insert_empty_part"), params)  # a row to lock, even for a part's first write
        old = conn.execute(queries.load("runs/select_part_counts"), params).fetchone() or (0, 0, 0)
        conn.execute(
            queries.load("runs/add_part_counts"),
            {**params, "old_rows": old[0], "old_objects": old[1], "old_bytes": old[2]},
        )


def restart_dry_run_part(conn: psycopg.Connection, run: RunRef, part: str) -> None:
    """Take back what an earlier attempt of this dry-run part reported: its counts (its keys are its plan items,
    taken back by `blobgc.core.plans.restart_plan_part`).

    Collectors that write a dry run's report piecemeal (batch by batch) call this first, so a retried
    task reports its part once. Does nothing on a real run.
    """
    if not run.dry_run:
        return
    with conn.transaction():
        conn.execute(
            queries.load("runs/delete_part_report"), {"dag_id": run.dag_id, "run_id": run.run_id, "part": part}
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

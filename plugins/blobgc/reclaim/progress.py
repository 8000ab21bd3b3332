"""A run's progress while it is going, as data: parts done and left, rows and objects deleted so far and left, the
current rate and an estimated end. The receipt shows it at its top (and refreshes itself while the run is unfinished),
the run's JSON and `/blobgc/api/runs/<dag_id>/<run_id>/progress` serve it, and the reclaim page lists the unfinished
runs with theirs.

Read from what the database already records, in one statement (receipts/summarize_run_progress), without unnesting
a single key: the plan's items and their outcomes (`blobgc.plan_item`, `blobgc.plan_outcome`: which parts are done),
the run's counters (`blobgc.run`: rows, objects and bytes deleted so far), and its deletion log with the outbox and
the drain's settlements (keys still owed; keys dealt with in the last minute, by `settled_at`).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from datetime import date, datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from blobgc.core import queries
from blobgc.core.plans import GOES_ON, REJECTED, TIMED_OUT, WAITING

RATE_WINDOW_S = 60  # the current rate: what the run dealt with in the last minute
REFRESH_S = 5  # an unfinished run's receipt refreshes itself every 5 s at least...
REFRESH_PER_BUILD = 10  # ...and at least ten times as long as building it took, so a big run's receipt stays gentle
REFRESH_MAX_S = 600  # a receipt that takes a minute to build refreshes every ten: one open tab, a tenth of a connection
IN_PROGRESS_LIMIT = 20  # unfinished runs listed on the reclaim page

PHASES = {
    "planning": "planning: finding what to delete; nothing is deleted yet",
    "waiting": "waiting at the gate for a person to approve or reject the plan",
    "refused": "the gate refused the plan: nothing of it is deleted; the run is ending",
    "executing": "executing the plan part by part: deleting its rows and owing their objects to the drain",
    "draining": "deleting the objects the run owes",
    "finishing": "everything planned is dealt with: the run is writing its report",
    "finished": "finished",
}


def run_progress(
    conn: psycopg.Connection, dag_id: str, run_id: str, *, window: float = RATE_WINDOW_S
) -> dict[str, Any] | None:
    """A run's progress as JSON-able data (`progress_of`); None when blobgc has no such run."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            queries.load("receipts/summarize_run_progress"), {"dag_id": dag_id, "run_id": run_id, "window": window}
        ).fetchone()
    return progress_of(row, window) if row is not None else None


def phase_of(row: dict[str, Any]) -> str:
    """What the run is doing now (a key of PHASES), from its figures and its gate's decision."""
    if row["finished_at"] is not None:
        return "finished"
    if row["dry_run"]:
        return "planning"
    if row["decision"] == WAITING:
        return "waiting"
    if row["decision"] in (REJECTED, TIMED_OUT):
        return "refused"
    if row["decision"] in GOES_ON and row["items"] > row["items_done"]:
        return "executing"
    if row["owed_objects"] > row["parked_objects"]:
        return "draining"
    if row["decision"] is None:
        return "planning"
    return "finishing"


def per_second(count: int, seconds: float | None) -> float:
    """`count` over the seconds of the window the run was at it (at least one); 0 when it did nothing in it."""
    if not count or seconds is None:
        return 0.0
    return round(count / max(seconds, 1.0), 3)


def progress_of(row: dict[str, Any], window: float = RATE_WINDOW_S) -> dict[str, Any]:
    """The progress of a run from its receipts/summarize_run_progress row.

    - parts and items: those of the plan the run executes, done when the run dealt with every item of the part;
    - rows and objects deleted: the run's own counters (blobgc.run, what its receipt and blobgc.reclaim_daily show);
      objects left: the keys of plan items not dealt with yet plus the keys the run logged that are still owed
      (parked ones included, and counted apart);
    - the rate: keys of the run's deletion log the drain dealt with (deleted, or found absent or kept) in the last
      `window` seconds, per second of that window the run was at it (from its first settlement when that is more
      recent); `objects_deleted_per_second` counts the deleted ones alone, `rows_per_second` the plan's rows deleted;
    - the ETA: the objects left that the drain can reach (parked ones wait for an operator) over the rate, as a UTC
      time; with no object left, the rows left over their rate. None when the rate is 0, nothing is left, the run
      is a dry run (it only plans) or it has finished.

    A dry run reports what it planned so far; what it deleted, what is left and the ETA are None. `idle_seconds`
    is how long ago the run last recorded anything (planned, dealt with an item, owed or settled a key): an unfinished
    run idle for long has most likely stopped (its Airflow run failed or was killed before its report task).
    """
    finished = row["finished_at"] is not None
    dry = bool(row["dry_run"])
    phase = phase_of(row)
    objects_left = row["objects_not_reached"] + row["owed_objects"]
    rate = per_second(row["objects_recent"], row["objects_window_s"])
    rows_rate = per_second(row["rows_recent"], row["rows_window_s"])
    eta_s: float | None = None
    eta_of: str | None = None
    if not (finished or dry):
        reachable = objects_left - row["parked_objects"]
        if reachable > 0 and rate:
            eta_s, eta_of = reachable / rate, "objects"
        elif row["rows_not_reached"] and rows_rate:
            # executing: the drain starts when the parts are done, so this is the end of the execution, not the run's
            eta_s, eta_of = row["rows_not_reached"] / rows_rate, "rows"
    as_of: datetime = row["as_of"]
    return {
        "finished": finished,
        "dry_run": dry,
        "phase": phase,
        "phase_text": PHASES[phase],
        "as_of": _iso(as_of),
        "finished_at": _iso(row["finished_at"]),
        "last_activity_at": _iso(row["last_activity_at"]),
        "idle_seconds": round((as_of - row["last_activity_at"]).total_seconds(), 1),
        "parts": _done_left(row["parts"], None if dry else row["parts_done"]),
        "items": _done_left(row["items"], None if dry else row["items_done"]),
        "rows": {
            "planned": row["planned_rows"],
            "deleted": None if dry else row["rows_deleted"],
            "left": None if dry else row["rows_not_reached"],
        },
        "objects": {
            "planned": row["planned_objects"],
            "deleted": None if dry else row["objects_deleted"],
            "left": None if dry else objects_left,
            "parked": None if dry else row["parked_objects"],
        },
        "bytes_deleted": None if dry else row["bytes_deleted"],
        "rate": None
        if finished or dry
        else {
            "window_seconds": window,
            "objects_per_second": rate,
            "objects_deleted_per_second": per_second(row["deleted_recent"], row["objects_window_s"]),
            "rows_per_second": rows_rate,
        },
        "eta": _iso(as_of + timedelta(seconds=eta_s)) if eta_s is not None else None,
        "eta_seconds": round(eta_s, 1) if eta_s is not None else None,
        "eta_of": eta_of,  # "objects": the drain's end; "rows": the execution's end (the drain follows)
        "refresh_seconds": None if finished else REFRESH_S,
    }


def with_refresh(progress: dict[str, Any], build_seconds: float) -> dict[str, Any]:
    """`progress` with the receipt's refresh interval for an unfinished run: REFRESH_S, or REFRESH_PER_BUILD times
    what building the receipt took when that is longer (at most REFRESH_MAX_S); None once the run has finished."""
    if progress["finished"]:
        return {**progress, "refresh_seconds": None}
    seconds = min(REFRESH_MAX_S, max(REFRESH_S, math.ceil(build_seconds * REFRESH_PER_BUILD)))
    return {**progress, "refresh_seconds": seconds}


def runs_in_progress(
    conn: psycopg.Connection, dag_ids: Collection[str] | None = None, *, limit: int = IN_PROGRESS_LIMIT
) -> list[dict[str, Any]]:
    """The unfinished runs (of `dag_ids`, None for every DAG), newest first, each with its progress."""
    scope = None if dag_ids is None else sorted(dag_ids)
    with conn.cursor(row_factory=dict_row) as cur:
        runs = cur.execute(queries.load("report/select_unfinished_runs"), {"dag_ids": scope, "limit": limit}).fetchall()
    listed = []
    for run in runs:
        progress = run_progress(conn, run["dag_id"], run["run_id"])
        if progress is not None and not progress["finished"]:  # it may have finished meanwhile
            listed.append({**{k: _iso(v) for k, v in run.items()}, "progress": progress})
    return listed


def _done_left(total: int, done: int | None) -> dict[str, int | None]:
    return {"total": total, "done": done, "left": None if done is None else total - done}


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, (date, datetime)) else value

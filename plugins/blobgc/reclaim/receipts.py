"""A run's receipt, as data: what it deleted (or, dry, would delete), what that saves, and what undid it.

Read-only, except `record_undo_request`. Every key of a run comes from one statement, receipts/select_run_keys
(a real run's deletion log and what became of each key; a dry run's plan, or before plans its dry log): the
receipt's figures wrap it, and the manifest streams it (`manifest_rows`, a server-side cursor). Its `progress` (parts
done and left, the rate, the ETA; `blobgc.reclaim.progress`) is read first, as of the moment the receipt is asked for.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from blobgc.core import queries
from blobgc.core.lifecycle import version_flags
from blobgc.core.plans import COUNTED_SIZE_SOURCE, execution_figures, plan_figures, plan_size
from blobgc.core.sizes import S3_COPY_USD_PER_1000, S3_STANDARD_USD_PER_GB_MONTH, usd_per_month
from blobgc.reclaim.progress import run_progress, with_refresh

MANIFEST_COLUMNS = ("bucket", "key", "size_bytes", "status", "deleted_at", "version_id")
RESTORE_DAG_ID = "blobgc_restore"
COPY_REQUESTS = "COPY_REQUESTS_PER_1000"  # Variable blobgc_storage_prices' entry: USD per 1,000 copy requests


def run_keys_query(wrapper: str | None = None) -> sql.SQL | sql.Composed:
    """receipts/select_run_keys, alone or wrapped by another receipts statement (its `{run_keys}`)."""
    keys = sql.SQL(queries.load("receipts/select_run_keys"))
    if wrapper is None:
        return keys
    return sql.SQL(queries.load(f"receipts/{wrapper}")).format(run_keys=keys)


def storage_price(
    conn: psycopg.Connection, storage_class: str = "STANDARD", default: float = S3_STANDARD_USD_PER_GB_MONTH
) -> float:
    """USD per GB-month of a storage class (blobgc.storage_price, kept from Variable blobgc_storage_prices), or of
    another entry of the Variable (`COPY_REQUESTS`: USD per 1,000 copy requests)."""
    row = conn.execute(queries.load("report/select_storage_price"), {"storage_class": storage_class}).fetchone()
    return float(row[0]) if row else default  # while blobgc.storage_price says nothing


def find_run(conn: psycopg.Connection, dag_id: str, run_id: str) -> dict[str, Any] | None:
    """One run's counts, timing, plan and collections (blobgc.run), or None."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            queries.load("report/select_runs"), {"dag_id": dag_id, "run_id": run_id, "dag_ids": None, "limit": 1}
        ).fetchone()


def collect_receipt(
    conn: psycopg.Connection, dag_id: str, run_id: str, *, sample: int = 20, prefixes: int = 20
) -> dict[str, Any] | None:
    """Everything a run's receipt shows, as JSON-able data; None when blobgc has no such run.

    `progress` is there for every run, finished ones too (`finished: true`, no rate, ETA nor refresh); an unfinished
    run's `refresh_seconds` grows with what building this receipt took (`with_refresh`)."""
    began = time.monotonic()
    run = find_run(conn, dag_id, run_id)
    progress = run_progress(conn, dag_id, run_id)
    if run is None or progress is None:
        return None
    ids = {"dag_id": dag_id, "run_id": run_id}
    plan_run_id = run["plan_run_id"] or run_id
    with conn.cursor(row_factory=dict_row) as cur:
        gate = cur.execute(queries.load("receipts/select_gate_decision"), ids).fetchone()
        failed = queries.one_row(cur.execute(queries.load("receipts/count_failed_deletions"), ids))
        statuses = cur.execute(run_keys_query("count_keys_by_status"), ids).fetchall()
        by_prefix = cur.execute(run_keys_query("sum_keys_by_prefix"), {**ids, "limit": prefixes}).fetchall()
        keys = cur.execute(run_keys_query("select_sample_keys"), {**ids, "sample": sample}).fetchall()
        restored = cur.execute(queries.load("receipts/count_restore_items"), ids).fetchall()
        undos = cur.execute(queries.load("receipts/select_undo_requests"), ids).fetchall()
        recorded = cur.execute(queries.load("receipts/select_not_planned"), ids).fetchone()
        not_planned = recorded["not_planned"] if recorded else None
        quarantine = cur.execute(queries.load("receipts/summarize_quarantine"), ids).fetchone()
        buckets = cur.execute(queries.load("receipts/select_run_buckets"), ids).fetchall()
        price = storage_price(conn)
        copy_price = storage_price(conn, COPY_REQUESTS, S3_COPY_USD_PER_1000)
    planned, _per_collection = plan_size(conn, dag_id, plan_run_id)
    has_plan = bool(planned.rows or planned.objects)  # every plan item has rows or keys
    done = execution_figures(conn, dag_id, run_id)
    figures = plan_figures(conn, dag_id, run_id)
    deleted = next((s for s in statuses if s["status"] == "deleted"), None)
    return {
        "run": jsonable(run),
        "progress": with_refresh(progress, time.monotonic() - began),
        "plan_run_id": plan_run_id,
        "plan_from_other_run": plan_run_id != run_id,
        "gate": jsonable(gate) if gate else None,
        "counts": {
            "planned_objects": planned.objects if has_plan else None,
            "planned_rows": planned.rows if has_plan else None,
            "deleted_rows": run["rows_deleted"],
            "deleted_objects": run["objects_deleted"],
            "skipped_objects": done.objects_skipped,
            "skipped_rows": done.rows_skipped,
            "failed": failed["owed"],
            "parked": failed["parked"],
        },
        # planned = deleted + absent + kept + failed, in keys and in the plan's bytes (each with its source)
        "figures": figures.to_json() if figures is not None else None,
        "counted_size_source": COUNTED_SIZE_SOURCE,
        "statuses": [jsonable(s) for s in statuses],
        "by_prefix": [jsonable(p) for p in by_prefix],
        "sample_keys": [jsonable(k) for k in keys],
        "usd_per_gb_month": price,
        "usd_per_month_saved": usd_per_month(run["bytes_reclaimed"], price),
        "storage": storage_truth(run, quarantine, buckets, price, copy_price),
        "undoable": (not run["dry_run"])
        and bool((deleted and deleted["with_version_id"]) or (quarantine and quarantine["held"])),
        "restore": {"items": [jsonable(r) for r in restored], "requests": [jsonable(u) for u in undos]},
        # collection -> rows (or keys) considered and why those not planned were not (sweep, reconcile); or None
        "not_planned": not_planned if isinstance(not_planned, dict) and not_planned else None,
    }


def storage_truth(
    run: dict[str, Any],
    quarantine: dict[str, Any] | None,
    buckets: list[dict[str, Any]],
    usd_per_gb_month: float,
    usd_per_1000_copies: float,
) -> dict[str, Any]:
    """The three amounts of a run's deletions: bytes *deleted* (out of the buckets' view), bytes *reclaimed* (gone from
    storage), and what is still stored (in quarantine until its window ends, or noncurrent versions until a lifecycle
    rule frees them, or for good where no rule does), with the copies' request cost and quarantine's storage cost."""
    held = dict(quarantine or {})
    days = held.get("days") or 0
    flagged = [b["bucket"] for b in buckets if b["bytes_noncurrent"] and b["noncurrent_days"] is None]
    return {
        "bytes_deleted": run.get("bytes_deleted", run["bytes_reclaimed"]),
        "bytes_reclaimed": run["bytes_reclaimed"],
        "quarantine": jsonable(held) if held.get("objects") else None,
        "buckets": [
            {
                **jsonable(b),
                **version_flags(b["bucket"], b["bucket"] in flagged),
            }
            for b in buckets
        ],
        "keeps_every_version": flagged,
        "usd_copy_requests": round((held.get("objects") or 0) / 1000 * usd_per_1000_copies, 6),
        "usd_quarantine_storage": round(usd_per_month(held.get("bytes") or 0, usd_per_gb_month) * days / 30, 6),
    }


def undo_refusal(conn: psycopg.Connection, dag_id: str, run_id: str) -> str | None:
    """Why a run cannot be undone from its receipt (a dry run; nothing deleted with a version id), or None."""
    run = find_run(conn, dag_id, run_id)
    if run is None:
        return f"blobgc has no run {run_id!r} of {dag_id!r}"
    if run["dry_run"]:
        return "a dry run deleted nothing: there is nothing to undo"
    with conn.cursor(row_factory=dict_row) as cur:
        statuses = cur.execute(run_keys_query("count_keys_by_status"), {"dag_id": dag_id, "run_id": run_id}).fetchall()
    deleted = next((s for s in statuses if s["status"] == "deleted"), None)
    if not deleted:
        return "this run deleted no object: there is nothing to undo"
    if not deleted["with_version_id"]:
        with conn.cursor(row_factory=dict_row) as cur:
            held = cur.execute(
                queries.load("receipts/summarize_quarantine"), {"dag_id": dag_id, "run_id": run_id}
            ).fetchone()
        if held and held["held"]:
            return None  # undone from quarantine
        if held and held["purged"]:
            return (
                f"this run's {held['purged']} quarantined objects were purged (the last at "
                f"{held['last_purged_at']:%Y-%m-%d %H:%M} UTC, after their {held['days']}-day window): the bytes are "
                "gone for good and blobgc_restore cannot bring them back"
            )
        return (
            "this run's deletions left no version ids and went through no quarantine: its bucket was not "
            "versioned, so the bytes are gone for good and blobgc_restore cannot bring them back"
        )
    return None


def record_undo_request(
    conn: psycopg.Connection, dag_id: str, run_id: str, restore_run_id: str, requested_by: str
) -> None:
    with conn.transaction():
        conn.execute(
            queries.load("receipts/insert_undo_request"),
            {"dag_id": dag_id, "run_id": run_id, "restore_run_id": restore_run_id, "requested_by": requested_by},
        )


def manifest_rows(
    conn: psycopg.Connection, dag_id: str, run_id: str, *, batch: int = 5000
) -> Iterator[list[tuple[Any, ...]]]:
    """Every key of a run (MANIFEST_COLUMNS), a batch at a time from a server-side cursor: constant memory
    however many keys the run has. The caller owns `conn` (autocommit); the cursor lives in a transaction."""
    with conn.transaction(), conn.cursor(name="blobgc_manifest") as cur:
        cur.itersize = batch
        cur.execute(run_keys_query(), {"dag_id": dag_id, "run_id": run_id})
        while rows := cur.fetchmany(batch):
            yield rows


def jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: jsonable_value(v) for k, v in row.items()}


def jsonable_value(v: Any) -> Any:
    if isinstance(v, (date, datetime)):
        return v.isoformat()
    if isinstance(v, Decimal):
        return float(v)
    return v

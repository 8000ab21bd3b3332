"""The storage reclaim report, as data: what `blobgc.reclaim.page` draws and `/blobgc/api/reclaim` serves.

Reads `blobgc.reclaim_daily` (or, filtered by a collection, `blobgc.reclaim_daily_by_collection`), the last real and dry runs of each DAG, the owed deletions (parked
ones too), the latest reconcile's findings, the most recent runs and the S3 Standard price (blobgc.storage_price),
in one read-only pass.
"""
from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from blobgc.core import queries
from blobgc.reclaim.receipts import storage_price


def collect_report(conn: psycopg.Connection, *, days: int = 30, per_dag: int = 5, sample: int = 20,
                   today: date | None = None, collection: str | None = None, recent: int = 30) -> dict[str, Any]:
    """Everything the page shows, as JSON-able data: daily reclaim (of one collection, when given), last runs,
    the most recent runs (each with a receipt), owed deletions, reconcile findings, the collections the daily
    figures can be filtered by, and the storage price their dollars are reckoned at."""
    if not 1 <= days <= 366:
        raise ValueError(f"days must be between 1 and 366, got {days}")
    if not 1 <= per_dag <= 50:
        raise ValueError(f"per_dag must be between 1 and 50, got {per_dag}")
    with conn.cursor(row_factory=dict_row) as cur:
        if today is None:
            today = cur.execute("SELECT (now() AT TIME ZONE 'UTC')::date AS d").fetchone()["d"]
        since = today - timedelta(days=days - 1)
        if collection is None:
            daily = cur.execute(queries.load("report/select_reclaim_daily"), {"since": since}).fetchall()
        else:
            daily = cur.execute(queries.load("report/select_reclaim_daily_by_collection"),
                                {"since": since, "collection": collection}).fetchall()
        collections = [r["collection"] for r in cur.execute(queries.load("report/select_collections"),
                                                              {"since": since})]
        runs = cur.execute(queries.load("report/select_last_runs"), {"per_dag": per_dag}).fetchall()
        owed = cur.execute(queries.load("report/select_owed_deletions")).fetchall()
        findings = cur.execute(queries.load("report/select_reconcile_findings"), {"sample": sample}).fetchall()
        recent_runs = cur.execute(queries.load("report/select_runs"),
                                  {"dag_id": None, "run_id": None, "limit": recent}).fetchall()
        price = storage_price(conn)
    return {
        "since": since.isoformat(),
        "until": today.isoformat(),
        "days": days,
        "collection": collection,
        "collections": collections,
        "daily": [_jsonable(r) for r in daily],
        "last_runs": _pair_runs(runs),
        "recent_runs": [_jsonable(r) for r in recent_runs],
        "usd_per_gb_month": price,
        "owed": [_jsonable(r) for r in owed],
        "reconcile": {
            "run_id": findings[0]["run_id"] if findings else None,
            "findings": [_jsonable({k: v for k, v in r.items() if k != "run_id"}) for r in findings],
        },
    }


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, (date, datetime)) else v) for k, v in row.items()}


def _pair_runs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per DAG, its last real runs next to its last dry runs."""
    by_dag: dict[str, dict[str, Any]] = {}
    for r in rows:
        entry = by_dag.setdefault(r["dag_id"], {"dag_id": r["dag_id"], "real": [], "dry_run": []})
        run = _jsonable({k: v for k, v in r.items() if k not in ("dag_id", "dry_run")})
        entry["dry_run" if r["dry_run"] else "real"].append(run)
    return [by_dag[d] for d in sorted(by_dag)]

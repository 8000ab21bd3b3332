"""The storage reclaim report, as data: what `blobgc.reclaim.page` draws and `/blobgc/api/reclaim` serves.

Reads `blobgc.reclaim_daily` (or, filtered by a collection, `blobgc.reclaim_daily_by_collection`), the last
real and dry runs of each DAG, the owed deletions (parked ones too), the latest reconcile's findings, the most
recent runs, the runs not finished yet with their progress (`blobgc.reclaim.progress`), the buckets' versioning and
lifecycle as runs found them, what waits in quarantine, and the S3 Standard price (blobgc.storage_price), in one
read-only pass. Given `dag_ids` (the DAGs whose runs the reader may read, `blobgc.reclaim.run_access`), every
figure, run and owed deletion of another DAG is left out, and reconcile's findings unless blobgc_reconcile is among
them.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import date, datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from blobgc.core import queries
from blobgc.core.lifecycle import version_flags
from blobgc.core.objects import KEEPS_VERSIONS
from blobgc.reclaim.progress import runs_in_progress
from blobgc.reclaim.receipts import storage_price

RECONCILE_DAG_ID = "blobgc_reconcile"  # the DAG whose runs record blobgc.reconcile_finding


def run_dag_ids(conn: psycopg.Connection) -> set[str]:
    """Every DAG blobgc has runs or owed deletions of (report/select_run_dag_ids)."""
    return {r[0] for r in conn.execute(queries.load("report/select_run_dag_ids"))}


def collect_report(
    conn: psycopg.Connection,
    *,
    days: int = 30,
    per_dag: int = 5,
    sample: int = 20,
    today: date | None = None,
    collection: str | None = None,
    recent: int = 30,
    dag_ids: Collection[str] | None = None,
) -> dict[str, Any]:
    """Everything the page shows, as JSON-able data: the runs in progress (unfinished, each with its progress), daily
    reclaim (of one collection, when given), last runs, the most recent runs (each with a receipt), owed deletions,
    reconcile findings, the collections the daily figures can be filtered by, and the storage price their dollars
    are reckoned at.

    :param dag_ids: only these DAGs' runs and figures (the ones the reader may read); None for every DAG
    """
    if not 1 <= days <= 366:
        raise ValueError(f"days must be between 1 and 366, got {days}")
    if not 1 <= per_dag <= 50:
        raise ValueError(f"per_dag must be between 1 and 50, got {per_dag}")
    scope = None if dag_ids is None else sorted(dag_ids)
    with conn.cursor(row_factory=dict_row) as cur:
        if today is None:
            today = queries.one_row(cur.execute("SELECT (now() AT TIME ZONE 'UTC')::date AS d"))["d"]
        since = today - timedelta(days=days - 1)
        if collection is None:
            daily = cur.execute(
                queries.load("report/select_reclaim_daily"), {"since": since, "dag_ids": scope}
            ).fetchall()
        else:
            daily = cur.execute(
                queries.load("report/select_reclaim_daily_by_collection"),
                {"since": since, "collection": collection, "dag_ids": scope},
            ).fetchall()
        collections = [
            r["collection"]
            for r in cur.execute(queries.load("report/select_collections"), {"since": since, "dag_ids": scope})
        ]
        runs = cur.execute(queries.load("report/select_last_runs"), {"per_dag": per_dag, "dag_ids": scope}).fetchall()
        owed = cur.execute(queries.load("report/select_owed_deletions"), {"dag_ids": scope}).fetchall()
        findings = reconcile_findings(cur, sample) if scope is None or RECONCILE_DAG_ID in scope else []
        recent_runs = cur.execute(
            queries.load("report/select_runs"), {"dag_id": None, "run_id": None, "dag_ids": scope, "limit": recent}
        ).fetchall()
        buckets = cur.execute(
            queries.load("report/select_bucket_states"), {"since": since, "dag_ids": scope}
        ).fetchall()
        held = cur.execute(queries.load("report/select_quarantine_held"), {"dag_ids": scope}).fetchall()
        price = storage_price(conn)
    in_progress = runs_in_progress(conn, scope)
    return {
        "since": since.isoformat(),
        "until": today.isoformat(),
        "days": days,
        "collection": collection,
        "collections": collections,
        "in_progress": in_progress,
        "daily": [_jsonable(r) for r in daily],
        "last_runs": _pair_runs(runs),
        "recent_runs": [_jsonable(r) for r in recent_runs],
        "usd_per_gb_month": price,
        "owed": [_jsonable(r) for r in owed],
        # versioned buckets as last found: one keeping every deleted version (no noncurrent rule) is flagged
        "buckets": [
            {
                **_jsonable(b),
                "versioned": b["versioning"] in KEEPS_VERSIONS,
                **version_flags(b["bucket"], b["versioning"] in KEEPS_VERSIONS and b["noncurrent_days"] is None),
            }
            for b in buckets
        ],
        "quarantine": [_jsonable(q) for q in held],
        "reconcile": {
            "run_id": findings[0]["run_id"] if findings else None,
            "findings": [_jsonable({k: v for k, v in r.items() if k != "run_id"}) for r in findings],
        },
    }


def reconcile_findings(cur: psycopg.Cursor[dict[str, Any]], sample: int) -> list[dict[str, Any]]:
    """The latest reconcile run's findings (per kind and bucket, `sample` keys each), or none if none was found."""
    latest = cur.execute(queries.load("report/select_latest_finding_run")).fetchone()
    if latest is None:
        return []
    return cur.execute(
        queries.load("report/select_reconcile_findings"), {"run_id": latest["run_id"], "sample": sample}
    ).fetchall()


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

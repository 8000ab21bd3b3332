"""blobgc.reclaim.report: what the reclaim page and JSON read from PostgreSQL."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest

from blobgc.reclaim.page import render_page
from blobgc.reclaim.report import collect_report


def test_report_collects_runs_owed_deletions_and_reconcile_findings(conn):
    with conn.transaction():
        today = conn.execute("SELECT (now() AT TIME ZONE 'UTC')::date").fetchone()[0]
        # r0 started an hour earlier, but never before today's UTC midnight: the daily figures group by start day,
        # and a run shortly after midnight must not put r0 on yesterday (a CI run just after midnight failed so).
        for run_id, dry, objects, size in (("r1", False, 3, 300), ("d1", True, 5, 500), ("r0", False, 1, 10)):
            conn.execute("INSERT INTO blobgc.run (dag_id, run_id, dry_run, finished_at, objects_deleted, "
                         "bytes_reclaimed, bytes_deleted, started_at) VALUES ('blobgc_sweep', %s, %s, now(), %s, %s, "
                         "%s, greatest(now() - %s::interval, (now() AT TIME ZONE 'UTC')::date AT TIME ZONE 'UTC'))",
                         (run_id, dry, objects, size, size, "1 hour" if run_id == "r0" else "0"))
        log_id = conn.execute(
            "INSERT INTO blobgc.deletion_log (dag_id, run_id, source, bucket, keys, sizes) VALUES "
            "('blobgc_sweep', 'r1', 'app.blob', 'blobgc', '{a,b,c}', '{1,2,3}') RETURNING id").fetchone()[0]
        conn.execute("INSERT INTO blobgc.outbox (log_id, dag_id, bucket, keys, sizes, attempts, last_errors) "
                     "VALUES (%s, 'blobgc_sweep', 'blobgc', '{b,c}', '{2,3}', 2, '{\"b\": \"SlowDown\"}')", (log_id,))
        conn.execute("INSERT INTO blobgc.reconcile_finding (run_id, kind, bucket, key) VALUES "
                     "('rec1', 'unknown_key', 'blobgc', 'stray/1'), ('rec1', 'unknown_key', 'blobgc', 'stray/0'), "
                     "('rec1', 'missing_object', 'blobgc', 'images/9/0.jpg')")

    report = collect_report(conn, days=7)

    assert report["until"] == today.isoformat() and report["since"] == (today - timedelta(days=6)).isoformat()
    real = [r for r in report["daily"] if not r["dry_run"]]
    assert real == [{"day": today.isoformat(), "dag_id": "blobgc_sweep", "dry_run": False, "runs": 2,
                     "rows_deleted": 0, "objects_deleted": 4, "bytes_reclaimed": 310, "bytes_deleted": 310,
                     "bytes_noncurrent": 0, "noncurrent_freed_by": None}]
    (sweep,) = report["last_runs"]
    assert [r["run_id"] for r in sweep["real"]] == ["r1", "r0"]  # newest first
    assert [r["run_id"] for r in sweep["dry_run"]] == ["d1"]
    (owed,) = report["owed"]
    assert (owed["dag_id"], owed["objects"], owed["bytes"], owed["max_attempts"]) == ("blobgc_sweep", 2, 5, 2)
    assert "SlowDown" in owed["last_errors"]
    assert report["reconcile"]["run_id"] == "rec1"
    kinds = {f["kind"]: f for f in report["reconcile"]["findings"]}
    assert kinds["unknown_key"]["findings"] == 2 and kinds["unknown_key"]["sample_keys"] == ["stray/0", "stray/1"]
    assert kinds["missing_object"]["sample_keys"] == ["images/9/0.jpg"]
    json.dumps(report)  # what the BI endpoint serves must be plain JSON

    page = render_page(report)
    assert 'data-dag="blobgc_sweep" data-value="310"' in page and "stray/0" in page and "images/9/0.jpg" in page
    with pytest.raises(ValueError, match="days"):
        collect_report(conn, days=0)


def test_the_report_filters_the_daily_figures_by_collection(conn):
    """docs/reference.md §6: blobgc.reclaim_daily_by_collection, and the page's filter by collection."""
    with conn.transaction():
        conn.execute("INSERT INTO blobgc.run (dag_id, run_id, dry_run, finished_at, rows_deleted, objects_deleted, "
                     "bytes_reclaimed) VALUES ('blobgc_sweep', 'c1', false, now(), 5, 7, 700)")
        conn.execute("INSERT INTO blobgc.run_collection (dag_id, run_id, collection, rows_deleted, objects_deleted, "
                     "bytes_reclaimed) VALUES ('blobgc_sweep', 'c1', 'uploads', 2, 3, 300), "
                     "('blobgc_sweep', 'c1', 'app_blob', 3, 4, 400)")

    everything = collect_report(conn, days=7)
    assert everything["collections"] == ["app_blob", "uploads"]
    assert [(r["rows_deleted"], r["objects_deleted"]) for r in everything["daily"]] == [(5, 7)]
    uploads = collect_report(conn, days=7, collection="uploads")
    assert [(r["collection"], r["rows_deleted"], r["objects_deleted"], r["bytes_reclaimed"])
            for r in uploads["daily"]] == [("uploads", 2, 3, 300)]
    page = render_page(uploads)
    assert "blobgc.reclaim_daily_by_collection, collection uploads" in page
    assert '<b data-collection="uploads">uploads</b>' in page and 'href="?days=7&amp;collection=app_blob"' in page

"""Per-DAG read permission on receipts, manifests, undo, the reclaim JSON and the reclaim page (issue 29, finding 10).

The reclaim app runs in this process under FastAPI's TestClient, with `DagScopedAuthManager` as Airflow's auth
manager (tests/support/dag_permission.py): user sweep_reader may read blobgc_sweep's runs and not
blobgc_reconcile's. The app reads the tests' own database (the `conn` fixture points blobgc_postgres at it).
"""
from __future__ import annotations

import csv
import io
import json

import pytest
from fastapi.testclient import TestClient

from blobgc.reclaim.app import create_app
from blobgc.reclaim.report import collect_report
from tests.support.dag_permission import DENIED_DAG, OPERATOR, READER, dag_scoped_auth_manager, token_of

READABLE_DAG = "blobgc_sweep"
READABLE_RUN, DENIED_RUN = "manual__sweep_1", "manual__reconcile_1"
READABLE_KEY, DENIED_KEY = "blobs/sweep-1/raw", "u/alice_secret-contract.pdf"
FINDING_KEY = "u/bob/unknown-scan.pdf"


@pytest.fixture
def runs(conn):
    """A real run of blobgc_sweep (collection app_blob) and, an hour later, one of blobgc_reconcile (collection
    uploads): each with a deleted key and an owed one; and a finding of the reconcile run."""
    with conn.transaction():
        for dag_id, run_id, collection, key, ago in ((READABLE_DAG, READABLE_RUN, "app_blob", READABLE_KEY, "2 hours"),
                                                      (DENIED_DAG, DENIED_RUN, "uploads", DENIED_KEY, "1 hour")):
            conn.execute("INSERT INTO blobgc.run (dag_id, run_id, dry_run, started_at, finished_at, rows_deleted, "
                         "objects_deleted, bytes_reclaimed) VALUES (%(dag)s, %(run)s, false, "
                         "greatest(now() - %(ago)s::interval, (now() AT TIME ZONE 'UTC')::date AT TIME ZONE 'UTC'), "
                         "now(), 1, 1, 100)", {"dag": dag_id, "run": run_id, "ago": ago})
            conn.execute("INSERT INTO blobgc.run_collection (dag_id, run_id, collection, rows_deleted, "
                         "objects_deleted, bytes_reclaimed) VALUES (%s, %s, %s, 1, 1, 100)",
                         (dag_id, run_id, collection))
            log_id = conn.execute("INSERT INTO blobgc.deletion_log (dag_id, run_id, source, bucket, keys, sizes) "
                                  "VALUES (%s, %s, 'app.blob', 'blobgc', %s, '{100}') RETURNING id",
                                  (dag_id, run_id, [key])).fetchone()[0]
            conn.execute("INSERT INTO blobgc.deletion_settlement (log_id, run_id, keys, outcome) "
                         "VALUES (%s, %s, %s, 'deleted')", (log_id, run_id, [key]))
            owed = conn.execute("INSERT INTO blobgc.deletion_log (dag_id, run_id, source, bucket, keys, sizes) "
                                "VALUES (%s, %s, 'app.blob', 'blobgc', %s, '{7}') RETURNING id",
                                (dag_id, run_id, [f"{key}.owed"])).fetchone()[0]
            conn.execute("INSERT INTO blobgc.outbox (log_id, dag_id, bucket, keys, sizes) "
                         "VALUES (%s, %s, 'blobgc', NULL, NULL)", (owed, dag_id))
        conn.execute("INSERT INTO blobgc.reconcile_finding (run_id, kind, bucket, key) "
                     "VALUES (%s, 'unknown_key', 'blobgc', %s)", (DENIED_RUN, FINDING_KEY))
    return conn


@pytest.fixture
def app(runs, monkeypatch):
    """The reclaim app under DagScopedAuthManager, and a bearer header per user."""
    with dag_scoped_auth_manager(monkeypatch) as manager:
        headers = {user: {"Authorization": f"Bearer {token_of(manager, user)}"} for user in (READER, OPERATOR, "admin")}
        yield TestClient(create_app()), headers


def test_receipt_dag_permission_receipts_manifests_and_undo_of_an_unreadable_dag_answer_403(app):
    client, headers = app
    reader = headers[READER]

    response = client.get(f"/runs/{READABLE_DAG}/{READABLE_RUN}", headers=reader)
    assert response.status_code == 200 and READABLE_KEY in response.text
    for path in (f"/runs/{DENIED_DAG}/{DENIED_RUN}", f"/runs/{DENIED_DAG}/no_such_run"):  # its existence unsaid
        response = client.get(path, headers=reader)
        assert response.status_code == 403 and 'id="forbidden"' in response.text
        assert DENIED_KEY not in response.text and DENIED_RUN not in response.text

    for fmt in ("csv", "json"):
        response = client.get(f"/api/runs/{READABLE_DAG}/{READABLE_RUN}/manifest.{fmt}", headers=reader)
        assert response.status_code == 200 and READABLE_KEY in response.text
        response = client.get(f"/api/runs/{DENIED_DAG}/{DENIED_RUN}/manifest.{fmt}", headers=reader)
        assert response.status_code == 403 and DENIED_KEY not in response.text
        assert "may not read runs of DAG 'blobgc_reconcile'" in response.json()["detail"]

    # the operator may trigger blobgc_restore, but not read the run it would undo: refused before any look-up
    response = client.post(f"/api/runs/{DENIED_DAG}/{DENIED_RUN}/undo", headers={**headers[OPERATOR],
                                                                                "X-Blobgc-Action": "undo"})
    assert response.status_code == 403 and "may not read runs of DAG 'blobgc_reconcile'" in response.json()["detail"]

    # the same run, to a user who may read it: the refusals above are the permission, not a missing run
    response = client.get(f"/runs/{DENIED_DAG}/{DENIED_RUN}", headers=headers["admin"])
    assert response.status_code == 200 and DENIED_KEY in response.text
    response = client.get(f"/api/runs/{DENIED_DAG}/{DENIED_RUN}/manifest.csv", headers=headers["admin"])
    assert sorted(r["key"] for r in csv.DictReader(io.StringIO(response.text))) == [DENIED_KEY, f"{DENIED_KEY}.owed"]


def test_receipt_dag_permission_reclaim_json_and_page_leave_out_unreadable_dags(app):
    client, headers = app

    report = client.get("/api/reclaim?days=2", headers=headers[READER]).json()
    assert {r["dag_id"] for r in report["daily"]} == {READABLE_DAG}
    assert [e["dag_id"] for e in report["last_runs"]] == [READABLE_DAG]
    assert [(r["dag_id"], r["run_id"]) for r in report["recent_runs"]] == [(READABLE_DAG, READABLE_RUN)]
    assert [o["dag_id"] for o in report["owed"]] == [READABLE_DAG]
    assert report["collections"] == ["app_blob"]
    assert report["reconcile"] == {"run_id": None, "findings": []}  # findings are blobgc_reconcile's
    text = json.dumps(report)
    assert DENIED_DAG not in text and DENIED_RUN not in text and FINDING_KEY not in text
    uploads = client.get("/api/reclaim?days=2&collection=uploads", headers=headers[READER]).json()
    assert uploads["daily"] == []

    page = client.get("/reclaim?days=2", headers=headers[READER])
    assert page.status_code == 200 and f'data-run-id="{READABLE_RUN}"' in page.text
    for hidden in (DENIED_DAG, DENIED_RUN, FINDING_KEY, "uploads"):
        assert hidden not in page.text

    everything = client.get("/api/reclaim?days=2", headers=headers["admin"]).json()
    assert [(r["dag_id"], r["run_id"]) for r in everything["recent_runs"]] == [(DENIED_DAG, DENIED_RUN),
                                                                              (READABLE_DAG, READABLE_RUN)]
    assert [o["dag_id"] for o in everything["owed"]] == [DENIED_DAG, READABLE_DAG]
    assert everything["reconcile"]["run_id"] == DENIED_RUN and everything["collections"] == ["app_blob", "uploads"]


def test_receipt_dag_permission_report_counts_recent_runs_among_readable_dags_only(runs):
    report = collect_report(runs, days=2, recent=1, dag_ids={READABLE_DAG})
    # the newest run is blobgc_reconcile's: left out before the limit, not after it
    assert [(r["dag_id"], r["run_id"]) for r in report["recent_runs"]] == [(READABLE_DAG, READABLE_RUN)]
    assert [(r["dag_id"], r["run_id"]) for r in collect_report(runs, days=2, recent=1)["recent_runs"]] == [
        (DENIED_DAG, DENIED_RUN)]

"""The receipt page's "Considered but not planned" table (issue 30): a run's `blobgc.run.details["not_planned"]`, shown
whatever keys the DAG's report records (the sweep's reasons; reconcile's accounted, too young, ...).

The reclaim app runs in this process under FastAPI's TestClient (as in test_receipt_dag_permission.py), reading the
tests' own database.
"""
from __future__ import annotations

import json
import re
from datetime import timedelta

from fastapi.testclient import TestClient

from blobgc.collectors.mark import mark_in_columns
from blobgc.collectors.sweep import NotPlannedReport
from blobgc.kinds.blobs import bound_app_blob
from blobgc.core.runs import RunRef, ensure_run, finish_run
from blobgc.reclaim.app import create_app
from tests.helpers import make_blobs
from tests.support.dag_permission import dag_scoped_auth_manager, token_of
from tests.support.sweep import plan_sweep, references_of


def row_of(page: str, collection: str) -> list[tuple[str, str, str]]:
    """(data-key, data-value, text shown) of each cell of one collection's row of "Considered but not planned"."""
    table = page.split('<table id="not-planned">', 1)[1].split("</table>", 1)[0]
    row = table.split(f'<tr data-collection="{collection}">', 1)[1].split("</tr>", 1)[0]
    return re.findall(r'data-key="([^"]+)" data-value="([^"]*)">([^<]*)<', row)


def cells(page: str, collection: str) -> dict[str, str]:
    """data-key -> data-value of one collection's row of the "Considered but not planned" table."""
    return {key: value for key, value, _shown in row_of(page, collection)}


def test_receipt_shows_considered_but_not_planned_for_a_sweep_dry_run_and_reconciles_counts(conn, s3, bucket,
                                                                                        monkeypatch):
    """A first sweep dry run on a fresh install (one blob just marked unused, one added since), recorded by the
    sweep's own code, and a reconcile run with reconcile's keys: each receipt shows its table."""
    make_blobs(conn, s3, bucket, 1)
    refs = references_of(conn, bound_app_blob(bucket))
    assert mark_in_columns(conn, bound_app_blob(""), refs).became_unused == 1
    make_blobs(conn, s3, bucket, 1, prefix="n")  # no mark since it appeared
    sweep = ensure_run(conn, RunRef("blobgc_sweep", "manual__first_dry_run", dry_run=True))
    grace = timedelta(hours=bound_app_blob(bucket).collection.grace_hours)
    results = plan_sweep(conn, sweep, bound_app_blob(bucket), cutoff=sweep.reference_time - grace, refs=refs)
    finish_run(conn, sweep, {"not_planned": NotPlannedReport.total([r.to_xcom() for r in results])})
    recorded = conn.execute("SELECT details -> 'not_planned' -> 'app_blob' FROM blobgc.run WHERE run_id = %s",
                            (sweep.run_id,)).fetchone()[0]
    reconcile_counts = {"considered": 12, "accounted": 9, "too_young": 3, "planned": 0,
                        "first_eligible_at": "2026-11-28T09:30:00+00:00"}
    with conn.transaction():
        conn.execute("INSERT INTO blobgc.run (dag_id, run_id, dry_run, started_at, finished_at, details) VALUES "
                     "('blobgc_reconcile', 'manual__reconcile_1', true, now(), now(), %s)",
                     (json.dumps({"not_planned": {"uploads": reconcile_counts}}),))

    with dag_scoped_auth_manager(monkeypatch) as manager:
        client = TestClient(create_app())
        headers = {"Authorization": f"Bearer {token_of(manager, 'admin')}"}
        page = client.get(f"/runs/blobgc_sweep/{sweep.run_id}", headers=headers).text
        reconcile = client.get("/runs/blobgc_reconcile/manual__reconcile_1", headers=headers).text

    assert "<h2>Considered but not planned</h2>" in page
    shown = cells(page, "app_blob")
    assert {k: shown[k] for k in ("considered", "planned", "referenced", "not_marked", "within_grace",
                                  "young_created_at")} == {"considered": "2", "planned": "0", "referenced": "0",
                                                           "not_marked": "1", "within_grace": "1",
                                                           "young_created_at": "0"}
    assert shown["first_eligible_at"] == recorded["first_eligible_at"] != ""
    shown_text = {key: text for key, _value, text in row_of(page, "app_blob")}
    assert shown_text["young_created_at"] == "0" and shown_text["grace_hours"] == "24"
    assert shown_text["first_eligible_at"] == f'{recorded["first_eligible_at"][:19].replace("T", " ")} UTC'
    assert "run blobgc_mark first; the grace counts from the first mark" in page

    assert "<h2>Considered but not planned</h2>" in reconcile  # reconcile's keys, shown as they are
    assert cells(reconcile, "uploads") == {k: str(v) for k, v in reconcile_counts.items()}
    assert "2026-11-28 09:30:00 UTC" in reconcile

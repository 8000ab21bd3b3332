"""blobgc.core.plans: the gate's judgement and settings, and what execution refuses."""
from __future__ import annotations

import pytest

from blobgc.core.gate import GateSettings, judge, record_judgement
from blobgc.core.plans import (
    GateClosed,
    PlanRefused,
    add_plan_item,
    check_fresh,
    fix_plan,
    plan_size,
    record_decision,
    require_go,
)
from blobgc.core.runs import RunRef, ensure_run, finish_run
from blobgc.core.settings import ConfigurationError
from tests.helpers import NOW

DAG = "blobgc_sweep"


def planned_run(conn, run_id: str, *, objects: int, collection: str | None = "app_blob", dry: bool = False,
                rows: int | None = None) -> RunRef:
    """A run whose plan holds `objects` objects of 10 bytes and `rows` rows (as many as the objects by default)."""
    rows = objects if rows is None else rows
    run = ensure_run(conn, RunRef(DAG, run_id, dry), NOW)
    fix_plan(conn, run, None, 24)
    with conn.transaction():
        for start in range(0, max(objects, rows), 1000):
            n, m = max(0, min(1000, objects - start)), max(0, min(1000, rows - start))
            add_plan_item(conn, run, part="p", collection=collection, source="blobs", bucket="b",
                          keys=[f"blobs/{run_id}-{start + i}/raw" for i in range(n)], sizes=[10] * n,
                          row_ids=[f"{run_id}-{start + i}" for i in range(m)])
    return run


def past_runs(conn, objects: list[int], rows: list[int] | None = None) -> None:
    for i, n in enumerate(objects):
        run = ensure_run(conn, RunRef(DAG, f"past{i}"), NOW)
        with conn.transaction():
            conn.execute("UPDATE blobgc.run SET objects_deleted = %s, bytes_reclaimed = %s, rows_deleted = %s, "
                         "started_at = now() - %s * interval '1 hour' WHERE run_id = %s",
                         (n, n * 10, n if rows is None else rows[i], i + 1, run.run_id))
        finish_run(conn, run)


def test_gate_settings_default_and_refuse_what_they_cannot_use():
    assert GateSettings.parse(None) == GateSettings(5, 1000, 1073741824, 10)
    assert GateSettings.parse({"ratio": 2.5, "history": 3}) == GateSettings(2.5, 1000, 1073741824, 3)
    for raw, message in (([1], "must be a JSON object"), ({"ratio": "5"}, "ratio must be a number"),
                         ({"ratio": 0}, "ratio must be > 0"), ({"min_objects": -1}, "min_objects must be >= 0"),
                         ({"history": 2.5}, "history must be a whole number"), ({"rate": 5}, "unknown field")):
        with pytest.raises(ConfigurationError, match=message):
            GateSettings.parse(raw)


def test_a_first_run_is_judged_by_the_floors(conn):
    run = planned_run(conn, "first", objects=1200)
    judgement = judge(conn, run, GateSettings())
    whole = judgement.scopes[0]
    assert (whole["scope"], whole["history_runs"], whole["threshold_objects"]) == ("(all)", 0, 1000)
    assert judgement.needs_approval  # 1200 objects > the 1000-object floor
    small = planned_run(conn, "small", objects=999)
    assert not judge(conn, small, GateSettings()).needs_approval


def test_the_trailing_median_of_the_last_runs_sets_the_threshold(conn):
    past_runs(conn, [400, 500, 600, 10_000, 450, 1])  # history 5: the last five, median 450
    run = planned_run(conn, "now", objects=2300, collection=None)  # judged as a whole only
    judgement = judge(conn, run, GateSettings(ratio=5, min_objects=10, min_bytes=10**12, history=5))
    assert [s["scope"] for s in judgement.scopes] == ["(all)"]
    whole = judgement.scopes[0]
    assert (whole["history_runs"], whole["median_objects"], whole["threshold_objects"]) == (5, 500, 2500)
    assert not judgement.needs_approval
    assert judge(conn, run, GateSettings(ratio=4, min_objects=10, min_bytes=10**12, history=5)).needs_approval


def test_a_plan_of_many_rows_and_few_objects_is_judged_by_its_rows(conn):
    """Rows whose objects stay in use (pastes of shared contents, images whose ids keep a row) are deletions too:
    a plan far past the median rows waits even when its objects are within the threshold."""
    past_runs(conn, [100, 100, 100], rows=[200, 200, 200])  # median: 100 objects, 200 rows
    usual = planned_run(conn, "usual", objects=100, rows=900, collection=None)
    judgement = judge(conn, usual, GateSettings(ratio=5, min_objects=10, min_bytes=10**12, history=5))
    whole = judgement.scopes[0]
    assert (whole["planned_rows"], whole["median_rows"], whole["threshold_rows"]) == (900, 200, 1000)
    assert not judgement.needs_approval
    unusual = planned_run(conn, "rows", objects=100, rows=1001, collection=None)
    judgement = judge(conn, unusual, GateSettings(ratio=5, min_objects=10, min_bytes=10**12, history=5))
    whole = judgement.scopes[0]
    assert (whole["planned_objects"], whole["threshold_objects"]) == (100, 500)  # objects alone would pass
    assert whole["exceeds"] and judgement.needs_approval
    assert "1,001 rows" in judgement.summary() and "1,000 rows" in judgement.summary()
    rows_only = planned_run(conn, "rows-only", objects=0, rows=1200, collection=None)
    assert not judge(conn, rows_only, GateSettings(min_objects=2000)).needs_approval  # min_objects floors rows too
    assert judge(conn, rows_only, GateSettings(min_objects=1000)).needs_approval  # 1200 > max(5 x 200, 1000)


def test_a_rejected_or_waiting_plan_is_never_executed(conn):
    run = planned_run(conn, "gated", objects=5)
    with pytest.raises(GateClosed, match="not judged yet"):
        require_go(conn, run)
    judgement = judge(conn, run, GateSettings())
    record_judgement(conn, run, judgement, "waiting")
    with pytest.raises(GateClosed, match="waiting"):
        require_go(conn, run)
    record_decision(conn, run, "rejected", "alice")
    with pytest.raises(GateClosed, match="rejected by alice"):
        require_go(conn, run)
    record_decision(conn, run, "approved", "bob")
    require_go(conn, run)
    assert plan_size(conn, DAG, run.run_id)[0].objects == 5


def test_a_plan_that_expires_while_waiting_is_refused(conn):
    run = planned_run(conn, "old", objects=3)
    check_fresh(conn, run, run.run_id, 24)
    with conn.transaction():
        conn.execute("UPDATE blobgc.plan_item SET planned_at = now() - interval '13 hours'")
    with pytest.raises(PlanRefused, match="expired"):
        check_fresh(conn, run, run.run_id, 12)


def test_a_runs_plan_cannot_change_once_fixed(conn):
    dry = planned_run(conn, "dry", objects=1, dry=True)
    finish_run(conn, dry)
    run = ensure_run(conn, RunRef(DAG, "real"), NOW)
    assert fix_plan(conn, run, "dry", 24) == "dry"
    assert fix_plan(conn, run, "dry", 24) == "dry"  # a retry
    with pytest.raises(PlanRefused, match="already executes the plan of 'dry'"):
        fix_plan(conn, run, None, 24)


def test_a_collection_without_history_of_its_own_is_judged_by_the_floors(conn):
    past_runs(conn, [5000, 5000, 5000])  # the DAG deleted plenty, none of it from this collection
    run = planned_run(conn, "new collection", objects=1500, collection="shop")
    judgement = judge(conn, run, GateSettings())
    whole, shop = judgement.scopes
    assert (whole["exceeds"], shop["scope"], shop["median_objects"], shop["exceeds"]) == (False, "shop", 0, True)


def test_a_dry_runs_report_is_its_plan_recorded_once_and_shown_as_deleted_objects(conn):
    run = planned_run(conn, "dry-report", objects=3, dry=True)
    assert conn.execute("SELECT count(*) FROM blobgc.deletion_log WHERE run_id = 'dry-report'").fetchone()[0] == 0
    shown = conn.execute("SELECT key, size_bytes, dry_run, deleted_at, owed, log_id FROM blobgc.deleted_object "
                         "WHERE run_id = %s ORDER BY key", (run.run_id,)).fetchall()
    assert shown == [(f"blobs/dry-report-{i}/raw", 10, True, None, False, None) for i in range(3)]
    real = planned_run(conn, "real-plan", objects=2)  # a real run's plan is not a report: nothing shown yet
    assert conn.execute("SELECT count(*) FROM blobgc.deleted_object WHERE run_id = %s",
                        (real.run_id,)).fetchone()[0] == 0

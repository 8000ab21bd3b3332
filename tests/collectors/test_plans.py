"""A sweep's plan executed against a collection: what changed since the plan is skipped, and a plan, once judged or
executed, is never made again under the same run, nor executed after a person refused it."""
from __future__ import annotations

import pytest

from blobgc.collectors.mark import mark_collection
from blobgc.collectors.sweep import execute_plan_part, plan_collection, range_part
from blobgc.core.gate import GateSettings, judge, record_judgement
from blobgc.core.plans import APPROVED, REJECTED, PlanRefused, fix_plan
from blobgc.core.references import discover_references
from blobgc.core.runs import RunRef, ensure_run, finish_run
from tests.helpers import NOW
from tests.support.collections import backdate_marks, backdate_uploads, bound_shop, new_schema
from tests.collectors.test_collections import CUTOFF, shop_with_references

DAG = "blobgc_sweep"
WHOLE = (None, None)


def marked_shop(conn, s3, bucket):
    schema = new_schema()
    uploads = shop_with_references(conn, s3, bucket, schema)  # 5-8 unreferenced
    bound = bound_shop(conn, schema, bucket, name=schema)
    refs = discover_references(conn, f"{schema}.upload", extra_sql=bound.collection.references, id_column="id")
    mark_collection(conn, bound, refs)
    backdate_marks(conn, schema, "2 days")
    backdate_uploads(conn, schema, list(range(1, 10)), "2 days")
    return schema, uploads, bound, refs


def planned(conn, run_id: str, bound, refs, *, dry: bool = False) -> RunRef:
    run = ensure_run(conn, RunRef(DAG, run_id, dry), NOW)
    fix_plan(conn, run, None, 24)
    plan_collection(conn, run, bound, refs, cutoff=CUTOFF)
    return run


def test_a_row_whose_key_columns_changed_since_the_plan_is_skipped_not_deleted(conn, s3, bucket):
    schema, uploads, bound, refs = marked_shop(conn, s3, bucket)
    run = planned(conn, "keys-changed", bound, refs)
    plan_keys = {k for (k,) in conn.execute("SELECT unnest(keys) FROM blobgc.plan_item WHERE run_id = %s",
                                            (run.run_id,))}
    assert uploads[5]["key"] in plan_keys
    with conn.transaction():  # upload 5 now names other content: its objects are no longer the plan's
        conn.execute(f"UPDATE {schema}.upload SET sha = 'f' || sha WHERE id = 5")
    record_judgement(conn, run, judge(conn, run, GateSettings()), APPROVED, "alice")
    result = execute_plan_part(conn, run, bound, refs, cutoff=CUTOFF, part=range_part(WHOLE, bound.name))
    assert (result.rows_deleted, result.skipped_rereferenced) == (3, 1)
    assert {r[0] for r in conn.execute(f"SELECT id FROM {schema}.upload")} == {1, 2, 3, 4, 5, 9}
    owed = {k for (k,) in conn.execute("SELECT key FROM blobgc.deleted_object WHERE run_id = %s", (run.run_id,))}
    assert owed <= plan_keys and f"uploads/f{uploads[5]['sha']}.png" not in owed
    assert conn.execute("SELECT skipped_ids FROM blobgc.plan_outcome WHERE run_id = %s", (run.run_id,)
                        ).fetchone()[0] == ["5"]


def test_a_run_whose_plan_was_judged_may_not_plan_again(conn, s3, bucket):
    _schema, _uploads, bound, refs = marked_shop(conn, s3, bucket)
    run = planned(conn, "judged", bound, refs)
    record_judgement(conn, run, judge(conn, run, GateSettings()), APPROVED, "alice")
    with pytest.raises(PlanRefused, match=r"may not plan again: its gate judged the plan \(approved\)"):
        plan_collection(conn, run, bound, refs, cutoff=CUTOFF)
    assert conn.execute("SELECT count(*) FROM blobgc.plan_item WHERE run_id = %s", (run.run_id,)).fetchone()[0] == 1


def test_a_plan_refused_at_one_runs_gate_is_never_executed_by_another(conn, s3, bucket):
    _schema, _uploads, bound, refs = marked_shop(conn, s3, bucket)
    dry = planned(conn, "the-plan", bound, refs, dry=True)
    finish_run(conn, dry)
    first = ensure_run(conn, RunRef(DAG, "first"), NOW)
    fix_plan(conn, first, dry.run_id, 24)
    record_judgement(conn, first, judge(conn, first, GateSettings()), REJECTED, "bob")
    second = ensure_run(conn, RunRef(DAG, "second"), NOW)
    with pytest.raises(PlanRefused, match="was rejected at the gate of run 'first'"):
        fix_plan(conn, second, dry.run_id, 24)
    report_before = dry_run_report(conn, dry.run_id)
    assert report_before == (4, 8, 8)
    with pytest.raises(PlanRefused, match="may not plan again: run first executes it"):
        plan_collection(conn, dry, bound, refs, cutoff=CUTOFF)  # the dry run's plan is on record: kept as it is
    assert dry_run_report(conn, dry.run_id) == report_before  # and so is its report, which a person judged


def dry_run_report(conn, run_id: str) -> tuple:
    """A dry run's report: the rows and objects it counted, and the keys in its deletion log."""
    return conn.execute("SELECT rows_deleted, objects_deleted, (SELECT count(*) FROM blobgc.deleted_object "
                        "WHERE run_id = %s AND dry_run) FROM blobgc.run WHERE dag_id = %s AND run_id = %s",
                        (run_id, DAG, run_id)).fetchone()


def test_a_row_used_and_unused_again_since_the_plan_is_skipped_by_a_run_with_a_shorter_grace(conn, s3, bucket):
    """A run executing a dry run's plan re-checks each row against the plan's cut-off too, not only its own: a row
    that became used again after the plan, and unused once more, is skipped even at a grace of 0."""
    schema, _uploads, bound, refs = marked_shop(conn, s3, bucket)
    dry = planned(conn, "planned-at-24h", bound, refs, dry=True)  # 5, 6, 7 and 8, unused for 2 days
    finish_run(conn, dry)
    with conn.transaction():
        conn.execute(f"INSERT INTO {schema}.product VALUES (4, 6)")
    mark_collection(conn, bound, refs)  # 6 is used again
    with conn.transaction():
        conn.execute(f"DELETE FROM {schema}.product WHERE id = 4")
    mark_collection(conn, bound, refs)  # and unused again, since now
    real = ensure_run(conn, RunRef(DAG, "grace-0"), NOW)
    fix_plan(conn, real, dry.run_id, 24)
    record_judgement(conn, real, judge(conn, real, GateSettings()), APPROVED, "alice")
    now = conn.execute("SELECT now()").fetchone()[0]  # grace_hours 0: the run's own cut-off is the present
    result = execute_plan_part(conn, real, bound, refs, cutoff=now, part=range_part(WHOLE, bound.name))
    assert (result.rows_deleted, result.skipped_rereferenced) == (3, 1)
    assert {r[0] for r in conn.execute(f"SELECT id FROM {schema}.upload")} == {1, 2, 3, 4, 6, 9}
    assert conn.execute("SELECT skipped_ids FROM blobgc.plan_outcome WHERE run_id = %s", (real.run_id,)
                        ).fetchone()[0] == ["6"]

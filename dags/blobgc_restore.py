"""
### blobgc_restore: undo one run's deletions

Trigger with `{"run_id": "<the run to undo>"}` (add `"source_dag_id"` when two DAGs have a run of
that id). Works on versioned buckets only: each object blobgc deletes there gets a delete marker,
whose version id the deletion log records; this DAG removes those markers.

1. **plan_restore** finds the run and checks that every bucket it deleted from is versioned. On an
   unversioned bucket it **refuses**, with nothing changed: the bytes are gone for good.
2. **cancel_owed_deletions** takes the run's deletions that are still owed out of the outbox.
3. **restore_objects** removes the run's delete markers, 1000 a DeleteObjects call, so each
   object's previous version is current again.
4. **restore_rows** puts back the rows the log holds: seed 000's `app.blob` rows, as *used* rows
   (no sweep takes them before the next mark). For every other source it records precisely why its
   rows cannot come back.
5. **report** sums it up, per outcome and reason; every item is in `blobgc.restore_item`.

Every step can be retried or re-run alone: what a restore has dealt with is recorded and skipped.
`dry_run` reports what would be restored and changes nothing.
"""
from __future__ import annotations

from datetime import datetime

from airflow.sdk import Param, dag

from blobgc.collectors import restore
from blobgc.collectors.restore import RestorePlan, RestoreResult
from blobgc.dag_kit import S3_POOL, Step, default_args, gc_step, report_run


@dag(
    dag_id="blobgc_restore",
    schedule=None,
    start_date=datetime(2026, 1, 1), catchup=False, max_active_runs=1, default_args=default_args(),
    params={
        "run_id": Param(type="string", minLength=1, description="The run id of the blobgc run to undo."),
        "source_dag_id": Param(None, type=["null", "string"],
                               description="The DAG of that run; needed only when several DAGs have a run of that id."),
        "dry_run": Param(False, type="boolean", description="Report what would be restored and change nothing."),
    },
    tags=["blobgc", "audit", "restore"],
    doc_md=__doc__,
)
def blobgc_restore():
    @gc_step(pool=S3_POOL)
    def plan_restore(step: Step) -> RestorePlan:  # a refusal fails at once: no retry can change the answer
        return restore.plan_restore(step.conn, step.s3, step.params["run_id"], step.params["source_dag_id"])

    @gc_step()
    def cancel_owed_deletions(step: Step, plan: dict) -> RestoreResult:
        return restore.cancel_owed_deletions(step.conn, step.run, RestorePlan.from_xcom(plan))

    @gc_step(pool=S3_POOL)
    def restore_objects(step: Step, plan: dict) -> RestoreResult:
        return restore.restore_objects(step.conn, step.s3, step.run, RestorePlan.from_xcom(plan))

    @gc_step()
    def restore_rows(step: Step, plan: dict) -> RestoreResult:
        return restore.restore_rows(step.conn, step.run, RestorePlan.from_xcom(plan))

    planned = plan_restore()
    owed, objects, rows = cancel_owed_deletions(planned), restore_objects(planned), restore_rows(planned)
    owed >> objects >> rows
    report_run(summaries={"recorded": restore.summarize_restore}, source=RestorePlan, owed=RestoreResult,
               objects=RestoreResult, rows=RestoreResult)(source=planned, owed=owed, objects=objects, rows=rows)


blobgc_restore()

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

from airflow.sdk import Param, dag, get_current_context, task

from blobgc.airflow_adapters import DEFAULT_ARGS, S3_POOL, gc_task, s3_client


@dag(
    dag_id="blobgc_restore",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
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
    @task(pool=S3_POOL)
    def plan_restore() -> dict:
        from airflow.sdk.exceptions import AirflowFailException

        from blobgc.restore import RestoreRefused
        from blobgc.restore import plan_restore as plan

        context = get_current_context()
        params = context["params"]
        with gc_task(context) as (conn, _run):
            try:
                return plan(conn, s3_client(), params["run_id"], params["source_dag_id"]).as_xcom()
            except RestoreRefused as refused:
                raise AirflowFailException(str(refused)) from refused  # no retry can change the answer

    @task
    def cancel_owed_deletions(plan: dict) -> dict:
        from blobgc.restore import RestorePlan
        from blobgc.restore import cancel_owed_deletions as cancel

        with gc_task(get_current_context()) as (conn, run):
            return cancel(conn, run, RestorePlan(**plan)).as_xcom()

    @task(pool=S3_POOL)
    def restore_objects(plan: dict) -> dict:
        from blobgc.restore import RestorePlan
        from blobgc.restore import restore_objects as restore

        with gc_task(get_current_context()) as (conn, run):
            return restore(conn, s3_client(), run, RestorePlan(**plan)).as_xcom()

    @task
    def restore_rows(plan: dict) -> dict:
        from blobgc.restore import RestorePlan
        from blobgc.restore import restore_rows as restore

        with gc_task(get_current_context()) as (conn, run):
            return restore(conn, run, RestorePlan(**plan)).as_xcom()

    @task
    def report(plan: dict, owed: dict, objects: dict, rows: dict) -> dict:
        from blobgc.airflow_adapters import finish_dag_run
        from blobgc.restore import summarize_restore

        with gc_task(get_current_context()) as (conn, run):
            details = {"source": plan, "owed": owed, "objects": objects, "rows": rows}
            if not run.dry_run:
                details["recorded"] = summarize_restore(conn, run.run_id)
            return finish_dag_run(conn, run, details)

    planned = plan_restore()
    owed = cancel_owed_deletions(planned)
    objects = restore_objects(planned)
    rows = restore_rows(planned)
    owed >> objects >> rows
    report(planned, owed, objects, rows)


blobgc_restore()

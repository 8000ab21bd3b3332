"""
### blobgc_restore: undo one run's deletions

Trigger with `{"run_id": "<the run to undo>"}` (and `"source_dag_id"` if two DAGs have a run of that
id). Versioned buckets only: it removes the delete markers the run's deletions left (logged).

1. **plan_restore** finds the run and checks that every bucket it deleted from is versioned (else it
   **refuses**, changing nothing: the bytes are gone for good).
2. **cancel_owed_deletions** takes the run's still-owed deletions out of the outbox.
3. **restore_objects** removes the delete markers (1000 a call) and checks each object is back.
4. **restore_rows** puts back app_blob's rows as *used* rows, and records why each seed source's rows
   cannot come back; **restore_collection_rows** (one mapped task per collection that
   **collections_with_rows** lists) puts back other collections' logged rows. A row comes back only
   when every object it forms is in the store; one whose object a later run deleted is reported
   failed, naming that run (restore it first). Param `collections`
   limits the restore. **report** sums it up; every item is in `blobgc.restore_item`. Each step can
   be re-run alone (what is done is recorded and skipped); `dry_run` changes nothing.
"""
from __future__ import annotations

from airflow import sdk
from airflow.sdk import Param, task

from blobgc.collectors import restore
from blobgc.collectors.restore import RestorePlan, RestoreResult
from blobgc.dag_kit import S3_POOL, Step, dag_defaults, gc_step, report_run
from blobgc.dag_kit.collections import checked_collections, collections_param, one_collection


@sdk.dag(
    dag_id="blobgc_restore",
    schedule=None,
    **dag_defaults("blobgc_restore"),
    params={
        "run_id": Param(type="string", minLength=1, description="The run id of the blobgc run to undo."),
        "source_dag_id": Param(None, type=["null", "string"],
                               description="The DAG of that run, if 2 DAGs have that id."),
        "dry_run": Param(False, type="boolean", description="Report what would be restored and change nothing."),
        "collections": collections_param(),
    },
    tags=["blobgc", "audit", "restore"],
    doc_md=__doc__,
)
def blobgc_restore():
    @gc_step()  # not pooled: the DAG's first task checks the pools (a pooled one would wait in a missing pool)
    def plan_restore(step: Step) -> RestorePlan:  # a refusal fails at once: no retry can change the answer
        sources = [b.collection.source for b in checked_collections(step.conn, step.params)] \
            if step.params["collections"] else None
        return restore.plan_restore(step.conn, step.s3, step.params["run_id"],
                                    step.params["source_dag_id"], sources)

    @gc_step()
    def cancel_owed_deletions(step: Step, plan: dict) -> RestoreResult:
        return restore.cancel_owed_deletions(step.conn, step.run, RestorePlan.from_xcom(plan))

    @gc_step(pool=S3_POOL)
    def restore_objects(step: Step, plan: dict) -> RestoreResult:
        return restore.restore_objects(step.conn, step.s3, step.run, RestorePlan.from_xcom(plan))

    @gc_step(pool=S3_POOL)
    def restore_rows(step: Step, plan: dict) -> RestoreResult:
        return restore.restore_rows(step.conn, step.s3, step.run, RestorePlan.from_xcom(plan))

    @task
    def collections_with_rows(plan: dict) -> list[str]:
        return plan["collections"]

    @gc_step(pool=S3_POOL, map_index_template="{{ task.op_kwargs['collection'] }}")
    def restore_collection_rows(step: Step, plan: dict, collection: str) -> RestoreResult:
        return restore.restore_collection_rows(step.conn, step.s3, step.run,
                                               RestorePlan.from_xcom(plan), one_collection(step.conn, collection))

    planned = plan_restore()
    owed, objects, rows = cancel_owed_deletions(planned), restore_objects(planned), restore_rows(planned)
    collection_rows = restore_collection_rows.partial(plan=planned).expand(collection=collections_with_rows(planned))
    owed >> objects >> [rows, collection_rows]
    report_run(summaries={"recorded": restore.summarize_restore}, source=RestorePlan, owed=RestoreResult,
               objects=RestoreResult, rows=RestoreResult, collection_rows=RestoreResult)(
        source=planned, owed=owed, objects=objects, rows=rows, collection_rows=collection_rows)


dag = blobgc_restore()

"""
### blobgc_mark: mark blobs unused from every reference found (seed 000)

Seed 000 tries to `DELETE` each blob inside a PL/pgSQL loop and relies on `ON DELETE RESTRICT`
to tell it which blobs are referenced. This DAG does the same job set-based:

1. **check_references** discovers every foreign key to `app.blob` (to its id or any unique column,
   one column or several; a table added later counts with no configuration) and checks the extra
   reference queries of Variable `blobgc_extra_blob_references` (each must run, read-only, and
   return one column of blob ids). A reference blobgc cannot follow fails the run here, before
   anything is written.
2. **remove_stale_page_usages** deletes `app.page_using_blob` rows not confirmed within
   `page_grace_days`, in batches of `batch_size`.
3. **mark_blobs** walks the blob table in key ranges of 100,000 ids, one short transaction each on
   two connections, flipping `unused` only where it changes (NULL-safe: a NULL reference references
   nothing) and stamping `updated_at` at the flip; `visibility` is `PUBLIC` exactly when an in-use
   page usage remains.
4. **publish_marks** records the run's report and emits the `blobgc_marked_blobs` Asset that
   schedules `blobgc_sweep`. A dry run changes nothing and does not trigger the sweep.

Every task is idempotent: clear and re-run any of them.
"""
from __future__ import annotations

from datetime import datetime

from airflow.sdk import Asset, dag

from blobgc.collectors import mark
from blobgc.collectors.mark import MarkResult, PageUsagesRemoved
from blobgc.core.references import discover_references
from blobgc.dag_kit import Step, default_args, destructive_params, gc_step, report_run
from blobgc.dag_kit.variables import extra_blob_references


@dag(
    dag_id="blobgc_mark",
    schedule="@daily",
    start_date=datetime(2026, 1, 1), catchup=False, max_active_runs=1, default_args=default_args(),
    params=destructive_params("page_grace_days", 30, "Page usages not confirmed for this many days are removed."),
    tags=["blobgc", "seed-000", "mark"],
    doc_md=__doc__,
)
def blobgc_mark():
    @gc_step()
    def check_references(step: Step) -> list[str]:
        return discover_references(step.conn, extra_sql=extra_blob_references()).describe()

    @gc_step()
    def remove_stale_page_usages(step: Step) -> PageUsagesRemoved:
        return PageUsagesRemoved(mark.remove_stale_page_usages(
            step.conn, step.run, cutoff=step.cutoff(days=step.params["page_grace_days"]),
            batch_size=step.params["batch_size"]))

    @gc_step()
    def mark_blobs(step: Step) -> MarkResult:
        refs = discover_references(step.conn, extra_sql=extra_blob_references())
        return mark.mark_unused_blobs(step.conn, refs, dry_run=step.run.dry_run, workers=2, connect=step.connect)

    removed = remove_stale_page_usages()
    marks = mark_blobs()
    check_references() >> removed >> marks
    report_run("publish_marks", outlets=[Asset("blobgc_marked_blobs")], skip_dry_run=True,
               page_usages=PageUsagesRemoved, marks=MarkResult)(page_usages=removed, marks=marks)


blobgc_mark()

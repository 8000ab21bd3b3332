"""
### blobgc_mark: mark every collection's rows unused from the references found (seed 000)

Seed 000 tries to `DELETE` each blob inside a PL/pgSQL loop and relies on `ON DELETE RESTRICT`
to tell it which blobs are referenced. This DAG does the same job set-based, for every collection
of the collections file (docs/reference.md §6; Param `collections` picks some):

1. **check_references** checks the collections file and each selected collection against the
   database: its table and columns, every foreign key to its id or any unique column (one column or
   several; a table added later counts with no configuration), and its `references` queries (plus,
   for `app_blob`, Variable `blobgc_extra_blob_references`). Anything wrong fails the run here, naming
   the collection and the field, before anything is written.
2. **remove_stale_page_usages** (app_blob) deletes `app.page_using_blob` rows not confirmed within
   `page_grace_days`, in batches of `batch_size`.
3. **mark_blobs**, one mapped task per collection, walks its table in id ranges of 100,000, one short
   transaction each on two connections (NULL-safe: a NULL reference references nothing). `app_blob`
   flips its own `unused` (stamping `updated_at`) and `visibility` columns; any other collection's
   state is kept in `blobgc.mark_<name>`, never in the user's table.
4. **publish_marks** records the run's report and emits the `blobgc_marked_blobs` Asset that
   schedules `blobgc_sweep`. A dry run changes nothing and does not trigger the sweep.

Every task is idempotent: clear and re-run any of them.
"""
from __future__ import annotations

from airflow import sdk
from airflow.sdk import Asset

from blobgc.collectors import mark
from blobgc.collectors.mark import MarkResult
from blobgc.dag_kit import Step, dag_defaults, destructive_params, gc_step, report_run
from blobgc.dag_kit.collections import checked_collections, collections_param, one_collection, references
from blobgc.kinds.blobs import APP_BLOB, pages
from blobgc.kinds.blobs.pages import PageUsagesRemoved


@sdk.dag(
    dag_id="blobgc_mark",
    schedule="@daily",
    **dag_defaults("blobgc_mark"),
    params=destructive_params("page_grace_days", 30, "Page usages not confirmed for this many days are removed.",
                              collections=collections_param()),
    tags=["blobgc", "seed-000", "mark"],
    doc_md=__doc__,
)
def blobgc_mark():
    @gc_step()
    def check_references(step: Step) -> list[str]:
        return [bound.name for bound in checked_collections(step.conn, step.params)]

    @gc_step()
    def remove_stale_page_usages(step: Step, collections: list[str]) -> PageUsagesRemoved:
        return PageUsagesRemoved(pages.remove_stale_page_usages(
            step.conn, step.run, cutoff=step.cutoff(days=step.params["page_grace_days"]),
            batch_size=step.params["batch_size"]) if APP_BLOB.name in collections else 0)

    @gc_step(map_index_template="{{ task.op_kwargs['collection'] }}")
    def mark_blobs(step: Step, collection: str) -> MarkResult:
        bound = one_collection(step.conn, collection)
        reads = step.reads  # the replica's connections when blobgc_postgres_replica is set: the mark's scans read it
        return mark.mark_any(step.conn, bound, references(step.conn, bound), dry_run=step.run.dry_run, workers=2,
                             connect=step.connect, read=reads.connect if reads.replica else None)

    checked = check_references()
    removed = remove_stale_page_usages(checked)
    marks = mark_blobs.expand(collection=checked)
    removed >> marks
    report_run("publish_marks", outlets=[Asset("blobgc_marked_blobs")], skip_dry_run=True,
               page_usages=PageUsagesRemoved, marks=MarkResult)(page_usages=removed, marks=marks)


dag = blobgc_mark()

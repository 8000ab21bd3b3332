"""
### blobgc_mark: mark blobs unused from every reference found (seed 000)

Seed 000 tries to `DELETE` each blob inside a PL/pgSQL loop and relies on `ON DELETE RESTRICT`
to tell it which blobs are referenced. This DAG does the same job set-based:

1. **check_references** discovers every foreign key to `app.blob` and checks the declared extra
   reference queries (each must run, read-only, and return one column of blob ids). A reference
   blobgc cannot follow fails the run here, before anything is written.
2. **remove_stale_page_usages** deletes `app.page_using_blob` rows not confirmed (polled) within
   `page_grace_days`, in batches of `batch_size`.
3. **mark_blobs** discovers every foreign key to `app.blob` in the catalog (a table added later
   counts with no configuration; non-FK references can be declared as SQL in Variable
   `blobgc_extra_blob_references`), then walks the blob table in key ranges of 100,000 ids, one
   short transaction each on two connections, flipping `unused` only where it changes and
   stamping `updated_at` at the flip. In the same pass it sets `visibility` to `PUBLIC` exactly
   when an in-use page usage remains.
4. **publish_marks** records the run's report and emits the `blobgc_marked_blobs` Asset that
   schedules `blobgc_sweep`. A dry run changes nothing and does not trigger the sweep.

Every task is idempotent: clear and re-run any of them.
"""
from __future__ import annotations

from datetime import datetime

from airflow.sdk import Asset, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowSkipException

from blobgc.airflow_adapters import (
    DEFAULT_ARGS,
    cutoff,
    destructive_params,
    extra_blob_references,
    gc_task,
    pg_connector,
)

MARKED_BLOBS = Asset("blobgc_marked_blobs")


@dag(
    dag_id="blobgc_mark",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params=destructive_params("page_grace_days", 30, "Page usages not confirmed for this many days are removed."),
    tags=["blobgc", "seed-000", "mark"],
    doc_md=__doc__,
)
def blobgc_mark():
    @task
    def check_references() -> list[str]:
        from blobgc.references import discover_references

        with gc_task(get_current_context()) as (conn, _run):
            return discover_references(conn, extra_sql=extra_blob_references()).describe()

    @task
    def remove_stale_page_usages() -> int:
        from blobgc.pages import remove_stale_page_usages as remove

        context = get_current_context()
        with gc_task(context) as (conn, run):
            return remove(conn, run, cutoff=cutoff(run, days=context["params"]["page_grace_days"]),
                          batch_size=context["params"]["batch_size"])

    @task
    def mark_blobs() -> dict:
        from blobgc.mark import mark_unused_blobs
        from blobgc.references import discover_references

        context = get_current_context()
        with gc_task(context) as (conn, run):
            refs = discover_references(conn, extra_sql=extra_blob_references())
            result = mark_unused_blobs(conn, refs, dry_run=run.dry_run, workers=2, connect=pg_connector())
        return {"references": refs.describe(), **vars(result)}

    @task(outlets=[MARKED_BLOBS])
    def publish_marks(page_usages_removed: int, marks: dict) -> dict:
        from blobgc.airflow_adapters import finish_dag_run

        context = get_current_context()
        with gc_task(context) as (conn, run):
            report = finish_dag_run(conn, run, {"page_usages_removed": page_usages_removed, **marks})
        if run.dry_run:
            raise AirflowSkipException(f"dry run, sweep not triggered: {report}")
        return report

    removed = remove_stale_page_usages()
    marks = mark_blobs()
    check_references() >> removed >> marks
    publish_marks(removed, marks)


blobgc_mark()

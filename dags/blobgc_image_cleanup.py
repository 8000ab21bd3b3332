"""
### blobgc_image_cleanup: remove rotten photos (seed 001)

Photos not bound to any offer (`offer_id IS NULL`: never attached, or their offer was deleted
and `ON DELETE SET NULL` unbound them) and untouched for `grace_days` are removed.

Their grace counts from the moment they became unbound, whoever unbound them: a trigger on
`app.image` stamps `last_update` when `offer_id` becomes NULL, `ON DELETE SET NULL` included.

1. **delete_unbound_images** first checks Variable `blobgc_image_sizes` (size names must match
   `[a-z0-9_]+`: they are file names); a bad one fails the run before anything is deleted. It
   then works in batches of `batch_size`, one transaction each: claim the stale unbound rows
   with `FOR UPDATE SKIP LOCKED` and delete them (rows first: a row without its file is worse
   than a file without a row), re-check which of their `image_id`s still have a row (bound
   elsewhere, or fresh), and owe the files of the others in the deletion log and the outbox.
2. **delete_owed_objects** deletes the owed files with DeleteObjects. Under the image ids' locks
   it checks once more that no row uses them: an image id that got a row again keeps its files.
   It also deletes the files of uploads that died before their row was written.
3. **report** records rows, objects and bytes in `blobgc.reclaim_daily`.

`dry_run` reports the rows and files that would go and changes nothing.
"""
from __future__ import annotations

from datetime import datetime

from airflow.sdk import CronTriggerTimetable, dag, get_current_context, task

from blobgc.airflow_adapters import (
    DEFAULT_ARGS,
    S3_POOL,
    cutoff,
    destructive_params,
    drain_owed_objects,
    failing_fast,
    gc_task,
    image_settings,
)


@dag(
    dag_id="blobgc_image_cleanup",
    schedule=CronTriggerTimetable("30 4 * * *", timezone="UTC"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params=destructive_params("grace_days", 14, "Unbound photos touched within this many days are kept."),
    tags=["blobgc", "seed-001", "images", "destructive"],
    doc_md=__doc__,
)
def blobgc_image_cleanup():
    @task
    def delete_unbound_images() -> dict:
        from blobgc.images import delete_unbound_images as delete

        with failing_fast():  # a bad blobgc_image_sizes fails the run here, before anything changes
            settings = image_settings()
        context = get_current_context()
        params = context["params"]
        with gc_task(context) as (conn, run):
            result = delete(conn, run, cutoff=cutoff(run, days=params["grace_days"]), settings=settings,
                            batch_size=params["batch_size"])
        return result.counts()

    @task(pool=S3_POOL)
    def delete_owed_objects() -> dict:
        return drain_owed_objects(get_current_context())

    @task
    def report(deleted: dict, drained: dict) -> dict:
        from blobgc.airflow_adapters import finish_dag_run

        with gc_task(get_current_context()) as (conn, run):
            return finish_dag_run(conn, run, {"images": deleted, "objects": drained})

    deleted = delete_unbound_images()
    drained = delete_owed_objects()
    deleted >> drained
    report(deleted, drained)


blobgc_image_cleanup()

"""
### blobgc_image_cleanup: remove rotten photos (seed 001)

Photos not bound to any offer (`offer_id IS NULL`: never attached, or unbound, whoever unbound them,
`ON DELETE SET NULL` included; the unbinding stamps `last_update`) and untouched for `grace_days`
are removed.

1. **delete_unbound_images** checks Variable `blobgc_image_sizes` (a bad one fails the run before
   anything changes), then works in batches of `batch_size`, one transaction each: claim the stale
   unbound rows with `FOR UPDATE SKIP LOCKED` and delete them (rows first: a row without its file is
   worse than a file without a row), re-check which `image_id`s still have a row, and owe the files
   of the others in the deletion log and the outbox.
2. **delete_owed_objects** deletes the owed files with DeleteObjects. Under the image ids' locks it
   checks once more that no row uses them. It also deletes the files of uploads that died before
   their row was written.
3. **report** records rows, objects and bytes in `blobgc.reclaim_daily`.

`dry_run` reports the rows and files that would go and changes nothing.
"""
from __future__ import annotations

from airflow.sdk import CronTriggerTimetable, dag

from blobgc.collectors.image_cleanup import CleanupResult, delete_unbound_images
from blobgc.core.outbox import DrainResult
from blobgc.dag_kit import Step, dag_defaults, destructive_params, drain_owed_objects, gc_step, report_run
from blobgc.dag_kit.variables import blob_bucket, image_sizes


@dag(
    dag_id="blobgc_image_cleanup",
    schedule=CronTriggerTimetable("30 4 * * *", timezone="UTC"),
    **dag_defaults(),
    params=destructive_params("grace_days", 14, "Unbound photos touched within this many days are kept."),
    tags=["blobgc", "seed-001", "images", "destructive"],
    doc_md=__doc__,
)
def blobgc_image_cleanup():
    @gc_step(task_id="delete_unbound_images", checks=(image_sizes,))
    def delete_unbound(step: Step) -> CleanupResult:
        return delete_unbound_images(step.conn, step.run, cutoff=step.cutoff(days=step.params["grace_days"]),
                                     bucket=blob_bucket(), size_names=image_sizes(),
                                     batch_size=step.params["batch_size"])

    deleted = delete_unbound()
    drained = drain_owed_objects()()
    deleted >> drained
    report_run(images=CleanupResult, objects=DrainResult)(images=deleted, objects=drained)


dag = blobgc_image_cleanup()

"""
### blobgc_image_cleanup: remove rotten photos (seed 001)

Photos not bound to any offer (`offer_id IS NULL`: never attached, or unbound, whoever unbound them,
`ON DELETE SET NULL` included; the unbinding stamps `last_update`) and untouched for `grace_days`
are removed. Files go only when no row with that `image_id` is left, and rows go first.

A run **plans first, then deletes exactly its plan** (`blobgc.core.plans`):

1. **plan_unbound_images** checks Variable `blobgc_image_sizes` (a bad one fails the run before
   anything changes) and fixes the run's plan. It lists the stale unbound rows in batches of
   `batch_size`, locking and deleting nothing, into `blobgc.plan_item`: an item per batch, with its
   row ids and the files (keys and sizes) of the `image_id`s that would be left with no row. On a dry
   run this is the report. With Param `from_plan` (a dry run's id) it checks that plan instead (same
   DAG, finished, younger than `plan_max_age_hours`, executed by no other run) and plans nothing.
2. **gate** compares the plan with the median of the last real runs (Variable `blobgc_gate`). Past the
   threshold, it waits for a person to approve or reject; otherwise it goes on at once. A dry run
   never waits.
3. **delete_unbound_images** executes the plan, an item per transaction: claim again with
   `FOR UPDATE SKIP LOCKED` only the planned rows still unbound and untouched since before this run's
   cut-off, and delete them (rows first: a row without its file is worse than a file without a row).
   Then re-check which planned `image_id`s still have a row, and owe only the planned files of the
   others in the deletion log and the outbox. A row bound or touched since the plan is skipped and
   recorded, and so are the files of an `image_id` that still has a row. Nothing outside the plan is
   touched.
4. **delete_owed_objects** deletes the owed files with DeleteObjects. Under the image ids' locks it
   checks once more that no row uses them. It also deletes the files of uploads that died before
   their row was written.
5. **report** records rows, objects and bytes in `blobgc.reclaim_daily`, and the plan's planned,
   deleted, skipped and failed counts. It runs even when the gate refused.

`dry_run` makes the plan (also in `blobgc.deleted_object`, `dry_run = true`) and changes nothing. The
receipt page `/blobgc/runs/blobgc_image_cleanup/<run id>` shows the plan and what became of it.
"""
from __future__ import annotations

from airflow.sdk import CronTriggerTimetable

from blobgc.dag_kit import destructive_params, plan_params
from blobgc.dag_kit.builder import destructive_dag
from blobgc.dag_kit.variables import blob_bucket, image_sizes
from blobgc.kinds.images.deletion import ImageCleanup
from blobgc.reclaim.routes import receipt_path

dag = destructive_dag(
    "blobgc_image_cleanup",
    deletion=ImageCleanup(bucket=blob_bucket, sizes=image_sizes),
    schedule=CronTriggerTimetable("30 4 * * *", timezone="UTC"),
    params=destructive_params("grace_days", 14, "Unbound photos touched within this many days are kept.",
                              **plan_params()),
    tags=["blobgc", "seed-001", "images", "destructive"],
    doc_md=__doc__,
    receipt_path=receipt_path,
)

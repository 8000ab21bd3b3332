"""
### blobgc_media_thumbnails: seed 004's thumbnail worker and its cleaning

1. **drain_thumbnail_queue**, the first step, checks both buckets and fixes the run's plan; then it
   takes jobs from the Redis list `media-thumb-queue` (JSON
   `{"type": "image"|"icon", "bucket": …, "originalKey": …}`, pushed by `finalize`), in batches,
   and writes the master's WebP thumbnails at every configured size (JPEG, PNG, WEBP and HEIC
   masters). A job is moved atomically to `media-thumb-queue:processing` when taken and removed
   only when done, so a task that dies mid-batch loses nothing: its retry does those jobs first.
   Jobs that can never succeed (not an image, a decompression bomb, an unknown bucket) go to
   `media-thumb-queue:dead` with the reason; that list keeps the newest 10,000 and the run's report
   counts what was dropped (`dead_letters_dropped`).
2. **plan_shards** finds the shards of both buckets: one per leading
   character of the user ids.
3. **check_thumbnails** (mapped: one task per shard) lists the shard once, user by user: masters
   older than `min_age_hours` that lack a thumbnail size are queued again, unless their job was
   queued less than `min_age_hours` ago (the hash `media-thumb-queue:queued`); thumbnails older than
   `min_age_hours` whose master is gone go into the run's **plan** (`blobgc.plan_item`), with that
   cut-off. `min_age_hours` is at least 1. A retry lists again and replaces what it planned.
4. **gate** compares the plan with the median of the last real runs (Variable `blobgc_gate`); past the
   threshold it waits for a person to approve or reject. A dry run never waits.
5. **owe_planned_objects** hands the plan's thumbnails to the outbox; **delete_owed_objects** deletes
   them with DeleteObjects: a thumbnail whose master has come back meanwhile (a profile slot uploaded
   anew), or that was written again since the plan, is kept.
6. **report** records the totals and the plan's planned, deleted, skipped and failed counts (even when
   the gate refused).

With Param `from_plan` (a dry run's id), no shard is checked: the run makes its thumbnails (step 1),
checks that plan (same DAG, finished, younger than `plan_max_age_hours`, executed by no other run) and
deletes exactly it.

`dry_run` changes nothing but the run's report and plan: the queue is not drained (its lengths are
reported: jobs queued, in processing, dead-lettered), no master is queued (those that would be are
counted) and no thumbnail is deleted (those that would be are planned).
"""
from __future__ import annotations

from airflow.sdk import CronTriggerTimetable, Param

from blobgc.dag_kit import deleting_params, plan_params
from blobgc.dag_kit.builder import destructive_dag
from blobgc.dag_kit.variables import media_settings
from blobgc.kinds.media.deletion import ThumbnailCheck
from blobgc.reclaim.routes import receipt_path
from demo_app.media import render_thumbnails

dag = destructive_dag(
    "blobgc_media_thumbnails",
    deletion=ThumbnailCheck(settings=media_settings, render=render_thumbnails),
    schedule=CronTriggerTimetable("*/10 * * * *", timezone="UTC"),
    params=deleting_params(
        min_age_hours=Param(24, type="integer", minimum=1,
                            description="Orphan thumbnails younger than this are kept, and masters younger than this "
                                        "are not queued again (their job may still be on its way). At least 1."),
        max_jobs=Param(10000, type="integer", minimum=1,
                       description="At most this many queued jobs per run; the rest wait for the next run."),
        **plan_params()),
    tags=["blobgc", "seed-004", "media", "destructive"],
    doc_md=__doc__,
    receipt_path=receipt_path,
)

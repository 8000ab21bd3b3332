"""
### blobgc_media_thumbnails: seed 004's thumbnail worker and its cleaning

1. **drain_thumbnail_queue** takes jobs from the Redis list `media-thumb-queue` (JSON
   `{"type": "image"|"icon", "bucket": …, "originalKey": …}`, pushed by `finalize`), in batches,
   and writes the master's WebP thumbnails at every configured size (JPEG, PNG, WEBP and HEIC
   masters). A job is moved atomically to `media-thumb-queue:processing` when taken and removed
   only when done, so a task that dies mid-batch loses nothing: its retry does those jobs first.
   Jobs that can never succeed (not an image, a decompression bomb, an unknown bucket) go to
   `media-thumb-queue:dead` with the reason; that list keeps the newest 10,000 and the run's report
   counts what was dropped (`dead_letters_dropped`).
2. **plan_shards** fixes the run's plan and finds the shards of both buckets: one per leading
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

from blobgc.kinds.media import cleanup as media_cleanup
from blobgc.kinds.media.cleanup import MediaShard, ThumbnailCheckResult, ThumbnailResult
from blobgc.dag_kit import S3_POOL, Step, deleting_params, fix_run_plan, gc_step, plan_params
from blobgc.dag_kit.builder import Kind, Planned, destructive_dag
from blobgc.dag_kit.unfixable import check_media_buckets
from blobgc.dag_kit.variables import media_settings
from blobgc.reclaim.routes import receipt_path
from demo_app.media import render_thumbnails


def planning() -> Planned:
    @gc_step(pool=S3_POOL)
    def drain_thumbnail_queue(step: Step) -> ThumbnailResult:
        return media_cleanup.work_thumbnail_queue(step.redis, step.s3, step.run, media_settings(), render_thumbnails,
                                                  max_jobs=step.params["max_jobs"])

    @gc_step()
    def plan_shards(step: Step) -> list[dict]:
        if not fix_run_plan(step):
            return []
        settings = media_settings()
        check_media_buckets(step.s3, settings)  # a missing bucket fails here, named, without retries
        return [s.to_xcom() for s in media_cleanup.thumbnail_shards(step.s3, settings)]

    @gc_step(pool=S3_POOL, map_index_template="{{ task.op_kwargs['shard']['bucket'] }}/"
                                              "{{ task.op_kwargs['shard']['prefix'] }}")
    def check_thumbnails(step: Step, shard: dict) -> ThumbnailCheckResult:
        return media_cleanup.check_thumbnails(step.conn, step.s3, step.redis, step.run, MediaShard.from_xcom(shard),
                                              media_settings(), cutoff=step.cutoff(hours=step.params["min_age_hours"]),
                                              batch_size=step.params["batch_size"])

    made = drain_thumbnail_queue()
    shards = plan_shards()
    made >> shards
    return Planned(check_thumbnails.expand(shard=shards), {"thumbnails": made})


dag = destructive_dag(
    "blobgc_media_thumbnails",
    kind=Kind(planning, {"thumbnails": ThumbnailResult}, extra_counters=("dead_letters_dropped",)),
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

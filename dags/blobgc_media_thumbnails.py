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
2. **plan_shards** finds the shards of both buckets: one per leading character of the user ids.
3. **check_thumbnails** (mapped: one task per shard) lists the shard once, user by user: masters
   older than `min_age_hours` that lack a thumbnail size are queued again, unless their job was
   queued less than `min_age_hours` ago (the hash `media-thumb-queue:queued`); thumbnails older than
   `min_age_hours` whose master is gone are owed for deletion. `min_age_hours` is at least 1.
4. **delete_owed_objects** deletes them with DeleteObjects; a thumbnail whose master has come back
   meanwhile (a profile slot uploaded anew) is kept.
5. **report** records the totals.

`dry_run` changes nothing but the run's report: the queue is not drained (its lengths are
reported: jobs queued, in processing, dead-lettered), no master is queued (those that would be are
counted) and no thumbnail is deleted (those that would be are counted).
"""
from __future__ import annotations

from datetime import datetime

from airflow.sdk import CronTriggerTimetable, Param, TriggerRule, dag, get_current_context, task

from blobgc.airflow_adapters import (
    DEFAULT_ARGS,
    S3_POOL,
    cutoff,
    deleting_params,
    drain_owed_objects,
    gc_task,
    media_settings,
    redis_client,
    s3_client,
)


@dag(
    dag_id="blobgc_media_thumbnails",
    schedule=CronTriggerTimetable("*/10 * * * *", timezone="UTC"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params=deleting_params(
        min_age_hours=Param(24, type="integer", minimum=1,
                            description="Orphan thumbnails younger than this are kept, and masters younger than "
                                        "this, or queued less than this long ago, are not queued again (their job "
                                        "may still be on its way). At least 1."),
        max_jobs=Param(10000, type="integer", minimum=1,
                       description="At most this many queued jobs per run; the rest wait for the next run."),
    ),
    tags=["blobgc", "seed-004", "media", "destructive"],
    doc_md=__doc__,
)
def blobgc_media_thumbnails():
    @task(pool=S3_POOL)
    def drain_thumbnail_queue() -> dict:
        from blobgc.media import drain_thumbnail_queue as drain
        from blobgc.media import thumbnail_queue_counts

        params = get_current_context()["params"]
        if params["dry_run"]:  # a dry run takes no job: it reports the queue as it is
            return thumbnail_queue_counts(redis_client())
        return drain(redis_client(), s3_client(), media_settings(), max_jobs=params["max_jobs"]).counts()

    @task
    def plan_shards() -> list[dict]:
        from blobgc.media_cleanup import thumbnail_shards

        with gc_task(get_current_context()):
            return [s.as_xcom() for s in thumbnail_shards(s3_client(), media_settings())]

    @task(pool=S3_POOL, map_index_template="{{ task.op_kwargs['shard']['bucket'] }}/{{ task.op_kwargs['shard']['prefix'] }}")
    def check_thumbnails(shard: dict) -> dict:
        from datetime import timedelta

        from blobgc.media_cleanup import MediaShard, check_min_age
        from blobgc.media_cleanup import check_thumbnails as check

        context = get_current_context()
        params = context["params"]
        check_min_age(timedelta(hours=params["min_age_hours"]))
        with gc_task(context) as (conn, run):
            return check(conn, s3_client(), redis_client(), run, MediaShard(**shard), media_settings(),
                         cutoff=cutoff(run, hours=params["min_age_hours"]), batch_size=params["batch_size"])

    @task(pool=S3_POOL, trigger_rule=TriggerRule.NONE_FAILED)
    def delete_owed_objects() -> dict:
        return drain_owed_objects(get_current_context())

    @task
    def report(made: dict, drained: dict) -> dict:
        from blobgc.airflow_adapters import finish_dag_run

        with gc_task(get_current_context()) as (conn, run):
            return finish_dag_run(conn, run, {"thumbnails": made, "objects": drained},
                                  extra_counters={"dead_letters_dropped": made.get("dead_letters_dropped", 0)})

    made = drain_thumbnail_queue()
    shards = plan_shards()
    made >> shards
    checked = check_thumbnails.expand(shard=shards)
    drained = delete_owed_objects()
    checked >> drained
    report(made, drained)


blobgc_media_thumbnails()

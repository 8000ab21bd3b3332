"""
### blobgc_media_staging: abandoned uploads in seed 004's staging areas

Clients upload straight to `staging/{userId}/…` (bucket `{prefix}images`) and
`profiles-staging/{userId}/{slot}/…` (bucket `{prefix}profiles`) with a presigned POST that lives
5 minutes; `finalize` moves what it accepts and deletes what it refuses. What is left there was
never finalized: a client that gave up, or a finalize that died between its copy and its delete.

1. **plan_shards** finds the shards: one per leading character of the user ids under each
   staging prefix (one listing call per shard found).
2. **delete_stale_staging** (mapped: one task per shard) lists the shard and owes the deletion of
   every upload last modified before the run's data-interval end (never past the present) minus
   `max_age_minutes` (which must exceed the presign lifetime: at least 7). Only keys of the staging
   layouts (`staging/{userId}/{uuid}.{ext}`, `profiles-staging/{userId}/{slot}/{uuid}.{ext}`) go;
   any other key under a staging prefix is reported as `unexpected` and kept. A retry lists again
   and replaces what it owed.
3. **delete_owed_objects** deletes them with DeleteObjects, 1000 keys a call.
4. **report** records the totals.

`dry_run` reports what would go and deletes nothing.
"""
from __future__ import annotations

from airflow.sdk import CronTriggerTimetable, Param, TriggerRule, dag

from blobgc.collectors import media_cleanup
from blobgc.collectors.media_cleanup import MediaShard, StagingResult
from blobgc.core.outbox import DrainResult
from blobgc.dag_kit import S3_POOL, Step, dag_defaults, deleting_params, drain_owed_objects, gc_step, report_run
from blobgc.dag_kit.variables import media_settings


@dag(
    dag_id="blobgc_media_staging",
    schedule=CronTriggerTimetable("20 * * * *", timezone="UTC"),
    **dag_defaults(),
    params=deleting_params(
        max_age_minutes=Param(60, type="integer", minimum=7,
                              description="Staging objects older than this are abandoned uploads. Must exceed "
                                          "the presigned POST's 5 minutes.")),
    tags=["blobgc", "seed-004", "media", "destructive"],
    doc_md=__doc__,
)
def blobgc_media_staging():
    @gc_step()
    def plan_shards(step: Step) -> list[dict]:
        return [s.to_xcom() for s in media_cleanup.staging_shards(step.s3, media_settings())]

    @gc_step(pool=S3_POOL, map_index_template="{{ task.op_kwargs['shard']['bucket'] }}/"
                                              "{{ task.op_kwargs['shard']['prefix'] }}")
    def delete_stale_staging(step: Step, shard: dict) -> StagingResult:
        return media_cleanup.delete_stale_staging(step.conn, step.s3, step.run, MediaShard.from_xcom(shard),
                                                  cutoff=step.cutoff(minutes=step.params["max_age_minutes"]),
                                                  batch_size=step.params["batch_size"])

    stale = delete_stale_staging.expand(shard=plan_shards())
    drained = drain_owed_objects(trigger_rule=TriggerRule.NONE_FAILED)()  # also when no shard had a task
    stale >> drained
    report_run(staging=StagingResult, objects=DrainResult)(staging=stale, objects=drained)


dag = blobgc_media_staging()

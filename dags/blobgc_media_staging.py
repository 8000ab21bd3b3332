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
    s3_client,
)


@dag(
    dag_id="blobgc_media_staging",
    schedule=CronTriggerTimetable("20 * * * *", timezone="UTC"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params=deleting_params(
        max_age_minutes=Param(60, type="integer", minimum=7,
                              description="Staging objects older than this are abandoned uploads. Must exceed "
                                          "the presigned POST's 5 minutes."),
    ),
    tags=["blobgc", "seed-004", "media", "destructive"],
    doc_md=__doc__,
)
def blobgc_media_staging():
    @task
    def plan_shards() -> list[dict]:
        from blobgc.media_cleanup import staging_shards

        with gc_task(get_current_context()):
            return [s.as_xcom() for s in staging_shards(s3_client(), media_settings())]

    @task(pool=S3_POOL, map_index_template="{{ task.op_kwargs['shard']['bucket'] }}/{{ task.op_kwargs['shard']['prefix'] }}")
    def delete_stale_staging(shard: dict) -> dict:
        from datetime import timedelta

        from blobgc.media_cleanup import MediaShard, check_max_age
        from blobgc.media_cleanup import delete_stale_staging as delete

        context = get_current_context()
        params = context["params"]
        check_max_age(timedelta(minutes=params["max_age_minutes"]))
        with gc_task(context) as (conn, run):
            return delete(conn, s3_client(), run, MediaShard(**shard),
                          cutoff=cutoff(run, minutes=params["max_age_minutes"]), batch_size=params["batch_size"])

    # runs when no shard had anything (no mapped task) too: earlier runs' debts are still owed
    @task(pool=S3_POOL, trigger_rule=TriggerRule.NONE_FAILED)
    def delete_owed_objects() -> dict:
        return drain_owed_objects(get_current_context())

    @task
    def report(drained: dict) -> dict:
        from blobgc.airflow_adapters import finish_dag_run

        with gc_task(get_current_context()) as (conn, run):
            return finish_dag_run(conn, run, {"objects": drained})

    stale = delete_stale_staging.expand(shard=plan_shards())
    drained = delete_owed_objects()
    stale >> drained
    report(drained)


blobgc_media_staging()

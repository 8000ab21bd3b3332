"""
### blobgc_reconcile: the bucket against the database, shard by shard (seed 001 §5)

Seed 001's "cleaning after the cleaning", the second way: listing first, then the database.

1. **plan_shards** walks the bucket for its shards (one listing call per shard found): each key
   source's prefix (`blobs/`, `pastes/`, `images/`, `mail/`) cut by leading characters
   (`images/{xx}/` by the two-hex shard), plus one shard per unknown top-level folder. Param
   `prefixes` limits a run to some of them.
2. **reconcile_shard** (mapped: one task per shard) lists a page of up to 1000 keys, asks the
   database in one query which of them a row accounts for, and logs and owes the others whose
   `LastModified` is older than the run's data-interval end minus `min_age_hours` (the floor
   applies to deletion, never to the listing). Keys of no known layout are reported, never
   deleted; rows whose object is missing are recorded, never "fixed". A checkpoint per page lets
   a retry resume where it stopped; a listing error fails the task with nothing past the last
   fully checked page.
3. **delete_owed_objects** deletes the orphans with DeleteObjects (the sources' guards keep any
   key a row has claimed since).
4. **report** records the totals; findings are in `blobgc.reconcile_finding`.

Seed 004's buckets are left alone: orphan thumbnails belong to `blobgc_media_thumbnails`, staging
to `blobgc_media_staging`. `dry_run` reports orphans, bytes, unknown keys and missing objects,
and deletes nothing.
"""
from __future__ import annotations

from datetime import datetime

from airflow.sdk import CronTriggerTimetable, Param, dag, get_current_context, task

from blobgc.reconcile import MIN_AGE_FLOOR_HOURS
from blobgc.airflow_adapters import (
    DEFAULT_ARGS,
    S3_POOL,
    blob_bucket,
    cutoff,
    destructive_params,
    drain_owed_objects,
    gc_task,
    s3_client,
)


@dag(
    dag_id="blobgc_reconcile",
    schedule=CronTriggerTimetable("0 5 * * 0", timezone="UTC"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params=destructive_params(
        "min_age_hours", 24, "Objects younger than this are never judged orphans (at least 1: an upload in flight "
        "must never be one).", grace_minimum=MIN_AGE_FLOOR_HOURS,
        prefixes=Param(None, type=["null", "array"], items={"type": "string"},
                       description='Limit the run to shards under these prefixes, e.g. ["images/", "pastes/"]; '
                                   "empty: every shard."),
    ),
    tags=["blobgc", "seed-001", "reconcile", "destructive"],
    doc_md=__doc__,
)
def blobgc_reconcile():
    @task
    def plan_shards() -> list[dict]:
        from blobgc.reconcile import discover_shards

        context = get_current_context()
        with gc_task(context) as (conn, _run):
            shards = discover_shards(s3_client(), blob_bucket(), context["params"]["prefixes"], conn=conn)
        return [s.as_xcom() for s in shards]

    @task(pool=S3_POOL, map_index_template="{{ task.op_kwargs['shard']['prefix'] or '(top level)' }}")
    def reconcile_shard(shard: dict) -> dict:
        from blobgc.reconcile import Shard, reconcile_shard as reconcile

        context = get_current_context()
        with gc_task(context) as (conn, run):
            result = reconcile(conn, s3_client(), run, Shard(shard["prefix"], shard["source"]), bucket=blob_bucket(),
                               cutoff=cutoff(run, hours=context["params"]["min_age_hours"]))
        return vars(result)

    @task(pool=S3_POOL)
    def delete_owed_objects() -> dict:
        return drain_owed_objects(get_current_context())

    @task
    def report(_: list[dict], drained: dict) -> dict:
        from blobgc.reconcile import summarize
        from blobgc.airflow_adapters import finish_dag_run

        with gc_task(get_current_context()) as (conn, run):
            totals = summarize(conn, run.run_id)
            return {**finish_dag_run(conn, run, {"reconcile": totals, "objects": drained}), **totals}

    shards = reconcile_shard.expand(shard=plan_shards())
    drained = delete_owed_objects()
    shards >> drained
    report(shards, drained)


blobgc_reconcile()

"""
### blobgc_sweep: delete blobs unused for longer than the grace (seed 000)

Runs when `blobgc_mark` publishes the `blobgc_marked_blobs` Asset, and daily at 03:00 UTC in
any case (so it can be backfilled with `airflow backfill create`, and owed deletions are retried
even on a day the mark did not run). It can also be triggered by hand.

1. **retry_owed_objects** first deletes any objects earlier runs still owe (S3 was down, a
   worker died after the database commit, or DeleteObjects reported per-key `Errors`). Deletions
   parked after failing again and again do not stop the sweep: the last drain reports them.
2. **delete_unused_blobs** (mapped: one task per id range that **plan_shards** cuts, about
   `sweep_workers` of them in parallel) picks blobs with `unused` set since before the run's data-interval end minus `grace_hours`.
   Each batch is one transaction: claim with `FOR UPDATE SKIP LOCKED`,
   re-check every reference, delete the rows, and record their object keys in the deletion log
   and the outbox. A blob found referenced is set back to used. `ON DELETE RESTRICT` is the last
   guard: a failing batch is split and the referenced blob kept.
3. **delete_owed_objects** deletes the objects with S3 DeleteObjects (up to 1000 keys a call) and
   settles the outbox; failed keys stay owed for the next run.
4. **report** records rows, objects and bytes in `blobgc.reclaim_daily`.

`dry_run` reports the blobs, keys and bytes that would go (also in `blobgc.deletion_log`, with
`dry_run = true`) and changes nothing. Each task is idempotent: clear any one and re-run it.
"""
from __future__ import annotations

from datetime import datetime

from airflow.sdk import Asset, AssetOrTimeSchedule, CronTriggerTimetable, Param, dag, get_current_context, task

from blobgc.airflow_adapters import (
    DEFAULT_ARGS,
    S3_POOL,
    blob_bucket,
    cutoff,
    destructive_params,
    drain_owed_objects,
    extra_blob_references,
    gc_task,
)

MARKED_BLOBS = "blobgc_marked_blobs"


@dag(
    dag_id="blobgc_sweep",
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable("0 3 * * *", timezone="UTC"), assets=[Asset(MARKED_BLOBS)]
    ),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params=destructive_params(
        "grace_hours", 24, "Blobs unused for less than this many hours are kept.",
        sweep_workers=Param(2, type="integer", minimum=1, maximum=16,
                            description="Parallel delete_unused_blobs tasks, each over its own range of blob ids."),
    ),
    tags=["blobgc", "seed-000", "sweep", "destructive"],
    doc_md=__doc__,
)
def blobgc_sweep():
    @task(pool=S3_POOL)
    def retry_owed_objects() -> dict:
        # parked deletions fail the run's last drain, not this one: the sweep goes on past them
        return drain_owed_objects(get_current_context(), fail_on_parked=False)

    @task
    def plan_shards() -> list[list[str | None]]:
        from blobgc.key_space import split_key_space
        from blobgc.references import discover_references

        context = get_current_context()
        with gc_task(context) as (conn, _run):
            discover_references(conn, extra_sql=extra_blob_references())  # a reference it cannot follow stops here
            return [list(r) for r in split_key_space(conn, context["params"]["sweep_workers"])]

    @task(map_index_template="ids {{ task.op_kwargs['shard'][0] or 'start' }} .. {{ task.op_kwargs['shard'][1] or 'end' }}")
    def delete_unused_blobs(shard: list[str | None]) -> dict:
        from blobgc.references import discover_references
        from blobgc.sweep import sweep_unused_blobs

        context = get_current_context()
        params = context["params"]
        with gc_task(context) as (conn, run):
            refs = discover_references(conn, extra_sql=extra_blob_references())
            result = sweep_unused_blobs(conn, run, refs, cutoff=cutoff(run, hours=params["grace_hours"]),
                                        bucket=blob_bucket(), batch_size=params["batch_size"],
                                        key_range=(shard[0], shard[1]))
        return result.counts()

    @task(pool=S3_POOL)
    def delete_owed_objects() -> dict:
        return drain_owed_objects(get_current_context())

    @task
    def report(swept: list[dict], drained: dict) -> dict:
        from blobgc.airflow_adapters import finish_dag_run

        parts = list(swept)
        totals = {key: sum(part[key] for part in parts) for key in parts[0]} if parts else {}
        with gc_task(get_current_context()) as (conn, run):
            return finish_dag_run(conn, run, {"swept": totals, "objects": drained})

    swept = delete_unused_blobs.expand(shard=plan_shards())
    drained = delete_owed_objects()
    retry_owed_objects() >> swept >> drained
    report(swept, drained)


blobgc_sweep()

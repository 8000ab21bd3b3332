"""
### blobgc_sweep: delete blobs unused for longer than the grace (seed 000)

Runs when `blobgc_mark` publishes the `blobgc_marked_blobs` Asset, and daily at 03:00 UTC in
any case (so it can be backfilled, and owed deletions are retried even on a day the mark did not
run). It can also be triggered by hand.

1. **retry_owed_objects** first deletes any objects earlier runs still owe (S3 was down, a worker
   died after the database commit, or DeleteObjects reported per-key `Errors`). Deletions parked
   after failing again and again do not stop the sweep: the last drain reports them.
2. **plan_shards** checks every reference (a foreign key blobgc cannot follow, or a bad extra
   reference query, stops the run here) and cuts the blob ids into about `sweep_workers` ranges.
3. **delete_unused_blobs** (mapped, one task per range) deletes blobs unused since before the run's
   reference time minus `grace_hours`, a batch per transaction: claim with `FOR UPDATE SKIP LOCKED`,
   delete what no reference points at (the DELETE re-checks every reference itself), log and owe
   their objects. A blob found referenced is set back to used.
4. **delete_owed_objects** deletes the objects with DeleteObjects (up to 1000 keys a call), counting
   only those that existed; failed keys stay owed.
5. **report** records rows, objects and bytes in `blobgc.reclaim_daily`.

`dry_run` reports what would go (also in `blobgc.deletion_log`, `dry_run = true`) and changes
nothing. Each task is idempotent: clear any one and re-run it.
"""
from __future__ import annotations

from datetime import datetime

from airflow.sdk import Asset, AssetOrTimeSchedule, CronTriggerTimetable, Param, dag

from blobgc.collectors.sweep import SweepResult, sweep_unused_blobs
from blobgc.core.key_space import split_key_space
from blobgc.core.outbox import DrainResult
from blobgc.core.references import discover_references
from blobgc.dag_kit import Step, default_args, destructive_params, drain_owed_objects, gc_step, report_run
from blobgc.dag_kit.variables import blob_bucket, extra_blob_references


@dag(
    dag_id="blobgc_sweep",
    schedule=AssetOrTimeSchedule(timetable=CronTriggerTimetable("0 3 * * *", timezone="UTC"),
                                 assets=[Asset("blobgc_marked_blobs")]),
    start_date=datetime(2026, 1, 1), catchup=False, max_active_runs=1, default_args=default_args(),
    params=destructive_params(
        "grace_hours", 24, "Blobs unused for less than this many hours are kept.",
        sweep_workers=Param(2, type="integer", minimum=1, maximum=16,
                            description="Parallel delete_unused_blobs tasks, each over its own range of blob ids.")),
    tags=["blobgc", "seed-000", "sweep", "destructive"],
    doc_md=__doc__,
)
def blobgc_sweep():
    @gc_step()
    def plan_shards(step: Step) -> list[list[str | None]]:
        discover_references(step.conn, extra_sql=extra_blob_references())
        return [list(r) for r in split_key_space(step.conn, step.params["sweep_workers"])]

    @gc_step(map_index_template="ids {{ task.op_kwargs['shard'][0] or 'start' }} .. "
                                "{{ task.op_kwargs['shard'][1] or 'end' }}")
    def delete_unused_blobs(step: Step, shard: list[str | None]) -> SweepResult:
        refs = discover_references(step.conn, extra_sql=extra_blob_references())
        return sweep_unused_blobs(step.conn, step.run, refs, cutoff=step.cutoff(hours=step.params["grace_hours"]),
                                  bucket=blob_bucket(), batch_size=step.params["batch_size"],
                                  key_range=(shard[0], shard[1]))

    swept = delete_unused_blobs.expand(shard=plan_shards())
    drained = drain_owed_objects()()
    drain_owed_objects("retry_owed_objects", fail_on_parked=False)() >> swept >> drained
    report_run(swept=SweepResult, objects=DrainResult)(swept=swept, objects=drained)


blobgc_sweep()

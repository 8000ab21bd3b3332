"""
### blobgc_sweep: delete rows unused for longer than their grace, in every collection (seed 000)

Runs when `blobgc_mark` publishes the `blobgc_marked_blobs` Asset, and daily at 03:00 UTC in
any case (so it can be backfilled, and owed deletions are retried even on a day the mark did not
run). It can also be triggered by hand. Param `collections` picks some of the collections file's.

1. **plan_shards** checks the collections file and every reference (anything wrong stops the run
   here, naming the collection and the field; so does a missing pool) and cuts each collection's ids
   into about `sweep_workers` ranges.
2. **retry_owed_objects** then deletes any objects earlier runs still owe (S3 was down, a worker
   died after the database commit, or DeleteObjects reported per-key `Errors`). Deletions parked
   after failing again and again do not stop the sweep: the last drain reports them.
3. **delete_unused_blobs** (mapped, one task per collection and range) deletes rows unused since
   before the run's reference time minus the grace, a batch per transaction: claim with
   `FOR UPDATE SKIP LOCKED`, delete what no reference points at (the DELETE re-checks every reference
   itself), log and owe every key template's object. The grace is the larger of the collection's
   `grace_hours` and this run's: a run may be more careful than the file, never less. A row whose
   `created_at` is younger than the grace is never deleted.
4. **delete_owed_objects** deletes the objects with DeleteObjects (up to 1000 keys a call), counting
   only those that existed; failed keys stay owed.
5. **report** records rows, objects and bytes in `blobgc.reclaim_daily` (and per collection in
   `blobgc.reclaim_daily_by_collection`).

`dry_run` reports what would go (also in `blobgc.deletion_log`, `dry_run = true`) and changes
nothing. Each task is idempotent: clear any one and re-run it.
"""
from __future__ import annotations

from airflow.sdk import Asset, AssetOrTimeSchedule, CronTriggerTimetable, Param, dag

from blobgc.collectors.sweep import SweepResult, sweep_collection
from blobgc.core.key_space import split_key_space
from blobgc.core.outbox import DrainResult
from blobgc.dag_kit import Step, dag_defaults, destructive_params, drain_owed_objects, gc_step, report_run
from blobgc.dag_kit.collections import checked_collections, collections_param, one_collection, references


@dag(
    dag_id="blobgc_sweep",
    schedule=AssetOrTimeSchedule(timetable=CronTriggerTimetable("0 3 * * *", timezone="UTC"),
                                 assets=[Asset("blobgc_marked_blobs")]),
    **dag_defaults(),
    params=destructive_params(
        "grace_hours", 24, "Rows unused for less than this many hours (or their collection's grace, if longer) "
        "are kept.", collections=collections_param(),
        sweep_workers=Param(2, type="integer", minimum=1, maximum=16,
                            description="Parallel delete_unused_blobs tasks per collection, each over an id range.")),
    tags=["blobgc", "seed-000", "sweep", "destructive"],
    doc_md=__doc__,
)
def blobgc_sweep():
    @gc_step()
    def plan_shards(step: Step) -> list[dict]:
        return [{"collection": bound.name, "lo": lo, "hi": hi}
                for bound in checked_collections(step.conn, step.params)
                for lo, hi in split_key_space(step.conn, step.params["sweep_workers"], bound.id_column)]

    @gc_step(map_index_template="{% set s = task.op_kwargs['shard'] %}{{ s['collection'] }} ids "
                                "{{ s['lo'] or 'start' }} .. {{ s['hi'] or 'end' }}")
    def delete_unused_blobs(step: Step, shard: dict) -> SweepResult:
        bound = one_collection(step.conn, shard["collection"])
        grace = max(float(step.params["grace_hours"]), bound.collection.grace_hours)
        return sweep_collection(step.conn, step.run, bound, references(step.conn, bound),
                                cutoff=step.cutoff(hours=grace), batch_size=step.params["batch_size"],
                                key_range=(shard["lo"], shard["hi"]))

    shards = plan_shards()
    swept = delete_unused_blobs.expand(shard=shards)
    drained = drain_owed_objects()()
    shards >> drain_owed_objects("retry_owed_objects", fail_on_parked=False)() >> swept >> drained
    report_run(swept=SweepResult, objects=DrainResult)(swept=swept, objects=drained)


dag = blobgc_sweep()

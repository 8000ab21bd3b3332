"""
### blobgc_sweep: delete rows unused for longer than their grace, in every collection (seed 000)

Runs when `blobgc_mark` publishes the `blobgc_marked_blobs` Asset, and daily at 03:00 UTC in
any case (so it can be backfilled, and owed deletions are retried even on a day the mark did not
run). It can also be triggered by hand. Param `collections` picks some of the collections file's.

A run **plans first, then deletes exactly its plan** (`blobgc.core.plans`):

1. **plan_shards** checks the collections file and every reference (anything wrong stops the run
   here, naming the collection and the field; so do a missing pool, a privilege the real run needs,
   or a missing bucket), fixes the run's plan, and cuts
   each collection's ids into about `sweep_workers` ranges. With Param `from_plan` (a dry run's id) it
   checks that plan instead (same DAG, finished, younger than `plan_max_age_hours`, executed by no
   other run) and plans nothing.
2. **plan_deletions** (mapped, one task per collection and range) lists the rows unused since before
   the run's reference time minus the grace that no reference points at, with their objects and sizes,
   into `blobgc.plan_item`. The grace is each collection's own `grace_hours` (the file's; 24 where it
   declares none). Param `grace_hours` is null by default; given, it can only lengthen a collection's
   grace (the larger of the two counts): a run may be more careful than the file, never less. A row
   whose `created_at` is younger than the grace is never planned. Nothing is locked or deleted. On a
   dry run, this is the run's report. Each task also counts the rows it considered and why each one not
   planned was not: referenced, not marked unused yet (no mark has found it unused: run `blobgc_mark`
   first, the grace counts from the first mark), unused but within the grace, or created within it,
   with the time the first of those becomes eligible; it logs them in a sentence.
3. **gate** compares the plan with the median of the last real runs (Variable `blobgc_gate`). Past the
   threshold, it waits for a person to approve or reject (Airflow's Required Actions); otherwise it
   goes on at once. A dry run never waits.
4. **plan_parts** lists the plan's parts, once the gate let the plan through; **retry_owed_objects**
   deletes any objects earlier runs still owe.
5. **delete_unused_blobs** (mapped, one task per part of the plan) deletes the plan's rows, a batch per
   transaction: claim again with `FOR UPDATE SKIP LOCKED` only rows still unused since before the
   cut-off, delete what no reference points at (the DELETE re-checks every reference itself), log and
   owe every key template's object. A row referenced again since the plan is skipped and recorded.
6. **delete_owed_objects** deletes the objects with DeleteObjects (up to 1000 keys a call), counting
   only those that existed; failed keys stay owed.
7. **report** records rows, objects and bytes in `blobgc.reclaim_daily` (and per collection), and
   the plan's planned, deleted, skipped and failed counts. It runs even when the gate refused. The
   counts of what was not planned, per collection, go to `blobgc.run.details` under `not_planned`
   (shown on the receipt page), and it logs them again, a sentence per collection.

`dry_run` makes the plan (also in `blobgc.deleted_object`, `dry_run = true`) and changes nothing. Each
task is idempotent: clear any one and re-run it. The receipt page `/blobgc/runs/blobgc_sweep/<run id>`
shows the plan and what became of it.
"""
from __future__ import annotations

from airflow.sdk import Asset, AssetOrTimeSchedule, CronTriggerTimetable, Param

from blobgc.collectors.sweep import Sweep
from blobgc.dag_kit import destructive_params, plan_params
from blobgc.dag_kit.builder import destructive_dag
from blobgc.dag_kit.collections import FILE, collections_param
from blobgc.reclaim.routes import receipt_path

dag = destructive_dag(
    "blobgc_sweep",
    deletion=Sweep(collections=FILE),
    schedule=AssetOrTimeSchedule(timetable=CronTriggerTimetable("0 3 * * *", timezone="UTC"),
                                 assets=[Asset("blobgc_marked_blobs")]),
    params=destructive_params(
        "grace_hours", None, "Empty (the default): each collection's own grace_hours (the collections file's; 24 "
        "where it declares none). Given: rows unused for less than this many hours, or their collection's grace "
        "if longer, are kept (a run can lengthen a collection's grace, never shorten it).",
        collections=collections_param(),
        sweep_workers=Param(2, type="integer", minimum=1, maximum=16,
                            description="Parallel plan_deletions tasks per collection, each over an id range."),
        **plan_params()),
    tags=["blobgc", "seed-000", "sweep", "destructive"],
    doc_md=__doc__,
    receipt_path=receipt_path,
)

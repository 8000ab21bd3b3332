"""
### blobgc_generations: generation-based collection with a bloom filter (seed 003, Apache James ADR 39)

Mail blobs are deduplicated within a reference generation only (the application's `demo_app.mail`);
deleting a reference records a `gen.deletion` row by trigger. A run **plans first, then deletes
exactly its plan** (`blobgc.core.plans`):

1. **open_generation** fixes the run's plan (with Param `from_plan`, a dry run's id: it checks that
   plan instead, same DAG, finished, younger than `plan_max_age_hours`, executed by no other run,
   and nothing is planned anew), then opens the next reference generation; new blobs go there from
   now on. A retry of the same run finds the generation it opened and opens no other.
2. **plan_collection** lists the generations at most *this run's generation − 2* (the ADR's n-2
   rule) that have pending deletions (none with `from_plan`).
3. **collect** (mapped: one task per generation) holds the generation against late writers,
   streams every live reference to its blobs into a bloom filter (salted per attempt, sized for
   Param `false_positive_rate`), then walks the blobs with pending deletions in batches of
   `batch_size` (two connections side by side): those the filter has never seen go into the plan
   (`blobgc.plan_item`, part `generation {n}`: blob ids, `mail/{blob_id}` keys and sizes). Nothing
   is deleted. Blobs in the filter keep their deletions for a later run (a false positive there is
   collected by the next run's differently salted filter). If the reference scan fails, the task
   fails and the run deletes nothing. On a dry run, this is the run's report.
4. **gate** compares the plan with the median of the last real runs (Variable `blobgc_gate`). Past
   the threshold, it waits for a person to approve or reject (Airflow's Required Actions);
   otherwise it goes on at once. A dry run never waits.
5. **plan_parts** lists the plan's parts (one per generation), once the gate let the plan through.
6. **delete_planned_blobs** (mapped, one task per generation of the plan) deletes the plan's blobs,
   a batch per transaction, holding the generation alone and re-checking each blob exactly (not
   with the filter): a blob no `gen.reference` points at loses its `gen.blob` row and deletions,
   and its object is owed in the outbox; a blob referenced again since the plan is skipped,
   recorded and kept. Nothing outside the plan is touched.
7. **delete_owed_objects** deletes the owed objects with DeleteObjects (earlier runs' debts too).
8. **report** records the totals and the plan's planned, deleted, skipped and failed counts, even
   when the gate refused; per-generation figures are in `blobgc.generation_collection`.

`dry_run` opens no generation (it reports the one a real run would open), makes the plan (also in
`blobgc.deleted_object`, `dry_run = true`) and deletes nothing. Each task is idempotent: clear any
one and re-run it. The receipt page `/blobgc/runs/blobgc_generations/<run id>` shows the plan and
what became of it.
"""
from __future__ import annotations

from airflow.sdk import CronTriggerTimetable, Param

from blobgc.dag_kit import deleting_params, plan_params
from blobgc.dag_kit.builder import destructive_dag
from blobgc.dag_kit.variables import blob_bucket
from blobgc.kinds.generations.deletion import GenerationCollection
from blobgc.reclaim.routes import receipt_path

dag = destructive_dag(
    "blobgc_generations",
    deletion=GenerationCollection(bucket=blob_bucket),
    schedule=CronTriggerTimetable("15 3 * * *", timezone="UTC"),
    params=deleting_params(
        false_positive_rate=Param(0.01, type="number", exclusiveMinimum=0, maximum=0.5,
                                  description="The bloom filter's false-positive rate: the share of unreferenced "
                                              "blobs a run keeps for a later run. Smaller costs more memory."),
        **plan_params()),
    tags=["blobgc", "seed-003", "generations", "destructive"],
    doc_md=__doc__,
    receipt_path=receipt_path,
)

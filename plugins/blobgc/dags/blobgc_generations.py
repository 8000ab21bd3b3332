"""
### blobgc_generations: generation-based collection with a bloom filter (seed 003, Apache James ADR 39)

Mail blobs are deduplicated within a reference generation only (the application's `demo_app.mail`);
deleting a reference records a `gen.deletion` row by trigger. Each run:

1. **open_generation** opens the next reference generation; new blobs go there from now on. A
   retry of the same run finds the generation it opened and opens no other.
2. **plan_collection** lists the generations at most *this run's generation − 2* (the ADR's n-2
   rule) that have pending deletions.
3. **collect** (mapped: one task per generation) holds the generation against late writers,
   streams every live reference to its blobs into a bloom filter (salted per attempt, sized for
   Param `false_positive_rate`), then walks the blobs with pending deletions in batches of
   `batch_size`: those the filter has never seen lose their `gen.blob` row and deletions, and
   their `mail/{blob_id}` object is owed in the outbox (two connections walk halves of the
   candidates side by side). Blobs in the filter keep their deletions
   for a later run (a false positive there is collected by the next run's differently salted
   filter). If the reference scan fails, the task fails before deleting anything.
4. **delete_owed_objects** deletes the owed objects with DeleteObjects.
5. **report** records the totals; per-generation figures are in `blobgc.generation_collection`.

`dry_run` opens no generation (it reports the one a real run would open), deletes nothing, and
logs the keys that would go. Clearing a failed `collect` re-runs just that generation.
"""
from __future__ import annotations

from airflow.sdk import CronTriggerTimetable, Param, TriggerRule, dag

from blobgc.collectors import generations
from blobgc.collectors.generations import CollectResult, OpenedGeneration
from blobgc.core.outbox import DrainResult
from blobgc.dag_kit import Step, dag_defaults, deleting_params, drain_owed_objects, gc_step, report_run
from blobgc.dag_kit.variables import blob_bucket

COLLECT_WORKERS = 2  # connections walking a generation's candidates side by side


@dag(
    dag_id="blobgc_generations",
    schedule=CronTriggerTimetable("15 3 * * *", timezone="UTC"),
    **dag_defaults(),
    params=deleting_params(
        false_positive_rate=Param(0.01, type="number", exclusiveMinimum=0, maximum=0.5,
                                  description="The bloom filter's false-positive rate: the share of unreferenced "
                                              "blobs a run keeps for a later run. Smaller costs more memory.")),
    tags=["blobgc", "seed-003", "generations", "destructive"],
    doc_md=__doc__,
)
def blobgc_generations():
    @gc_step()
    def open_generation(step: Step) -> OpenedGeneration:
        return generations.open_generation(step.conn, step.run)

    @gc_step()
    def plan_collection(step: Step, opened: dict) -> list[int]:
        return generations.eligible_generations(step.conn, OpenedGeneration.from_xcom(opened))

    @gc_step(map_index_template="generation {{ task.op_kwargs['generation'] }}")
    def collect(step: Step, generation: int, opened: dict) -> CollectResult:
        return generations.collect_generation(
            step.conn, step.run, generation=generation, collectable=OpenedGeneration.from_xcom(opened).collectable,
            bucket=blob_bucket(), false_positive_rate=step.params["false_positive_rate"],
            batch_size=step.params["batch_size"], workers=COLLECT_WORKERS, connect=step.connect)

    opened = open_generation()
    collected = collect.partial(opened=opened).expand(generation=plan_collection(opened))
    # runs when there was nothing to collect too (no mapped task): earlier runs' debts are still owed
    drained = drain_owed_objects(trigger_rule=TriggerRule.NONE_FAILED)()
    collected >> drained
    report_run(summaries={"collected": generations.summarize}, generation=OpenedGeneration, objects=DrainResult)(
        generation=opened, objects=drained)


dag = blobgc_generations()

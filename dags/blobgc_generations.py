"""
### blobgc_generations: generation-based collection with a bloom filter (seed 003, Apache James ADR 39)

Mail blobs are deduplicated within a reference generation only (`blobgc.generations.store_blob`);
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

from datetime import datetime

from airflow.sdk import CronTriggerTimetable, Param, TriggerRule, dag, get_current_context, task

from blobgc.airflow_adapters import (
    DEFAULT_ARGS,
    S3_POOL,
    blob_bucket,
    deleting_params,
    drain_owed_objects,
    gc_task,
    pg_connector,
)

COLLECT_WORKERS = 2  # connections walking a generation's candidates side by side


@dag(
    dag_id="blobgc_generations",
    schedule=CronTriggerTimetable("15 3 * * *", timezone="UTC"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params=deleting_params(
        false_positive_rate=Param(0.01, type="number", exclusiveMinimum=0, maximum=0.5,
                                  description="The bloom filter's false-positive rate: the share of unreferenced "
                                              "blobs a run keeps for a later run. Smaller costs more memory."),
    ),
    tags=["blobgc", "seed-003", "generations", "destructive"],
    doc_md=__doc__,
)
def blobgc_generations():
    @task
    def open_generation() -> dict:
        from blobgc.generations import open_generation as open_next

        with gc_task(get_current_context()) as (conn, run):
            opened = open_next(conn, run)
        return {"generation": opened.generation, "opened": opened.opened, "collectable": opened.collectable}

    @task
    def plan_collection(opened: dict) -> list[int]:
        from blobgc.generations import OpenedGeneration, eligible_generations

        with gc_task(get_current_context()) as (conn, _run):
            return eligible_generations(conn, OpenedGeneration(opened["generation"], opened["opened"]))

    @task(map_index_template="generation {{ task.op_kwargs['generation'] }}")
    def collect(generation: int, opened: dict) -> dict:
        from blobgc.generations import collect_generation

        context = get_current_context()
        params = context["params"]
        with gc_task(context) as (conn, run):
            result = collect_generation(conn, run, generation=generation, collectable=opened["collectable"],
                                        bucket=blob_bucket(), false_positive_rate=params["false_positive_rate"],
                                        batch_size=params["batch_size"], workers=COLLECT_WORKERS,
                                        connect=pg_connector())
        return result.counts()

    # runs when there was nothing to collect too (no mapped task): earlier runs' debts are still owed
    @task(pool=S3_POOL, trigger_rule=TriggerRule.NONE_FAILED)
    def delete_owed_objects() -> dict:
        return drain_owed_objects(get_current_context())

    @task
    def report(opened: dict, drained: dict) -> dict:
        from blobgc.generations import summarize
        from blobgc.airflow_adapters import finish_dag_run

        with gc_task(get_current_context()) as (conn, run):
            collected = summarize(conn, run)
            totals = finish_dag_run(conn, run, {"generation": opened, "collected": collected, "objects": drained})
        return {**totals, "generation": opened["generation"],
                **{k: v for k, v in collected.items() if k != "generations"}}

    opened = open_generation()
    collected = collect.partial(opened=opened).expand(generation=plan_collection(opened))
    drained = delete_owed_objects()
    collected >> drained
    report(opened, drained)


blobgc_generations()

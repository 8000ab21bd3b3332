"""One builder for every destructive DAG: a DAG file declares its kind of planned deletion (a
`blobgc.engine.Deletion`), its Params, schedule, tags and `doc_md`, and `destructive_dag` wires the engine's steps
(`blobgc.engine.run`), in the same order, for all of them:

    [prepare] -> [shards] -> plan (mapped over the shards) -> gate -> execution -> drain -> purge -> report

- **planning**: the kind's first step fixes the run's plan (its own, or Param `from_plan`'s); the engine does it,
  whichever step comes first. A shard is planned by its own mapped task.
- **gate**: `deletion_gate`, after the planning.
- **execution**: `plan_parts` then the kind's execute step mapped over the parts, or one task over the whole plan,
  or, for a plan of objects alone, `owe_planned_objects` (the drain deletes them). Whatever runs it, it executes
  only a plan the gate let through: the engine refuses it first (`blobgc.engine.run.execute`), and so does the
  plan store's reader (`blobgc.core.plans.pending_items`), not this wiring.
- **drain**: `delete_owed_objects` after the execution (and `retry_owed_objects` before it, for a kind that
  drains earlier runs' debts first), then `purge_quarantine` (the DAG's quarantine copies past their window,
  `blobgc.core.quarantine`), and `purge_cache_keys` for a kind that owes Redis keys.
- **report**: `report` (`report_parts`), even when the gate refused, with `execution_report` as "plan" and the
  kind's own summaries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

from blobgc.core.outbox import DrainResult
from blobgc.core.plans import OwedFromPlan, execution_report
from blobgc.core.quarantine import QuarantinePurge
from blobgc.core.results import TaskResult
from blobgc.dag_kit.collections import quarantine_policy
from blobgc.dag_kit.gate import deletion_gate
from blobgc.dag_kit.params import S3_POOL, dag_defaults
from blobgc.dag_kit.steps import (
    Step,
    drain_owed_objects,
    gc_step,
    purge_owed_cache_keys,
    purge_quarantine_step,
    report_parts,
)
from blobgc.engine import run as engine
from blobgc.engine.deletion import Deletion

NONE_FAILED = "none_failed"
BUILT_BY = "blobgc_built_by"  # the attribute of a DAG that names the builder that wired it


def destructive_dag(
    dag_id: str,
    *,
    deletion: Deletion,
    schedule: Any,
    params: dict[str, Any],
    tags: list[str],
    doc_md: str | None,
    receipt_path: Callable[[str, str], str],
) -> Any:
    """The DAG `dag_id`, wired from `deletion` (see the module docstring). `receipt_path(dag_id, run_id)` is where a
    run's receipt page is (`blobgc.reclaim.routes.receipt_path`): the gate links the plan it asks about there."""
    from airflow.sdk import dag

    @dag(dag_id=dag_id, schedule=schedule, **dag_defaults(dag_id), params=params, tags=tags, doc_md=doc_md)
    def build() -> None:
        planned, results, types = planning(deletion)
        gate = deletion_gate(trigger_rule=NONE_FAILED, receipt_path=receipt_path)
        planned >> gate
        executed, name, result = execution(deletion, gate)
        drains = trigger(NONE_FAILED if deletion.drain_when_nothing_executed else None)
        objects = drain_owed_objects(**drains)()
        executed >> objects
        purged = purge_quarantine_step(trigger_rule=NONE_FAILED)()
        objects >> purged
        results.update({name: executed, "objects": objects, "quarantine": purged})
        types.update({name: result, "objects": DrainResult, "quarantine": QuarantinePurge})
        if deletion.cache_keys:
            from blobgc.core.cache_purge import PurgeResult

            results["cache"] = purge_owed_cache_keys(**drains)()
            types["cache"] = PurgeResult
            executed >> results["cache"]
        report_parts(
            types,
            trigger_rule=NONE_FAILED,
            summaries={**deletion.summaries(), "plan": execution_report},
            extra_counters=deletion.extra_counters,
        )(**results)

    built = build()
    setattr(built, BUILT_BY, "destructive_dag")
    return built


def task_options(deletion: Deletion, task_id: str, *, lists: bool = False) -> dict[str, Any]:
    """`gc_step`'s options for the kind's step `task_id`: its pool, its mapped tasks' label, and for the first
    step the settings read before the run is recorded."""
    options: dict[str, Any] = {"task_id": task_id}
    if task_id == getattr(deletion.tasks, deletion.first):
        options["checks"] = (*deletion.preflight(), quarantine_policy)  # a bad Variable fails before anything
    if lists and deletion.lists_objects:
        options["pool"] = S3_POOL
    if task_id in deletion.labels:
        options["map_index_template"] = deletion.labels[task_id]
    return options


def planning(deletion: Deletion) -> tuple[Any, dict[str, Any], dict[str, type[TaskResult]]]:
    """The kind's planning tasks: (the plan step, the results the report gathers by name, and their types)."""
    tasks, reported = deletion.tasks, deletion.reported
    results: dict[str, Any] = {}
    types: dict[str, type[TaskResult]] = dict(reported.planned)
    inputs: dict[str, Any] = {}
    if tasks.prepare:

        @gc_step(**task_options(deletion, tasks.prepare, lists=True))
        def prepare(step: Step) -> TaskResult:
            return engine.prepare(step, deletion)

        inputs["prepared"] = prepare()
        if reported.prepared:
            results[reported.prepared[0]] = inputs["prepared"]
            types[reported.prepared[0]] = reported.prepared[1]

    @gc_step(**task_options(deletion, tasks.plan, lists=True))
    def plan(step: Step, shard: dict | None = None, prepared: dict | None = None) -> TaskResult:
        return engine.plan(step, deletion, shard, prepared)

    if tasks.shards:

        @gc_step(**task_options(deletion, tasks.shards))
        def shards(step: Step, prepared: dict | None = None) -> list[dict]:
            return engine.shards(step, deletion, prepared)

        planned = plan.partial(**inputs).expand(shard=shards(**inputs))
    else:
        planned = plan(**inputs)
    results.update({name: planned for name in reported.planned})
    return planned, results, types


def execution(deletion: Deletion, gate: Any) -> tuple[Any, str, type[TaskResult]]:
    """The kind's execution tasks after `gate`: (the task whose result is reported, its name, its type)."""
    task_id, reported = deletion.tasks.execute, deletion.reported.executed
    if task_id is None:

        @gc_step(task_id="owe_planned_objects")
        def owe_planned_objects(step: Step) -> OwedFromPlan:
            return engine.owe(step)  # refused, owing nothing, unless the gate let the plan through

        owed = owe_planned_objects()
        gate >> owed
        return owed, "owed", OwedFromPlan
    name, result = reported or ("executed", TaskResult)
    if not deletion.mapped:

        @gc_step(**task_options(deletion, task_id))
        def execute_plan(step: Step) -> TaskResult:
            return engine.execute(step, deletion)

        executed = execute_plan()
        gate >> executed
        return executed, name, result

    @gc_step(task_id="plan_parts")
    def plan_parts(step: Step) -> list[dict]:
        return engine.parts(step)  # refused unless the gate let the plan through

    @gc_step(**task_options(deletion, task_id))
    def execute_part(step: Step, part: dict) -> TaskResult:
        return engine.execute(step, deletion, part)

    parts = plan_parts()
    gate >> parts
    executed = execute_part.expand(part=parts)
    if deletion.catch_up_drain:  # earlier runs' debts first: this run's delete tasks start from a settled outbox
        parts >> drain_owed_objects("retry_owed_objects", fail_on_parked=False)() >> executed
    return executed, name, result


class TaskTrigger(TypedDict, total=False):
    """A step's trigger_rule, given only when the kind sets one (Airflow's default otherwise)."""

    trigger_rule: str


def trigger(rule: str | None) -> TaskTrigger:
    return {"trigger_rule": rule} if rule else {}
